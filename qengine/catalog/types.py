"""DB-API type objects and the mapping from Arrow types to the type codes in ``description``.

Type codes are DuckDB-style type names ("INTEGER", "DECIMAL(7,2)", "VARCHAR"), which DuckDB users
already know; the PEP 249 type objects (STRING, NUMBER, ...) compare equal to every code of their
group.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re

import duckdb
import pyarrow as pa

from qengine.sandbox.carried_types import carried_type
from qengine.sandbox.quoting import identifier


class DBAPITypeObject:
    """A PEP 249 type object: equal to every type code of its group."""

    def __init__(self, name: str, *prefixes: str) -> None:
        self.name = name
        self._prefixes = prefixes

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return other is self
        if isinstance(other, str):
            return any(other == p or other.startswith(p + "(") for p in self._prefixes)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<DBAPITypeObject {self.name}>"


STRING = DBAPITypeObject("STRING", "VARCHAR")
BINARY = DBAPITypeObject("BINARY", "BLOB")
NUMBER = DBAPITypeObject(
    "NUMBER",
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
    "FLOAT", "DOUBLE", "DECIMAL", "BOOLEAN",
)
DATETIME = DBAPITypeObject("DATETIME", "DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "INTERVAL")
ROWID = DBAPITypeObject("ROWID", "BIGINT")


class ZonedTime(pa.ExtensionType):
    """A Parquet TIME adjusted to UTC, DuckDB's TIME WITH TIME ZONE, which pyarrow reads as a
    plain time: it only names the type of a column holding one (``catalog.scan.duckdb_schema``)."""

    def __init__(self) -> None:
        super().__init__(pa.time64("us"), "qengine.time_with_time_zone")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> ZonedTime:
        return cls()


def type_code(t: pa.DataType) -> str:
    """The name DuckDB gives an Arrow type, used as the DB-API ``type_code`` and wherever a
    column's type is spelled in SQL (a struct is ``STRUCT(a INTEGER)``, as DuckDB writes and
    reads it, not Arrow's ``struct<a: int32>``)."""
    if isinstance(t, pa.UuidType):  # as a Parquet file's UUID column reads
        return "UUID"
    if isinstance(t, pa.JsonType):  # as a Parquet file's JSON column is named
        return "JSON"
    if isinstance(t, ZonedTime):
        return "TIME WITH TIME ZONE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_integer(t):
        signed = {8: "TINYINT", 16: "SMALLINT", 32: "INTEGER", 64: "BIGINT"}
        name = signed[t.bit_width]
        return name if pa.types.is_signed_integer(t) else "U" + name
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "VARCHAR"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "BLOB"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else _TIMESTAMPS[t.unit]
    if pa.types.is_time(t):
        return "TIME_NS" if t.unit == "ns" else "TIME"
    if pa.types.is_interval(t) or pa.types.is_duration(t):
        return "INTERVAL"
    if pa.types.is_fixed_size_list(t):
        return f"{type_code(t.value_type)}[{t.list_size}]"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return type_code(t.value_type) + "[]"
    if pa.types.is_map(t):
        return f"MAP({type_code(t.key_type)}, {type_code(t.item_type)})"
    if pa.types.is_struct(t) or pa.types.is_union(t):
        named = any(t.field(i).name for i in range(t.num_fields))  # a row() or list_zip pair's are not
        fields = ", ".join(
            f"{field_name(t.field(i).name)} {type_code(t.field(i).type)}" if named else type_code(t.field(i).type)
            for i in range(t.num_fields)
        )
        return f"{'STRUCT' if pa.types.is_struct(t) else 'UNION'}({fields})"
    if pa.types.is_dictionary(t):
        return type_code(t.value_type)
    return str(t).upper()


_TIMESTAMPS = {"s": "TIMESTAMP_S", "ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name SQL may write bare


def field_name(name: str) -> str:
    """A struct field's name as DuckDB writes it in a type: bare if it is a plain word and no
    keyword, else in double quotes."""
    return name if PLAIN_NAME.fullmatch(name) and name.lower() not in _keywords() else identifier(name)


@functools.cache
def _keywords() -> frozenset[str]:
    """DuckDB's keywords, every one of which it quotes as a field name."""
    with duckdb.connect() as con:
        return frozenset(row[0] for row in con.execute("SELECT keyword_name FROM duckdb_keywords()").fetchall())


_NUMBERS = frozenset(
    ["TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE"]
)
_DECIMAL = re.compile(r"DECIMAL\(\d+,\s*\d+\)")


def is_number(t: str) -> bool:
    """Whether the DuckDB type name ``t`` is a number's: an integer, a DECIMAL, FLOAT or DOUBLE
    (not a list or struct of them: ``DECIMAL(5,2)[]`` is none)."""
    return t in _NUMBERS or bool(_DECIMAL.fullmatch(t))


def column_type(field: pa.Field) -> str:
    """The DuckDB type a column holds: the type its field carries (``sandbox.carried_types``: a
    HUGEINT is decimal128 in Arrow), else its Arrow type's name. A column of untyped NULL
    (tagged NULL) is an INTEGER, as DuckDB's own result and its ``description`` type it."""
    tag = carried_type(field)
    return type_code(field.type) if tag in ("", "NULL") else tag


def Date(year: int, month: int, day: int) -> _dt.date:  # noqa: N802 - PEP 249 names
    return _dt.date(year, month, day)


def Time(hour: int, minute: int, second: int) -> _dt.time:  # noqa: N802
    return _dt.time(hour, minute, second)


def Timestamp(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> _dt.datetime:  # noqa: N802
    return _dt.datetime(year, month, day, hour, minute, second)


def DateFromTicks(ticks: float) -> _dt.date:  # noqa: N802
    return _dt.date.fromtimestamp(ticks)


def TimeFromTicks(ticks: float) -> _dt.time:  # noqa: N802
    return _dt.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks: float) -> _dt.datetime:  # noqa: N802
    return _dt.datetime.fromtimestamp(ticks)


def Binary(value: bytes | str) -> bytes:  # noqa: N802
    return value.encode() if isinstance(value, str) else bytes(value)
