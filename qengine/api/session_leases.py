"""How long a standalone coordinator keeps a client's session once the client has gone quiet.

A session holds what its client stored on the workers (session tables, shared results) and its
results not fetched yet. A client closes it on ``close()``, but a client killed with SIGKILL, or
whose host went away, never does, and its tables stayed on the workers until they stopped. So a
session is leased: every call that names it renews the lease, and a client sends a keepalive
every ``timeout / 4`` seconds while it is open (``api.remote``), so a live client, however idle,
never loses its session. A session not heard from for ``timeout`` seconds, with no call of its
running, is closed, as Spark Connect and Trino drop the sessions and queries of clients that
stopped polling. A statement that is running when its client goes is cancelled by its own
watch (``CoordinatorServer._run_watched``), and its session then expires like any other.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator

DEFAULT_SESSION_TIMEOUT = 60.0  # seconds without a word from a client before its session is closed
_REMEMBERED = 1024  # expired session ids kept, to tell their clients why the session is gone


class SessionLeases:
    """When each session was last heard from, and which calls of it are running."""

    def __init__(self, timeout: float = DEFAULT_SESSION_TIMEOUT) -> None:
        if not timeout > 0:
            raise ValueError("a session timeout must be a positive number of seconds")
        self.timeout = timeout
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}
        self._calls: collections.Counter[str] = collections.Counter()
        self._expired: collections.OrderedDict[str, None] = collections.OrderedDict()

    def touch(self, sid: str) -> None:
        with self._lock:
            self._seen[sid] = time.monotonic()

    @contextlib.contextmanager
    def call(self, sid: str) -> Iterator[None]:
        """Hold the lease while a call of the session runs (a statement may run for hours, and
        a dead client's statement is cancelled by its watch, not by its lease)."""
        with self._lock:
            self._calls[sid] += 1
            self._seen[sid] = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._calls[sid] -= 1
                if not self._calls[sid]:
                    del self._calls[sid]
                if sid in self._seen:  # not closed by its client meanwhile
                    self._seen[sid] = time.monotonic()

    def forget(self, sid: str) -> None:
        """The session was closed by its client: nothing to expire."""
        with self._lock:
            self._seen.pop(sid, None)

    def expire(self) -> list[str]:
        """The sessions whose lease ran out; each is forgotten and remembered as expired."""
        deadline = time.monotonic() - self.timeout
        with self._lock:
            gone = [sid for sid, seen in self._seen.items() if seen < deadline and not self._calls[sid]]
            for sid in gone:
                del self._seen[sid]
                self._expired[sid] = None
            while len(self._expired) > _REMEMBERED:
                self._expired.popitem(last=False)
        return gone

    def expired(self, sid: str) -> bool:
        with self._lock:
            return sid in self._expired
