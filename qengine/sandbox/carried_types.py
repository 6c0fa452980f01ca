"""DuckDB types that do not survive a trip through Arrow, carried across exchanges: HUGEINT
(alone or inside a LIST, STRUCT or MAP), ENUM, UUID, JSON, and the untyped NULL of ``SELECT
NULL AS x`` (see ``planner.null_columns``). An ENUM comes back as VARCHAR, which orders and compares
alphabetically where the enum has its declared order (``min`` of ENUM('c', 'b', 'a') is 'c').

DuckDB hands HUGEINT and UHUGEINT to Arrow as decimal128(38, 0), and reads that back as
DECIMAL(38,0). The values are the same, but the semantics are not: ``sum(k) // 3`` divides
exactly on a DECIMAL (599.67) where DuckDB's HUGEINT divides as an integer (599), and bitwise
operators refuse DECIMAL. Every aggregate ``sum`` of an integer column is a HUGEINT, so a stage
that reads another's sums would otherwise answer differently from DuckDB.

The producing task tags such a column's Arrow field with the DuckDB type; the tag travels with
the schema through shuffles, and the consuming fragment reads the column cast back. A result
fetched as Arrow carries no tag: it is DuckDB's own Arrow form of the type; fetched as rows, a
HUGEINT is a Python int, as DuckDB gives it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import uuid
from collections.abc import Callable, Collection

import duckdb
import pyarrow as pa

from qengine.errors import DataError, NotSupportedError
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.quoting import identifier

TAG = b"qengine.duckdb_type"
# Types Arrow holds as another: HUGEINT as decimal128 (also inside a LIST, STRUCT or MAP), an
# ENUM as a dictionary of strings (read back as VARCHAR, which orders alphabetically, not in
# the enum's order), a UUID or JSON as a string (a JSON column of CREATE TABLE AS was VARCHAR).
_RETYPED = re.compile(r"\bU?HUGEINT\b|\bUUID\b|\bENUM\(|\bJSON\b")
# Types Arrow cannot hold at all, refused: a BIT as its inner bytes, which neither read back nor
# print as DuckDB's '101'; a TIME WITH TIME ZONE as a time without its offset ('10:00:00+02'
# came back as 10:00:00, a TIME); a BIGNUM (or VARINT) as an opaque extension of its bytes,
# which came back as a BLOB.
_REFUSED = {
    re.compile(r"\bBIT\b"): "the BIT type",
    re.compile(r"\bTIME WITH TIME ZONE\b"): "the TIME WITH TIME ZONE type",
    re.compile(r"\b(BIGNUM|VARINT)\b"): "the BIGNUM type",
}


def tag_types(table: pa.Table, types: list[str], nulls: Collection[str] = ()) -> pa.Table:
    """``table`` (a fragment's result, whose DuckDB column types are ``types``) with each
    column of a type Arrow does not carry tagged with that type, and the columns the planner
    knows to be untyped NULL (``nulls``, see ``planner.null_columns``) tagged NULL."""
    for t in types:
        refuse_unsupported(t)
    tags = ["NULL" if f.name in nulls else t if _RETYPED.search(t) else None for f, t in zip(table.schema, types, strict=True)]
    if not any(tags):
        return table
    for column, tag in zip(table.columns, tags, strict=True):
        if tag and _UNSIGNED_HUGE.search(tag) and any(_negative(leaf) for leaf in _decimal_leaves(column)):
            # Arrow's decimal128 holds a UHUGEINT's bits: from 2^127 on they read as negative numbers
            raise NotSupportedError(
                "UHUGEINT values of 2^127 (170141183460469231731687303715884105728) or more are not supported "
                "in a query's columns (cast them to VARCHAR)"
            )
    # an ENUM inside a list, struct or map travels as its labels: DuckDB's scan of a nested
    # dictionary with NULLs in it corrupted its heap (workers died of "free(): invalid next size")
    fields = [tagged(f.with_type(_decoded(f.type)), t) if t else f for f, t in zip(table.schema, tags, strict=True)]
    return table.cast(pa.schema(fields, table.schema.metadata))


def unsupported(duckdb_type: str) -> str | None:
    """What of ``duckdb_type`` cannot travel in Arrow (``_REFUSED``), or None."""
    return next((what for pattern, what in _REFUSED.items() if pattern.search(duckdb_type)), None)


def refuse_unsupported(duckdb_type: str) -> None:
    """Raise if a column of ``duckdb_type`` cannot travel in Arrow."""
    what = unsupported(duckdb_type)
    if what is not None:
        raise NotSupportedError(f"{what} is not supported in a query's columns (cast it to VARCHAR)")


def _decoded(t: pa.DataType, nested: bool = False) -> pa.DataType:
    """``t`` with every dictionary below its top level as the values' type (one at the top stays)."""
    if pa.types.is_dictionary(t):
        return t.value_type if nested else t
    return with_child_types(t, lambda child: _decoded(child, True))


def with_child_types(t: pa.DataType, change: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``t`` rebuilt with ``change`` made to each type directly inside it, in order: a struct's
    fields, a map's key then item, a list's values; any other type as it is."""
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(change(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        key = change(t.key_type)
        return pa.map_(key, t.item_field.with_type(change(t.item_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(change(t.value_type)), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind = pa.large_list if pa.types.is_large_list(t) else pa.list_
        return kind(t.value_field.with_type(change(t.value_type)))
    return t


_UNSIGNED_HUGE = re.compile(r"\bUHUGEINT\b")


def tagged_result(relation: duckdb.DuckDBPyRelation, nulls: Collection[str] = ()) -> pa.Table:
    """A DuckDB relation's rows as Arrow, its columns of types Arrow does not carry tagged
    (:func:`tag_types`)."""
    return tag_types(relation.to_arrow_table(), [str(t) for t in relation.types], nulls)


def _decimal_leaves(column: pa.ChunkedArray | pa.Array) -> list[pa.Array]:
    """The decimal arrays inside ``column``, through its lists, maps and structs."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    leaves: list[pa.Array] = []
    for chunk in chunks:
        t = chunk.type
        if pa.types.is_decimal(t):
            leaves.append(chunk)
        elif pa.types.is_map(t):
            leaves += _decimal_leaves(chunk.keys) + _decimal_leaves(chunk.items)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            leaves += _decimal_leaves(chunk.flatten())
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                leaves += _decimal_leaves(chunk.field(i))
    return leaves


def _negative(leaf: pa.Array) -> bool:
    import pyarrow.compute as pc  # here, not at the top: it costs a one-statement CLI run ~30 ms to import

    return bool(pc.any(pc.less(leaf, pa.scalar(0, leaf.type))).as_py())


def stored_nulls_as_integers(table: pa.Table) -> pa.Table:
    """``table`` as a session table keeps it: an untyped NULL column as INTEGER, as DuckDB's
    CREATE TABLE AS makes it (Arrow already holds it as int32), not as the NULL literal, which
    would hide the rows INSERTed into it later."""
    if not any(untyped_null(f) for f in table.schema):
        return table
    return table.cast(pa.schema([_without_tag(f) if untyped_null(f) else f for f in table.schema], table.schema.metadata))


def untyped_null(field: pa.Field) -> bool:
    """Whether ``field`` is tagged as a column of untyped NULLs (``planner.null_columns``)."""
    return (field.metadata or {}).get(TAG) == b"NULL"


def tagged(field: pa.Field, duckdb_type: str) -> pa.Field:
    """``field`` tagged as holding ``duckdb_type``, which its Arrow type carries otherwise."""
    return field.with_metadata({**(field.metadata or {}), TAG: duckdb_type.encode()})


def carried_type(field: pa.Field) -> str:
    """The DuckDB type ``field`` is tagged with ("NULL" for an untyped NULL column), or "" when
    its Arrow type is its DuckDB type. A tag is spliced into SQL as a type, and blocks can come
    from outside (a push to a worker): one that is not a single type name is refused."""
    tag = (field.metadata or {}).get(TAG, b"").decode()
    if tag and not _a_type(tag):
        raise DataError(f"column {field.name!r} carries {tag!r}, which is not a DuckDB type")
    return tag


@functools.lru_cache(maxsize=1024)
def _a_type(text: str) -> bool:
    """Whether ``text`` is the untyped NULL's tag or one type as DuckDB's type parser reads it
    (checked once a tag), nothing more: ``INTEGER) AS x, (SELECT …`` is none."""
    if text == "NULL":
        return True
    try:
        duckdb.sqltype(text)
    except (duckdb.Error, ValueError):
        return False
    return True


def restoring_query(name: str, schema: pa.Schema, typed: bool = True, nulls: bool = True) -> str | None:
    """A query reading Arrow input ``name`` with its tagged columns back in their DuckDB types
    (an untyped NULL column as the NULL literal), or None when it has none. ``typed`` and
    ``nulls`` say which of the two kinds are restored."""
    casts = []
    for f in schema:
        tag = carried_type(f)
        if tag == "NULL" and nulls:
            casts.append(f"NULL AS {identifier(f.name)}")
        elif tag and tag != "NULL" and typed:
            casts.append(f"CAST({identifier(f.name)} AS {tag}) AS {identifier(f.name)}")
    if not casts:
        return None
    return f"SELECT * REPLACE ({', '.join(casts)}) FROM {identifier(name)}"


def python_values(column: pa.Array | pa.ChunkedArray, field: pa.Field) -> list:
    """A result column as Python values, as DuckDB's own ``fetchall`` gives them, at any depth
    of nesting: a HUGEINT is an ``int``, not the ``Decimal`` its Arrow form would make, a UUID a
    ``uuid.UUID``, an INTERVAL a ``timedelta``, not Arrow's ``MonthDayNano``, a MAP a ``dict``,
    not Arrow's list of pairs, an ARRAY a tuple, and so is a struct of unnamed fields (a ``row()``
    or ``list_zip`` pair, which Arrow cannot make a dict of)."""
    tag = carried_type(field)
    if tag == "UUID":
        return [None if v is None else uuid.UUID(v) for v in column.to_pylist()]
    if _UUID.search(tag):  # inside a list, struct or map: DuckDB's own values of the type
        con = scratch_connection()
        try:
            con.register("__qengine_values", pa.table({"v": column}))
            return [v for (v,) in con.execute(f"SELECT CAST(v AS {tag}) FROM __qengine_values").fetchall()]
        finally:
            con.close()
    huge = bool(HUGEINT.search(tag))
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return [v for chunk in chunks for v in _python(chunk, huge)]


HUGEINT = re.compile(r"\bU?HUGEINT\b")  # a HUGEINT or UHUGEINT, at any depth of a type
_UUID = re.compile(r"\bUUID\b")


def _beyond_python(column: pa.Array | pa.ChunkedArray, t: pa.DataType) -> list:
    """Values of a DATE or TIMESTAMP column some of which Python's types cannot hold, as DuckDB's
    ``fetchall`` gives them: 'infinity' as the latest date or datetime Python has, '-infinity'
    as the earliest, and any other such value as DuckDB's text of it ('294247-01-01')."""
    date = pa.types.is_date32(t)
    infinity = 2**31 - 1 if date else 2**63 - 1
    latest, earliest = (dt.date.max, dt.date.min) if date else (dt.datetime.max, dt.datetime.min)
    raw = column.cast(pa.int32() if date else pa.int64()).to_pylist()
    with duckdb.connect() as con:  # Arrow's text of such a value is "<value out of range: …>"
        text = [v for (v,) in con.from_arrow(pa.table({"v": column})).project("CAST(v AS VARCHAR)").fetchall()]
    out: list = []
    for value, written in zip(raw, text, strict=True):
        if value is None or abs(value) == infinity:
            out.append(None if value is None else latest if value > 0 else earliest)
            continue
        try:
            out.append(pa.scalar(value, pa.int32() if date else pa.int64()).cast(t).as_py())
        except (OverflowError, ValueError):
            out.append(written)
    return out


def _python(array: pa.Array, huge: bool) -> list:
    """``array``'s values as DuckDB gives them (see ``python_values``); ``huge``: the column's
    DuckDB type holds a HUGEINT, which Arrow holds as decimal128(38, 0)."""
    t = array.type
    if not _differs(t, huge):
        try:
            return array.to_pylist()
        except (OverflowError, ValueError) as e:  # a date or timestamp beyond Python's years 1 to 9999
            if pa.types.is_date32(t) or pa.types.is_timestamp(t):
                return _beyond_python(array, t)
            if not (pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
                raise NotSupportedError(
                    f"fetching a {t} value beyond Python's dates (years 1 to 9999) as rows is not supported: "
                    "fetch it as Arrow, or cast it to VARCHAR"
                ) from e
            # somewhere inside: converted element by element below, each date where it is
    if pa.types.is_decimal(t):
        return [None if v is None else int(v) for v in array.to_pylist()]
    if pa.types.is_timestamp(t):  # nanoseconds: a datetime, cut to microseconds as DuckDB cuts them (not a pandas Timestamp)
        return array.cast(pa.timestamp("us", t.tz), safe=False).to_pylist()
    if pa.types.is_time(t):  # TIME '24:00:00', which Python's time cannot hold, is DuckDB's text of it
        ticks = array.cast(pa.int32() if pa.types.is_time32(t) else pa.int64())
        day = 86_400 * _PER_SECOND[t.unit]
        if max((n for n in ticks.to_pylist() if n is not None), default=0) < day:
            return array.to_pylist()
        return [v if n is None or n < day else "24:00:00" for v, n in zip(array.to_pylist(), ticks.to_pylist(), strict=True)]
    if pa.types.is_interval(t):  # DuckDB counts a month as 30 days
        return [
            None if v is None else dt.timedelta(days=v.months * 30 + v.days, microseconds=v.nanoseconds // 1000)
            for v in array.to_pylist()
        ]
    valid = array.is_valid().to_pylist()
    if pa.types.is_struct(t):
        fields = [_python(child, huge) for child in array.flatten()]
        if all(not t.field(i).name for i in range(t.num_fields)):
            rows: list = [tuple(values) for values in zip(*fields, strict=True)] if fields else [()] * len(array)
        else:
            names = [t.field(i).name for i in range(t.num_fields)]
            rows = [dict(zip(names, values, strict=True)) for values in zip(*fields, strict=True)]
        return [row if ok else None for row, ok in zip(rows, valid, strict=True)]
    if pa.types.is_map(t):  # a map is laid out as a list of (key, value) structs
        array = array.view(pa.list_(pa.field("entries", pa.struct([t.key_field, t.item_field]), nullable=False)))
    inner = _python(array.flatten(), huge)  # a list's, array's or map's elements, in order
    out: list = []
    at = 0
    lengths = [t.list_size] * len(array) if pa.types.is_fixed_size_list(t) else array.value_lengths().to_pylist()
    for ok, length in zip(valid, lengths, strict=True):
        if not ok:
            out.append(None)
            continue
        items, at = inner[at:at + length], at + length
        if pa.types.is_map(t) and pa.types.is_nested(t.key_type):
            # keys Python cannot hash (lists, structs): DuckDB gives the two lists side by side
            out.append({"key": [entry["key"] for entry in items], "value": [entry["value"] for entry in items]})
        elif pa.types.is_map(t):
            out.append(dict(tuple(entry.values()) for entry in items))  # each entry is {key:, value:}
        else:
            out.append(tuple(items) if pa.types.is_fixed_size_list(t) else items)
    return out


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _differs(t: pa.DataType, huge: bool) -> bool:
    """Whether Arrow's Python value of type ``t`` may not be DuckDB's (see ``_python``)."""
    if pa.types.is_decimal(t):
        return huge and t.precision == 38 and t.scale == 0
    if pa.types.is_interval(t) or pa.types.is_map(t) or pa.types.is_fixed_size_list(t) or pa.types.is_time(t):
        return True
    if pa.types.is_timestamp(t):
        return t.unit == "ns"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _differs(t.value_type, huge)
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        return len(set(names)) < len(names) or not all(names) or any(_differs(t.field(i).type, huge) for i in range(t.num_fields))
    return False


def untagged(table: pa.Table) -> pa.Table:
    """``table`` without the tags, as DuckDB itself would hand it out."""
    if not any(f.metadata and TAG in f.metadata for f in table.schema):
        return table
    return table.cast(untagged_schema(table.schema))


def untagged_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` without the tags."""
    return pa.schema([_without_tag(f) for f in schema], schema.metadata)


def _without_tag(f: pa.Field) -> pa.Field:
    rest = {k: v for k, v in (f.metadata or {}).items() if k != TAG}
    return f.with_metadata(rest) if rest else f.remove_metadata()
