"""qengine's own scan: the only code that reads table data from files.

It runs in workers, turning a split from :mod:`qengine.catalog` into an Arrow table whose
columns carry the query's internal names, or, for a Parquet split that a DuckDB fragment
consumes, into the SQL that reads exactly that split (:func:`parquet_sql`). The fragment's
connection may read the registered tables' Parquet files and nothing else
(``sandbox.safe_connection``, ``Catalog.parquet_files``).
"""

from __future__ import annotations

import collections
import functools
import os
import re
import threading
from collections.abc import Callable

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from qengine.catalog import records
from qengine.catalog.hive import constant_sql as hive_constant_sql
from qengine.catalog.hive import constant_values as hive_constant_values
from qengine.catalog.types import ZonedTime, type_code
from qengine.errors import DataError, OperationalError
from qengine.sandbox.carried_types import tagged, tagged_result, with_child_types
from qengine.sandbox.connection import one_select, safe_connection, scratch_connection
from qengine.sandbox.quoting import identifier, string_literal
from qengine.transport.wire import empty_table, schema_from_hex, table_from_hex


def parquet_sql(split: dict, columns: list[tuple[str, str]]) -> str | None:
    """A query reading a Parquet split under internal column names, for DuckDB to run with
    the fragment, so that its filters and projections reach the Parquet reader and only the
    rows and columns they keep are ever decoded; None for an empty split.

    Whole files are read as they are; a run of row groups is selected by file row number,
    which DuckDB's reader prunes row groups by.
    """
    if not split.get("runs"):
        return None
    hive = split.get("hive")
    # Files of the same partition values are read together; DuckDB is kept from reading
    # partitions from the (resolved) paths itself: a split's ``hive`` entry says what they are.
    whole: dict[tuple, list[str]] = {}
    for path, _, stop in split["runs"]:
        if stop is None:
            whole.setdefault(_partition_key(hive, path), []).append(path)
    parts = [
        f"SELECT {_select_list(hive, paths[0], columns)} FROM read_parquet([{', '.join(map(string_literal, paths))}], "
        "hive_partitioning = false)"
        for paths in whole.values()
    ]
    parts += [
        f"SELECT {_select_list(hive, path, columns)} FROM read_parquet({string_literal(path)}, file_row_number = true, "
        f"hive_partitioning = false) WHERE file_row_number >= {int(first)} AND file_row_number < {int(stop)}"
        for path, first, stop in split["runs"]
        if stop is not None
    ]
    return " UNION ALL ".join(parts)


def _partition_index(hive: dict | None) -> dict[str, int]:
    """A split's partition columns by lower-cased name (DuckDB's names are not case sensitive)."""
    return {n.lower(): i for i, n in enumerate(hive["names"])} if hive else {}


def _partition_key(hive: dict | None, path: str) -> tuple:
    return tuple(hive["values"][path]) if hive else ()


def _select_list(hive: dict | None, path: str, columns: list[tuple[str, str]]) -> str:
    """The columns read from file ``path``, a partition column as its constant value."""
    index = _partition_index(hive)
    out = []
    for source, internal in columns:
        i = index.get(source.lower())
        value = identifier(source) if i is None else hive_constant_sql(hive["values"][path][i], hive["types"][i])
        out.append(f"{value} AS {identifier(internal)}")
    return ", ".join(out)


# A Parquet split of at most this many rows is read here and given to its DuckDB fragment as
# Arrow (:func:`reads_best_as_arrow`).
SMALL_SPLIT_ROWS = 1 << 16


class _Footers:
    """Parquet footers read lately, by path, size and modification time: a split of a few row
    groups of a file of thousands took DuckDB 10 to 20 ms to read, most of it going over the
    whole file's row groups, and pyarrow 2 ms to parse the footer again, against 0.05 ms to
    read the row group once the footer is known (one-off measurements on a file of 2,000 row
    groups). A file that changes is read afresh."""

    SIZE = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (footer, Arrow schema as pyarrow reads the file, as DuckDB reads it) by (path, size, mtime)
        self._kept: collections.OrderedDict[tuple[str, int, int], tuple[pq.FileMetaData, pa.Schema, pa.Schema]] = collections.OrderedDict()

    def _entry(self, path: str) -> tuple[pq.FileMetaData, pa.Schema, pa.Schema]:
        info = os.stat(path)
        key = (path, info.st_size, info.st_mtime_ns)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept
        opened = pq.ParquetFile(path)
        kept = (opened.metadata, opened.schema_arrow, duckdb_schema(opened.schema))
        with self._lock:
            self._kept[key] = kept
            while len(self._kept) > self.SIZE:
                self._kept.popitem(last=False)
        return kept

    def footer(self, path: str) -> tuple[pq.FileMetaData, pa.Schema]:
        """The file's footer and its Arrow schema as pyarrow reads it, parsed once while the file is unchanged."""
        metadata, arrow, _ = self._entry(path)
        return metadata, arrow

    def duckdb_schema(self, path: str) -> pa.Schema:
        """The file's Arrow schema as DuckDB reads it (:func:`duckdb_schema`), worked out once."""
        return self._entry(path)[2]

    def file(self, path: str) -> pq.ParquetFile:
        """The file opened with its footer already parsed."""
        return pq.ParquetFile(path, metadata=self.footer(path)[0])


_FOOTERS = _Footers()


def _exact_in_arrow(kind: pa.DataType) -> bool:
    """Types that pyarrow's Parquet reader hands DuckDB as DuckDB's own reader would type them
    (timestamps of other units, unsigned and dictionary types, and nested ones may not be)."""
    return (
        pa.types.is_signed_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_decimal128(kind)
        or (pa.types.is_timestamp(kind) and kind.unit == "us" and kind.tz is None)
    )


def reads_best_as_arrow(split: dict, columns: list[tuple[str, str]]) -> bool:
    """Whether a DuckDB fragment should be given this split as Arrow, read here, rather than
    read it itself (:func:`parquet_sql`): a small Parquet split (``SMALL_SPLIT_ROWS``) whose
    columns are of types both readers agree on. Filters reaching the Parquet reader save little
    on so few rows, and reading them here skips DuckDB's pass over the file's every row group."""
    if split.get("kind") != "parquet" or not split.get("pieces") or split.get("rows", SMALL_SPLIT_ROWS + 1) > SMALL_SPLIT_ROWS:
        return False
    if split.get("hive"):  # its partition columns are constants DuckDB makes as it reads
        return False
    sources = [source for source, _ in columns]
    types = None
    for path, _ in split["pieces"]:
        try:
            _, schema = _FOOTERS.footer(path)
        except (OSError, pa.ArrowException):  # gone or bad: the fragment's own read says which
            return False
        if any(schema.get_field_index(s) < 0 for s in sources):
            return False
        mine = [schema.field(s).type for s in sources]
        if types is not None and mine != types:
            return False
        types = mine
    return all(_exact_in_arrow(t) for t in types or [])


def split_files(split: dict) -> tuple[str, ...]:
    """Every file a split may open: what the worker checks against the data roots first."""
    paths = {path for path, _, _ in split.get("runs") or []} | {path for path, _ in split.get("pieces") or []}
    paths |= {split[key] for key in ("path", "schema_path") if split.get(key)}
    return tuple(sorted(paths))


# What a scan's tasks were cut by, per kind of split, as EXPLAIN ANALYZE says it
_CUT_BY = {"parquet": "row groups", "csv": "files", "records": "byte ranges", "memory": "partitions"}


def cut_by(splits: list[dict]) -> str:
    """What ``splits`` were cut by ("row groups" of Parquet files…), or "" where it is not one thing."""
    kinds = {_CUT_BY.get(s.get("kind", "")) for s in splits}
    return (kinds.pop() or "") if len(kinds) == 1 else ""


def row_groups(splits: list[dict]) -> int:
    """The Parquet row groups ``splits`` read."""
    return sum(len(indexes) for s in splits for _, indexes in s.get("pieces") or [])


def read_split(split: dict, columns: list[tuple[str, str]], fetch_memory: Callable[[dict], pa.Table]) -> pa.Table:
    """Read one split; ``columns`` pairs source names with the internal names to give them."""
    sources = [s for s, _ in columns]
    kind = split["kind"]
    try:
        if kind == "parquet":
            try:
                table = _read_parquet(split, sources)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                table = _read_parquet_by_duckdb(split, sources)
        elif kind in ("csv", "json"):
            table = _read_by_duckdb(split).select(sources)
        elif kind == "records":
            with open(split["path"], "rb") as f:
                f.seek(split["offset"])
                data = np.frombuffer(f.read(split["length"]), dtype=np.uint8)
            table = records.to_table(data.reshape(-1, records.RECORD)).select(sources)
        elif kind == "empty":  # a concatenated union's input that another task reads
            table = empty_table(schema_from_hex(split["schema"])).select(sources)
        elif kind == "inline":
            table = table_from_hex(split["data"]).select(sources)
        elif kind == "range":
            values = split["start"] + split["step"] * np.arange(split["count"], dtype=np.int64)
            table = pa.table({split["column"]: values}).select(sources)
        elif kind == "memory":
            table = fetch_memory(split) if split["key"] else empty_table(schema_from_hex(split["schema"]))
            table = table.select(sources)
        else:
            raise OperationalError(f"unknown split kind {kind!r}")
    except pa.ArrowInvalid as e:
        raise OperationalError(f"scan failed: {e}") from e
    except OSError as e:
        raise OperationalError(f"scan failed: {e}") from e
    return table.rename_columns([internal for _, internal in columns])


def _read_parquet(split: dict, sources: list[str]) -> pa.Table:
    """A Parquet split's columns ``sources``: a partition column as its file's constant."""
    hive = split.get("hive")
    index = _partition_index(hive)
    stored = [s for s in sources if s.lower() not in index]
    made = [s for s in sources if s.lower() in index]
    tables = []
    constants: dict[tuple, list[pa.Scalar]] = {}  # by partition values: files of one partition share them
    for path, groups in split["pieces"]:
        table = _FOOTERS.file(path).read_row_groups(groups, columns=stored, use_threads=False)
        table = _as_duckdb_read(table, _FOOTERS.duckdb_schema(path))
        if made:
            key = tuple(hive["values"][path])
            if key not in constants:
                constants[key] = hive_constant_values(hive, path, made)
            for name, value in zip(made, constants[key], strict=True):
                table = table.append_column(name, pa.repeat(value, table.num_rows))
        tables.append(table.select(sources))
    if tables:
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    schema = _FOOTERS.duckdb_schema(split["schema_path"])
    if hive:
        partitions = schema_from_hex(hive["schema"])
        schema = pa.schema([f for f in schema if f.name.lower() not in index] + list(partitions))
    lowered = {f.name.lower(): f for f in schema}
    return empty_table(pa.schema([lowered[s.lower()].with_name(s) for s in sources]))


def _read_parquet_by_duckdb(split: dict, sources: list[str]) -> pa.Table:
    """A Parquet split pyarrow could not read, read by DuckDB's reader, the reference: pyarrow
    fails on files DuckDB reads (a DuckDB ARRAY column holding a NULL)."""
    sql = parquet_sql(split, [(s, s) for s in sources])
    assert sql is not None  # pyarrow read something: the split has row groups
    con = safe_connection(readable=split_files(split))
    try:
        return tagged_result(con.sql(sql))
    except duckdb.Error as e:
        raise OperationalError(f"scan failed: {str(e).splitlines()[0]}") from e
    finally:
        con.close()


def duckdb_schema(schema: pq.ParquetSchema) -> pa.Schema:
    """The Arrow schema of a Parquet file's columns as DuckDB reads them, where pyarrow reads
    them otherwise. pyarrow reads an INTERVAL column (a 12-byte FIXED_LEN_BYTE_ARRAY marked
    INTERVAL) as fixed-size binary, where DuckDB reads an INTERVAL: typed BLOB, the table was
    DESCRIBEd as one, an empty input of that type made a UNION ALL with a VARCHAR a BLOB, and an
    average ``avg(BLOB)``. pyarrow also follows the Arrow schema a writer stored: a duration,
    which DuckDB reads as the BIGINT it is stored as (an INTERVAL averaged to a timedelta where
    DuckDB averages numbers), a half float (which DuckDB cannot scan from Arrow, and reads as a
    FLOAT), and timestamps in seconds or milliseconds (TIMESTAMP to DuckDB). A UUID, at any
    depth, pyarrow reads as its 16 bytes, which reached results as a BLOB: it is DuckDB's text of
    the UUID, tagged as one (``sandbox.carried_types``), as DuckDB's own Arrow output carries it."""
    # INT96 (Impala's and Spark's timestamps): pyarrow reads nanoseconds, DuckDB a TIMESTAMP
    arrow = _marked_leaves(schema, _is_int96, lambda _: pa.timestamp("us"), _marked_leaves(schema, _is_uuid, _as_uuid))
    # for their types' names alone: pyarrow reads a JSON as text, and a TIME WITH TIME ZONE as a
    # time with its offset dropped (a type qengine refuses to carry, see ``sandbox.carried_types``)
    described = _marked_leaves(schema, _is_zoned_time, lambda _: ZonedTime(), _marked_leaves(schema, _is_json, _as_json, arrow))
    intervals = set(_interval_columns(schema))
    for index, field in enumerate(arrow):
        kind = pa.month_day_nano_interval() if field.name in intervals else _as_duckdb_reads(field.type)
        named = described.field(index).type  # the field's type with its UUID, JSON and zoned-time leaves marked
        if named != field.type or _holds_uuid(field.type):
            arrow = arrow.set(index, tagged(field.with_type(kind), type_code(named)))
        elif kind != field.type:
            arrow = arrow.set(index, field.with_type(kind))
    return arrow


def _marked_leaves(
    schema: pq.ParquetSchema, test: Callable[[pq.ColumnSchema], bool], make: Callable[[pa.DataType], pa.DataType], arrow: pa.Schema | None = None
) -> pa.Schema:
    """``arrow`` (by default the file's Arrow schema) with the leaves whose Parquet column
    passes ``test`` (also inside lists, structs and maps) made what ``make`` makes of them: a
    UUID as Arrow's UUID, as pyarrow reads it (the schema pyarrow derives from a footer has its
    16 bytes), a JSON as Arrow's JSON. Parquet's leaf columns come in the order of a depth-first
    walk of the fields."""
    arrow = arrow if arrow is not None else schema.to_arrow_schema()
    marked = [test(schema.column(i)) for i in range(len(schema))]
    if not any(marked):
        return arrow
    leaves = iter(marked)

    def walk(t: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return with_child_types(t, walk)
        return make(t) if next(leaves) else t

    return pa.schema([f.with_type(walk(f.type)) for f in arrow], arrow.metadata)


def _as_uuid(t: pa.DataType) -> pa.DataType:
    return pa.uuid() if pa.types.is_fixed_size_binary(t) and t.byte_width == 16 else t


def _as_json(t: pa.DataType) -> pa.DataType:
    return pa.json_() if pa.types.is_string(t) else t


def _holds_uuid(t: pa.DataType) -> bool:
    """Whether ``t`` is a UUID or holds one."""
    return isinstance(t, pa.UuidType) or any(_holds_uuid(t.field(i).type) for i in range(t.num_fields))


def _as_duckdb_reads(t: pa.DataType) -> pa.DataType:
    """The Arrow type of a column pyarrow reads as ``t``, as DuckDB reads it (see :func:`duckdb_schema`).

    The variants of one type (a large or dictionary-encoded string, say) are the type itself:
    DuckDB reads them all as one, and files written with different variants concatenate."""
    if _holds_uuid(t):
        return _uuids_as_strings(t)
    if pa.types.is_dictionary(t):
        return _as_duckdb_reads(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_null(t):  # a column of no type at all is DuckDB's INTEGER
        return pa.int32()
    if pa.types.is_decimal256(t):  # wider than DuckDB's DECIMAL: it reads a DOUBLE
        return pa.float64()
    if pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(t.value_field.with_type(_as_duckdb_reads(t.value_type)))
    if pa.types.is_nested(t):  # DuckDB reads the values inside as it reads them outside
        return with_child_types(t, _as_duckdb_reads)
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_timestamp(t) and t.tz is not None:  # a TIMESTAMPTZ, in microseconds and DuckDB's zone
        return pa.timestamp("us", _duckdb_time_zone())
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms"):
        return pa.timestamp("us")
    if pa.types.is_time(t):  # every TIME, of seconds to nanoseconds, is DuckDB's TIME, of microseconds
        return pa.time64("us")
    return t


@functools.cache
def _duckdb_time_zone() -> str:
    """The zone DuckDB gives its TIMESTAMPTZ results in Arrow: its TimeZone setting, which
    follows this host's (``TZ``), whatever zone a file's column was written with."""
    con = scratch_connection()
    try:
        return con.execute("SELECT current_setting('TimeZone')").fetchone()[0]
    finally:
        con.close()


def misread_columns(schema: pq.ParquetSchema) -> frozenset[str]:
    """The top-level columns that pyarrow reads other than DuckDB does, in values and not only
    in type, so that only DuckDB's reader may read them: an INT96 timestamp (whose nanoseconds
    DuckDB cuts its own way), a DECIMAL wider than 38 digits (DuckDB reads a DOUBLE, even where
    that DOUBLE is not the number), a fixed-size list (a DuckDB ARRAY with a NULL is a file
    pyarrow cannot read at all), a column of no type, a union (DuckDB writes a struct whose tag
    field has no name, and reads it back as a struct without names)."""
    arrow = schema.to_arrow_schema()
    tops = top_columns(schema, arrow)
    int96 = {tops[i] for i in range(len(schema)) if _is_int96(schema.column(i))}
    return frozenset(f.name for f in arrow if f.name in int96 or _misread(f.type))


def top_columns(schema: pq.ParquetSchema, arrow: pa.Schema | None = None) -> list[str]:
    """The top-level column each of the schema's leaf columns belongs to, in leaf order (``arrow``:
    the schema as Arrow, if already made). Not the leaf's path up to its first dot: a column
    named ``a.b`` has the path ``a.b`` too."""
    tops: list[str] = []
    for column in arrow if arrow is not None else schema.to_arrow_schema():
        tops += [column.name] * _leaves(column.type)
    # a layout this count does not know: no column's statistics are taken, so nothing is pruned
    return tops if len(tops) == len(schema) else [""] * len(schema)


def _leaves(t: pa.DataType) -> int:
    """How many Parquet leaf columns a field of Arrow type ``t`` is stored as."""
    if pa.types.is_dictionary(t):
        return _leaves(t.value_type)
    return sum(_leaves(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else 1


def _misread(t: pa.DataType) -> bool:
    if pa.types.is_null(t) or pa.types.is_decimal256(t) or pa.types.is_fixed_size_list(t) or pa.types.is_union(t):
        return True
    if pa.types.is_struct(t) and any(not t.field(i).name for i in range(t.num_fields)):
        return True
    if pa.types.is_dictionary(t):
        return _misread(t.value_type)
    return any(_misread(t.field(i).type) for i in range(t.num_fields))


def _is_int96(column: pq.ColumnSchema) -> bool:
    return column.physical_type == "INT96"


def _is_uuid(column: pq.ColumnSchema) -> bool:
    return column.logical_type.type == "UUID"


def _is_json(column: pq.ColumnSchema) -> bool:
    return column.logical_type.type == "JSON"


def _is_zoned_time(column: pq.ColumnSchema) -> bool:
    """Whether a Parquet column holds DuckDB's TIME WITH TIME ZONE: a TIME adjusted to UTC."""
    return column.logical_type.type == "TIME" and '"isAdjustedToUTC":true' in column.logical_type.to_json()


def _interval_columns(schema: pq.ParquetSchema) -> list[str]:
    """The top-level columns of a Parquet schema that hold DuckDB INTERVALs."""
    return [c.path for c in (schema.column(i) for i in range(len(schema))) if c.converted_type == "INTERVAL" and "." not in c.path]


def _as_duckdb_read(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table``, read by pyarrow, with its columns as DuckDB reads them (``target``, see
    :func:`duckdb_schema`). An INTERVAL's months, days and milliseconds, each a little-endian
    32-bit integer, become Arrow's month-day-nanosecond interval, a UUID its text; the other
    columns are cast."""
    for index, field in enumerate(table.schema):
        wanted = target.field(field.name)
        if wanted.type == field.type:
            if wanted.metadata != field.metadata:  # a JSON column's tag
                table = table.set_column(index, wanted.with_name(field.name), table.column(index))
            continue
        column = table.column(index)
        if _holds_uuid(field.type):
            column = pa.chunked_array([_uuid_texts(chunk) for chunk in column.chunks], wanted.type)
        else:
            # A finer time than DuckDB keeps is cut to its microseconds, toward zero, as DuckDB cuts it.
            column = _interval(column) if pa.types.is_interval(wanted.type) else column.cast(wanted.type, safe=not _holds_time(wanted.type))
        table = table.set_column(index, wanted.with_name(field.name), column)
    return table


def _holds_time(t: pa.DataType) -> bool:
    """Whether ``t`` is, or holds, a timestamp or a time of day."""
    return pa.types.is_timestamp(t) or pa.types.is_time(t) or any(_holds_time(t.field(i).type) for i in range(t.num_fields))


def _uuids_as_strings(t: pa.DataType) -> pa.DataType:
    """``t`` with each UUID in it a string (see :func:`_uuid_texts`)."""
    if not _holds_uuid(t):
        return t
    return pa.string() if isinstance(t, pa.UuidType) else with_child_types(t, _uuids_as_strings)


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_UUID_GROUPS = ((0, 8), (9, 13), (14, 18), (19, 23), (24, 36))  # where the 32 digits go among the 36 characters


def _uuid_texts(array: pa.Array) -> pa.Array:
    """``array`` with each UUID in it as DuckDB's text of it (8-4-4-4-12 lower-case hex digits)."""
    t = array.type
    if not _holds_uuid(t):
        return array
    if isinstance(t, pa.UuidType):
        raw = array.storage
        data = np.frombuffer(raw.buffers()[1], dtype=np.uint8)[16 * raw.offset:16 * (raw.offset + len(raw))].reshape(-1, 16)
        digits = np.empty((len(raw), 32), dtype=np.uint8)
        digits[:, 0::2], digits[:, 1::2] = _HEX_DIGITS[data >> 4], _HEX_DIGITS[data & 15]
        text = np.full((len(raw), 36), ord("-"), dtype=np.uint8)
        taken = 0
        for start, end in _UUID_GROUPS:
            text[:, start:end] = digits[:, taken:taken + end - start]
            taken += end - start
        offsets = pa.py_buffer(np.arange(0, 36 * (len(raw) + 1), 36, dtype=np.int32).tobytes())
        strings = pa.StringArray.from_buffers(len(raw), offsets, pa.py_buffer(text.tobytes()))
        if not raw.null_count:
            return strings
        import pyarrow.compute as pc  # here, not at the top: it costs a one-statement CLI run ~30 ms to import

        return pc.if_else(raw.is_valid(), strings, pa.scalar(None, pa.string()))
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(t):
        children = array.flatten()
        return pa.StructArray.from_arrays([_uuid_texts(c) for c in children], fields=list(_uuids_as_strings(t)), mask=mask)
    if pa.types.is_map(t):
        return pa.MapArray.from_arrays(array.offsets, _uuid_texts(array.keys), _uuid_texts(array.items), _uuids_as_strings(t), mask=mask)
    if pa.types.is_fixed_size_list(t):
        flat = array.flatten()
        return pa.FixedSizeListArray.from_arrays(_uuid_texts(flat), type=_uuids_as_strings(t), mask=mask)
    kind = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
    return kind.from_arrays(array.offsets, _uuid_texts(array.values), type=_uuids_as_strings(t), mask=mask)


def _interval(stored: pa.ChunkedArray) -> pa.Array:
    """A Parquet INTERVAL column (12 bytes a value, as pyarrow reads it) as DuckDB's interval."""
    packed = stored.combine_chunks()
    raw = np.frombuffer(packed.buffers()[1], dtype="<u4", count=3 * (packed.offset + len(packed)))[3 * packed.offset:].reshape(-1, 3)
    values = np.empty(len(packed), dtype=[("months", "<i4"), ("days", "<i4"), ("nanoseconds", "<i8")])
    values["months"], values["days"] = raw[:, 0].view("<i4"), raw[:, 1].view("<i4")
    values["nanoseconds"] = raw[:, 2].astype(np.int64) * 1_000_000
    validity = None if packed.null_count == 0 else pa.array(packed.is_valid()).buffers()[1]
    return pa.Array.from_buffers(pa.month_day_nano_interval(), len(packed), [validity, pa.py_buffer(values.tobytes())])


def _read_by_duckdb(split: dict) -> pa.Table:
    """A CSV or JSON file read by DuckDB's reader with the options its table found once
    (``sources.CsvSource``, ``sources.JsonSource``), on a connection that may read that file alone."""
    path = split["path"]
    con = safe_connection(readable=(path,))
    try:
        sql = f"SELECT * FROM read_{split['kind']}({string_literal(path)}, {split['options']})"
        one_select(sql)  # the options come with the task
        relation = con.sql(sql)
        return tagged_result(relation)  # a JSON column stays JSON
    except duckdb.Error as e:
        if split["kind"] == "csv":
            raise csv_error(path, e) from e
        raise DataError(f"bad JSON file {path}: {str(e).splitlines()[0]}") from e
    finally:
        con.close()


# DuckDB's complaints about a CSV file: the line, the line's text, then what is wrong with it.
_CSV_LINE = re.compile(r"CSV Error on Line: (\d+)\n(?:Original Line: (.*)\n)?(.*)")
_CSV_COLUMNS = re.compile(r"Expected Number of Columns: (\d+) Found: (\d+)")
_CSV_VALUE = re.compile(r'Error when converting column "(.*)"\. (.*)')
_ERROR_KIND = re.compile(r"^(Error: )?[A-Z][A-Za-z ]* Error: ")  # "Invalid Input Error: " and the like


def csv_error(path: str, error: duckdb.Error) -> DataError:
    """A CSV file DuckDB cannot read as its table, in one line: the file, the line and, for a bad
    value, the column."""
    message = str(error)
    if match := _CSV_LINE.search(message):
        line, text, detail = match.groups()
        if columns := _CSV_COLUMNS.search(detail):
            return DataError(f"bad row in CSV file {path}, line {line}: expected {columns.group(1)} columns, found {columns.group(2)}: {text}")
        if value := _CSV_VALUE.search(detail):
            return DataError(f"bad value in CSV file {path}, line {line}, column {value.group(1)!r}: {value.group(2)}")
        return DataError(f"bad CSV file {path}, line {line}: {detail}")
    lines = [_ERROR_KIND.sub("", line) for line in message.splitlines() if line and not line.startswith("Attempting to execute")]
    if len(lines) > 1 and lines[0].startswith("Error when sniffing file"):
        lines = lines[1:]  # the file is named already; what follows says what went wrong
    return DataError(f"bad CSV file {path}: {lines[0] if lines else message}")
