"""The tasks every query of this coordinator has sent to each worker: a query's own slots see
only its own tasks, so with several connections at once every one-task query went to the
same worker (tasks run per worker over 8 connections' queries: [170, 0, 0]). A query places
a task, of workers with as many free slots of its own, on the one with the fewest tasks of
all queries running, then the one sent the fewest so far, so that work spreads over the
cluster whether the queries run at once or one after another.
"""

from __future__ import annotations

import collections
import threading


class ClusterLoad:
    """Tasks running on each worker address, and tasks sent to it so far, over every query."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: collections.Counter[str] = collections.Counter()
        self._sent: collections.Counter[str] = collections.Counter()

    def started(self, address: str) -> None:
        with self._lock:
            self._running[address] += 1
            self._sent[address] += 1

    def ended(self, address: str) -> None:
        with self._lock:
            self._running[address] -= 1
            if self._running[address] <= 0:
                del self._running[address]

    def order(self, address: str) -> tuple[int, int]:
        """How busy a worker is, for choosing among workers: (running, sent so far)."""
        with self._lock:
            return self._running[address], self._sent[address]
