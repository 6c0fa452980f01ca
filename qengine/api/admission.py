"""Which statements a standalone coordinator lets run: at most ``per_user`` of one user's at once,
the others waiting in that user's queue, first come first served, with their place in it shown
(``qengine coordinator --max-queries-per-user``). A user is what ``connect(user=...)`` names.

A waiting statement can be cancelled like a running one (``cancel(query_id)``, or its client
going away): it leaves the queue and fails with "query cancelled". Users do not wait for each
other. Admission by predicted memory is not done here.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from qengine.errors import OperationalError

POLL_SECONDS = 0.2  # a waiting statement looks for a cancel at least this often


@dataclass(eq=False)
class _Waiting:
    statement: str
    user: str
    cancelled: bool = False


class Admission:
    """The coordinator's per-user queues; see the module docstring."""

    def __init__(self, per_user: int | None = None) -> None:
        if per_user is not None and (not isinstance(per_user, int) or per_user < 1):
            raise ValueError(f"per_user must be a positive integer or None, not {per_user!r}")
        self.per_user = per_user
        self._cond = threading.Condition()
        self._queues: dict[str, collections.deque[_Waiting]] = collections.defaultdict(collections.deque)
        self._running: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def admitted(self, user: str, statement: str) -> Iterator[None]:
        """Wait for ``user``'s turn, then hold one of the user's places while the block runs."""
        if self.per_user is None:
            yield
            return
        entry = _Waiting(statement, user)
        with self._cond:
            queue = self._queues[user]
            queue.append(entry)
            while not (queue[0] is entry and self._running[user] < self.per_user):
                if entry.cancelled:
                    queue.remove(entry)
                    self._cond.notify_all()
                    raise OperationalError("query cancelled (while it waited for its turn)")
                self._cond.wait(POLL_SECONDS)
            queue.popleft()
            self._running[user] += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._running[user] -= 1
                self._cond.notify_all()

    def cancel(self, statement: str) -> bool:
        """Cancel a waiting statement; whether one was waiting."""
        with self._cond:
            for queue in self._queues.values():
                for entry in queue:
                    if entry.statement == statement:
                        entry.cancelled = True
                        self._cond.notify_all()
                        return True
        return False

    def waiting(self) -> list[dict]:
        """Every waiting statement: its id, user and place in the user's queue (1 is next)."""
        with self._cond:
            return [
                {"query": e.statement, "user": e.user, "position": i + 1}
                for queue in self._queues.values()
                for i, e in enumerate(queue)
                if not e.cancelled
            ]
