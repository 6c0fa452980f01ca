"""Task slots: at most ``per_worker`` tasks of a query run on a worker at once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Slots:
    """Per-worker task slots, for tasks pinned to a worker and for tasks free to run anywhere.

    A pinned task (its input lives on one worker, or its reducer was placed ahead) waits for a
    slot of its worker. A free task (a scan split, which every worker reads equally well) takes
    the first slot that frees on any worker. Fixed round-robin placement gave worker 0 the odd
    task of every odd-sized stage and left the faster worker idle while the other worked
    through its half; taking free slots balances both.
    """

    def __init__(self, workers: int, per_worker: int) -> None:
        self._per_worker = per_worker
        self._free = [per_worker] * workers
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, worker: int | None) -> Iterator[int]:
        """Wait for a slot of ``worker`` (any worker's if None); yields the worker it is on."""
        with self._cond:
            while (chosen := self._pick(worker)) is None:
                self._cond.wait()
            self._free[chosen] -= 1
        try:
            yield chosen
        finally:
            with self._cond:
                self._free[chosen] += 1
                self._cond.notify_all()

    def running(self) -> int:
        """Tasks holding a slot now, on all workers together."""
        with self._cond:
            return sum(self._per_worker - free for free in self._free)

    def least_busy(self) -> int:
        """The worker with the most free slots now (the lowest id of equals)."""
        with self._cond:
            return self._most_free()

    def _most_free(self) -> int:
        return max(range(len(self._free)), key=self._free.__getitem__)

    def _pick(self, worker: int | None) -> int | None:
        chosen = self._most_free() if worker is None else worker
        return chosen if self._free[chosen] > 0 else None
