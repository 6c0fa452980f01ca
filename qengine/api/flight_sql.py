"""Arrow Flight SQL on a coordinator's port, for the clients BI tools and notebooks already have:
ADBC (Python, Go, C), the Flight SQL JDBC driver (DBeaver and the like), and SQLAlchemy and
pandas through ADBC.

Flight SQL commands arrive inside ordinary Flight calls, beside qengine's own JSON calls on the
same server (``transport.flight_sql_messages`` tells them apart). A statement runs when its
``GetFlightInfo`` arrives: the reply carries the result's schema and row count, and one ticket.
The ``DoGet`` of that ticket streams the result from the workers' final stage, batch by batch,
as :class:`~qengine.api.result_stream.ResultStream` reads it: a result larger than its read-ahead
never sits whole in the coordinator. Results no one fetches, and prepared statements no one uses,
are dropped after :data:`IDLE_SECONDS`.

Every statement runs in one session the endpoint keeps, over the tables given to the server
(``-d DIR``) and those its clients create: Flight SQL's calls carry no session, so a table one
call creates is there for the next, as in a database. qengine has no transactions; it says so
in ``GetSqlInfo``, and ADBC clients run in autocommit mode.
"""

from __future__ import annotations

import importlib.metadata
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import sqlglot.expressions as exp

from qengine.api.result_stream import ResultStream
from qengine.api.session import Result, Session
from qengine.catalog.sources import Source
from qengine.catalog.types import column_type
from qengine.errors import DataError, Error, NotSupportedError, OperationalError, ProgrammingError
from qengine.planner.frontend import parse
from qengine.sandbox.carried_types import untagged_schema
from qengine.transport.flight_sql_messages import (
    CANCELLED,
    NOT_CANCELLABLE,
    SQL_PACKAGE,
    flight_message,
    packed,
    sql_message,
    type_url_of,
    unpacked,
)
from qengine.transport.rpc import batch_stream

IDLE_SECONDS = 600.0  # how long an unfetched result or an unused prepared statement is kept
# The one catalog and schema tables are listed under: DuckDB's names for its in-memory database,
# which information_schema reports too, so a BI tool's qualified names are the ones SQL knows.
CATALOG = "memory"
SCHEMA = "main"
ACTIONS = ("CreatePreparedStatement", "ClosePreparedStatement", "CancelFlightInfo", "CancelQuery")
# Flight's and Flight SQL's other actions, which a client may send (ADBC asks GetSessionOptions
# for its current catalog): answered UNIMPLEMENTED, not taken for a call of qengine's own
UNSERVED_ACTIONS = frozenset({
    "GetSessionOptions", "SetSessionOptions", "CloseSession", "RenewFlightEndpoint", "PollFlightInfo",
    "BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint", "CreatePreparedSubstraitPlan",
})

# Runs a statement for a call: (call, SQL, parameters) → result. The server behind the endpoint
# supplies it, with its admission and its cancelling of statements whose client went away.
Runner = Callable[[flight.ServerCallContext, str, Sequence[Any] | None], Result]

_STRING_LIST = pa.list_(pa.field("item", pa.string()))
_SQL_INFO_VALUE = pa.dense_union([
    pa.field("string_value", pa.string()),
    pa.field("bool_value", pa.bool_()),
    pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()),
    pa.field("string_list", _STRING_LIST),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
])
_KEYS_SCHEMA = pa.schema([
    pa.field("pk_catalog_name", pa.string()), pa.field("pk_db_schema_name", pa.string()),
    pa.field("pk_table_name", pa.string(), False), pa.field("pk_column_name", pa.string(), False),
    pa.field("fk_catalog_name", pa.string()), pa.field("fk_db_schema_name", pa.string()),
    pa.field("fk_table_name", pa.string(), False), pa.field("fk_column_name", pa.string(), False),
    pa.field("key_sequence", pa.int32(), False), pa.field("fk_key_name", pa.string()), pa.field("pk_key_name", pa.string()),
    pa.field("update_rule", pa.uint8(), False), pa.field("delete_rule", pa.uint8(), False),
])
SCHEMAS = {
    "CommandGetCatalogs": pa.schema([pa.field("catalog_name", pa.string(), False)]),
    "CommandGetDbSchemas": pa.schema([pa.field("catalog_name", pa.string()), pa.field("db_schema_name", pa.string(), False)]),
    "CommandGetTables": pa.schema([
        pa.field("catalog_name", pa.string()), pa.field("db_schema_name", pa.string()),
        pa.field("table_name", pa.string(), False), pa.field("table_type", pa.string(), False),
    ]),
    "CommandGetTableTypes": pa.schema([pa.field("table_type", pa.string(), False)]),
    "CommandGetSqlInfo": pa.schema([pa.field("info_name", pa.uint32(), False), pa.field("value", _SQL_INFO_VALUE, False)]),
    "CommandGetPrimaryKeys": pa.schema([
        pa.field("catalog_name", pa.string()), pa.field("db_schema_name", pa.string()), pa.field("table_name", pa.string(), False),
        pa.field("column_name", pa.string(), False), pa.field("key_name", pa.string()), pa.field("key_sequence", pa.int32(), False),
    ]),
    "CommandGetExportedKeys": _KEYS_SCHEMA,
    "CommandGetImportedKeys": _KEYS_SCHEMA,
}
_TABLE_SCHEMA_FIELD = pa.field("table_schema", pa.binary(), False)

# GetSqlInfo: what the server is and what its SQL is like (numbers from FlightSql.proto's SqlInfo).
_SQL_INFO: dict[int, object] = {
    0: "qengine",  # FLIGHT_SQL_SERVER_NAME
    1: importlib.metadata.version("qengine"),  # FLIGHT_SQL_SERVER_VERSION
    2: pa.__version__,  # FLIGHT_SQL_SERVER_ARROW_VERSION
    3: False,  # FLIGHT_SQL_SERVER_READ_ONLY
    4: True,  # FLIGHT_SQL_SERVER_SQL
    5: False,  # FLIGHT_SQL_SERVER_SUBSTRAIT
    8: 0,  # FLIGHT_SQL_SERVER_TRANSACTION: none
    9: True,  # FLIGHT_SQL_SERVER_CANCEL
    100: int(IDLE_SECONDS * 1000),  # FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT (ms)
    101: 0,  # FLIGHT_SQL_SERVER_TRANSACTION_TIMEOUT
    500: False,  # SQL_DDL_CATALOG
    501: False,  # SQL_DDL_SCHEMA
    502: True,  # SQL_DDL_TABLE
    503: 1,  # SQL_IDENTIFIER_CASE: case-insensitive, as DuckDB
    504: '"',  # SQL_IDENTIFIER_QUOTE_CHAR
    505: 1,  # SQL_QUOTED_IDENTIFIER_CASE: case-insensitive, as DuckDB
    506: True,  # SQL_ALL_TABLES_ARE_SELECTABLE
    507: 3,  # SQL_NULL_ORDERING: nulls at the end, DuckDB's default
    515: True,  # SQL_SUPPORTS_COLUMN_ALIASING
    516: True,  # SQL_NULL_PLUS_NULL_IS_NULL
    529: "schema",  # SQL_SCHEMA_TERM
    531: "catalog",  # SQL_CATALOG_TERM
    532: True,  # SQL_CATALOG_AT_START
}
_BITMASK_INFOS = {8, 100, 101, 503, 505, 507}  # ints sent as int32 (the rest are int64)


class FlightSqlError(Exception):
    """A request this endpoint cannot read: not a Flight SQL message, or one it does not serve."""


@dataclass
class _Held:
    """A result waiting for its ``DoGet``."""

    stream: ResultStream
    schema: pa.Schema  # as it is sent
    expires: float


@dataclass
class _Prepared:
    """A prepared statement: its SQL and the parameter rows bound to it last."""

    sql: str
    rows: list[tuple]
    expires: float


class FlightSqlService:
    """The Flight SQL calls of one server; see the module docstring."""

    def __init__(self, session: Callable[[], Session], run: Runner) -> None:
        """``session`` gives the endpoint's session (made on first use: a coordinator's workers
        join after it starts); ``run`` runs a statement for a call."""
        self._session = session
        self._run = run
        self._results: dict[bytes, _Held] = {}
        self._prepared: dict[bytes, _Prepared] = {}
        self._lock = threading.Lock()

    # ---- the Flight calls -----------------------------------------------------------------------

    def get_flight_info(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        name, command = _command(descriptor.command)
        if name == "CommandStatementQuery":
            _no_transaction(command)
            return self._execute_info(context, descriptor, command.query, None)
        if name == "CommandPreparedStatementQuery":
            prepared = self._prepared_statement(command.prepared_statement_handle)
            if len(prepared.rows) > 1:
                raise NotSupportedError("a query takes one row of parameters; run an update to bind several")
            return self._execute_info(context, descriptor, prepared.sql, prepared.rows[0] if prepared.rows else None)
        table = self._metadata(context, name, command)
        return self._info(descriptor, ResultStream.of_table(table), table.schema)

    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        name, command = _command(descriptor.command)
        if name in SCHEMAS:
            schema = SCHEMAS[name]
            if name == "CommandGetTables" and command.include_schema:
                schema = schema.append(_TABLE_SCHEMA_FIELD)
            return flight.SchemaResult(schema)
        if name == "CommandStatementQuery":
            sql = command.query
        elif name == "CommandPreparedStatementQuery":
            sql = self._prepared_statement(command.prepared_statement_handle).sql
        else:
            raise NotSupportedError(f"GetSchema of {name} is not supported")
        schema = self._result_schema(context, sql)
        if schema is None:
            raise NotSupportedError("the schema of a statement with parameters, or of more than one statement, is known only once it runs")
        return flight.SchemaResult(schema)

    def _result_schema(self, context: flight.ServerCallContext, sql: str) -> pa.Schema | None:
        """The schema of what ``sql`` returns: none of its rows are made, a query's being known
        once a task has made its first batch. None where that cannot be known without running it
        (parameters not bound yet, several statements, a statement qengine reads as a bare command)."""
        dialect = self._session().dialect
        statements = parse(sql, dialect)
        if len(statements) != 1 or any(statements[0].find_all(exp.Placeholder, exp.Parameter)):
            return None
        statement = statements[0]
        if isinstance(statement, exp.Query | exp.Values):
            probe = exp.select("*").from_(exp.Subquery(this=statement, alias=exp.TableAlias(this=exp.to_identifier("q")))).limit(0)
        elif isinstance(statement, exp.Describe):
            probe = statement  # cheap, and it has rows
        elif isinstance(statement, exp.Create | exp.Insert | exp.Drop | exp.Copy | exp.Set):
            return pa.schema([])  # COPY's count aside, they return no rows
        else:
            return None
        result = self._run(context, probe.sql(dialect=dialect), None)
        try:
            return _described(result.rows.schema) if result.rows is not None else pa.schema([])
        finally:
            result.close()

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        name, command = _command(ticket.ticket)
        if name != "TicketStatementQuery":
            raise ProgrammingError(f"DoGet takes the ticket GetFlightInfo gave, not {name}")
        with self._lock:
            held = self._results.pop(command.statement_handle, None)
        if held is None:
            raise ProgrammingError("no such result: it was fetched already, cancelled, or not fetched in time")
        stream, schema = held.stream, held.schema

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for batch in stream:
                    yield batch.cast(schema)  # without qengine's type tags, with the SQL type names
            except Error as e:
                raise flight_error(e) from e
            finally:  # read to its end, failed, or given up by the client
                stream.close()

        return batch_stream(schema, batches())

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        name, command = _command(descriptor.command)
        if name == "CommandStatementUpdate":
            _no_transaction(command)
            count = self._update(context, command.query, [None])
        elif name == "CommandPreparedStatementQuery":
            handle = command.prepared_statement_handle
            prepared = self._prepared_statement(handle)
            prepared.rows = _parameter_rows(reader)
            # DoPut's results travel bare in the app metadata, not inside an Any.
            writer.write(pa.py_buffer(sql_message("DoPutPreparedStatementResult", prepared_statement_handle=handle).SerializeToString()))
            return
        elif name == "CommandPreparedStatementUpdate":
            prepared = self._prepared_statement(command.prepared_statement_handle)
            rows = _parameter_rows(reader) or prepared.rows
            count = self._update(context, prepared.sql, rows or [None])
        else:
            raise NotSupportedError(f"DoPut of {name} is not supported")
        writer.write(pa.py_buffer(sql_message("DoPutUpdateResult", record_count=count).SerializeToString()))

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> list[flight.Result]:
        body = action.body.to_pybytes()
        if action.type == "CreatePreparedStatement":
            name, request = _command(body)
            if name != "ActionCreatePreparedStatementRequest":
                raise ProgrammingError(f"CreatePreparedStatement takes an ActionCreatePreparedStatementRequest, not {name}")
            _no_transaction(request)
            # Read now, as a database prepares: a mistake shows here, and the result's schema with it.
            schema = self._result_schema(context, request.query)
            handle = secrets.token_bytes(16)
            with self._lock:
                self._prepared[handle] = _Prepared(request.query, [], time.monotonic() + IDLE_SECONDS)
            reply = sql_message(
                "ActionCreatePreparedStatementResult",
                prepared_statement_handle=handle,
                dataset_schema=schema.serialize().to_pybytes() if schema is not None else b"",
            )
            return [flight.Result(packed(reply))]
        if action.type == "ClosePreparedStatement":
            _, request = _command(body)
            with self._lock:
                self._prepared.pop(request.prepared_statement_handle, None)
            return []
        if action.type == "CancelFlightInfo":
            status = self._cancel(flight_message("CancelFlightInfoRequest", body).info)
            return [flight.Result(flight_message("CancelFlightInfoResult", status=status).SerializeToString())]
        if action.type == "CancelQuery":
            _, request = _command(body)
            return [flight.Result(packed(sql_message("ActionCancelQueryResult", result=self._cancel(request.info))))]
        raise NotSupportedError(f"action {action.type} is not supported (qengine has no transactions)")

    # ---- statements -----------------------------------------------------------------------------

    def _execute_info(
        self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, sql: str, params: Sequence[Any] | None
    ) -> flight.FlightInfo:
        self.expire()
        result = self._run(context, sql, params)
        if result.rows is None:  # a statement without rows: its count, and nothing to fetch
            return flight.FlightInfo(pa.schema([]), descriptor, [], result.rowcount, -1)
        return self._info(descriptor, result.rows, _described(result.rows.schema))

    def _info(self, descriptor: flight.FlightDescriptor, stream: ResultStream, schema: pa.Schema) -> flight.FlightInfo:
        """Keep ``stream`` for the DoGet of the one ticket the returned FlightInfo holds."""
        handle = secrets.token_bytes(16)
        with self._lock:
            self._results[handle] = _Held(stream, schema, time.monotonic() + IDLE_SECONDS)
        ticket = flight.Ticket(packed(sql_message("TicketStatementQuery", statement_handle=handle)))
        return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(ticket, [])], stream.rows, -1)

    def _update(self, context: flight.ServerCallContext, sql: str, rows: list[tuple | None]) -> int:
        """Run ``sql`` once per parameter row; the rows it changed, or -1 when it does not say."""
        counts = []
        for params in rows:
            result = self._run(context, sql, params)
            result.close()
            counts.append(result.rowcount)
        return sum(counts) if all(c >= 0 for c in counts) else -1

    def _prepared_statement(self, handle: bytes) -> _Prepared:
        with self._lock:
            prepared = self._prepared.get(handle)
            if prepared is None:
                raise ProgrammingError("no such prepared statement: it was closed, or not used in time")
            prepared.expires = time.monotonic() + IDLE_SECONDS
        return prepared

    def _cancel(self, info: bytes) -> int:
        """Drop the result a FlightInfo's tickets name. A statement still running is cancelled
        by cancelling its GetFlightInfo call, which is what ADBC's cancel does."""
        try:
            endpoints = flight.FlightInfo.deserialize(info).endpoints
        except (pa.ArrowInvalid, TypeError) as e:
            raise ProgrammingError("the cancel request does not hold a FlightInfo") from e
        found = False
        for endpoint in endpoints:
            command = unpacked(endpoint.ticket.ticket)
            if command is not None and command[0] == "TicketStatementQuery":
                with self._lock:
                    held = self._results.pop(command[1].statement_handle, None)
                if held is not None:
                    held.stream.close()
                    found = True
        return CANCELLED if found else NOT_CANCELLABLE

    def expire(self) -> None:
        """Drop the results and prepared statements left unused too long (their blocks with them)."""
        now = time.monotonic()
        with self._lock:
            stale = [h for h, held in self._results.items() if held.expires < now]
            streams = [self._results.pop(h).stream for h in stale]
            for handle in [h for h, p in self._prepared.items() if p.expires < now]:
                del self._prepared[handle]
        for stream in streams:
            stream.close()

    def close(self) -> None:
        """Free every result not fetched."""
        with self._lock:
            streams = [held.stream for held in self._results.values()]
            self._results.clear()
            self._prepared.clear()
        for stream in streams:
            stream.close()

    # ---- metadata -------------------------------------------------------------------------------

    def _metadata(self, context: flight.ServerCallContext, name: str, command: Any) -> pa.Table:
        if name == "CommandGetSqlInfo":
            return _sql_info(list(command.info))
        if name == "CommandGetTableTypes":
            return pa.table({"table_type": ["TABLE", "VIEW"]}, schema=SCHEMAS[name])
        if name == "CommandGetCatalogs":
            return pa.table({"catalog_name": [CATALOG]}, schema=SCHEMAS[name])
        if name == "CommandGetDbSchemas":
            keep = _in_catalog(command) and _matches(command, "db_schema_filter_pattern", SCHEMA)
            return pa.table({"catalog_name": [CATALOG] * keep, "db_schema_name": [SCHEMA] * keep}, schema=SCHEMAS[name])
        if name == "CommandGetTables":
            return self._tables(context, command)
        if name in ("CommandGetPrimaryKeys", "CommandGetExportedKeys", "CommandGetImportedKeys"):
            return SCHEMAS[name].empty_table()  # qengine has no keys
        raise NotSupportedError(f"Flight SQL command {name} is not supported")

    def _tables(self, context: flight.ServerCallContext, command: Any) -> pa.Table:
        catalog = self._session().catalog
        wanted = {t.upper() for t in command.table_types}
        rows: list[tuple[str, str, Source | None]] = []
        if _in_catalog(command) and _matches(command, "db_schema_filter_pattern", SCHEMA):
            rows = [(s.name, "TABLE", s) for s in catalog.user_tables()]
            rows += [(v.name, "VIEW", None) for v in list(catalog.views.values())]
        rows = sorted(r for r in rows if (not wanted or r[1] in wanted) and _matches(command, "table_name_filter_pattern", r[0]))
        columns: dict[str, list] = {
            "catalog_name": [CATALOG] * len(rows),
            "db_schema_name": [SCHEMA] * len(rows),
            "table_name": [r[0] for r in rows],
            "table_type": [r[1] for r in rows],
        }
        schema = SCHEMAS["CommandGetTables"]
        if command.include_schema:
            columns["table_schema"] = [self._table_schema(context, name, source).serialize().to_pybytes() for name, _, source in rows]
            schema = schema.append(_TABLE_SCHEMA_FIELD)
        return pa.table(columns, schema=schema)

    def _table_schema(self, context: flight.ServerCallContext, name: str, source: Source | None) -> pa.Schema:
        """A table's columns; a view's, as its query's result has them."""
        if source is not None:
            return _described(source.schema)
        view = exp.select("*").from_(exp.Table(this=exp.to_identifier(name, quoted=True)))
        try:
            return self._result_schema(context, view.sql(dialect=self._session().dialect)) or pa.schema([])
        except Error:  # it reads a table dropped since: listed without columns, not failing the listing
            return pa.schema([])


def _command(data: bytes | None) -> tuple[str, Any]:
    """The Flight SQL message in ``data``. One of Flight SQL's that qengine does not serve
    (bulk ingest, Substrait plans, XDBC type info) is unsupported (UNIMPLEMENTED, which ADBC
    raises as NotSupportedError); anything else is not a request this endpoint reads."""
    if data is None:
        raise FlightSqlError("a Flight SQL request names a command, not a path")
    command = unpacked(data)
    if command is None:
        named = type_url_of(data)
        if named.startswith(SQL_PACKAGE + "."):
            raise NotSupportedError(f"Flight SQL {named.removeprefix(SQL_PACKAGE + '.')} is not supported by qengine")
        raise FlightSqlError(f"not a Flight SQL command{': ' + named if named else ''}")
    return command


def is_flight_sql(data: bytes) -> bool:
    """Whether a descriptor's command or a ticket is a Flight SQL message (rather than one of
    qengine's own JSON calls)."""
    return not data.lstrip().startswith(b"{") and bool(type_url_of(data))


def _no_transaction(command: Any) -> None:
    if command.HasField("transaction_id"):
        raise NotSupportedError("qengine has no transactions: run statements without one (autocommit)")


def _parameter_rows(reader: flight.MetadataRecordBatchReader) -> list[tuple]:
    """The parameter rows a client bound, by position (ADBC names them 0, 1, …)."""
    try:
        table = reader.read_all()
    except pa.ArrowInvalid as e:  # a stream with no schema: no parameters
        if "schema" in str(e).lower():
            return []
        raise
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(row) for row in zip(*columns, strict=True)] if columns else []


def _described(schema: pa.Schema) -> pa.Schema:
    """A result schema as Flight SQL clients read it: without qengine's internal type tags, and
    each column's SQL type named in ``ARROW:FLIGHT:SQL:TYPE_NAME`` (JDBC shows it)."""
    names = [column_type(f) for f in schema]
    plain = untagged_schema(schema)
    return pa.schema(
        [f.with_metadata({**(f.metadata or {}), b"ARROW:FLIGHT:SQL:TYPE_NAME": name.encode()}) for f, name in zip(plain, names, strict=True)],
        plain.metadata,
    )


def _in_catalog(command: Any) -> bool:
    return not command.HasField("catalog") or command.catalog == CATALOG


def _matches(command: Any, field: str, value: str) -> bool:
    """Whether ``value`` matches the command's LIKE pattern in ``field`` (``%`` any run, ``_``
    one character, backslash escapes); a command without the pattern matches everything."""
    if not command.HasField(field):
        return True
    pattern = getattr(command, field)
    regex = "".join(
        ".*" if part == "%" else "." if part == "_" else re.escape(part[-1])
        for part in re.findall(r"\\.|%|_|[^%_\\]", pattern)
    )
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _sql_info(wanted: list[int]) -> pa.Table:
    """GetSqlInfo's rows: the values asked for (all when none are), in a dense union by type."""
    codes = [c for c in (wanted or sorted(_SQL_INFO)) if c in _SQL_INFO]
    children: list[list] = [[] for _ in range(6)]
    type_ids, offsets = [], []
    for code in codes:
        value = _SQL_INFO[code]
        kind = (0 if isinstance(value, str) else 1 if isinstance(value, bool)
                else 3 if code in _BITMASK_INFOS else 2 if isinstance(value, int) else 4)
        type_ids.append(kind)
        offsets.append(len(children[kind]))
        children[kind].append(value)
    arrays = [pa.array(values, type=field.type) for values, field in zip(children, _SQL_INFO_VALUE, strict=True)]
    union = pa.UnionArray.from_dense(
        pa.array(type_ids, pa.int8()), pa.array(offsets, pa.int32()), arrays, [f.name for f in _SQL_INFO_VALUE], list(range(6))
    )
    return pa.Table.from_arrays([pa.array(codes, pa.uint32()), union], schema=SCHEMAS["CommandGetSqlInfo"])


def flight_error(exc: BaseException) -> Exception:
    """The Flight error a Flight SQL client gets for a failure: its gRPC status as ADBC and JDBC
    map them (a user's mistake is INVALID_ARGUMENT, an unsupported feature UNIMPLEMENTED, a
    cancelled query CANCELLED), and qengine's message as it is, without qengine's own envelope."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NotSupportedError):
        return pa.ArrowNotImplementedError(message)
    if isinstance(exc, ProgrammingError | DataError | FlightSqlError):
        return pa.ArrowInvalid(message)
    if isinstance(exc, OperationalError) and "cancelled" in str(exc):
        return flight.FlightCancelledError(message)
    if isinstance(exc, OperationalError):
        return flight.FlightUnavailableError(message)
    return flight.FlightInternalError(message)
