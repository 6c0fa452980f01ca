"""Table sources: where a table's rows come from, their schema, statistics and scan splits.

Statistics come from file metadata (Parquet footers) so the planner can size joins without
reading data. A split is a JSON-serializable description of one scan task's share of a table;
workers turn it back into Arrow data through :mod:`qengine.catalog.scan`.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from qengine.catalog import records
from qengine.catalog.hive import HiveOptions, HivePartitions
from qengine.catalog.hive import detect as detect_partitions
from qengine.catalog.scan import csv_error, duckdb_schema, misread_columns, top_columns
from qengine.catalog.types import PLAIN_NAME, type_code
from qengine.errors import DataError, NotSupportedError, OperationalError, ProgrammingError
from qengine.sandbox.carried_types import tagged_result
from qengine.sandbox.connection import safe_connection
from qengine.sandbox.quoting import identifier, string_literal
from qengine.transport.wire import schema_to_hex, table_to_hex

# By default a scan task covers about this many uncompressed bytes: Spark's default for
# spark.sql.files.maxPartitionBytes. Each task re-reads the small tables it joins whole and
# emits its own partial aggregates; against 64 MB, the 99 TPC-DS queries at SF 1 run about
# 6% faster on 2 workers (store_sales in 2 splits, not 3).
DEFAULT_SPLIT_BYTES = 128 << 20
_TEMPORAL = re.compile(r"DATE|TIME")  # a DuckDB type name holding a date or time, nested or not
JSON_SAMPLE_OBJECTS = 20_480  # the objects DuckDB's JSON reader detects columns from (its sample_size)


def arrow_width(t: pa.DataType) -> float:
    """Bytes one value takes in an Arrow array: the fixed width, or a guess for strings."""
    try:
        return max(1.0, t.bit_width / 8)
    except ValueError:
        return 24.0


class Source:
    """A scannable table."""

    name: str
    schema: pa.Schema
    # How the query named it, where ``name`` is made up (a read_parquet() call in FROM): for EXPLAIN
    written: str | None = None
    # Columns only DuckDB's own reader reads as DuckDB does (``scan.misread_columns``)
    misread: frozenset[str] = frozenset()

    def __deepcopy__(self, memo: dict) -> Source:
        """The catalog's table itself: a copied plan (``planner.templates``) reads the same one."""
        return self

    # Set by a table read from files: what they were then (``disk_state``), and how to read
    # them again.
    _signature: tuple | None = None
    _rebuild: Callable[[], Source] | None = None
    # The directories listed to find the files (of a registered directory or glob): a file
    # added to one changes its modification time, and the table is listed and read again.
    _watched: tuple[str, ...] = ()

    def on_disk(self) -> tuple | None:
        """What the table's files were when it was read (:meth:`disk_state`); None for a table
        not read from files."""
        return self._signature

    def disk_state(self) -> tuple:
        """Size and modification time of each of the table's files and watched directories."""
        return file_signature([*self.paths, *self._watched])

    def watch(self, directories: list[str], rebuild: Callable[[], Source]) -> None:
        """Read the table again, listed afresh by ``rebuild``, once a file is added to or
        removed from one of ``directories`` (as DuckDB lists a directory or glob at each query)."""
        self._watched, self._rebuild = tuple(dict.fromkeys(directories)), rebuild
        self._signature = self.disk_state()

    def reread(self) -> Source:
        """The same files read again: what they hold now."""
        assert self._rebuild is not None
        fresh = self._rebuild()
        fresh.written = self.written
        return fresh

    @property
    def rows(self) -> int:
        raise NotImplementedError

    def column_width(self, column: str) -> float:
        """Average uncompressed bytes per value of ``column``, for size estimates."""
        return 8.0

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        """Scan tasks' shares of the table, each about ``split_bytes`` uncompressed.

        ``ranges`` (column → inclusive min/max, from a join's build side) lets a source skip
        data that statistics prove cannot match.
        """
        raise NotImplementedError

    def whole(self) -> dict | None:
        """One split of the whole table, for a scan every task reads in full; None where the
        source cannot be read that way."""
        return None

    def clustered(self, column: str) -> bool:
        """Whether the table is laid out in ranges of ``column``, so that a key range given to
        :meth:`splits` can skip much of it."""
        return False

    def single_split(self, split_bytes: int) -> bool:
        """Whether :meth:`splits` makes one split of the table whatever the number of workers
        (and with fewer row groups after pruning): its scan is then one task."""
        return False

    def sql_schema(self) -> dict[str, str]:
        """Column name → SQL type, the form sqlglot's optimizer takes. sqlglot parses each name
        as SQL: one that is not a plain identifier (``a b``, ``x;y``, ``c.d``) goes quoted."""
        return {f.name if PLAIN_NAME.fullmatch(f.name) else identifier(f.name): type_code(f.type) for f in self.schema}


def file_signature(paths: list[str]) -> tuple:
    """Size and modification time of each file, or None for one that is gone: a file rewritten
    in place changes its row groups, its columns, or both."""
    signature = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            signature.append(None)
        else:
            signature.append((info.st_size, info.st_mtime_ns))
    return tuple(signature)


@dataclass
class _RowGroup:
    path: str
    index: int
    first: int  # the file's row number of its first row
    rows: int
    bytes: int
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # integer columns' min/max

    def may_match(self, ranges: dict[str, tuple[int, int]]) -> bool:
        """False only when statistics prove no row can fall in every given range."""
        for column, (lo, hi) in ranges.items():
            if lo > hi:  # an empty range: the build side has no rows
                return False
            stats = self.ranges.get(column)
            if stats is not None and (stats[1] < lo or stats[0] > hi):
                return False
        return True


class ParquetSource(Source):
    """One or more Parquet files; splits are runs of row groups.

    With ``hive`` the files are a hive-partitioned dataset: its partition columns follow the
    files' own (or take the place of a file column of the same name, as in DuckDB), each
    file's values constant over its rows; an integer one gives its row groups a range of one
    value, for joins' key ranges to prune by.
    """

    def __init__(self, name: str, paths: list[str], hive: HivePartitions | None = None) -> None:
        if not paths:
            raise ProgrammingError(f"table {name!r}: no Parquet files found")
        self.name = name
        self.paths = paths
        self.hive = hive
        self._signature, self._rebuild = file_signature(paths), functools.partial(ParquetSource, name, paths, hive)
        self.row_groups: list[_RowGroup] = []
        self._file_rows: dict[str, int] = {}
        widths: dict[str, int] = {}
        for path in paths:
            try:
                md = pq.ParquetFile(path).metadata
            except (OSError, pa.ArrowInvalid) as e:
                raise ProgrammingError(f"table {name!r}: cannot read Parquet file {path}: {e}") from e
            self.misread |= misread_columns(md.schema)
            if path == paths[0]:
                self.schema = duckdb_schema(md.schema)
                _refuse_repeated_names(name, path, self.schema.names)
            elif (theirs := duckdb_schema(md.schema)).names != self.schema.names:
                raise ProgrammingError(f"table {name!r}: {path} has columns that differ from {paths[0]}")
            elif differing := [(f.name, mine, other) for f, g in zip(self.schema, theirs, strict=True)
                               if (mine := type_code(f.type)) != (other := type_code(g.type))]:
                # DuckDB reads both as the wider type; read apart, each task's rows had its file's
                column, mine, other = differing[0]
                raise NotSupportedError(f"table {name!r}: column {column!r} of {path} is {other}, of {paths[0]} {mine}: "
                                        "rewrite the files with one type")
            # each leaf column's top-level column, by the schema: a column named ``a.b`` has the
            # path ``a.b`` too, and splitting it on the dot filed its statistics under ``a``
            tops = top_columns(md.schema)
            first = 0
            for i in range(md.num_row_groups):
                rg = md.row_group(i)
                group = _RowGroup(path, i, first, rg.num_rows, rg.total_byte_size)
                first += rg.num_rows
                self.row_groups.append(group)
                for c in range(rg.num_columns):
                    cc = rg.column(c)
                    top = tops[c]
                    widths[top] = widths.get(top, 0) + cc.total_uncompressed_size
                    # a top-level integer column's own statistics, not a nested field's
                    if cc.path_in_schema == top and cc.physical_type in ("INT32", "INT64") and (bounds := _integer_bounds(cc.statistics)) is not None:
                        group.ranges[top] = bounds
                if hive is not None:
                    _partition_ranges(group, hive)
            self._file_rows[path] = first
        if hive is not None:
            self.schema = _with_partitions(self.schema, hive.schema)
        self._rows = sum(rg.rows for rg in self.row_groups)
        self._bytes = sum(rg.bytes for rg in self.row_groups)
        self._widths = {k: v / max(1, self._rows) for k, v in widths.items()}
        self._whole: dict | None = None
        self._schema_path = paths[0]

    @property
    def rows(self) -> int:
        return self._rows

    def restricted(self, paths: set[str]) -> ParquetSource:
        """The table's files among ``paths`` only (those a partition filter keeps), splitting
        as the whole table's would: a view of the same footers, read no more."""
        part = copy.copy(self)
        part.paths = [p for p in self.paths if p in paths]
        part.row_groups = [rg for rg in self.row_groups if rg.path in paths]
        part._rows = sum(rg.rows for rg in part.row_groups)
        part._bytes = sum(rg.bytes for rg in part.row_groups)
        part._whole = None
        return part

    def column_width(self, column: str) -> float:
        # Parquet sizes are of encoded pages (dictionaries, RLE), far below Arrow's in memory.
        return max(arrow_width(self.schema.field(column).type), self._widths.get(column, 8.0))

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        groups = [rg for rg in self.row_groups if rg.may_match(ranges)] if ranges else self.row_groups
        total = sum(rg.bytes for rg in groups)
        if not groups:
            return [self._split([])]
        wanted = math.ceil(total / split_bytes)
        if not self._too_small_to_spread(self._bytes, split_bytes):
            # Big enough to spread: a split per worker at least. Scan tasks read files and never
            # wait on inputs, so more than one per worker only adds per-task costs (each task
            # re-reads the small tables it joins whole and emits its own partial aggregates).
            # What ``ranges`` leave of such a table is spread too: a join to a filtered
            # dimension keeps each row as costly as before, only fewer of them.
            wanted = max(wanted, workers)
        wanted = max(1, min(wanted, len(groups)))
        per_split = total / wanted
        splits: list[list[_RowGroup]] = [[]]
        acc = 0
        for rg in groups:
            if splits[-1] and acc + rg.bytes / 2 > per_split * len(splits) and len(splits) < wanted:
                splits.append([])
            splits[-1].append(rg)
            acc += rg.bytes
        return [self._split(group) for group in splits]

    def clustered(self, column: str) -> bool:
        """Row groups whose ranges of ``column`` are, on average, under half of its whole range."""
        spans = [rg.ranges.get(column) for rg in self.row_groups]
        if len(spans) < 2 or None in spans:
            return False
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        return hi > lo and sum(s[1] - s[0] for s in spans) < 0.5 * len(spans) * (hi - lo)

    def single_split(self, split_bytes: int) -> bool:
        return len(self.row_groups) <= 1 or self._too_small_to_spread(self._bytes, split_bytes)

    @staticmethod
    def _too_small_to_spread(total: int, split_bytes: int) -> bool:
        return total < split_bytes / 8

    def whole(self) -> dict:
        # Every task of a stage that reads the table whole gets this split: make it once.
        if self._whole is None:
            self._whole = self._split(self.row_groups)
        return self._whole

    def _split(self, groups: list[_RowGroup]) -> dict:
        """A split of these row groups: their indexes per file, and the same rows as runs of
        file row numbers ``[path, first, stop)`` (whole files as ``[path, 0, None]``)."""
        pieces: dict[str, list[int]] = {}
        runs: list[list] = []
        for rg in groups:
            pieces.setdefault(rg.path, []).append(rg.index)
            if runs and runs[-1][0] == rg.path and runs[-1][2] == rg.first:
                runs[-1][2] += rg.rows
            else:
                runs.append([rg.path, rg.first, rg.first + rg.rows])
        for run in runs:
            if run[1] == 0 and run[2] == self._file_rows[run[0]]:
                run[2] = None
        split = {
            "kind": "parquet",
            "pieces": list(pieces.items()),
            "runs": runs,
            "rows": sum(rg.rows for rg in groups),
            "schema_path": self._schema_path,
        }
        if self.hive is not None:
            split["hive"] = self.hive.for_split(list(pieces))
        return split


def hive_parquet(name: str, files: list[tuple[str, str]], options: HiveOptions | None = None) -> ParquetSource:
    """A Parquet table of ``files`` (resolved path, path as the user spelled it), read as a
    hive-partitioned dataset where ``options`` (DuckDB's, detected by default) make it one."""
    options = options or HiveOptions()
    paths = [path for path, _ in files]
    return ParquetSource(name, paths, detect_partitions([spelled for _, spelled in files], paths, options))


def _partition_ranges(group: _RowGroup, hive: HivePartitions) -> None:
    """A row group's ranges with its file's partition values in place of any file column's."""
    for index, f in enumerate(hive.schema):
        group.ranges.pop(f.name, None)
        value = hive.values[group.path][index]
        if pa.types.is_integer(f.type) and value is not None:
            group.ranges[f.name] = (int(value), int(value))


def _with_partitions(schema: pa.Schema, partitions: pa.Schema) -> pa.Schema:
    """The files' schema with the partition columns: a file column of the same name (compared
    without case, as DuckDB does) takes the partition's type, the others come after."""
    fields = list(schema)
    for f in partitions:
        same = [i for i, g in enumerate(fields) if g.name.lower() == f.name.lower()]
        if same:
            fields[same[0]] = f.with_name(fields[same[0]].name)
        else:
            fields.append(f)
    return pa.schema(fields)


class CsvSource(Source):
    """CSV files read by DuckDB's CSV reader as DuckDB's read_csv() reads them; one split per file.

    DuckDB's sniffer works out the dialect (delimiter, quoting, header, date formats) from the
    first file and the column types over the files, once, here; every file is then read with
    exactly those (``read_options``), so each split reads the same columns with the same types.
    Arrow's reader, used before, answered differently from DuckDB on ordinary files: an empty
    field was '' rather than NULL, '007' became 7, 'nan' NULL, a file without a header lost its
    first row to the column names, and a .tsv file or one using ';' was read as one column.
    ``delimiter`` and ``header`` override what the sniffer finds (None: sniffed)."""

    def __init__(self, name: str, paths: list[str], delimiter: str | None = None, header: bool | None = None) -> None:
        if not paths:
            raise ProgrammingError(f"table {name!r}: no CSV files found")
        self.name = name
        self.paths = paths
        self._signature, self._rebuild = file_signature(paths), functools.partial(CsvSource, name, paths, delimiter, header)
        given = ""
        if delimiter is not None:
            given += f", delim = {string_literal(delimiter)}"
        if header is not None:
            given += f", header = {'true' if header else 'false'}"
        files = "[" + ", ".join(string_literal(p) for p in paths) + "]"
        con = safe_connection(readable=tuple(paths))
        try:
            dialect = con.sql(
                "SELECT Delimiter, Quote, Escape, Comment, SkipRows, HasHeader, DateFormat, TimestampFormat "
                f"FROM sniff_csv({string_literal(paths[0])}{given})"
            ).fetchone()
            columns, self.schema, types = _detected(con, f"read_csv({files}{given})")
            self.read_options = _csv_read_options(dialect, columns)
            self._file_options = _reordered_headers(con, paths, dialect, self.schema, types) if dialect[5] and len(paths) > 1 else {}
        except duckdb.Error as e:
            raise csv_error(paths[0] if len(paths) == 1 else files, e) from e
        finally:
            con.close()
        self._bytes = sum(os.path.getsize(p) for p in paths)

    @property
    def rows(self) -> int:
        return max(1, self._bytes // max(1, 8 * len(self.schema)))

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        return [{"kind": "csv", "path": p, "options": self._file_options.get(p, self.read_options)} for p in self.paths]


def _reordered_headers(con: duckdb.DuckDBPyConnection, paths: list[str], dialect: tuple, schema: pa.Schema, types: list[str]) -> dict[str, str]:
    """The read options of each file whose header names the table's columns in another order:
    DuckDB matches a file's columns to the first file's by name, and read with the first file's
    ``columns`` option, such a file's values went to the wrong columns.

    A file whose header names other columns is refused, as DuckDB refuses it ("schema
    mismatch"): read with the first file's options, a file without a header lost its first row
    to the header it was taken for."""
    delimiter, quote, escape, _, skip = dialect[:5]
    text = _sniffed_text
    duck_types = dict(zip(schema.names, types, strict=True))
    order = [n.lower() for n in schema.names]
    by_lower = {n.lower(): n for n in schema.names}
    options = {}
    for path in paths[1:]:
        if os.path.getsize(path) == 0:  # no header and no rows: DuckDB reads it as nothing
            continue
        header = con.sql(f"SELECT * FROM read_csv({string_literal(path)}, delim = {text(delimiter)}, quote = {text(quote)}, "
                         f"escape = {text(escape)}, skip = {int(skip)}, header = true, all_varchar = true) LIMIT 0").columns
        if sorted(header) != sorted(schema.names):  # as DuckDB compares them: ``A`` is not ``a``
            raise DataError(f"CSV file {path} has the columns {', '.join(header)} where {paths[0]} has "
                            f"{', '.join(schema.names)}: read them as separate tables")
        if [n.lower() for n in header] != order:
            named = ", ".join(f"{string_literal(by_lower[n.lower()])}: {string_literal(duck_types[by_lower[n.lower()]])}" for n in header)
            options[path] = _csv_read_options(dialect, f"columns = {{{named}}}")
    return options


def _refuse_repeated_names(table: str, path: str, names: list[str]) -> None:
    """A file with two columns of one name, in any case: DuckDB renames the second (``a_1``),
    which qengine's reads by name cannot follow (one of them was dropped, or a KeyError)."""
    seen: dict[str, str] = {}
    for column in names:
        if column.lower() in seen:
            raise NotSupportedError(f"table {table!r}: {path} has two columns named {seen[column.lower()]!r} and {column!r}; "
                                    "names are told apart without case: rename one in the file")
        seen[column.lower()] = column


def _refuse_keys_renamed(con: duckdb.DuckDBPyConnection, table: str, paths: list[str], json_format: str) -> None:
    """Refuse JSON objects whose keys DuckDB's reader renames: two keys told apart only by case
    (``A`` and ``a``: the second column is ``a_1``) and the empty key (column ``C0``). Each file
    is read with the detected columns by name, and those names match no key: the values were
    NULL, or another file's ``a_1`` key was taken for them. The keys are those of each file's
    first objects, as many as DuckDB's detection samples."""
    seen: dict[str, str] = {}
    for path in paths:
        keys = con.sql(f"SELECT DISTINCT unnest(json_keys(json)) FROM (SELECT json FROM read_json_objects("
                       f"{string_literal(path)}, {json_format}) LIMIT {JSON_SAMPLE_OBJECTS})").fetchall()
        for (key,) in keys:
            if key == "":
                raise NotSupportedError(f"table {table!r}: {path} has an object key that is the empty string, which "
                                        "DuckDB's reader renames; rename it in the file")
            if seen.setdefault(key.lower(), key) != key:
                raise NotSupportedError(f"table {table!r}: the JSON keys {seen[key.lower()]!r} and {key!r} differ only in case, "
                                        "which columns read by name cannot tell apart; rename one in the files")


def _refuse_times_read_otherwise(con: duckdb.DuckDBPyConnection, table: str, paths: list[str], json_format: str, options: str) -> None:
    """Refuse JSON whose dates or times the imposed columns read otherwise than DuckDB's detection:
    DuckDB detects a format (``2020-01-02T10:00:00+02:00`` as ``%Y-%m-%dT%H:%M:%S%z``, 08:00 in
    UTC), where a string cast to the imposed TIMESTAMP kept 10:00. Each file's first objects are
    read both ways, where DuckDB gives the column the same type read alone."""
    for path in paths:
        own = con.sql(f"SELECT * FROM read_json({string_literal(path)}, {json_format}) LIMIT 0")
        imposed = con.sql(f"SELECT * FROM read_json({string_literal(path)}, {options}) LIMIT 0")
        typed = dict(zip(imposed.columns, map(str, imposed.types), strict=True))
        columns = [c for c, t in zip(own.columns, map(str, own.types), strict=True) if _TEMPORAL.search(t) and typed.get(c) == t]
        if not columns:
            continue
        picked = ", ".join(identifier(c) for c in columns)
        differ = con.sql(f"SELECT count(*) FROM ((SELECT {picked} FROM read_json({string_literal(path)}, {json_format}) "
                         f"LIMIT {JSON_SAMPLE_OBJECTS}) EXCEPT ALL (SELECT {picked} FROM read_json({string_literal(path)}, "
                         f"{options}) LIMIT {JSON_SAMPLE_OBJECTS}))").fetchone()[0]
        if differ:
            raise NotSupportedError(f"table {table!r}: {path} writes dates or times ({', '.join(columns)}) in a form qengine "
                                    "cannot read as DuckDB does (a time with a UTC offset, say); write them in UTC")


def _detected(con: duckdb.DuckDBPyConnection, reader: str) -> tuple[str, pa.Schema, list[str]]:
    """What DuckDB's ``reader`` (``read_csv([...])``, ``read_json([...])``) detects over all its
    files, once: its ``columns`` option, which imposes the names and types on each file read
    alone, the Arrow schema those make (a JSON column tagged as one, ``sandbox.carried_types``),
    and DuckDB's names of the types."""
    relation = con.sql(f"SELECT * FROM {reader} LIMIT 0")
    types = [str(t) for t in relation.types]
    named = ", ".join(f"{string_literal(c)}: {string_literal(t)}" for c, t in zip(relation.columns, types, strict=True))
    return f"columns = {{{named}}}", tagged_result(relation).schema, types


def _records(con: duckdb.DuckDBPyConnection, reader: str, columns: str) -> str:
    """Whether DuckDB read the files as records (an object's keys are columns), as ``reader``, the
    same files read with ``records = true``, tells: "true" or "false". DuckDB decides over all
    the files, so a file of objects read alone must be told: beside a file of scalars, its
    objects are values of one JSON column, not rows of columns named by their keys."""
    try:
        return "true" if _detected(con, reader)[0] == columns else "false"
    except duckdb.Error:  # "expected records, but got non-record JSON"
        return "false"


def _integer_bounds(st: pq.Statistics | None) -> tuple[int, int] | None:
    """A column chunk's integer minimum and maximum, or None where its statistics hold none:
    also a DATE or TIMESTAMP Python cannot hold (-infinity, a year before 1), which pyarrow
    fails to convert."""
    if st is None or not st.has_min_max:
        return None
    try:
        low, high = st.min, st.max
    except (OverflowError, ValueError):
        return None
    return (low, high) if isinstance(low, int) and isinstance(high, int) else None


def _sniffed_text(value: str) -> str:
    """A value of sniff_csv()'s row as a SQL string, where '(empty)' stands for the empty string."""
    return string_literal("" if value == "(empty)" else value)


def _csv_read_options(dialect: tuple, columns: str) -> str:
    """read_csv()'s options, after the path, that read a file exactly as sniffed: ``dialect`` is
    sniff_csv()'s row (where '(empty)' stands for the empty string), ``columns`` the option
    ``_detected`` made over all the files. The line break is left to the reader, which takes
    ``\n``, ``\r\n`` and ``\r`` alike, as DuckDB reads each file of a glob: told the first
    file's, a later file written with another one read as no rows at all."""
    delimiter, quote, escape, comment, skip, header, date_format, timestamp_format = dialect
    text = _sniffed_text

    options = [
        "auto_detect = false", f"delim = {text(delimiter)}", f"quote = {text(quote)}", f"escape = {text(escape)}",
        f"comment = {text(comment)}", f"skip = {int(skip)}", f"header = {'true' if header else 'false'}", columns,
    ]
    if date_format:
        options.append(f"dateformat = {string_literal(date_format)}")
    if timestamp_format:
        options.append(f"timestampformat = {string_literal(timestamp_format)}")
    return ", ".join(options)


class JsonSource(Source):
    """JSON files, newline-delimited or a top-level array, read by DuckDB's JSON reader as DuckDB's
    read_json() reads them; one split per file. The schema DuckDB detects over all the files is
    worked out once, here, and imposed on every file (``read_options``), so each split reads the
    same columns with the same types."""

    def __init__(self, name: str, paths: list[str], json_format: str = "auto") -> None:
        if not paths:
            raise ProgrammingError(f"table {name!r}: no JSON files found")
        self.name = name
        self.paths = paths
        self._signature, self._rebuild = file_signature(paths), functools.partial(JsonSource, name, paths, json_format)
        files = "[" + ", ".join(string_literal(p) for p in paths) + "]"
        json_format = f"format = {string_literal(json_format)}"
        con = safe_connection(readable=tuple(paths))
        try:
            columns, self.schema, types = _detected(con, f"read_json({files}, {json_format})")
            records = _records(con, f"read_json({files}, {json_format}, records = true)", columns)
            self.read_options = f"{columns}, {json_format}, records = {records}"
            if records == "true":
                _refuse_keys_renamed(con, name, paths, json_format)
                if any(_TEMPORAL.search(t) for t in types):
                    _refuse_times_read_otherwise(con, name, paths, json_format, self.read_options)
        except duckdb.Error as e:
            raise ProgrammingError(f"cannot read JSON file {paths[0] if len(paths) == 1 else files}: {str(e).splitlines()[0]}") from e
        finally:
            con.close()
        self._bytes = sum(os.path.getsize(p) for p in paths)

    @property
    def rows(self) -> int:
        return max(1, self._bytes // max(1, 16 * len(self.schema)))

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        return [{"kind": "json", "path": p, "options": self.read_options} for p in self.paths]


class RecordSource(Source):
    """Flat files of 100-byte sort-benchmark records (gensort's binary layout), read as
    ``key`` and ``payload`` columns; splits are record-aligned byte ranges."""

    def __init__(self, name: str, paths: list[str]) -> None:
        if not paths:
            raise ProgrammingError(f"table {name!r}: no record files found")
        self.name = name
        self.paths = paths
        self.schema = records.SCHEMA
        self.sizes = [os.path.getsize(p) for p in paths]
        bad = next((p for p, s in zip(paths, self.sizes, strict=True) if s % records.RECORD), None)
        if bad:
            raise ProgrammingError(f"{bad} is not a whole number of {records.RECORD}-byte records")

    @property
    def rows(self) -> int:
        return sum(self.sizes) // records.RECORD

    def column_width(self, column: str) -> float:
        return float(records.KEY if column == "key" else records.RECORD - records.KEY)

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        step = max(records.RECORD, split_bytes - split_bytes % records.RECORD)
        out = [
            {"kind": "records", "path": path, "offset": offset, "length": min(step, size - offset)}
            for path, size in zip(self.paths, self.sizes, strict=True)
            for offset in range(0, size, step)
        ]
        return out or [{"kind": "records", "path": self.paths[0], "offset": 0, "length": 0}]


@dataclass
class Partition:
    """One piece of an in-memory table, kept under ``key`` in the table store of each of its
    ``holders``: the worker that wrote it, then the one holding its copy, so that the table
    outlives the loss of one worker (``qengine.api.replicas``). ``lost`` counts the holders
    dropped because their workers left the cluster; with no holder left, the rows are gone."""

    holders: list[str]
    key: str
    rows: int
    bytes: int
    lost: int = 0


class MemorySource(Source):
    """A table held in the cluster's memory: registered Arrow data, CTAS results, inserts."""

    def __init__(self, name: str, schema: pa.Schema, uid: int) -> None:
        self.name = name
        self.schema = schema
        self.uid = uid
        self.partitions: list[Partition] = []

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    def column_width(self, column: str) -> float:
        total = sum(p.bytes for p in self.partitions)
        return max(1.0, total / max(1, self.rows) / max(1, len(self.schema)))

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        """One split per partition: ``address`` is its first holder, ``replicas`` every holder
        (first holder first), for the scheduler to place the task on one that is alive and for
        the task to read from the next if one fails. A partition no worker holds any more fails
        the scan: a table missing some of its rows must not answer as if it were whole."""
        schema = schema_to_hex(self.schema)
        if not self.partitions:
            return [{"kind": "memory", "address": None, "replicas": [], "key": None, "schema": schema}]
        splits = []
        for index, p in enumerate(self.partitions):
            holders = list(p.holders)  # read once: another statement's healing may replace it
            if not holders:
                who = "both workers holding it were" if p.lost > 1 else "the worker holding it was"
                raise OperationalError(f"session table {self.name} lost partition {index}: {who} lost")
            splits.append(
                {"kind": "memory", "address": holders[0], "replicas": holders, "key": p.key, "schema": schema,
                 "table": self.name, "index": index}
            )
        return splits


class InlineSource(Source):
    """A small table made while planning (information_schema's rows), whose rows travel in its
    one split: nothing is stored on a worker, and nothing is left to free when the query ends."""

    def __init__(self, name: str, table: pa.Table) -> None:
        self.name = name
        self.schema = table.schema
        self._rows = table.num_rows
        self._split = {"kind": "inline", "data": table_to_hex(table)}

    @property
    def rows(self) -> int:
        return self._rows

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        return [self._split]

    def whole(self) -> dict:
        return self._split

    def single_split(self, split_bytes: int) -> bool:
        return True


# Rows of a range() table a scan task makes at most: 8 bytes a row, DEFAULT_SPLIT_BYTES of them.
RANGE_SPLIT_ROWS = DEFAULT_SPLIT_BYTES // 8


class RangeSource(Source):
    """range(start, stop, step) and generate_series(...) as a table: the integers from ``start``
    by ``step`` up to ``stop`` (excluded), in one BIGINT column; the workers make them, in
    splits of consecutive runs."""

    def __init__(self, name: str, column: str, start: int, stop: int, step: int) -> None:
        self.name = name
        self.schema = pa.schema([pa.field(column, pa.int64())])
        self.start, self.stop, self.step = start, stop, step
        self._rows = max(0, -(-(stop - start) // step))

    @property
    def rows(self) -> int:
        return self._rows

    def splits(
        self, workers: int, split_bytes: int = DEFAULT_SPLIT_BYTES, ranges: dict[str, tuple[int, int]] | None = None
    ) -> list[dict]:
        per_split = max(1, min(RANGE_SPLIT_ROWS, split_bytes // 8, -(-self._rows // max(1, workers))))
        firsts = range(0, self._rows, per_split) if self._rows else [0]
        return [self._split(first, min(self._rows, first + per_split)) for first in firsts]

    def whole(self) -> dict:
        return self._split(0, self._rows)

    def _split(self, first: int, stop: int) -> dict:
        """Rows ``first`` to ``stop`` (excluded) of the series, as the values they hold."""
        return {"kind": "range", "start": self.start + first * self.step, "count": stop - first, "step": self.step,
                "column": self.schema.names[0]}
