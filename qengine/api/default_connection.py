"""The connection ``qengine.sql`` and ``qengine.execute`` run on, as ``duckdb.sql`` runs on
``duckdb.default_connection()``: a local cluster started on first use and stopped when the
interpreter exits."""

from __future__ import annotations

import atexit
import threading
from typing import Any

_lock = threading.Lock()
_connection: Any = None


def default_connection() -> Any:
    """The default connection, connected (``qengine.connect()``) on first use, or again after
    it was closed."""
    global _connection
    with _lock:
        if _connection is None:
            atexit.register(_close)  # once: a connection made again after a close is the same global
        if _connection is None or _connection.closed:
            from qengine import connect

            _connection = connect()
        return _connection


def _close() -> None:
    """Stop the default connection's cluster at exit, if it is running."""
    with _lock:
        if _connection is not None and not _connection.closed:
            _connection.close()
