"""qengine: a distributed, columnar SQL engine with a shuffle-optimized exchange.

>>> import qengine
>>> with qengine.connect(workers=2) as con:
...     con.register_parquet("t", "data/t/")
...     con.execute("SELECT count(*) FROM t").fetchall()
"""

from __future__ import annotations

from typing import Any

from qengine.api.options import DEFAULT_WORKERS, SessionSettings, parse_size
from qengine.catalog.types import (
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

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Connection", "Cursor", "DataError",
    "DatabaseError", "Date", "DateFromTicks", "Error", "IntegrityError", "InterfaceError", "InternalError",
    "NotSupportedError", "OperationalError", "ProgrammingError", "Time", "TimeFromTicks", "Timestamp",
    "TimestampFromTicks", "Warning", "apilevel", "connect", "default_connection", "execute", "paramstyle", "sql",
    "threadsafety",
]


def connect(
    target: str | None = None,
    *,
    workers: int = DEFAULT_WORKERS,
    dialect: str = SessionSettings.dialect,
    broadcast_threshold: int | str = SessionSettings.broadcast_threshold,
    replicate_size: int | str = SessionSettings.replicate_size,
    partitions: int | None = SessionSettings.partitions,
    slots: int = SessionSettings.slots,
    split_size: int | str = SessionSettings.split_size,
    shuffle: str = SessionSettings.shuffle,
    shuffle_memory: int | str | None = None,
    prefetch_fraction: float = SessionSettings.prefetch_fraction,
    samples_per_partition: int = SessionSettings.samples_per_partition,
    coalesce_size: int | str = SessionSettings.coalesce_size,
    speculation: bool = SessionSettings.speculation,
    hang_timeout: float | None = None,
    allowed_roots: list[str] | None = None,
    output_roots: list[str] | None = None,
    token: str | None = None,
    tls_root_certs: bytes | None = None,
    user: str | None = None,
    lazy_start: bool = False,
    ui: bool | str = False,
) -> Any:
    """Open a connection. With no ``target`` it starts a local cluster of ``workers`` processes.

    ``broadcast_threshold`` (bytes; 0 turns broadcast joins off), ``replicate_size`` (a broadcast
    Parquet table of at most these bytes is read whole by every consuming task instead of by a
    stage of its own; 0 never) and ``partitions`` (reducers per shuffle, default 2 per worker)
    steer the planner; ``split_size`` is the uncompressed bytes
    one scan task reads (default 128MB); ``slots`` the tasks a worker runs at once. ``shuffle`` is
    "prefetch" (SCache: map output in memory, reducers placed ahead of time, blocks pushed while
    the map stage runs) or "pull" (Spark's sort-shuffle baseline: map output on disk, fetched
    when the map stage ends). ``shuffle_memory`` is each worker's shuffle memory budget (beyond
    it blocks spill to disk); ``prefetch_fraction`` the share of map tasks that must finish
    before reducers are placed; ``samples_per_partition`` is s in the s×p range samples;
    ``coalesce_size`` is the bytes below which adjacent reduce partitions merge into one task
    (0 keeps one task per partition). ``speculation`` launches copies of straggling tasks on
    faster workers (LATE); ``hang_timeout`` is how many seconds a local worker may go without
    answering before it is taken for hung, killed and replaced (default 5).

    ``allowed_roots`` are the directories tables and SQL's read_parquet()/read_csv() may read
    below; by default the current directory and the files and directories registered
    explicitly. ``output_roots`` are where COPY may write; by default ``allowed_roots`` if
    given, else the current directory. Paths are compared after resolving links.

    ``target`` "qengine://HOST:PORT" connects to a standalone coordinator instead (``qengine
    coordinator``) with its cluster ``token``; ``tls_root_certs`` (PEM bytes) switches the
    connection to TLS and verifies the coordinator's certificate with them. ``user`` names who
    the connection's statements run for there (a coordinator started with
    ``--max-queries-per-user`` runs at most that many of one user's at once).

    A local cluster's workers start in the background as the connection opens, and statements
    that read no data (``SELECT 1``) run without them. ``lazy_start`` starts them only when a
    statement first needs them: for a client that runs one statement and goes (the CLI's
    ``-c``), where starting them alongside would only compete with it for the cores.

    ``ui`` serves the local cluster's web UI (its statements, their stage DAGs, task timelines
    and shuffles, its workers) on 127.0.0.1 at a free port, or at ``ui="HOST:PORT"``; the
    connection's ``ui_url`` is its address with a token that logs a browser in.
    """
    from qengine.api.dbapi import Connection
    from qengine.api.session import Session
    from qengine.catalog.catalog import local_catalog
    from qengine.runtime.local_cluster import LocalCluster

    settings = SessionSettings(
        dialect=dialect,
        broadcast_threshold=broadcast_threshold,
        replicate_size=replicate_size,
        partitions=partitions,
        slots=slots,
        split_size=split_size,
        shuffle=shuffle,
        prefetch_fraction=prefetch_fraction,
        samples_per_partition=samples_per_partition,
        coalesce_size=coalesce_size,
        speculation=speculation,
    ).validated()
    if target is not None and target.startswith("qengine://"):
        from qengine.api.remote import RemoteSession

        if lazy_start:
            raise ProgrammingError("lazy_start applies to a local cluster: a standalone cluster's workers are already running")
        if allowed_roots is not None or output_roots is not None or shuffle_memory is not None or hang_timeout is not None:
            raise ProgrammingError(
                "allowed_roots, output_roots, shuffle_memory and hang_timeout are set on the cluster (qengine coordinator "
                "--data-root/--output-root/--heartbeat-timeout, qengine worker --memory-budget), not per connection"
            )
        if ui:
            raise ProgrammingError("ui applies to a local cluster: start a standalone coordinator's with qengine coordinator --ui HOST:PORT")
        if user is not None and (not isinstance(user, str) or not user or len(user) > 128):
            raise ProgrammingError(f"user must be a name of 1 to 128 characters, not {user!r}")
        session = RemoteSession(target, token, settings, tls_root_certs, user)
        return Connection(session)
    if user is not None:
        raise ProgrammingError("user applies to a standalone cluster (qengine://HOST:PORT): a local cluster serves one connection")
    if target not in (None, "local", ":local:"):
        raise NotSupportedError(f"cannot connect to {target!r}: give qengine://HOST:PORT, or nothing for a local cluster")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ProgrammingError(f"workers must be a positive integer, not {workers!r}")
    memory = parse_size(shuffle_memory, "shuffle_memory")
    catalog = local_catalog(allowed_roots, output_roots)
    if hang_timeout is not None and (isinstance(hang_timeout, bool) or not isinstance(hang_timeout, int | float) or hang_timeout <= 0):
        raise ProgrammingError(f"hang_timeout must be a positive number of seconds, not {hang_timeout!r}")
    if not isinstance(lazy_start, bool):
        raise ProgrammingError(f"lazy_start must be True or False, not {lazy_start!r}")
    if not isinstance(ui, bool | str):
        raise ProgrammingError(f"ui must be True, False or 'HOST:PORT', not {ui!r}")
    listen = _ui_address(ui) if ui else None
    cluster = LocalCluster(workers, shuffle_memory=memory, lazy=lazy_start, **({"hang_timeout": hang_timeout} if hang_timeout else {}))
    session = Session(cluster, settings, workers, catalog)
    connection = Connection(session, cluster)
    if listen is not None:
        import secrets

        from qengine.ui.server import UiServer

        try:
            connection.attach_ui(UiServer(cluster, secrets.token_urlsafe(24), *listen))
        except BaseException:
            connection.close()
            raise
    return connection


def _ui_address(ui: bool | str) -> tuple[str, int]:
    """Where ``connect(ui=...)`` serves the web UI: loopback at a free port, or HOST:PORT."""
    if ui is True:
        return "127.0.0.1", 0
    host, _, port = str(ui).rpartition(":")
    if not host or not port.isdigit():
        raise ProgrammingError(f"ui must be True or 'HOST:PORT' (e.g. '127.0.0.1:8080'), not {ui!r}")
    return host, int(port)


def default_connection() -> Any:
    """The connection :func:`sql` and :func:`execute` run on: a local cluster
    (``qengine.connect()``) started on first use and stopped when the interpreter exits."""
    from qengine.api.default_connection import default_connection as connection

    return connection(connect)


def sql(query: str, *, params: Any = None) -> Any:
    """``default_connection().sql(query, params=params)``: a relation for a query, as
    ``duckdb.sql``; any other statement runs at once and gives None."""
    return default_connection().sql(query, params=params)


def execute(operation: str, parameters: Any = None) -> Any:
    """``default_connection().execute(operation, parameters)``: a cursor with the statement run."""
    return default_connection().execute(operation, parameters)


def __getattr__(name: str) -> Any:
    if name in ("Connection", "Cursor"):
        from qengine.api import dbapi

        return getattr(dbapi, name)
    raise AttributeError(name)
