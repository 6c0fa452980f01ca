"""Calls from one worker to another (shuffle fetches and pushes), given up once the query's
coordinator declares the other worker lost.

A stopped process (SIGSTOP, a stuck machine) keeps its connections open and never answers, and
closing a Flight client does not end the calls already waiting on it. So each call to a peer
runs in a thread of its own while the calling thread watches for the peer to be declared lost
(the coordinator's ``forget``); a call given up is left to end when the peer's process does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from qengine.errors import input_lost
from qengine.transport.rpc import ClientPool

T = TypeVar("T")

CHECK_SECONDS = 0.1  # how often a waiting call looks whether its peer was declared lost
QUERIES_KEPT = 256  # queries whose lost peers are remembered


class Peers:
    """The peers each query's coordinator declared lost, and calls that respect that."""

    def __init__(self, pool: ClientPool) -> None:
        self.pool = pool
        self._lost: dict[str, set[str]] = {}  # query → addresses; an ordered map, the oldest go first
        self._lock = threading.Lock()

    def lost(self, query: str, address: str) -> None:
        """``query``'s coordinator declared the worker at ``address`` lost: the query's calls to
        it fail from now on, and those waiting on it fail within ``CHECK_SECONDS``."""
        with self._lock:
            self._lost.setdefault(query, set()).add(address)
            while len(self._lost) > QUERIES_KEPT:
                del self._lost[next(iter(self._lost))]
        self.pool.forget(address)

    def check(self, key: str, address: str) -> None:
        """Raise :class:`InputLostError` if the query of block key ``key`` lost ``address``."""
        with self._lock:
            lost = address in self._lost.get(key.split("/", 1)[0], ())
        if lost:
            raise input_lost(address, key, None, f"worker {address} was declared lost")

    def call(self, key: str, address: str, call: Callable[[], T]) -> T:
        """``call()`` (a call to ``address`` for block key ``key``), or :class:`InputLostError`
        as soon as the key's query declares ``address`` lost."""
        self.check(key, address)
        done = threading.Event()
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                outcome.append((False, e))
            finally:
                done.set()

        threading.Thread(target=run, name=f"peer-{address}", daemon=True).start()
        while not done.wait(CHECK_SECONDS):
            self.check(key, address)
        ok, value = outcome[0]
        if ok:
            return value
        raise value
