"""The statements a session is running, by id, so that one can be cancelled from elsewhere: from
another thread on the same connection, or, on a standalone coordinator, from another connection
or because the client that ran it went away (``cancel(query_id)``).

A statement's id is chosen by whoever runs it (a cursor, before it starts, so that the id is
known while the statement runs). A cancel marks the statement: a query it has running stops at
its scheduling loop's next look, and one it has yet to start fails before it starts.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Iterator

from qengine.errors import ProgrammingError


def new_statement_id() -> str:
    return secrets.token_hex(8)


def checked_sql(sql: object) -> str:
    """``sql`` if it is a string; the user error every door gives otherwise."""
    if not isinstance(sql, str):
        raise ProgrammingError(f"SQL must be a string, not {type(sql).__name__}")
    return sql


class Statements:
    """A session's running statements; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}
        self._mine = threading.local()  # the statement the calling thread runs

    @contextlib.contextmanager
    def running(self, statement_id: str) -> Iterator[None]:
        """Hold ``statement_id`` as running in the calling thread while the block runs."""
        cancelled = threading.Event()
        with self._lock:
            self._running[statement_id] = cancelled
        outer = getattr(self._mine, "cancelled", None), getattr(self._mine, "statement", None)
        self._mine.cancelled, self._mine.statement = cancelled, statement_id
        try:
            yield
        finally:
            self._mine.cancelled, self._mine.statement = outer
            with self._lock:
                if self._running.get(statement_id) is cancelled:
                    del self._running[statement_id]

    def current(self) -> threading.Event | None:
        """The calling thread's statement's cancel mark (None outside a statement)."""
        return getattr(self._mine, "cancelled", None)

    def current_id(self) -> str | None:
        """The calling thread's statement's id (None outside a statement)."""
        return getattr(self._mine, "statement", None)

    def cancel(self, statement_id: str) -> bool:
        """Mark a running statement cancelled; whether it was running here."""
        with self._lock:
            cancelled = self._running.get(statement_id)
        if cancelled is None:
            return False
        cancelled.set()
        return True

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._running)
