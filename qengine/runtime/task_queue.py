"""A worker's own queue of tasks (Canary): the coordinator sends a worker many of a query's
tasks in one call, and the worker starts them itself, ``slots`` of a query at a time, as its
running ones end, with no round trip to the coordinator between one task and the next.

Each call's tasks report back on that call as they go: a ``started`` event when one starts
(LATE measures a task's progress from there, not from when it was queued) and a ``done`` or
``failed`` event when it ends. Events that are ready together travel in one message, so a
burst of short tasks costs the coordinator one message, not one call each.

A query's tasks queue in the order they arrive. The worker's slots are shared by the queries
it holds: when one frees, ``runtime.fair_queue`` chooses whose task starts (by weighted slot
time, or first come first served), and the worker runs at most as many tasks at once as the
largest ``slots`` of those queries. Beyond that, a query with no task running here may always
start one (Spark's FAIR pools' minShare of one slot): there is no preempting a running task, and
a short query must not wait for tasks of another that run for an hour. The coordinator may take back tasks that have not started
(``withdraw``): an idle worker steals them, so that a busy worker's queue does not hold up the
stage.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from qengine.runtime.fair_queue import FairQueue, ShareTerms
from qengine.transport.rpc import error_payload

log = logging.getLogger("qengine.runtime.task_queue")


@dataclass
class _Query:
    slots: int
    running: int = 0
    pending: deque[tuple[dict, queue.SimpleQueue]] = field(default_factory=deque)


class TaskQueue:
    """Runs the tasks sent to this worker from per-query queues; see the module docstring."""

    THREADS = 64  # tasks of every query running here at once, at most

    def __init__(self, run: Callable[[dict], dict[str, Any]], quiet: tuple[type[BaseException], ...] = ()) -> None:
        self._run = run
        self._quiet = quiet  # failures that are the query's own: not logged with a traceback
        self._lock = threading.Lock()
        self._queries: dict[str, _Query] = {}
        self._share = FairQueue()
        self._pool = ThreadPoolExecutor(max_workers=self.THREADS, thread_name_prefix="task")

    def run(self, query: str, slots: int, specs: list[dict], terms: ShareTerms | None = None) -> Iterator[list[dict]]:
        """Queue ``specs`` (tasks of ``query``, which runs at most ``slots`` tasks here at
        once, with ``terms`` for its share of the worker), and yield their events, in messages,
        until every one has ended."""
        channel: queue.SimpleQueue[dict] = queue.SimpleQueue()
        with self._lock:
            mine = self._queries.get(query)
            if mine is None:
                mine = self._queries[query] = _Query(slots)
            mine.slots = max(1, slots)
            self._share.terms(query, terms or ShareTerms())
            mine.pending.extend((spec, channel) for spec in specs)
            self._start()
            self._drop_if_idle(query, mine)
        return self._events(channel, len(specs))

    def withdraw(self, query: str, keys: set[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """Take back the tasks (stage, task, attempt) of ``query`` that wait here unstarted:
        each ends on its call with a ``withdrawn`` event, for the coordinator to send it to
        another worker. Returns the ones taken; one already started runs on."""
        taken: list[tuple[dict, queue.SimpleQueue]] = []
        with self._lock:
            mine = self._queries.get(query)
            if mine is None:
                return []
            kept: deque[tuple[dict, queue.SimpleQueue]] = deque()
            for spec, channel in mine.pending:
                (taken if _names(spec) in keys else kept).append((spec, channel))
            mine.pending = kept
            self._drop_if_idle(query, mine)
        for spec, channel in taken:
            stage, task, attempt = _names(spec)
            channel.put({"event": "withdrawn", "stage": stage, "task": task, "attempt": attempt})
        return [_names(spec) for spec, _ in taken]

    def cancel(self, query: str, error: BaseException) -> int:
        """End the tasks of ``query`` that wait here unstarted, each failing with ``error`` (the
        query was cancelled). Left queued, they were started one at a time only to be refused,
        which held their calls, and the coordinator's record of them, open for seconds, and a
        worker draining thousands of them answered nothing else. Returns how many ended."""
        with self._lock:
            mine = self._queries.get(query)
            if mine is None:
                return 0
            dropped, mine.pending = mine.pending, deque()
            self._drop_if_idle(query, mine)
        payload = error_payload(error)
        for spec, channel in dropped:
            stage, task, attempt = _names(spec)
            channel.put({"event": "failed", "stage": stage, "task": task, "attempt": attempt, "error": payload})
        return len(dropped)

    @staticmethod
    def _events(channel: queue.SimpleQueue, count: int) -> Iterator[list[dict]]:
        left = count
        while left:
            events = [channel.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    events.append(channel.get_nowait())
            left -= sum(1 for e in events if e["event"] != "started")
            yield events

    def _start(self) -> None:
        """Start queued tasks while the worker has free slots (the lock is held)."""
        while (chosen := self._take()) is not None:
            self._pool.submit(self._one, *chosen)

    def _take(self) -> tuple[str, _Query, dict, queue.SimpleQueue] | None:
        """The queued task to start next, of the query whose turn it is, counted as running;
        None while the worker has no free slot for any (the lock is held)."""
        if not self._queries:
            return None
        capacity = max(q.slots for q in self._queries.values())
        full = sum(q.running for q in self._queries.values()) >= capacity
        ready = [name for name, q in self._queries.items() if q.pending and q.running < q.slots and not (full and q.running)]
        if not ready:
            return None
        query = self._share.pick(ready)
        mine = self._queries[query]
        spec, channel = mine.pending.popleft()
        mine.running += 1
        self._share.started(query, id(spec))
        return query, mine, spec, channel

    def _drop_if_idle(self, query: str, mine: _Query) -> None:
        if not mine.running and not mine.pending and self._queries.get(query) is mine:
            del self._queries[query]
            self._share.forget(query)

    def _one(self, query: str, mine: _Query, spec: dict, channel: queue.SimpleQueue) -> None:
        """Run a task, then, in the same thread, the next one whose turn it is while there is
        one: a burst of short tasks costs no hand-over to another thread between them."""
        chosen: tuple[str, _Query, dict, queue.SimpleQueue] | None = (query, mine, spec, channel)
        while chosen is not None:
            query, mine, spec, channel = chosen
            reported = False
            try:
                self._report(query, spec, channel)
                reported = True
            finally:
                with self._lock:
                    mine.running -= 1
                    self._share.ended(query, id(spec))
                    self._drop_if_idle(query, mine)
                    chosen = self._take() if reported else None
                    self._start()

    def _report(self, query: str, spec: dict, channel: queue.SimpleQueue) -> None:
        """Run one task, its start and its end told on its call's channel."""
        stage, task, attempt = _names(spec)
        names = {"stage": stage, "task": task, "attempt": attempt}
        channel.put({"event": "started", **names})
        try:
            channel.put({"event": "done", **names, "result": self._run(spec)})
        except Exception as e:  # noqa: BLE001 - every failure goes back to the coordinator, which decides
            if not isinstance(e, self._quiet):
                log.exception("task %s of stage %s of %s failed", spec["task"], spec["stage"], query)
            channel.put({"event": "failed", **names, "error": error_payload(e)})


def _names(spec: dict) -> tuple[int, int, int]:
    """A task's (stage, task, attempt), as its events name it."""
    return spec["stage"], spec["task"], int(spec.get("attempt", 0))
