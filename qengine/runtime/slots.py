"""Task slots: at most ``per_worker`` tasks of a query run on a worker at once; where each task is sent."""

from __future__ import annotations

import collections
import math
import threading

from qengine.runtime.cluster_load import ClusterLoad


class WorkerGoneError(Exception):
    """The worker a task waited for a slot of was lost: the task is placed again."""


class Slots:
    """Per-worker task slots, for tasks pinned to a worker and for tasks free to run anywhere.

    The coordinator sends tasks to a worker's own queue (``runtime.task_queue``), which runs
    ``per_worker`` of them at once; a worker's load here is the tasks sent to it that have not
    ended. A pinned task (its input lives on one worker, or its reducer was placed ahead) is
    sent to its worker as soon as its queue has room, to wait there. A free task (a scan split,
    which every worker reads equally well) goes to the worker with the most free slots: fixed
    round-robin placement gave worker 0 the odd task of every odd-sized stage and left the
    faster worker idle while the other worked through its half. With ``ahead``, a fast worker
    whose slots are all taken also queues up to that many free tasks, which it starts itself
    as its running ones end, with no round trip to the coordinator between them; a worker that
    frees a slot while another's queue still holds free tasks steals them (``runtime.dispatch``).

    Workers come and go while a query runs: a lost one is removed (tasks pinned to it are
    placed again), a replacement is added. A slow worker (``runtime.slow_workers``) takes a
    free task only when the fast workers' backlog is long enough for it to finish the task
    sooner than they could; one only remembered as slow takes one at a time.
    """

    QUEUE_DEPTH = 256  # tasks sent to a worker and not ended, at most, in slots' worth (512 with 2 slots)

    def __init__(
        self, workers: int, per_worker: int, ahead: int = 0, load: ClusterLoad | None = None, addresses: list[str] | None = None
    ) -> None:
        """``load`` is every query's tasks per worker (``runtime.cluster_load``), and
        ``addresses`` the workers' addresses by number, kept up to date by the caller."""
        self._per_worker = per_worker
        self._load = load
        self._addresses = addresses if addresses is not None else []
        self._held: collections.Counter[int] = collections.Counter()  # tasks counted in ``load``, by worker
        self._ahead = ahead  # free tasks a fast worker queues beyond its slots
        self._free = [per_worker] * workers  # below 0: tasks queued on the worker
        self._gone: set[int] = set()
        self._slow: dict[int, float] = {}  # worker → how many times slower than typical
        self._probing: set[int] = set()  # slow workers only remembered as slow
        self._pace: dict[int, float] = {}  # worker → its pace (1 is typical), where known
        self._waiting = 0
        self._preferred: set[int] = set()  # SAMP's hosts for the query's free tasks; empty: any
        self._lock = threading.Lock()

    def take(self, worker: int | None) -> int | None:
        """A place for a task pinned to ``worker`` while its queue has room (``QUEUE_DEPTH``
        slots' worth of tasks: a worker holding tens of thousands of queued specs spent its
        time collecting garbage and ran a third slower), or for a free task (None) on a worker with a free slot; None
        if there is none. The task counts on the worker until :meth:`release`. Raises
        :class:`WorkerGoneError` for a pinned task whose worker is lost."""
        with self._lock:
            chosen = self._pick(worker)
            if chosen is not None:
                self._free[chosen] -= 1
                if self._load is not None:
                    self._load.started(self._addresses[chosen])
                    self._held[chosen] += 1
            return chosen

    def release(self, worker: int) -> None:
        """A task sent to ``worker`` has ended."""
        with self._lock:
            self._free[worker] += 1
            if self._load is not None and self._held[worker] > 0:
                self._load.ended(self._addresses[worker])
                self._held[worker] -= 1

    def close(self) -> None:
        """The query has ended: the tasks it still counts on workers (a failed query's, whose
        calls may never report) leave the cluster's load, and later ends change nothing."""
        with self._lock:
            load, self._load = self._load, None
            if load is not None:
                for worker, held in self._held.items():
                    for _ in range(held):
                        load.ended(self._addresses[worker])

    def prefer(self, workers: set[int]) -> None:
        """SAMP: free tasks go to ``workers``; to another only when no query runs anything
        there (a free worker is never left idle for the choice)."""
        with self._lock:
            self._preferred = set(workers)

    def waiting(self, count: int) -> None:
        """How many free tasks wait for a slot now (a slow worker's share depends on it)."""
        with self._lock:
            self._waiting = count

    def remove(self, worker: int) -> None:
        """Take a lost worker out: nothing is placed on it any more."""
        with self._lock:
            self._gone.add(worker)

    def add(self) -> int:
        """A new worker (a lost one's replacement); returns its number."""
        with self._lock:
            self._free.append(self._per_worker)
            return len(self._free) - 1

    def set_slow(self, slow: dict[int, float], probing: set[int], pace: dict[int, float] | None = None) -> None:
        """The slow workers now, each with how many times slower than typical it is, and
        those of them only remembered as slow from earlier queries: each of these runs one free
        task at a time, so that a worker that has become fast again shows it. ``pace`` is every
        worker's pace where known: of workers with as many free slots, the fastest is chosen."""
        with self._lock:
            self._pace = dict(pace or {})
            self._slow, self._probing = dict(slow), set(probing)

    def running(self) -> int:
        """Tasks sent to the live workers and not ended, up to their slots."""
        with self._lock:
            return sum(self._per_worker - max(0, free) for w, free in enumerate(self._free) if w not in self._gone)

    def idle(self) -> list[int]:
        """Live workers with a free slot, when no task is waiting for one (LATE launches
        speculative copies only into slots nothing else wants)."""
        with self._lock:
            if self._waiting:
                return []
            return [w for w, free in enumerate(self._free) if free > 0 and w not in self._gone]

    def open_slots(self) -> dict[int, int]:
        """Live workers that are not slow with a slot nothing is sent to: worker → how many."""
        with self._lock:
            return {w: self._free[w] for w in self._mine(self._fast()) if self._free[w] > 0}

    def total(self) -> int:
        """Slots on the live workers."""
        with self._lock:
            return self._per_worker * (len(self._free) - len(self._gone))

    def least_busy(self) -> int:
        """The live worker that is not slow with the most free slots now (of equals, the one
        with the lowest pace, then the lowest id), of SAMP's hosts if it chose some: a single
        task on a worker just under the slow line would be the whole query's critical path."""
        with self._lock:
            return self._most_free(self._mine(self._fast()))

    def _mine(self, among: list[int]) -> list[int]:
        """Of ``among``, SAMP's hosts, if it chose any of them."""
        return [w for w in among if w in self._preferred] or among

    def _idle_elsewhere(self, among: list[int]) -> list[int]:
        """Workers of ``among`` outside SAMP's hosts with a free slot that no query uses."""
        if not self._preferred or self._load is None:
            return []
        return [w for w in among if w not in self._preferred and self._free[w] > 0 and self._load.order(self._addresses[w])[0] == 0]

    def _fast(self) -> list[int]:
        live = [w for w in range(len(self._free)) if w not in self._gone]
        return [w for w in live if w not in self._slow] or live

    def _most_free(self, among: list[int]) -> int:
        """Of ``among``, the worker with the most free slots of this query's; of those, the one
        other queries load least (``runtime.cluster_load``), then the fastest: paces within a
        quarter of each other count as equal, or the fastest of equals would take every task."""

        def busy(w: int) -> tuple:
            load = self._load.order(self._addresses[w]) if self._load is not None else (0, 0)
            return (-self._free[w], load[0], round(math.log(max(self._pace.get(w, 1.0), 1e-3), 1.25)), load[1], w)

        return min(among, key=busy) if among else -1

    def _pick(self, worker: int | None) -> int | None:
        if worker is not None:
            if worker in self._gone:
                raise WorkerGoneError(worker)
            return worker if self._free[worker] > -self._per_worker * (self.QUEUE_DEPTH - 1) else None
        for w in sorted(self._probing):
            if w not in self._gone and self._free[w] == self._per_worker:
                return w
        fast = self._fast()
        chosen = self._most_free(self._mine(fast))
        if chosen >= 0 and self._free[chosen] > 0:
            return chosen
        idle = self._idle_elsewhere(fast)
        if idle:
            return self._most_free(idle)
        # The fast workers are busy. With W tasks waiting for F fast slots, the last would end
        # after about W / F + 1 task times there, and after r task times on a worker r times
        # slower: that worker takes one if it would finish it sooner.
        backlog = self._waiting / max(1, self._per_worker * len(fast))
        for w, times in sorted(self._slow.items(), key=lambda item: item[1]):
            if w not in self._gone and self._free[w] > 0 and backlog + 1 > times:
                return w
        if chosen >= 0 and self._free[chosen] > -self._ahead:
            return chosen  # queued there, to start as soon as one of its tasks ends
        return None
