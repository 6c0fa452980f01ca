"""A worker's own queue of tasks (Canary): the coordinator sends a worker many of a query's
tasks in one call, and the worker starts them itself, ``slots`` of a query at a time, as its
running ones end, with no round trip to the coordinator between one task and the next.

Each call's tasks report back on that call as they go: a ``started`` event when one starts
(LATE measures a task's progress from there, not from when it was queued) and a ``done`` or
``failed`` event when it ends. Events that are ready together travel in one message, so a
burst of short tasks costs the coordinator one message, not one call each.

A query's tasks queue in the order they arrive; tasks of different queries do not wait for
each other (each query has its own slots, as on the coordinator). The coordinator may take
back tasks that have not started (``withdraw``): an idle worker steals them, so that a busy
worker's queue does not hold up the stage.
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
        self._pool = ThreadPoolExecutor(max_workers=self.THREADS, thread_name_prefix="task")

    def run(self, query: str, slots: int, specs: list[dict]) -> Iterator[list[dict]]:
        """Queue ``specs`` (tasks of ``query``, which runs ``slots`` tasks here at once), and
        yield their events, in messages, until every one has ended."""
        channel: queue.SimpleQueue[dict] = queue.SimpleQueue()
        with self._lock:
            mine = self._queries.get(query)
            if mine is None:
                mine = self._queries[query] = _Query(slots)
            mine.slots = max(1, slots)
            mine.pending.extend((spec, channel) for spec in specs)
            self._start(query, mine)
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
            if not mine.running and not mine.pending:
                del self._queries[query]
        for spec, channel in taken:
            stage, task, attempt = _names(spec)
            channel.put({"event": "withdrawn", "stage": stage, "task": task, "attempt": attempt})
        return [_names(spec) for spec, _ in taken]

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

    def _start(self, query: str, mine: _Query) -> None:
        """Start queued tasks while the query has free slots here (the lock is held)."""
        while mine.running < mine.slots and mine.pending:
            spec, channel = mine.pending.popleft()
            mine.running += 1
            self._pool.submit(self._one, query, mine, spec, channel)
        if not mine.running and not mine.pending:
            del self._queries[query]

    def _one(self, query: str, mine: _Query, spec: dict, channel: queue.SimpleQueue) -> None:
        stage, task, attempt = _names(spec)
        names = {"stage": stage, "task": task, "attempt": attempt}
        channel.put({"event": "started", **names})
        try:
            channel.put({"event": "done", **names, "result": self._run(spec)})
        except Exception as e:  # noqa: BLE001 - every failure goes back to the coordinator, which decides
            if not isinstance(e, self._quiet):
                log.exception("task %s of stage %s of %s failed", spec["task"], spec["stage"], query)
            channel.put({"event": "failed", **names, "error": error_payload(e)})
        finally:
            with self._lock:
                mine.running -= 1
                self._start(query, mine)


def _names(spec: dict) -> tuple[int, int, int]:
    """A task's (stage, task, attempt), as its events name it."""
    return spec["stage"], spec["task"], int(spec.get("attempt", 0))
