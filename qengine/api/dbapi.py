"""PEP 249 connections and cursors, plus the DuckDB-style extras: Arrow, pandas and polars
results, relations (``con.sql``), registered data, and DataFrames found by their variable's
name (``api.replacement_scans``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import sqlglot.expressions as exp

from qengine import errors
from qengine.api.frames import arrow_table, pandas_frame, polars_frame
from qengine.api.relation import Relation, relation_or_run
from qengine.api.replacement_scans import caller_scope, scans_for
from qengine.api.result_stream import ResultStream
from qengine.api.session import Result, Session
from qengine.api.statements import new_statement_id
from qengine.catalog.types import column_type
from qengine.errors import Error, InterfaceError, InternalError, NotSupportedError, ProgrammingError
from qengine.sandbox.carried_types import python_values, untagged, untagged_schema
from qengine.sandbox.quoting import identifier

# Rows of a result turned into Python values at a time, for fetches of rows.
ROWS_AT_ONCE = 1 << 16


def _sql_value(function: str, name: str, value: Any) -> exp.Expression:
    """A reader option's Python value as SQL: a bool, number, string, or a dict of strings (a
    struct, as ``hive_types`` takes)."""
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float):
        return exp.Literal.number(value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return exp.Struct(expressions=[exp.PropertyEQ(this=exp.Literal.string(k), expression=exp.Literal.string(v)) for k, v in value.items()])
    raise ProgrammingError(f"{function}() option {name} takes a bool, number, string or dict of strings, not {type(value).__name__}")


def _user_errors(fn: Callable) -> Callable:
    """Let qengine errors through; wrap anything else as an InternalError with the cause kept,
    but Arrow's "not implemented", which is a type qengine does not support there."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Error:
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            # Closed by another thread while this ran: its executors refuse new work ("cannot
            # schedule new futures after shutdown"), which is the closing, not a bug.
            connection = getattr(args[0], "connection", args[0]) if args else None
            if getattr(connection, "_closed", False):
                raise InterfaceError("the connection was closed while the statement ran") from e
            if isinstance(e, pa.ArrowNotImplementedError):  # a type Arrow cannot handle here (a UNION range-sorted)
                raise NotSupportedError(errors.user_message(type(e).__name__, str(e))) from e
            raise InternalError(f"{type(e).__name__}: {e}") from e

    return wrapper


class Cursor:
    """Executes statements and holds one result set, read batch by batch as it is fetched
    (``api.result_stream``): each row is handed out once, by whichever fetch asks first."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self._result: Result | None = None
        self._batch: pa.RecordBatch | None = None  # the rows being handed out one by one
        self._rows: list[tuple] = []  # ... as Python values
        self._rest_of_batch: pa.RecordBatch | None = None  # what follows them in their batch
        self._pos = 0  # the next row of it to hand out
        self._closed = False
        # The id of the statement running or run last: ``Connection.cancel`` takes it, from
        # another thread, or on a standalone cluster from another connection.
        self.query_id: str | None = None

    # ---- PEP 249 attributes ------------------------------------------------------------

    @property
    def description(self) -> list[tuple] | None:
        if self._result is None or self._result.rows is None:
            return None
        out = []
        for f in self._result.rows.schema:
            code = column_type(f)  # a HUGEINT travels as a decimal: it is described as DuckDB names it
            decimal = pa.types.is_decimal(f.type) and code.startswith("DECIMAL")
            precision, scale = (f.type.precision, f.type.scale) if decimal else (None, None)
            out.append((f.name, code, None, None, precision, scale, f.nullable))
        return out

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else self._result.rowcount

    @property
    def stats(self):
        """Per-stage statistics of the last query (rows, bytes, times)."""
        return None if self._result is None else self._result.stats

    # ---- execution ---------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("cursor is closed")
        self.connection._check()

    def _discard(self) -> None:
        """Let go of the result set, freeing what still holds its unread rows."""
        if self._result is not None:
            self._result.close()
        self._result, self._batch, self._rest_of_batch, self._rows, self._pos = None, None, None, [], 0

    def execute(
        self,
        operation: str,
        parameters: Sequence[Any] | Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Cursor:
        """Run a statement; ``parameters`` bind its ``?``/``$n`` placeholders (a sequence) or
        its ``$name`` ones (a dict). A table name the catalog lacks may name a DataFrame, Arrow
        table or relation in the caller's variables."""
        return self.execute_scoped(operation, caller_scope(operation), parameters, progress)

    @_user_errors
    def execute_scoped(
        self,
        operation: str,
        scope: Mapping[str, Any],
        parameters: Sequence[Any] | Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Cursor:
        """:meth:`execute` with the variables a table name may name given as ``scope``."""
        self._check()
        if parameters is not None and (isinstance(parameters, str | bytes) or not isinstance(parameters, Sequence | Mapping)):
            raise InterfaceError("parameters must be a sequence for ? placeholders, e.g. [5] or (5, 'x'), or a dict for $name ones")
        self._discard()
        self.query_id = new_statement_id()
        with scans_for(self.connection, operation, scope):
            self._result = self.connection._session.execute(operation, parameters, progress, self.query_id)
        return self

    @_user_errors
    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        self._check()
        total = 0
        for params in seq_of_parameters:
            self.execute(operation, params)
            total += max(0, self.rowcount)
        if self._result is not None:
            self._discard()
            self._result = Result(None, total)
        return self

    def _stream(self) -> ResultStream:
        self._check()
        if self._result is None or self._result.rows is None:
            raise InterfaceError("no result set: execute a query first")
        return self._result.rows

    def _next_rows(self) -> bool:
        """Move on to the next rows to hand out one by one: the next ``ROWS_AT_ONCE`` of the
        current batch, or of the next; False at the end of the result. A worker's batch may hold
        millions of rows, which as Python values take about ten times their Arrow size."""
        rest = self._rest_of_batch
        if rest is None or not rest.num_rows:
            rest = self._stream().next_batch()
        if rest is None:
            self._batch, self._rest_of_batch, self._rows, self._pos = None, None, [], 0
            return False
        batch, self._rest_of_batch = rest.slice(0, ROWS_AT_ONCE), rest.slice(ROWS_AT_ONCE)
        columns = [python_values(c, f) for c, f in zip(batch.columns, batch.schema, strict=True)]
        self._batch, self._pos = batch, 0
        self._rows = list(zip(*columns, strict=True)) if columns else [()] * batch.num_rows
        return True

    @_user_errors
    def fetchone(self) -> tuple | None:
        self._stream()
        if self._pos >= len(self._rows) and not self._next_rows():
            return None
        self._pos += 1
        return self._rows[self._pos - 1]

    @_user_errors
    def fetchmany(self, size: int | None = None) -> list[tuple]:
        self._stream()
        n = self.arraysize if size is None else size
        out: list[tuple] = []
        while len(out) < n and (self._pos < len(self._rows) or self._next_rows()):
            taken = self._rows[self._pos: self._pos + n - len(out)]
            self._pos += len(taken)
            out.extend(taken)
        return out

    @_user_errors
    def fetchall(self) -> list[tuple]:
        self._stream()
        out = self._rows[self._pos:]
        while self._next_rows():
            out.extend(self._rows)
        self._batch, self._rows, self._pos = None, [], 0
        return out

    def _rest(self) -> Iterator[pa.RecordBatch]:
        """The rows not handed out yet, as record batches; they are taken from the cursor at
        once, so a fetch that follows gets none of them."""
        stream = self._stream()
        parts = [self._batch.slice(self._pos) if self._batch is not None else None, self._rest_of_batch]
        self._batch, self._rest_of_batch, self._rows, self._pos = None, None, [], 0

        def rest() -> Iterator[pa.RecordBatch]:
            yield from (part for part in parts if part is not None and part.num_rows)
            yield from stream

        return rest()

    def _rest_table(self) -> pa.Table:
        """The rows not fetched yet, the DuckDB types Arrow does not carry still tagged."""
        schema = self._stream().schema
        return pa.Table.from_batches(list(self._rest()), schema=schema)

    @_user_errors
    def fetch_typed_table(self) -> pa.Table:
        """The rows not fetched yet with the DuckDB types Arrow lacks (UUID, JSON, HUGEINT, ...)
        still tagged (``sandbox.carried_types``): for writers that give them back to DuckDB, as
        the CLI's JSON, CSV and Parquet output and its table do."""
        return self._rest_table()

    @_user_errors
    def fetch_arrow_table(self) -> pa.Table:
        """The rows not fetched yet, as an Arrow table (all of them for a result not read from)."""
        return untagged(self._rest_table())

    @_user_errors
    def fetch_record_batch(self, rows_per_batch: int = 1_000_000) -> pa.RecordBatchReader:
        """The rows not fetched yet, as an Arrow record batch reader of batches of at most
        ``rows_per_batch`` rows, read from the cluster as the reader asks for them."""
        if not isinstance(rows_per_batch, int) or rows_per_batch < 1:
            raise InterfaceError(f"rows_per_batch must be a positive integer, not {rows_per_batch!r}")
        schema = self._stream().schema
        plain = untagged_schema(schema)
        rest = self._rest()  # this result's rows, taken now: the cursor may run another statement before they are read

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in rest:
                for start in range(0, batch.num_rows, rows_per_batch):
                    part = batch.slice(start, rows_per_batch)
                    yield part if plain == schema else part.cast(plain)

        return pa.RecordBatchReader.from_batches(plain, batches())

    @property
    def result_schema(self) -> pa.Schema:
        """The result's Arrow schema, the DuckDB types Arrow does not carry tagged on their
        fields (``sandbox.carried_types``)."""
        return self._stream().schema

    @_user_errors
    def fetchdf(self) -> Any:
        """The rows not fetched yet, as a pandas DataFrame of the dtypes DuckDB's gives."""
        return pandas_frame(self._rest_table())

    df = fetchdf
    # DuckDB 1.5's names: arrow() is a reader, to_arrow_table() a table
    to_arrow_table = fetch_arrow_table
    arrow = to_arrow_reader = fetch_record_batch

    @_user_errors
    def pl(self) -> Any:
        """The rows not fetched yet, as a polars DataFrame (polars must be installed)."""
        return polars_frame(self.fetch_arrow_table())

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def setinputsizes(self, sizes: Any) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def close(self) -> None:
        self._discard()
        self._closed = True

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Connection:
    """A connection to a qengine cluster; closing it stops a local cluster it started."""

    # PEP 249's optional extension: the exception classes, for code that holds only a connection.
    Warning = errors.Warning
    Error = errors.Error
    InterfaceError = errors.InterfaceError
    DatabaseError = errors.DatabaseError
    DataError = errors.DataError
    OperationalError = errors.OperationalError
    IntegrityError = errors.IntegrityError
    InternalError = errors.InternalError
    ProgrammingError = errors.ProgrammingError
    NotSupportedError = errors.NotSupportedError

    def __init__(self, session: Session, cluster: Any = None) -> None:
        """``cluster`` is the local cluster this connection started (stopped on close); with
        none, the session lives in a remote coordinator and closing ends it there."""
        self._cluster = cluster
        self._session = session
        self._closed = False
        self._ui: Any = None  # the web UI of the local cluster (connect(ui=True)), stopped on close
        self.ui_url: str | None = None  # its address, with the token that logs a browser in

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("connection is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def session(self) -> Session:
        return self._session

    def attach_ui(self, ui: Any) -> None:
        """Keep the web UI serving this connection's local cluster (``qengine.ui.server.UiServer``)
        until the connection closes; ``ui_url`` is where a browser logs in to it."""
        self._ui, self.ui_url = ui, ui.login_url

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, operation: str, parameters: Sequence[Any] | Mapping[str, Any] | None = None) -> Cursor:
        """Shortcut: a new cursor with the statement executed (as in DuckDB and sqlite3)."""
        return self.cursor().execute(operation, parameters)

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        """Shortcut: a new cursor with the statement executed once per parameter set (as in DuckDB and sqlite3)."""
        return self.cursor().executemany(operation, seq_of_parameters)

    @_user_errors
    def sql(self, query: str, *, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Relation | None:
        """A relation for a query, run when its rows are asked for (``api.relation``); any
        other statement runs at once and gives None, as in DuckDB. With ``params`` (``?`` or
        ``$name`` values) the query runs at once, as DuckDB's does."""
        self._check()
        return relation_or_run(self, query, caller_scope(query), params)

    def read_parquet(self, path: str | Sequence[str], **options: Any) -> Relation:
        """A relation over Parquet files: a file, directory, glob or list of them."""
        return self._read("read_parquet", path, options)

    def read_csv(self, path: str | Sequence[str], **options: Any) -> Relation:
        """A relation over CSV files, their dialect sniffed as DuckDB's read_csv() does
        (``register_csv`` sets the delimiter or header)."""
        return self._read("read_csv", path, options)

    def read_json(self, path: str | Sequence[str], **options: Any) -> Relation:
        """A relation over JSON files."""
        return self._read("read_json", path, options)

    @_user_errors
    def _read(self, function: str, path: str | Sequence[str], options: dict[str, Any]) -> Relation:
        """A relation over ``SELECT * FROM function('path')``: the SQL table function, whose
        files the catalog checks as it does the same call written in SQL."""
        self._check()
        paths = [path] if isinstance(path, str) else path
        if isinstance(paths, bytes) or not isinstance(paths, Sequence) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise ProgrammingError(f"{function}() takes a path or a list of paths, not {path!r}")
        strings = [exp.Literal.string(p) for p in paths]
        argument = strings[0] if isinstance(path, str) else exp.Array(expressions=strings)
        # Options go to the SQL function as ``name = value``: it takes those it models and refuses the rest.
        named = [exp.EQ(this=exp.column(name), expression=_sql_value(function, name, value)) for name, value in options.items()]
        source = exp.Table(this=exp.Anonymous(this=function, expressions=[argument, *named]))
        return Relation(self, exp.select("*").from_(source).sql(dialect=self._session.dialect), {})

    @_user_errors
    def table(self, name: str) -> Relation:
        """A relation over a registered table or view."""
        self._check()
        if not isinstance(name, str) or name.lower() not in (t.lower() for t in self.tables()):
            raise ProgrammingError(f"Table {name!r} does not exist")
        query = exp.select("*").from_(exp.Table(this=exp.to_identifier(name, quoted=True)))
        return Relation(self, query.sql(dialect=self._session.dialect), {})

    @_user_errors
    def cancel(self, query_id: str) -> bool:
        """Cancel the statement running as ``query_id`` (a cursor's ``query_id``): it fails
        with "query cancelled", its tasks stop on the workers and its blocks are freed. On a
        standalone cluster any connection may cancel any query. Returns whether it was found
        running; one that has ended is left as it is."""
        self._check()
        if not isinstance(query_id, str):
            raise ProgrammingError(f"query_id must be a string (a cursor's query_id), not {type(query_id).__name__}")
        return self._session.cancel_statement(query_id)

    def queries(self) -> list[dict]:
        """The statements running now, each with its ``query`` id and ``state``: this
        connection's on a local cluster; on a standalone one every connection's, with their
        ``user`` and the user's ``weight`` (``--user-weight``), and those waiting with what
        they wait for (``waits_for``: "turn", behind their user's earlier statements, or
        "memory", for room in the workers' budgets, with the ``needs_bytes`` predicted) and
        their ``position`` in that queue."""
        self._check()
        return self._session.running_statements()

    def commit(self) -> None:
        """Statements take effect at once; there is nothing to commit."""
        self._check()

    def rollback(self) -> None:
        self._check()
        raise NotSupportedError("qengine has no transactions; statements take effect at once")

    @_user_errors
    def register_parquet(self, name: str, path: str) -> None:
        """Make a Parquet file, directory or glob queryable as ``name``."""
        self._check()
        self._session.register_parquet(name, path)

    @_user_errors
    def register_records(self, name: str, path: str) -> None:
        """Make flat files of 100-byte gensort records queryable as (key, payload)."""
        self._check()
        self._session.register_records(name, path)

    @_user_errors
    def register_csv(self, name: str, path: str, delimiter: str | None = None, header: bool | None = None) -> None:
        """CSV files as DuckDB's read_csv() reads them; ``delimiter`` and ``header`` override what
        its sniffer finds."""
        self._check()
        self._session.register_csv(name, path, delimiter, header)

    @_user_errors
    def register(self, name: str, data: Any) -> None:
        """Register an Arrow table, record batch (reader), pandas or polars DataFrame as a session table."""
        self._check()
        table = arrow_table(data)
        if table is None:
            raise InterfaceError(f"cannot register a {type(data).__name__}: pass an Arrow table, a pandas or polars DataFrame")
        self._session.register_arrow(name, table)

    @_user_errors
    def unregister(self, name: str) -> None:
        """Forget a table registered under ``name`` (as DuckDB's ``unregister``; a view too)."""
        self._check()
        for kind in ("TABLE", "VIEW"):  # whichever it is: the other drop finds nothing
            self.execute(f"DROP {kind} IF EXISTS {identifier(name)}")

    def tables(self) -> list[str]:
        """Names of the registered tables and views."""
        self._check()
        return self._session.table_names()

    def close(self) -> None:
        """Close the connection; closing a closed one is an error, as PEP 249 has it."""
        self._check()
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._ui is not None:
            self._ui.stop()
        if self._cluster is not None:  # its workers go with it: nothing of theirs to release
            self._session.coordinator.close()
            self._cluster.close()
        else:
            self._session.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()  # the block may have closed it already

    def __del__(self) -> None:
        # A closed connection has nothing to do: at interpreter shutdown this module's
        # globals may already be gone, and even ``contextlib`` failed here.
        if getattr(self, "_closed", True):
            return
        try:  # noqa: SIM105 - contextlib may be gone at shutdown; builtins are not
            self._close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass
