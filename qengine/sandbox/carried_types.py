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
import re
import uuid
from collections.abc import Callable, Collection
from typing import Any

import duckdb
import pyarrow as pa

from qengine.errors import NotSupportedError
from qengine.sandbox.quoting import identifier

TAG = b"qengine.duckdb_type"
# Types Arrow holds as another: HUGEINT as decimal128 (also inside a LIST, STRUCT or MAP), an
# ENUM as a dictionary of strings (read back as VARCHAR, which orders alphabetically, not in
# the enum's order), a UUID or JSON as a string (a JSON column of CREATE TABLE AS was VARCHAR).
_RETYPED = re.compile(r"\bU?HUGEINT\b|\bUUID\b|\bENUM\(|\bJSON\b")
# Types Arrow cannot hold at all, refused: a BIT as its inner bytes, which neither read back nor
# print as DuckDB's '101'; a TIME WITH TIME ZONE as a time without its offset ('10:00:00+02'
# came back as 10:00:00, a TIME).
_REFUSED = {re.compile(r"\bBIT\b"): "the BIT type", re.compile(r"\bTIME WITH TIME ZONE\b"): "the TIME WITH TIME ZONE type"}


def tag_types(table: pa.Table, types: list[str], nulls: Collection[str] = ()) -> pa.Table:
    """``table`` (a fragment's result, whose DuckDB column types are ``types``) with each
    column of a type Arrow does not carry tagged with that type, and the columns the planner
    knows to be untyped NULL (``nulls``, see ``planner.null_columns``) tagged NULL."""
    for pattern, what in _REFUSED.items():
        if any(pattern.search(t) for t in types):
            raise NotSupportedError(f"{what} is not supported in a query's columns (cast it to VARCHAR)")
    tags = ["NULL" if f.name in nulls else t if _RETYPED.search(t) else None for f, t in zip(table.schema, types, strict=True)]
    if not any(tags):
        return table
    fields = [f.with_metadata({**(f.metadata or {}), TAG: t.encode()}) if t else f for f, t in zip(table.schema, tags, strict=True)]
    return table.cast(pa.schema(fields, table.schema.metadata))


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


def restoring_query(name: str, schema: pa.Schema) -> str | None:
    """A query reading Arrow input ``name`` with its tagged columns back in their DuckDB types
    (an untyped NULL column as the NULL literal), or None when it has none."""
    casts = []
    for f in schema:
        tag = (f.metadata or {}).get(TAG, b"").decode()
        if tag == "NULL":
            casts.append(f"NULL AS {identifier(f.name)}")
        elif tag:
            casts.append(f"CAST({identifier(f.name)} AS {tag}) AS {identifier(f.name)}")
    if not casts:
        return None
    return f"SELECT * REPLACE ({', '.join(casts)}) FROM {identifier(name)}"


def python_values(column: pa.ChunkedArray, field: pa.Field) -> list:
    """A result column as Python values, as DuckDB's own ``fetchall`` gives them, at any depth
    of nesting: a HUGEINT is an ``int``, not the ``Decimal`` its Arrow form would make, a UUID a
    ``uuid.UUID``, an INTERVAL a ``timedelta``, not Arrow's ``MonthDayNano``, a MAP a ``dict``,
    not Arrow's list of pairs, and an ARRAY a tuple."""
    try:
        values = column.to_pylist()
    except (OverflowError, ValueError):  # a date or timestamp beyond Python's years 1 to 9999
        values = _beyond_python(column, field.type)
    tag = (field.metadata or {}).get(TAG, b"").decode()
    if tag == "UUID":
        return [None if v is None else uuid.UUID(v) for v in values]
    convert = _converter(field.type, bool(_HUGE.search(tag)))
    return values if convert is None else [None if v is None else convert(v) for v in values]


_HUGE = re.compile(r"\bU?HUGEINT\b")


def _beyond_python(column: pa.Array | pa.ChunkedArray, t: pa.DataType) -> list:
    """Values of a DATE or TIMESTAMP column some of which Python's types cannot hold, as DuckDB's
    ``fetchall`` gives them: 'infinity' as the latest date or datetime Python has, '-infinity'
    as the earliest, and any other such value as DuckDB's text of it ('294247-01-01')."""
    if not (pa.types.is_date32(t) or pa.types.is_timestamp(t)):
        raise NotSupportedError(f"fetching a {t} value beyond Python's dates (years 1 to 9999) as rows is not supported: fetch it as Arrow, or cast it to VARCHAR")
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


def _converter(t: pa.DataType, huge: bool) -> Callable[[Any], Any] | None:
    """How a non-NULL value of Arrow type ``t`` becomes DuckDB's Python value, or None where
    Arrow's is DuckDB's already. ``huge``: the column's DuckDB type holds a HUGEINT, which Arrow
    holds as decimal128(38, 0)."""
    if huge and pa.types.is_decimal(t) and t.precision == 38 and t.scale == 0:
        return int
    if pa.types.is_interval(t):  # DuckDB counts a month as 30 days
        return lambda v: dt.timedelta(days=v.months * 30 + v.days, microseconds=v.nanoseconds // 1000)
    if pa.types.is_map(t):
        key, item = _converter(t.key_type, huge) or _same, _converter(t.item_type, huge) or _same
        return lambda v: {key(k): _maybe(item, x) for k, x in v}
    if pa.types.is_fixed_size_list(t):  # DuckDB's ARRAY: a tuple
        inner = _converter(t.value_type, huge) or _same
        return lambda v: tuple(_maybe(inner, x) for x in v)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _converter(t.value_type, huge)
        return None if inner is None else lambda v: [_maybe(inner, x) for x in v]
    if pa.types.is_struct(t):
        fields = {t.field(i).name: _converter(t.field(i).type, huge) for i in range(t.num_fields)}
        if not any(fields.values()):
            return None
        return lambda v: {name: _maybe(fields[name], x) if fields[name] else x for name, x in v.items()}
    return None


def _same(v: Any) -> Any:
    return v


def _maybe(convert: Callable[[Any], Any], v: Any) -> Any:
    return None if v is None else convert(v)


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
