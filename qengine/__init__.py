"""qengine: a distributed, columnar SQL engine with a shuffle-optimized exchange.

>>> import qengine
>>> with qengine.connect(workers=2) as con:
...     con.register_parquet("t", "data/t/")
...     con.execute("SELECT count(*) FROM t").fetchall()
"""

from __future__ import annotations

from typing import Any

from qengine.errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,  # noqa: A004 - PEP 249 name
)
from qengine.types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Connection", "Cursor", "DataError",
    "DatabaseError", "Date", "DateFromTicks", "Error", "IntegrityError", "InterfaceError", "InternalError",
    "NotSupportedError", "OperationalError", "ProgrammingError", "Time", "TimeFromTicks", "Timestamp",
    "TimestampFromTicks", "Warning", "apilevel", "connect", "paramstyle", "threadsafety",
]


def parse_size(value: int | str | None, what: str) -> int | None:
    """Bytes from 1048576, "256MB", "4GiB"…; names ``what`` in the error."""
    if value is None or isinstance(value, int):
        if isinstance(value, int) and value < 0:
            raise ProgrammingError(f"{what} must not be negative")
        return value
    text = str(value).strip().upper().replace(" ", "")
    units = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
             "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    try:
        return int(float(number) * units[unit])
    except (ValueError, KeyError):
        raise ProgrammingError(f"{what}: cannot read {value!r} as a size (e.g. 268435456, '256MB', '4GB')") from None


def connect(
    target: str | None = None,
    *,
    workers: int = 2,
    dialect: str = "duckdb",
    broadcast_threshold: int | str = 10 << 20,
    partitions: int | None = None,
    slots: int = 2,
    split_size: int | str = 64 << 20,
    shuffle: str = "prefetch",
    shuffle_memory: int | str | None = None,
    prefetch_fraction: float = 0.5,
    samples_per_partition: int = 3,
    coalesce_size: int | str = 32 << 20,
    allowed_roots: list[str] | None = None,
) -> Any:
    """Open a connection. With no ``target`` it starts a local cluster of ``workers`` processes.

    ``broadcast_threshold`` (bytes; 0 turns broadcast joins off) and ``partitions`` (reducers
    per shuffle, default 2 per worker) steer the planner; ``split_size`` is the uncompressed bytes
    one scan task reads (default 64MB); ``slots`` the tasks a worker runs at once. ``shuffle`` is
    "prefetch" (SCache: map output in memory, reducers placed ahead of time, blocks pushed while
    the map stage runs) or "pull" (Spark's sort-shuffle baseline: map output on disk, fetched
    when the map stage ends). ``shuffle_memory`` is each worker's shuffle memory budget (beyond
    it blocks spill to disk); ``prefetch_fraction`` the share of map tasks that must finish
    before reducers are placed; ``samples_per_partition`` is s in the s×p range samples;
    ``coalesce_size`` is the bytes below which adjacent reduce partitions merge into one task
    (0 keeps one task per partition). ``allowed_roots`` confines which
    directories tables may be read from.
    """
    from sqlglot.dialects.dialect import Dialect

    from qengine.catalog import Catalog
    from qengine.cluster import LocalCluster
    from qengine.coordinator import ExecutionOptions
    from qengine.dbapi import Connection
    from qengine.planner import PlanOptions
    from qengine.session import Session

    if target not in (None, "local", ":local:"):
        raise NotSupportedError(f"cannot connect to {target!r}: only local clusters are supported")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ProgrammingError(f"workers must be a positive integer, not {workers!r}")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise ProgrammingError(f"partitions must be a positive integer, not {partitions!r}")
    if not isinstance(slots, int) or slots < 1:
        raise ProgrammingError(f"slots must be a positive integer, not {slots!r}")
    try:
        Dialect.get_or_raise(dialect)
    except ValueError as e:
        raise ProgrammingError(f"unknown SQL dialect {dialect!r}") from e
    if shuffle not in ("prefetch", "pull"):
        raise ProgrammingError(f"shuffle must be 'prefetch' or 'pull', not {shuffle!r}")
    if not 0 < prefetch_fraction <= 1:
        raise ProgrammingError(f"prefetch_fraction must be in (0, 1], not {prefetch_fraction!r}")
    if not isinstance(samples_per_partition, int) or samples_per_partition < 1:
        raise ProgrammingError(f"samples_per_partition must be a positive integer, not {samples_per_partition!r}")
    memory = parse_size(shuffle_memory, "shuffle_memory")
    threshold = parse_size(broadcast_threshold, "broadcast_threshold")
    split_bytes = parse_size(split_size, "split_size")
    if not split_bytes:
        raise ProgrammingError("split_size must be positive")
    plan_options = PlanOptions(dialect=dialect, partitions=partitions or 2 * workers, broadcast_threshold=threshold)
    cluster = LocalCluster(workers, shuffle_memory=memory)
    execution = ExecutionOptions(
        slots=slots,
        split_bytes=split_bytes,
        shuffle=shuffle,
        prefetch_fraction=prefetch_fraction,
        samples_per_partition=samples_per_partition,
        coalesce_bytes=parse_size(coalesce_size, "coalesce_size") or 0,
    )
    session = Session(cluster, plan_options, execution, Catalog(allowed_roots))
    return Connection(cluster, session, owns_cluster=True)


def __getattr__(name: str) -> Any:
    if name in ("Connection", "Cursor"):
        from qengine import dbapi

        return getattr(dbapi, name)
    raise AttributeError(name)
