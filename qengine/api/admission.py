"""Which statements a standalone coordinator lets run, and which wait their turn.

- **Per user**: at most ``per_user`` of one user's statements at once, the others waiting in
  that user's queue, first come first served (``qengine coordinator --max-queries-per-user``).
  A user is what ``connect(user=...)`` names; users do not wait for each other here.
- **By memory**: once planned, a query whose predicted shuffle and result bytes
  (``StagePlan.held_bytes``) do not fit in what the workers' memory budgets have left after the
  queries running now waits, in one queue for every user, first come first served, so that a
  large query is not passed over for ever by small ones. A query runs when nothing else holds
  memory, however large it is (it spills to disk rather than waiting for ever). Without a
  budget on every worker (``qengine worker --memory-budget``) nothing waits for memory.

Each waiting statement is shown with its place in its queue (``con.queries()``, ``qengine
queries``). It can be cancelled like a running one (``cancel(query_id)``, or its client going
away): it leaves the queue and fails with "query cancelled".
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from qengine.errors import OperationalError, ProgrammingError

POLL_SECONDS = 0.2  # a waiting statement looks for a cancel at least this often


@dataclass(eq=False)
class _Waiting:
    statement: str
    user: str
    cancelled: bool = False
    needs: int = 0  # bytes, for the memory queue


MEMORY_QUEUE = ""  # the memory queue's key among the per-user ones: no user is named ""


class Admission:
    """The coordinator's per-user queues; see the module docstring."""

    def __init__(self, per_user: int | None = None) -> None:
        if per_user is not None and (not isinstance(per_user, int) or per_user < 1):
            raise ProgrammingError(f"per_user must be a positive integer or None, not {per_user!r}")
        self.per_user = per_user
        self._cond = threading.Condition()
        self._queues: dict[str, collections.deque[_Waiting]] = collections.defaultdict(collections.deque)
        self._running: collections.Counter[str] = collections.Counter()
        self._held: dict[str, int] = {}  # statement → the memory it was admitted with

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

    @contextlib.contextmanager
    def memory(
        self, user: str, statement: str, needs: int, budget: Callable[[], int | None], cancelled: threading.Event | None = None
    ) -> Iterator[None]:
        """Wait until ``needs`` bytes fit in ``budget()`` (the live workers' memory budgets
        together; None for no limit) beside what running queries hold, then hold them while
        the block runs. ``cancelled`` is the statement's own cancel mark."""
        entry = _Waiting(statement, user, needs=max(0, needs))
        with self._cond:
            queue = self._queues[MEMORY_QUEUE]
            queue.append(entry)
            while not (queue[0] is entry and self._fits(entry.needs, budget())):
                if entry.cancelled or (cancelled is not None and cancelled.is_set()):
                    queue.remove(entry)
                    self._cond.notify_all()
                    raise OperationalError("query cancelled (while it waited for memory)")
                self._cond.wait(POLL_SECONDS)
            queue.popleft()
            self._held[statement] = self._held.get(statement, 0) + entry.needs
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._held[statement] -= entry.needs
                if self._held[statement] <= 0:
                    del self._held[statement]
                self._cond.notify_all()

    def _fits(self, needs: int, budget: int | None) -> bool:
        held = sum(self._held.values())
        return budget is None or not self._held or held + needs <= budget

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
        """Every waiting statement: its id, user, what it waits for ("turn": its user's
        earlier statements; "memory": room in the workers' budgets) and its place in that
        queue (1 is next)."""
        with self._cond:
            return [
                {"query": e.statement, "user": e.user, "position": i + 1, "waits_for": "memory" if key == MEMORY_QUEUE else "turn"}
                | ({"needs_bytes": e.needs} if key == MEMORY_QUEUE else {})
                for key, queue in self._queues.items()
                for i, e in enumerate(queue)
                if not e.cancelled
            ]

    def held(self) -> int:
        """Memory held by admitted queries now, in bytes (as predicted)."""
        with self._cond:
            return sum(self._held.values())
