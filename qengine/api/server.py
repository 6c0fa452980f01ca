"""``qengine coordinator``: the coordinator as a long-lived service for workers on many hosts.

It is an Arrow Flight server. Workers call ``register`` and then ``heartbeat``; clients
(``qengine.connect("qengine://HOST:PORT")``) open a session, run statements with ``execute``
and fetch each result with ``do_get``. A session is the same :class:`qengine.api.session.Session`
a local connection has — catalog, planner settings, scheduler — over the registry's live
workers. Every call must carry the cluster token; TLS is optional.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from qengine.api.admission import Admission
from qengine.api.flight_sql import ACTIONS as FLIGHT_SQL_ACTIONS
from qengine.api.flight_sql import UNSERVED_ACTIONS, FlightSqlError, FlightSqlService, flight_error, is_flight_sql
from qengine.api.options import SessionSettings
from qengine.api.result_stream import ResultStream
from qengine.api.session import Result, Session
from qengine.api.session_leases import DEFAULT_SESSION_TIMEOUT, SessionLeases
from qengine.api.statements import new_statement_id
from qengine.catalog.access import AccessPolicy
from qengine.catalog.catalog import Catalog
from qengine.errors import Error, NotSupportedError, OperationalError, ProgrammingError
from qengine.planner.stages import StagePlan
from qengine.runtime.membership import WorkerRegistry
from qengine.runtime.shares import DEFAULT_USER, Shares
from qengine.transport.rpc import ActionServer, batch_stream, server_error
from qengine.transport.wire import load_converters, schema_to_hex, table_from_hex

log = logging.getLogger("qengine.runtime.coordinator")

CLIENT_POLL_SECONDS = 0.2  # how often a running statement's client is looked for
FLIGHT_SQL_USER = "flightsql"  # whose share Flight SQL statements run in (a bearer token names no user)


OPENING_SECONDS = 60.0  # how long a session waits for the workers a server starts itself

class CoordinatorServer(ActionServer):
    quiet_errors = (ProgrammingError,)

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        heartbeat_timeout: float,
        tls: tuple[bytes, bytes] | None = None,
        tls_root: bytes | None = None,
        policy: AccessPolicy | None = None,
        max_queries_per_user: int | None = None,
        shares: Shares | None = None,
        served_tables: list[tuple[str, str, str]] | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        open_now: bool = True,
    ) -> None:
        """``shares`` is how the workers' slots are shared between users' queries
        (``runtime.shares``; by default fairly, every user weighing the same).
        ``served_tables`` (name, kind, path) are the tables Flight SQL clients find.
        ``session_timeout``: seconds a client may go unheard before its session is closed
        (``api.session_leases``). ``open_now``: open to sessions at once; ``qengine serve``
        opens (``opened.set()``) once the workers it starts have joined, so that a client as
        quick as the open port does not find none there."""
        load_converters()
        # Where every session may read and write; none given, nothing at all.
        self.policy = policy if policy is not None else AccessPolicy((), ())
        self.registry = WorkerRegistry(token, heartbeat_timeout, tls_root)
        if shares is not None:
            self.registry.shares = shares
        self._sessions: dict[str, Session] = {}
        self.admission = Admission(max_queries_per_user)
        # Results not fetched yet, by id: the session they belong to, and their rows.
        self._results: dict[str, tuple[str, ResultStream]] = {}
        self._lock = threading.Lock()
        self.served_tables = served_tables or []
        self.flight_sql = FlightSqlService(self._flight_sql_session, self._run_flight_sql)
        # Flight SQL's one session lives among the others under an id no client is given, so that
        # cancelling, listing and releasing statements reach it as they reach theirs.
        self._flight_sql_id = secrets.token_hex(16)
        self._flight_sql_lock = threading.Lock()
        self.leases = SessionLeases(session_timeout)
        self.opened = threading.Event()
        if open_now:
            self.opened.set()
        self._stopping = threading.Event()
        # Calls are answered from here on: what they use is made above.
        super().__init__(host, port, token, tls)
        self._reaper = threading.Thread(target=self._expire_sessions, name="session-leases", daemon=True)
        self._reaper.start()

    # ---- actions ------------------------------------------------------------------------------

    def _session(self, body: dict) -> Session:
        sid = str(body.get("session"))
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            if self.leases.expired(sid):
                raise OperationalError(
                    f"this connection's session was closed: the coordinator heard nothing from it for "
                    f"{self.leases.timeout:g} s (its --session-timeout), so its tables and results are gone; connect again"
                )
            raise ProgrammingError("unknown or closed session")
        self.leases.touch(sid)
        return session

    def _close_session(self, sid: str) -> None:
        """Close a session and drop its unread results: what it stored on the workers goes."""
        with self._lock:
            session = self._sessions.pop(sid, None)
            unread = [rid for rid, (owner, _) in self._results.items() if owner == sid]
            streams = [self._results.pop(rid)[1] for rid in unread]
        for stream in streams:
            stream.close()
        if session is not None:
            session.close()

    def _expire_sessions(self) -> None:
        """Close the sessions whose clients went quiet (killed, or their host lost)."""
        while not self._stopping.wait(min(1.0, self.leases.timeout / 4)):
            for sid in self.leases.expire():
                log.warning("closing session %s: its client was not heard from for %g s", sid, self.leases.timeout)
                try:
                    self._close_session(sid)
                except Exception:  # a worker may be gone; the other sessions still expire
                    log.exception("closing an expired session failed")

    def _handle(self, name: str, body: dict) -> Any:
        if name == "register":
            worker_id = self.registry.register(body["address"], body.get("memory_budget"))
            return {"id": worker_id, "heartbeat_timeout": self.registry.heartbeat_timeout, "access": self.policy.to_json()}
        if name == "heartbeat":
            return {"alive": self.registry.heartbeat(int(body["id"]))}
        if name == "workers":
            return [
                {"id": m.id, "address": m.address, "alive": m.alive, "memory_budget": m.memory_budget}
                for m in self.registry.members()
            ]
        if name == "open_session":
            self._wait_until_opened()
            user = body.get("user") or DEFAULT_USER
            if not isinstance(user, str) or len(user) > 128:
                raise ProgrammingError("user must be a name of at most 128 characters")
            session = self._new_session(SessionSettings(**body.get("settings", {})), user)
            sid = secrets.token_hex(8)
            with self._lock:
                self._sessions[sid] = session
            self.leases.touch(sid)
            return {"session": sid, "workers": len(self.registry.addresses), "keepalive": self.leases.timeout / 4}
        if name == "close_session":
            sid = str(body.get("session"))
            self.leases.forget(sid)
            self._close_session(sid)
            return {"ok": True}
        if name == "keepalive":
            self._session(body)
            return {"ok": True}
        if name == "execute":
            session = self._session(body)
            with self.leases.call(str(body["session"])):
                return self._execute(session, body)
        if name == "cancel":
            self._session(body).cancel()
            return {"ok": True}
        if name == "cancel_query":  # from any session: whoever holds the token may cancel
            return {"cancelled": self._cancel(str(body["query"]))}
        if name == "statements":
            with self._lock:
                sessions = list(self._sessions.values())
            waiting = self.admission.waiting()
            queued = {w["query"] for w in waiting}
            running = [
                {"query": q, "user": session.user, "state": "running", "weight": self.registry.shares.user_weight(session.user)}
                for session in sessions
                for q in session.statements.ids()
                if q not in queued
            ]
            return running + [dict(w, state="queued") for w in waiting]
        if name == "register_table":
            self._session(body).register_file(body["kind"], body["name"], body["path"], body.get("delimiter"), body.get("header"))
            return {"ok": True}
        if name == "allow_root":
            self._session(body).allow_root(body["directory"])
            return {"ok": True}
        if name == "tables":
            return self._session(body).table_names()
        if name == "table_schema":
            return {"schema": schema_to_hex(self._session(body).table_schema(body["name"]))}
        if name == "shutdown":
            threading.Thread(target=self.stop, daemon=True).start()
            return {"ok": True}
        raise ProgrammingError(f"unknown action {name!r}")

    def _execute(self, session: Session, body: dict) -> dict:
        """Run a statement for a qengine client, keeping its result for the client's ``do_get``."""
        row = table_from_hex(body["params"]).to_pylist()[0] if body.get("params") else None
        params = row if row is None or body.get("named") else list(row.values())  # by name: a dict
        statement = str(body.get("statement") or new_statement_id())
        result = self._run_watched(self.call_context(), session, body["sql"], params, statement)
        reply: dict[str, Any] = {
            "rowcount": result.rowcount,
            "stats": result.stats.to_json() if result.stats is not None else None,
            "result": None,
        }
        if result.rows is not None:
            rid = secrets.token_hex(8)
            with self._lock:
                self._results[rid] = (str(body["session"]), result.rows)
            reply["result"] = rid
        return reply

    def _run_watched(
        self, context: flight.ServerCallContext, session: Session, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, statement: str
    ) -> Result:
        """Run a statement for the client of a call, admitted as its user's statements are. A
        client that goes away while it runs (its process ended, its connection broke, it gave up
        the call) cancels it."""
        ended = threading.Event()

        def watch() -> None:
            while not ended.wait(CLIENT_POLL_SECONDS):
                if context.is_cancelled():
                    log.warning("the client of statement %s went away: cancelling it", statement)
                    self._cancel(statement)
                    return

        watcher = threading.Thread(target=watch, name=f"watch-{statement}", daemon=True)
        watcher.start()
        try:
            with self.admission.admitted(session.user, statement):
                return session.execute(sql, params, statement_id=statement)
        finally:
            # The call's context is freed once this call returns: the watcher must not be
            # looking at it then (it crashed the coordinator, one statement in thousands).
            ended.set()
            watcher.join()

    def _wait_until_opened(self) -> None:
        if not self.opened.wait(OPENING_SECONDS):
            raise OperationalError(f"this server's workers did not join within {OPENING_SECONDS:g} s")

    def _new_session(self, settings: SessionSettings, user: str) -> Session:
        """A session over the registry's workers, its queries admitted by memory."""
        session = Session(self.registry, settings.validated(), len(self.registry.addresses), Catalog(self.policy, extendable=False), user)
        session.gate = functools.partial(self._admit_by_memory, session)
        return session

    def _flight_sql_session(self) -> Session:
        """The session Flight SQL statements run in, over the served tables; made on first use,
        once workers have joined (a plan's partitions follow their number)."""
        with self._flight_sql_lock:
            with self._lock:
                session = self._sessions.get(self._flight_sql_id)
            if session is None:
                self._wait_until_opened()
                if not self.registry.addresses:
                    raise OperationalError("no worker has joined this coordinator yet")
                session = self._new_session(SessionSettings(), FLIGHT_SQL_USER)
                for name, kind, path in self.served_tables:
                    session.register_file(kind, name, path)
                with self._lock:
                    self._sessions[self._flight_sql_id] = session
            return session

    def _run_flight_sql(self, context: flight.ServerCallContext, sql: str, params: Sequence[Any] | None) -> Result:
        return self._run_watched(context, self._flight_sql_session(), sql, params, new_statement_id())

    def _flight_sql_call(self, call: Callable[[], Any]) -> Any:
        """Make a Flight SQL call, its failures as Flight SQL clients read them."""
        try:
            return call()
        except (Error, FlightSqlError) as e:
            if not isinstance(e, self.quiet_errors + (FlightSqlError,)):
                log.warning("Flight SQL call failed", exc_info=e)
            # Without its chain: a Flight SQL client is sent the traceback of what is raised here.
            raise flight_error(e) from None

    def get_flight_info(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        return self._flight_sql_call(lambda: self.flight_sql.get_flight_info(context, descriptor))

    def get_schema(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        return self._flight_sql_call(lambda: self.flight_sql.get_schema(context, descriptor))

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        self._flight_sql_call(lambda: self.flight_sql.do_put(context, descriptor, reader, writer))

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterable[flight.Result]:
        if action.type in FLIGHT_SQL_ACTIONS:
            return self._flight_sql_call(lambda: self.flight_sql.do_action(context, action))
        if action.type in UNSERVED_ACTIONS:
            raise flight_error(NotSupportedError(f"action {action.type} is not supported by qengine"))
        return super().do_action(context, action)

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(name, "Flight SQL") for name in FLIGHT_SQL_ACTIONS]

    def _admit_by_memory(self, session: Session, plan: StagePlan) -> contextlib.AbstractContextManager[None]:
        """Hold a planned query until its predicted memory fits what the workers have left."""
        statement = session.statements.current_id()  # the gate runs inside a statement
        needs = plan.held_bytes(max(1, len(self.registry.addresses)))
        return self.admission.memory(session.user, statement, needs, self.registry.memory_budget, session.statements.current())

    def _cancel(self, statement: str) -> bool:
        """Cancel a statement waiting for its turn or running, in any session."""
        if self.admission.cancel(statement):
            return True
        with self._lock:
            sessions = list(self._sessions.values())
        return any([session.cancel_statement(statement) for session in sessions])

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        """A result's rows, read from the workers as the client takes them."""
        if is_flight_sql(ticket.ticket):
            return self._flight_sql_call(lambda: self.flight_sql.do_get(context, ticket))
        rid = json.loads(ticket.ticket).get("result")
        with self._lock:
            _, stream = self._results.pop(str(rid), (None, None))
        if stream is None:
            raise server_error(OperationalError(f"no result {rid!r}: it was fetched already or never existed"))

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                yield from stream
            except Error as e:
                raise server_error(e) from e
            finally:  # read to its end, failed, or given up by the client
                stream.close()

        return batch_stream(stream.schema, batches())

    def release(self) -> None:
        """Close every session and stop the workers that joined (a clean coordinator shutdown
        leaves no worker behind). Safe to call twice."""
        self._stopping.set()
        self.flight_sql.close()
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            streams = [stream for _, stream in self._results.values()]
            self._results.clear()
        for stream in streams:
            stream.close()
        for session in sessions:
            try:
                session.close()
            except Exception:  # a worker may be gone already; the rest still stop
                log.exception("closing a session failed")
        self.registry.close()

    def stop(self) -> None:
        self.release()
        self.shutdown()
