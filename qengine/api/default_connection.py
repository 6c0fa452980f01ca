"""The connection ``qengine.sql`` and ``qengine.execute`` run on, as ``duckdb.sql`` runs on
``duckdb.default_connection()``: a local cluster started on first use and stopped when the
interpreter exits."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_connection: Any = None


def default_connection(connect: Callable[[], Any]) -> Any:
    """The default connection, made with ``connect`` (``qengine.connect``, which lives above
    this module) on first use, or again after it was closed."""
    global _connection
    with _lock:
        if _connection is None:
            atexit.register(_close)  # once: a connection made again after a close is the same global
        if _connection is None or _connection.closed:
            _connection = connect()
        return _connection


def _close() -> None:
    """Stop the default connection's cluster at exit, if it is running."""
    with _lock:
        if _connection is not None and not _connection.closed:
            _connection.close()
