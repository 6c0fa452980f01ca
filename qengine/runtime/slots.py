"""Task slots: at most ``per_worker`` tasks of a query run on a worker at once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class WorkerGoneError(Exception):
    """The worker a task waited for a slot of was lost: the task is placed again."""


class Slots:
    """Per-worker task slots, for tasks pinned to a worker and for tasks free to run anywhere.

    A pinned task (its input lives on one worker, or its reducer was placed ahead) waits for a
    slot of its worker. A free task (a scan split, which every worker reads equally well) takes
    the first slot that frees on any worker. Fixed round-robin placement gave worker 0 the odd
    task of every odd-sized stage and left the faster worker idle while the other worked
    through its half; taking free slots balances both.

    Workers come and go while a query runs: a lost one is removed (the tasks waiting for its
    slots are woken and placed again), a replacement is added.
    """

    def __init__(self, workers: int, per_worker: int) -> None:
        self._per_worker = per_worker
        self._free = [per_worker] * workers
        self._gone: set[int] = set()
        self._waiting = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, worker: int | None) -> Iterator[int]:
        """Wait for a slot of ``worker`` (any worker's if None); yields the worker it is on."""
        with self._cond:
            self._waiting += 1
            try:
                while (chosen := self._pick(worker)) is None:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._free[chosen] -= 1
        try:
            yield chosen
        finally:
            with self._cond:
                self._free[chosen] += 1
                self._cond.notify_all()

    def remove(self, worker: int) -> None:
        """Take a lost worker out: nothing is placed on it any more."""
        with self._cond:
            self._gone.add(worker)
            self._cond.notify_all()

    def add(self) -> int:
        """A new worker (a lost one's replacement); returns its number."""
        with self._cond:
            self._free.append(self._per_worker)
            self._cond.notify_all()
            return len(self._free) - 1

    def running(self) -> int:
        """Tasks holding a slot now, on the live workers together."""
        with self._cond:
            return sum(self._per_worker - free for w, free in enumerate(self._free) if w not in self._gone)

    def idle(self) -> list[int]:
        """Live workers with a free slot, when no task is waiting for one (LATE launches
        speculative copies only into slots nothing else wants)."""
        with self._cond:
            if self._waiting:
                return []
            return [w for w, free in enumerate(self._free) if free > 0 and w not in self._gone]

    def total(self) -> int:
        """Slots on the live workers."""
        with self._cond:
            return self._per_worker * (len(self._free) - len(self._gone))

    def least_busy(self) -> int:
        """The live worker with the most free slots now (the lowest id of equals)."""
        with self._cond:
            return self._most_free()

    def _most_free(self) -> int:
        live = [w for w in range(len(self._free)) if w not in self._gone]
        return max(live, key=self._free.__getitem__) if live else -1

    def _pick(self, worker: int | None) -> int | None:
        if worker is not None and worker in self._gone:
            raise WorkerGoneError(worker)
        chosen = self._most_free() if worker is None else worker
        return chosen if chosen >= 0 and self._free[chosen] > 0 else None
