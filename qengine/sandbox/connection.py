"""The fragment engine's sandbox: DuckDB connections that see only the inputs registered on them.

Fragments are rendered from user SQL, so the connection they run on must not reach files, the
network, extensions or its own configuration. Every DuckDB connection that evaluates plan
expressions (tasks, range partitioning, size prediction) comes from here.
"""

from __future__ import annotations

import functools
import threading

import duckdb

from qengine.errors import ProgrammingError
from qengine.sandbox.quoting import string_literal


def safe_connection(
    threads: int = 1, readable: tuple[str, ...] = (), build_sides: bool = False, lossless_arrow: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that cannot reach files, the network or extensions.

    ``readable`` names the only files it may read: the Parquet files of the registered tables,
    whose splits qengine's scan hands to DuckDB so that filters and projections reach the
    Parquet reader.
    They can only be allowed once the database is open, so the lock comes after them.

    Joins run in the order the planner rendered them. DuckDB takes every Arrow input for one row
    (duckdb/duckdb#25631), so it picks hash join build sides only with ``build_sides``, for
    fragments where that is about right (see ``Coordinator``'s task specs); otherwise the
    renderer's choice, made from actual input sizes, stands.

    ``lossless_arrow`` hands results to Arrow with a UUID and JSON as Arrow's extension types of
    them rather than strings, for writers of typed files; the setting is the whole database's.
    """
    con = duckdb.connect(
        config={
            "threads": threads,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "allow_community_extensions": False,
            "allow_unsigned_extensions": False,
            "disabled_optimizers": "join_order" if build_sides else "join_order,build_side_probe_side",
        }
    )
    # Progress is tracked from the start and never printed: a worker reports it to the
    # coordinator for LATE's progress rates (``runtime.progress``).
    con.execute("SET enable_progress_bar = true")
    con.execute("SET enable_progress_bar_print = false")
    con.execute("SET progress_bar_time = 0")
    if lossless_arrow:
        con.execute("SET arrow_lossless_conversion = true")
    if readable:
        # written out, not bound: binding a Python list makes DuckDB import pandas (0.7 s)
        con.execute(f"SET allowed_paths = [{', '.join(map(string_literal, readable))}]")
        con.execute("SET parquet_metadata_cache = true")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


_scratch: dict[bool, duckdb.DuckDBPyConnection] = {}
_scratch_lock = threading.Lock()


def scratch_connection(lossless_arrow: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection of its own to one sandboxed in-memory database per process that reads no
    files, for short computations over Arrow data the caller registers (range predictions,
    sort orders, type checks); the caller closes it.

    It is a cursor of that database: it opens in a fraction of a millisecond, where a new
    database takes 10 to 20 ms, and what one cursor registers the others do not see.
    ``lossless_arrow`` (see ``safe_connection``) is a database of its own.
    """
    with _scratch_lock:
        if lossless_arrow not in _scratch:
            _scratch[lossless_arrow] = safe_connection(lossless_arrow=lossless_arrow)
        return _scratch[lossless_arrow].cursor()


def one_select(sql: str) -> None:
    """Refuse SQL that is not exactly one SELECT before a worker runs it. A task's SQL and
    options come with the task, and ``SELECT 1; COPY (…) TO '/anywhere'`` sent to a worker
    directly ran both statements, writing outside every root."""
    if not _is_one_select(sql):
        raise ProgrammingError("a task may run a single SELECT statement only")


@functools.lru_cache(maxsize=1024)
def _is_one_select(sql: str) -> bool:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return True  # DuckDB cannot parse it: running it fails with DuckDB's own message
    return len(statements) == 1 and statements[0].type == duckdb.StatementType.SELECT
