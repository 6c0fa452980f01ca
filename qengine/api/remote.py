"""The client side of a standalone coordinator: a session that lives in the coordinator.

``qengine.connect("qengine://HOST:PORT", token=...)`` returns the usual DB-API connection
over a :class:`RemoteSession`. Statements run in the coordinator, which plans and schedules
them on its workers; each result comes back as one Arrow Flight stream, read as the cursor
fetches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from qengine.api.options import SessionSettings
from qengine.api.result_stream import ResultStream
from qengine.api.session import Result
from qengine.api.statements import checked_sql
from qengine.errors import Error, NotSupportedError, ProgrammingError
from qengine.planner.parameters import literal
from qengine.runtime.stats import QueryStats
from qengine.transport.rpc import Client
from qengine.transport.wire import schema_from_hex, table_to_hex

CANCEL_TIMEOUT = 10.0  # seconds the coordinator has to take, and carry out, a cancel

log = logging.getLogger("qengine.api.remote")


def parse_target(target: str) -> str:
    """'qengine://HOST:PORT' → 'HOST:PORT', with an error that shows the expected form."""
    address = target.removeprefix("qengine://").rstrip("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProgrammingError(f"cannot read {target!r} as a cluster address: use qengine://HOST:PORT (a port from 1 to 65535)")
    return address


class RemoteSession:
    def __init__(
        self, target: str, token: str | None, settings: SessionSettings, tls_root: bytes | None = None, user: str | None = None
    ) -> None:
        if not token:
            raise ProgrammingError("connecting to a cluster needs its token: qengine.connect(url, token=...)")
        self.address = parse_target(target)
        self._client = Client(self.address, token, tls_root, role="coordinator")
        body = {"settings": dataclasses.asdict(settings), "user": user}
        reply = self._client.action("open_session", body, timeout=30)
        self._id = reply["session"]
        self.dialect = settings.dialect  # what the statements are read in
        # The coordinator closes a session it has not heard from for a while (a killed client
        # never says goodbye); an open connection says it is there, however idle.
        self._closed = threading.Event()
        every = float(reply.get("keepalive") or 15.0)
        threading.Thread(target=self._keep_alive, args=(every,), name="qengine-keepalive", daemon=True).start()

    def _keep_alive(self, every: float) -> None:
        while not self._closed.wait(every):
            try:
                self._client.action("keepalive", {"session": self._id}, timeout=every)
            except Error as e:  # the next statement says what went wrong, in the user's thread
                log.debug("keepalive failed: %s", e)

    def _call(self, name: str, body: dict | None = None) -> Any:
        return self._client.action(name, {"session": self._id, **(body or {})})

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
        statement_id: str | None = None,
    ) -> Result:
        body: dict[str, Any] = {"sql": checked_sql(sql), "statement": statement_id}
        if params:
            named = isinstance(params, Mapping)  # sent as the columns' names, bound by name there
            if named and not all(isinstance(name, str) for name in params):
                raise ProgrammingError(f"parameter names must be strings, not {next(n for n in params if not isinstance(n, str))!r}")
            columns = {name: [v] for name, v in params.items()} if named else {f"p{i}": [v] for i, v in enumerate(params)}
            for (value,) in columns.values():  # refused here as in-process: Arrow would drop a time's offset
                literal(value)
            try:
                body["params"], body["named"] = table_to_hex(pa.table(columns)), named
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise ProgrammingError(f"cannot send these parameters: {e}") from e
            except OverflowError as e:  # an integer beyond BIGINT, which Arrow's inference does not carry
                raise NotSupportedError("an integer parameter beyond BIGINT's range cannot be sent to a coordinator: "
                                        "pass it as a string and cast it in SQL") from e
        reply = self._interruptible(functools.partial(self._call, "execute", body))
        stats = QueryStats.from_json(reply["stats"]) if reply["stats"] is not None else None
        if reply["result"] is None:
            return Result(None, reply["rowcount"], stats)
        schema, batches = self._client.batches({"result": reply["result"]})  # read as the cursor fetches
        return Result(ResultStream(schema, batches, reply["rowcount"]), reply["rowcount"], stats)

    def _interruptible(self, call: Callable[[], Any]) -> Any:
        """Make ``call`` in a thread of its own, so that Ctrl-C reaches this one while it waits
        (a blocking Flight call does not see it); on Ctrl-C the coordinator is told to cancel
        the session's query, and the interruption goes on to the caller."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qengine-call")
        future = pool.submit(call)
        pool.shutdown(wait=False)  # the thread ends with its call
        try:
            while True:
                try:
                    return future.result(timeout=0.2)
                except TimeoutError:
                    continue
        except KeyboardInterrupt:
            with contextlib.suppress(Error):
                self._client.action("cancel", {"session": self._id}, timeout=CANCEL_TIMEOUT)
            with contextlib.suppress(Exception):
                future.result(timeout=CANCEL_TIMEOUT)  # "query cancelled", once it has stopped
            raise

    def cancel_statement(self, statement_id: str) -> bool:
        """Cancel a statement running on the coordinator, this session's or another's."""
        return bool(self._client.action("cancel_query", {"query": statement_id}, timeout=CANCEL_TIMEOUT)["cancelled"])

    def running_statements(self) -> list[dict]:
        """The coordinator's statements, every session's: running, or waiting for their turn
        (with their user and place in the user's queue)."""
        return self._client.action("statements")

    def register_parquet(self, name: str, path: str) -> None:
        self._call("register_table", {"kind": "parquet", "name": name, "path": path})

    def register_records(self, name: str, path: str) -> None:
        self._call("register_table", {"kind": "records", "name": name, "path": path})

    def register_csv(self, name: str, path: str, delimiter: str | None = None, header: bool | None = None) -> None:
        self._call("register_table", {"kind": "csv", "name": name, "path": path, "delimiter": delimiter, "header": header})

    def register_arrow(self, name: str, table: pa.Table) -> None:
        raise NotSupportedError("registering in-memory tables over a cluster connection is not supported: write Parquet to a shared path and register_parquet it")

    def allow_root(self, directory: str) -> None:
        self._call("allow_root", {"directory": directory})

    def table_names(self) -> list[str]:
        return self._call("tables")

    def table_schema(self, name: str) -> pa.Schema:
        return schema_from_hex(self._call("table_schema", {"name": name})["schema"])

    def close(self) -> None:
        """End the session; quietly when the coordinator is gone or has closed it already (its
        lease ran out): nothing is left to free then, and a close that raised left the caller
        nothing to do about it."""
        self._closed.set()
        try:
            self._call("close_session")
        except Error as e:
            log.debug("closing the session: %s", e)
        finally:
            self._client.close()
