"""Assign each row of a map task's output to a reducer partition.

Hash partitioning uses DuckDB's ``hash()``, which is unsalted and so gives the same answer in
every process (Python's ``hash()`` does not). Numeric keys are cast to the nearest DOUBLE
first, so an INTEGER key on one side of a join and a BIGINT or DECIMAL key on the other land in
the same partition. Dates and timestamps are cast to TIMESTAMP, so a DATE key meets the
TIMESTAMP midnight it equals, and a TIMESTAMP WITH TIME ZONE its local time. An ENUM hashes as
its label, which is what DuckDB compares two ENUMs of different labels by. Keys of other kinds
hash as they are, so two inputs whose keys differ in kind (VARCHAR and BIGINT, UUID and
VARCHAR, INTEGER[] and DOUBLE[]) would not meet, nor would a FLOAT and an integer or DECIMAL,
which DuckDB compares as FLOATs (16777217 = 16777216.0), nor a DOUBLE and a wide number
(:func:`wide`), which DuckDB compares through its own rounding, nor, outside UTC, a TIMESTAMP
WITH TIME ZONE and a local time in an hour the clocks skip: :func:`keys_meet` tells which kinds
meet, and the coordinator refuses any other pair before its reducers run. The fragment itself
computes the id (:func:`hash_sql`). Range partitioning places each row by its first sort key
against sampled bounds; rows with equal keys always share a partition.
"""

from __future__ import annotations

import functools
import re

import duckdb
import numpy as np
import pyarrow as pa

from qengine.catalog.types import is_number
from qengine.sandbox.carried_types import HUGEINT, carried_type
from qengine.sandbox.quoting import identifier
from qengine.transport.wire import empty_table

# The column a fragment with a hash output adds for the partition id of each row.
PARTITION_COLUMN = "__qengine_partition"
# Dates and timestamps by their exact names (a list of them is no date)
_DATES = frozenset(["DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"])
_ENUM = re.compile(r"ENUM\(.*\)", re.DOTALL)
_DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
_HOLDS_ENUM = re.compile(r"\bENUM\(")


def hash_sql(types: dict[str, str], keys: list[str], partitions: int) -> str:
    """The partition id of a row as SQL, from the DuckDB types of the fragment's columns: the
    hash of the (type-canonical) keys modulo ``partitions``. The fragment computes it with its
    rows, which saves a second pass over them."""
    parts = []
    for key in keys:
        quoted = identifier(key)
        kind = types[key]
        if is_number(kind):
            parts.append(f"CAST(CAST({quoted} AS VARCHAR) AS DOUBLE)" if wide(kind) else f"CAST({quoted} AS DOUBLE)")
        elif kind in _DATES:
            # a DATE past TIMESTAMP's range (year 300000) equals no timestamp: hashed as NULL,
            # where the cast failed the query
            parts.append(f"TRY_CAST({quoted} AS TIMESTAMP)")
        elif _ENUM.fullmatch(kind):
            parts.append(f"CAST({quoted} AS VARCHAR)")
        else:
            parts.append(quoted)
    return f"CAST(hash({', '.join(parts)}) % {int(partitions)} AS BIGINT)"


def wide(kind: str) -> bool:
    """Whether DuckDB's cast of a number of type ``kind`` to DOUBLE may miss the nearest DOUBLE:
    a HUGEINT or UHUGEINT, or a DECIMAL whose unscaled value may pass 2^53 and has a fraction
    to divide off (DECIMAL(16,1) and up) or is held in 128 bits (more than 18 digits). Equal
    values of two such types cast apart (a DECIMAL(18,3) against a DECIMAL(38,20); a BIGINT
    against its sum, a HUGEINT), and hashed apart. Such a number is hashed as the DOUBLE its
    text parses to, the nearest, which is what DuckDB's casts of the other numbers give."""
    if kind in ("HUGEINT", "UHUGEINT"):
        return True
    decimal = _DECIMAL_TYPE.fullmatch(kind)
    return decimal is not None and (int(decimal.group(1)) > 18 or int(decimal.group(1)) > 15 and int(decimal.group(2)) > 0)


@functools.cache
def _local_time_is_utc() -> bool:
    """Whether DuckDB reads local times in UTC here (its TimeZone setting follows the process's)."""
    zone = duckdb.connect().execute("SELECT current_setting('TimeZone')").fetchone()[0]
    return zone.removeprefix("Etc/") in ("UTC", "UCT", "GMT", "Universal", "Zulu")


def key_class(field: pa.Field) -> str:
    """The kind of hash key a column of an exchange's output is, as :func:`hash_sql` hashes it:
    equal values of one kind land in one partition whatever their types within it (but see
    :func:`keys_meet` for FLOAT). A column of untyped NULLs (``planner.null_columns``) meets any kind."""
    t = field.type
    carried = carried_type(field)
    if carried == "NULL" or pa.types.is_null(t):
        return "any"
    if _ENUM.fullmatch(carried):
        return "ENUM"
    if carried and not HUGEINT.fullmatch(carried) and carried != "JSON":  # a UUID or nested HUGEINT hashes as itself
        return carried
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if HUGEINT.fullmatch(carried) or pa.types.is_decimal(t) and wide(f"DECIMAL({t.precision},{t.scale})"):
        return "wide number"  # hashed through its text (hash_sql): it meets no FLOAT or DOUBLE
    if pa.types.is_timestamp(t) and t.tz:
        return "timestamp with time zone"
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return "number"  # an integer or DECIMAL
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "date or timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    return str(t)




def keys_meet(a: str, b: str) -> bool:
    """Whether equal keys of kinds ``a`` and ``b`` (:func:`key_class`) land in one partition.
    DuckDB compares a FLOAT with an integer or DECIMAL as FLOATs, rounding the other side,
    while both hash as DOUBLEs: such a pair does not meet. With a DOUBLE, a FLOAT is compared
    as the DOUBLE it hashes as."""
    if "any" in (a, b) or a == b:
        return True
    if {a, b} == {"number", "wide number"}:
        return True
    if {a, b} == {"date or timestamp", "timestamp with time zone"}:
        # DuckDB compares them as instants, and a local time in an hour the clocks skip is not
        # the instant whose local time it hashes as: only in UTC do the two hash alike
        return _local_time_is_utc()
    numbers = {"number", "DOUBLE", "FLOAT"}
    return a in numbers and b in numbers and {a, b} != {"number", "FLOAT"}


def range_ids(
    con: duckdb.DuckDBPyConnection,
    table: pa.Table,
    key: str,
    bounds: pa.Array,
    desc: bool,
    nulls_first: bool,
) -> np.ndarray:
    """Partition id of every row for a range exchange with ascending ``bounds`` (P-1 of them).

    A row goes to the number of bounds ≤ its key (an ASOF join does the search in DuckDB, so the
    comparison is exactly the one the reducers' local sort uses); DESC mirrors that, and NULLs
    go first or last as the ORDER BY says.
    """
    partitions = len(bounds) + 1
    if partitions == 1 or table.num_rows == 0 or _HOLDS_ENUM.search(carried_type(table.schema.field(key))):
        # An ENUM (also in a list or struct) travels as its labels, which the sampled bounds
        # order alphabetically where DuckDB orders the ENUM's declared order: such a sort stays
        # in one partition.
        return np.zeros(table.num_rows, dtype=np.int64)
    column = table.column(key)
    keys = byte_keys(column)
    if keys is not None:
        # Fixed-width bytes (TeraSort keys): a binary search in NumPy, 20x faster than the join.
        ids = np.searchsorted(byte_keys(bounds.cast(column.type)), keys, side="right").astype(np.int64)
        if desc:
            ids = partitions - 1 - ids
        if column.null_count:
            ids[column.is_null().to_numpy(zero_copy_only=False)] = 0 if nulls_first else partitions - 1
        return ids
    quoted = identifier(key)
    con.register("__part_in", table.select([key]))
    con.register("__bounds", pa.table({"b": bounds, "i": pa.array(range(len(bounds)), pa.int64())}))
    try:
        asc = "coalesce(__bounds.i + 1, 0)"
        nonnull = f"{partitions - 1} - {asc}" if desc else asc
        null_id = 0 if nulls_first else partitions - 1
        sql = (
            f"SELECT CASE WHEN {quoted} IS NULL THEN {null_id} ELSE {nonnull} END AS p, __rn "
            f"FROM (SELECT *, row_number() OVER () AS __rn FROM __part_in) t "
            f"ASOF LEFT JOIN __bounds ON t.{quoted} >= __bounds.b ORDER BY __rn"
        )
        ids = con.execute(sql).fetchnumpy()["p"]
    finally:
        con.unregister("__part_in")
        con.unregister("__bounds")
    return np.asarray(ids, dtype=np.int64)


def byte_keys(column: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """A fixed-size binary column as a NumPy ``S<width>`` array, without a copy where it can.
    NumPy orders those byte-wise, as DuckDB orders BLOBs; any other type gives None."""
    if not pa.types.is_fixed_size_binary(column.type):
        return None
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    data = np.frombuffer(array.buffers()[1], dtype=f"S{array.type.byte_width}", count=array.offset + len(array))
    return data[array.offset:]


def roundrobin_ids(rows: int, partitions: int, offset: int) -> np.ndarray:
    """Spread rows evenly; ``offset`` (the map task's index) staggers where each task starts."""
    return (np.arange(rows, dtype=np.int64) + offset) % partitions


# Up to this many partitions, finding each one's rows in a pass of its own beats sorting the ids:
# for 1M rows into 2 to 8 partitions about 7 ms against 12 ms (at 12 partitions, 20 against 11).
_SCANNED_PARTITIONS = 8


def split(table: pa.Table, ids: np.ndarray, partitions: int) -> list[pa.Table]:
    """Cut ``table`` into one table per partition id, each keeping its rows in table order.

    Each partition is gathered into buffers of its own, not sliced out of one reordered copy:
    a slice would keep the whole copy alive until the last partition of it is freed, so a
    block sent to another host would go on taking memory here.
    """
    if partitions == 1:
        return [table]
    counts = np.bincount(ids, minlength=partitions)
    if np.count_nonzero(counts) == 1:
        target = int(np.flatnonzero(counts)[0])
        return [table if p == target else table.slice(0, 0) for p in range(partitions)]
    if partitions <= _SCANNED_PARTITIONS:
        rows = [np.flatnonzero(ids == p) for p in range(partitions)]
    else:
        # A stable sort of 16-bit ids is a radix sort: four times faster than on the int64 ids.
        narrow = ids.astype(np.uint16) if partitions <= 1 << 16 else ids
        order = np.argsort(narrow, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(counts)])
        rows = [order[offsets[p]:offsets[p + 1]] for p in range(partitions)]
    # One gather per column and partition: take on a many-chunk table costs several times more.
    # An empty partition is one shared table of no rows, which holds no buffer of the output:
    # among many partitions most are empty, and a take of no rows costs as much as one of many.
    combined = table.combine_chunks()
    empty = empty_table(combined.schema)
    return [combined.take(r) if len(r) else empty for r in rows]
