"""Arrow Flight plumbing shared by coordinator and workers: token auth, calls, error transport.

Every call carries ``authorization: Bearer <token>``; servers refuse (and log) calls without
the cluster token. Errors raised while serving an action travel back as JSON inside the Flight
error message, so the caller can re-raise them as the right qengine exception type.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from qengine.errors import Error, OperationalError, WorkerUnreachableError, error_class, user_message

log = logging.getLogger("qengine.transport.rpc")

_MARKER = "QENGINE_ERROR:"


class TokenAuthMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Refuses any call whose bearer token is not the cluster token."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._expected = f"Bearer {token}".encode()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[Any]]) -> None:
        values = headers.get("authorization", [])
        given = values[0].encode() if values and isinstance(values[0], str) else (values[0] if values else b"")
        if not hmac.compare_digest(given, self._expected):
            log.warning("refused %s call: %s token", info.method, "wrong" if values else "missing")
            raise flight.FlightUnauthenticatedError("qengine: missing or wrong cluster token")
        return None


class ActionServer(flight.FlightServerBase):
    """A Flight server of JSON actions, shared by workers and the standalone coordinator: every
    call must carry the token, TLS when given a certificate, and failures travel back as qengine
    errors (see :func:`server_error`). Subclasses answer actions in ``_handle``."""

    # Errors that are the caller's mistake: sent back, but not logged with a traceback.
    quiet_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, host: str, port: int, token: str, tls: tuple[bytes, bytes] | None = None) -> None:
        """The server answers calls from here on, before a subclass's ``__init__`` goes on:
        a subclass makes what its calls use before it calls this."""
        self._call = threading.local()
        super().__init__(
            f"{'grpc+tls' if tls else 'grpc+tcp'}://{host}:{port}",
            middleware={"auth": TokenAuthMiddlewareFactory(token)},
            tls_certificates=[flight.CertKeyPair(*tls)] if tls else None,
        )
        self.address = f"{host}:{self.port}"

    def _handle(self, name: str, body: dict) -> Any:
        raise NotImplementedError

    def call_context(self) -> flight.ServerCallContext:
        """The call the calling thread is answering (``_handle`` runs in its thread): whether
        its client is still there, ``is_cancelled()``."""
        return self._call.context

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterable[flight.Result]:
        self._call.context = context
        try:
            body = json.loads(action.body.to_pybytes() or b"{}")
            result = self._handle(action.type, body)
        except Exception as e:  # every failure goes back to the caller; the server lives on
            if not isinstance(e, self.quiet_errors):
                logging.getLogger(type(self).__module__).exception("action %s failed", action.type)
            raise server_error(e) from e
        finally:
            self._call.context = None  # freed with the call: never looked at after it
        if isinstance(result, Streamed):  # each message goes as soon as it is made
            return (flight.Result(json.dumps(item).encode()) for item in result.items)
        return [flight.Result(json.dumps(result).encode())]


@dataclass
class Streamed:
    """An action's answer sent in messages as they are made (``Client.stream`` reads them)."""

    items: Iterator[Any]


def error_payload(exc: BaseException) -> dict[str, str]:
    """An exception as it travels: its class name (qengine's or DuckDB's) and message."""
    return {"type": type(exc).__name__, "message": str(exc)}


class RemoteTaskError(Exception):
    """A failure as another process raised it (its class name and whole message): the cause
    attached to the qengine exception raised for it here."""


def remote_error(info: dict[str, str]) -> Error:
    """The qengine exception for an :func:`error_payload` from another process, with the
    whole original attached as its cause."""
    error = error_class(info["type"])(user_message(info["type"], info["message"]))
    error.__cause__ = RemoteTaskError(f"{info['type']}: {info['message']}")
    return error


MESSAGE_BYTES = 8 << 20  # a batch sent at most: gRPC clients (ADBC's Go driver, JDBC) refuse messages over 16 MiB


def batch_stream(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> flight.FlightDataStream:
    """A DoGet answer sending ``batches`` as they are made, each cut to at most
    ``MESSAGE_BYTES``: a worker's batch of a million rows was one message too large for an
    ADBC client. pyarrow's GeneratorStream sends no dictionary messages, so a result with a
    dictionary column (an ENUM) failed to read ("IPC stream did not have the expected number
    (1) of dictionaries"): such a schema goes as a RecordBatchStream over a reader of the same
    batches, which sends each batch's dictionary."""
    bounded = (piece for batch in batches for piece in _pieces(batch))
    if any(pa.types.is_dictionary(f.type) for f in schema):
        return flight.RecordBatchStream(pa.RecordBatchReader.from_batches(schema, _bare_errors(bounded)))
    return flight.GeneratorStream(schema, bounded)


def _pieces(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` in slices of at most ``MESSAGE_BYTES`` of rows each (a single larger row
    alone). A dictionary column counts its indices: its dictionary goes whole with each slice
    (a slice's ``nbytes`` counts it whole too), and cutting by it made one-row slices."""
    size = _row_bytes(batch)
    if size <= MESSAGE_BYTES or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, batch.num_rows * MESSAGE_BYTES // size)
    for start in range(0, batch.num_rows, rows):
        yield from _pieces(batch.slice(start, rows))


def _row_bytes(batch: pa.RecordBatch) -> int:
    return sum(column.indices.nbytes if pa.types.is_dictionary(column.type) else column.nbytes for column in batch.columns)


def _bare_errors(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, an error among them raised from here alone: the reader sends the client
    the traceback of what its generator raises, and the server's frames are not the client's."""
    try:
        yield from batches
    except Exception as e:  # noqa: BLE001 - re-raised, without the frames it came through
        raise type(e)(*e.args) from None


def server_error(exc: BaseException) -> flight.FlightServerError:
    """Wrap an exception raised while serving, keeping its class name and message."""
    return flight.FlightServerError(_MARKER + json.dumps(error_payload(exc)))


def client_error(exc: flight.FlightError, where: str) -> Error:
    """Turn a Flight error from a call to ``where`` into the qengine exception to raise."""
    text = str(exc)
    if _MARKER in text:
        payload = text[text.index(_MARKER) + len(_MARKER):]
        try:
            info, _ = json.JSONDecoder().raw_decode(payload)
            return remote_error(info)
        except (ValueError, KeyError):
            pass
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return OperationalError(f"{where} refused the call: wrong cluster token")
    if isinstance(exc, flight.FlightUnavailableError | flight.FlightTimedOutError | flight.FlightCancelledError):
        return WorkerUnreachableError(f"{where} is unreachable (is it running?): {text.splitlines()[0] if text else ''}")
    # No answer from the server's code at all (the connection broke mid-call): the server is gone.
    return WorkerUnreachableError(f"{where}: {text.splitlines()[0] if text else type(exc).__name__}")


class Client:
    """A Flight client for one server, with the token attached to every call."""

    def __init__(self, address: str, token: str, tls_root: bytes | None = None, role: str = "worker") -> None:
        self.address = address
        self.where = f"{role} {address}"
        scheme = "grpc+tls" if tls_root else "grpc+tcp"
        kwargs = {"tls_root_certs": tls_root} if tls_root else {}
        self._client = flight.FlightClient(f"{scheme}://{address}", **kwargs)
        self._headers = [(b"authorization", f"Bearer {token}".encode())]

    def options(self, timeout: float | None = None) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self._headers, timeout=timeout)

    def action(self, name: str, body: dict | None = None, timeout: float | None = None) -> Any:
        """Run an action and decode its JSON reply."""
        payload = json.dumps(body or {}).encode()
        try:
            results = list(self._client.do_action(flight.Action(name, payload), self.options(timeout)))
        except flight.FlightError as e:
            raise client_error(e, self.where) from e
        except pa.ArrowNotImplementedError as e:  # a gRPC server, but not one of qengine's
            raise OperationalError(f"{self.where} does not answer as a qengine server: {e}") from e
        except pa.ArrowInvalid as e:  # the client was closed (its connection closed meanwhile)
            raise WorkerUnreachableError(f"{self.where}: {e}") from e
        return json.loads(results[0].body.to_pybytes()) if results else None

    def stream(self, name: str, body: dict) -> Iterator[Any]:
        """Run an action whose answer comes in messages (``Streamed``), yielding each decoded
        as it arrives."""
        payload = json.dumps(body).encode()
        try:
            for result in self._client.do_action(flight.Action(name, payload), self.options()):
                yield json.loads(result.body.to_pybytes())
        except flight.FlightError as e:
            raise client_error(e, self.where) from e
        except pa.ArrowInvalid as e:  # the client was closed (its worker was declared lost)
            raise WorkerUnreachableError(f"{self.where}: {e}") from e

    def get(self, ticket: dict, timeout: float | None = None) -> pa.Table:
        try:
            reader = self._client.do_get(flight.Ticket(json.dumps(ticket).encode()), self.options(timeout))
            return reader.read_all()
        except flight.FlightError as e:
            raise client_error(e, self.where) from e
        except pa.ArrowInvalid as e:  # the client was closed: its worker was declared lost
            raise WorkerUnreachableError(f"{self.where}: {e}") from e

    def batches(self, ticket: dict) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """A stream's schema, and its record batches as they arrive: what ``get`` would return,
        without holding all of it at once. Errors come as qengine errors, whenever they come."""
        try:
            reader = self._client.do_get(flight.Ticket(json.dumps(ticket).encode()), self.options())
            schema = reader.schema
        except flight.FlightError as e:
            raise client_error(e, self.where) from e
        except pa.ArrowInvalid as e:  # the client was closed: its worker was declared lost
            raise WorkerUnreachableError(f"{self.where}: {e}") from e

        def read() -> Iterator[pa.RecordBatch]:
            finished = False
            try:
                for chunk in reader:
                    yield chunk.data
                finished = True
            except flight.FlightError as e:
                raise client_error(e, self.where) from e
            except pa.ArrowInvalid as e:
                raise WorkerUnreachableError(f"{self.where}: {e}") from e
            finally:
                if not finished:  # given up by the reader: the server stops sending
                    reader.cancel()

        return schema, read()

    def put(self, command: dict, table: pa.Table) -> None:
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        try:
            writer, _ = self._client.do_put(descriptor, table.schema, self.options())
            writer.write_table(table)
            writer.close()
        except flight.FlightError as e:
            raise client_error(e, self.where) from e

    def put_blocks(self, key: str, source: int, attempt: int, parts: list[tuple[int, pa.Table]], copies: bool = False) -> list[int]:
        """Push several partitions' blocks in one stream; each batch carries its partition and
        the map task attempt it came from. With ``copies`` the receiver keeps them as backups
        (copies of blocks held elsewhere) and answers which partitions it kept; otherwise
        nothing is answered and the list is empty."""
        command = {"key": key, "blocks": True, "copies": copies}
        descriptor = flight.FlightDescriptor.for_command(json.dumps(command).encode())
        schema = parts[0][1].schema
        kept: list[int] = []
        try:
            writer, reply = self._client.do_put(descriptor, schema, self.options())
            for partition, table in parts:
                meta = pa.py_buffer(json.dumps({"p": partition, "s": source, "a": attempt}).encode())
                batches = table.to_batches() or [pa.RecordBatch.from_pylist([], schema=schema)]
                for batch in batches:
                    writer.write_with_metadata(batch, meta)
            if copies:
                writer.done_writing()
                answer = reply.read()
                kept = json.loads(answer.to_pybytes()) if answer is not None else []
            writer.close()
        except flight.FlightError as e:
            raise client_error(e, self.where) from e
        except pa.ArrowInvalid as e:  # the client was closed: its worker was declared lost
            raise WorkerUnreachableError(f"{self.where}: {e}") from e
        return kept

    def close(self) -> None:
        self._client.close()


class ClientPool:
    """One shared client per address (gRPC channels are thread-safe)."""

    def __init__(self, token: str, tls_root: bytes | None = None) -> None:
        self._token = token
        self._tls_root = tls_root
        self._clients: dict[str, Client] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> Client:
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                client = self._clients[address] = Client(address, self._token, self._tls_root)
            return client

    def forget(self, address: str) -> None:
        """Close the client of a worker declared lost: calls still waiting on it (a hung
        process never answers) fail at once instead of holding their threads."""
        with self._lock:
            client = self._clients.pop(address, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            for c in self._clients.values():
                c.close()
            self._clients.clear()
