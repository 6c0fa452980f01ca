"""Pooled sandboxed DuckDB connections: opening one costs 10 to 20 ms, more than most fragments
take to run. Workers run their tasks on them, the coordinator its key-range probes."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa

from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.connection import safe_connection
from qengine.sandbox.quoting import identifier

# A NaN constant in fragment SQL: 'nan'::DOUBLE, CAST('NaN' AS FLOAT), '-nan', ...
_NAN_LITERAL = re.compile(r"'\s*[+-]?nan\s*'", re.IGNORECASE)
# ``op ANY (`` / ``op ALL (`` / ``op SOME (``, not a UNION ALL
_QUANTIFIED = re.compile(r"(?<!UNION )(?<!INTERSECT )(?<!EXCEPT )\b(?:ANY|ALL|SOME)\s*\(", re.IGNORECASE)


def filters_mishandle(table: pa.Table, sql: str) -> bool:
    """Whether DuckDB 1.5.5 may filter ``table`` wrongly, or fail to, if it is scanned as Arrow.

    DuckDB orders NaN above every number and equal to itself, but the filters it pushes into an
    Arrow scan are evaluated by Arrow with IEEE semantics: over [1, NaN, NULL], ``d >= 1`` keeps
    one row instead of two, a join on a NaN key loses its NaN pairs (join filter pushdown), and
    ``d <= 'nan'`` lets the NULL through (duckdb/duckdb-python#615). A table filters wrongly
    only when a floating-point column holds NaN, or when the query compares with a NaN
    constant; such an input is copied into a DuckDB table, where filters are DuckDB's own.

    Arrow's ``is_in`` hashes -0.0 apart from 0.0, where DuckDB takes them for equal: an IN list
    or a join's key filter pushed into the scan dropped the rows holding -0.0. A table holding
    -0.0 is copied as well.

    A filter on a TIMESTAMP WITH TIME ZONE column (a join's, from its build side's keys) is
    made into a Python value through pytz, which qengine does not install: the scan failed
    ("Required module 'pytz' failed to import"). Such an input is copied too, and so is one
    holding a date or timestamp past Python's (year 300000, infinity): such a filter's bound
    came to Arrow as a string, and the scan failed ("object of type str cannot be converted").

    A list, struct or map compared by ``op ANY`` or ``op ALL`` of a subquery read from Arrow
    was NULL where DuckDB's own tables give TRUE, and the worker sometimes crashed: an input
    with such columns of a query with such a test is copied.

    A UBIGINT of 2^63 or more in a filter pushed into the scan (a join's, from its build side's
    keys) failed it: DuckDB hands the bound to pyarrow as a signed 64-bit integer
    ("OverflowError: Python int too large to convert to C long"). Such an input is copied.
    """
    if table.num_rows and any(pa.types.is_timestamp(f.type) and f.type.tz for f in table.schema):
        return True
    if table.num_rows and _beyond_python_dates(table):
        return True
    if table.num_rows and _beyond_signed_integers(table):
        return True
    if table.num_rows and _QUANTIFIED.search(sql) and any(pa.types.is_nested(f.type) for f in table.schema):
        return True
    floats = [c for c, f in zip(table.columns, table.schema, strict=True) if pa.types.is_floating(f.type)]
    if not floats or table.num_rows == 0:
        return False
    if _NAN_LITERAL.search(sql):
        return True
    import pyarrow.compute as pc  # here, not at the top: it costs a one-statement CLI run ~30 ms to import
    return any(pc.any(pc.is_nan(c)).as_py() or _negative_zero(c) for c in floats)


# datetime.date.min and datetime.date.max, in days since 1970-01-01
_PYTHON_DAYS = (-719162, 2932896)
_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def _beyond_python_dates(table: pa.Table) -> bool:
    """Whether a date or timestamp column holds a value outside Python's years 1 to 9999."""
    import pyarrow.compute as pc

    for column, field in zip(table.columns, table.schema, strict=True):
        t = field.type
        if pa.types.is_date32(t):
            per_day = 1
        elif pa.types.is_timestamp(t):
            per_day = _PER_DAY[t.unit]
        else:
            continue
        bounds = pc.min_max(column.cast(pa.int32() if per_day == 1 else pa.int64()))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and (low < _PYTHON_DAYS[0] * per_day or high >= (_PYTHON_DAYS[1] + 1) * per_day):
            return True
    return False


def _beyond_signed_integers(table: pa.Table) -> bool:
    """Whether a UBIGINT column holds a value of 2^63 or more."""
    import pyarrow.compute as pc

    return any(pa.types.is_uint64(f.type) and (pc.max(c).as_py() or 0) >= 1 << 63 for c, f in zip(table.columns, table.schema, strict=True))


def _negative_zero(column: pa.ChunkedArray) -> bool:
    """Whether a floating-point column holds -0.0."""
    for chunk in column.chunks:
        values = chunk.to_numpy(zero_copy_only=False)  # a NULL is NaN here: never a zero
        if np.any((values == 0) & np.signbit(values)):
            return True
    return False


class Lease:
    """One task's turn on a pooled connection, and the inputs it added there: they are removed
    when the turn ends, so nothing of one task is visible to the next."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        # Set by whoever interrupts ``con`` (a cancelled task's): see :meth:`interrupt`.
        self.interrupted = False
        self._registered: list[str] = []
        self._tables: list[str] = []
        self._views: list[str] = []

    def add_inputs(self, tables: dict[str, pa.Table], copy: bool = False) -> None:
        """Make a fragment's Arrow inputs visible to it: registered as they are, or copied into
        temporary tables (``copy``; see ``task._run_fragment`` for when). An input with columns
        of a type Arrow does not carry is read through a view that casts them back
        (:mod:`qengine.sandbox.carried_types`)."""
        for name, table in tables.items():
            raw = f"__raw_{name}"
            restoring = restoring_query(raw, table.schema)  # tagged columns cast back
            if restoring is None and not copy:
                self.con.register(name, table)
                self._registered.append(name)
                continue
            self.con.register(raw, table)
            if not copy:
                self._registered.append(raw)
                self.con.execute(f"CREATE TEMP VIEW {identifier(name)} AS {restoring}")
                self._views.append(name)
                continue
            # A table makes an untyped NULL column an INTEGER (CREATE TABLE AS does): such
            # columns are NULL again in a view over the copy, or a VARCHAR compared with one failed.
            nulls = restoring_query(f"__copy_{name}", table.schema, typed=False)
            held = name if nulls is None else f"__copy_{name}"
            try:
                self.con.execute(f"CREATE TEMP TABLE {identifier(held)} AS {restoring_query(raw, table.schema, nulls=False) or f'SELECT * FROM {identifier(raw)}'}")
                self._tables.append(held)
            finally:
                self.con.unregister(raw)
            if nulls is not None:
                self.con.execute(f"CREATE TEMP VIEW {identifier(name)} AS {nulls}")
                self._views.append(name)

    def interrupt(self) -> None:
        """Stop what the connection runs. DuckDB's ``unregister`` does nothing, and says
        nothing, when an interrupt reaches it, and an interrupt that comes between statements
        waits for the next one: a connection once interrupted is not pooled again, or the next
        task could find this one's input (or have its own statement stopped)."""
        self.interrupted = True
        self.con.interrupt()

    def clear(self) -> None:
        """Remove this lease's inputs."""
        for name in self._views:
            self.con.execute(f"DROP VIEW {identifier(name)}")
        for name in self._registered:  # unregistering also frees the Arrow data
            self.con.unregister(name)
        for name in self._tables:
            self.con.execute(f"DROP TABLE {identifier(name)}")
        self._views.clear()
        self._registered.clear()
        self._tables.clear()


# What a pooled connection is kept for: its readable files, whether DuckDB picks build sides, its threads.
_Kind = tuple[tuple[str, ...], bool, int]


class ConnectionPool:
    """Reusable safe DuckDB connections.

    Connections are kept per kind (the set of readable files, none or the catalog's Parquet
    files, whether DuckDB picks build sides, and its threads: ``threads`` unless a lease asks
    for more), at most ``IDLE`` in all. A task has its connection to itself for the length of
    its lease.
    """

    IDLE = 32

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._idle: dict[_Kind, list[duckdb.DuckDBPyConnection]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self, readable: tuple[str, ...] = (), build_sides: bool = False, threads: int | None = None) -> Iterator[Lease]:
        threads = threads or self.threads
        kind = (readable, build_sides, threads)
        with self._lock:
            idle = self._idle.get(kind)
            con = idle.pop() if idle else None
        lease = Lease(con if con is not None else safe_connection(threads, readable, build_sides))
        try:
            yield lease
            lease.clear()
        except BaseException:
            lease.con.close()
            raise
        if lease.interrupted:
            lease.con.close()
        else:
            self._keep(kind, lease.con)

    def _keep(self, kind: _Kind, con: duckdb.DuckDBPyConnection) -> None:
        """Return a connection to the idle ones, closing the oldest idle one past ``IDLE``."""
        evicted = None
        with self._lock:
            self._idle.setdefault(kind, []).append(con)
            self._idle[kind] = self._idle.pop(kind)  # most recently used last
            if sum(len(v) for v in self._idle.values()) > self.IDLE:
                oldest = next(iter(self._idle))
                evicted = self._idle[oldest].pop(0)
                if not self._idle[oldest]:
                    del self._idle[oldest]
        if evicted is not None:
            evicted.close()
