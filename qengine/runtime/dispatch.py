"""Sending one query's tasks to its workers' own queues (Canary), and following them there.

A task launched by the scheduling loop waits here until its worker can take it: a task pinned
to a worker (its input lives there) while that worker's queue has room, a free task (a scan
split) when some worker has a free slot or room to queue one ahead (``runtime.slots``). Each
pass of the loop sends what can go, a worker's tasks in one ``run_tasks`` call
(``runtime.task_queue`` runs them there), their shared fields once
(``task_specs.split_template``). A thread follows each call: a task's reported start is handed
to the loop (LATE and the paces measure from there), its end resolves the task's future, and a
call that breaks fails the tasks it has not reported ended.

Work stealing: when a worker has a free slot and nothing is left to send, free tasks queued on
another worker and not started yet are taken back from it (``withdraw_tasks``), the last
queued first, and sent again; the same attempt, so nothing runs twice.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from qengine.errors import Error, WorkerUnreachableError
from qengine.runtime.query_state import Cluster, QueryState, StageRun
from qengine.runtime.slots import Slots, WorkerGoneError
from qengine.runtime.task_specs import split_template, task_spec, with_inline_finalize
from qengine.transport.rpc import remote_error


class CancelledTaskError(Exception):
    """A task skipped because its query already failed."""


class StaleAttemptError(Exception):
    """A task attempt no longer wanted (another attempt committed, or it was abandoned)."""


class DeferredTaskError(Exception):
    """A task whose inputs are being recomputed: it waits until they are back."""


@dataclass
class Queued:
    """A task attempt launched and not yet sent to a worker."""

    run: StageRun
    index: int
    attempt: int
    where: int | None  # the worker it is pinned to; None: any worker's free slot
    speculative: bool
    fut: Future
    # A reducer's fetches from other hosts, worked out once (NASS), and their count in the
    # network's load while it runs (``runtime.network_load``)
    fetches: list[tuple[str, str, int]] | None = None
    fetching: int | None = None


NASS_MIN_BYTES = 4 << 20  # a reducer fetching less from other hosts is never held back
NASS_MAX_DELAY = 2.0  # seconds a reducer is held back at most while the network is saturated


def resolve(fut: Future, result: Any) -> None:
    """End a task's future with its result, unless it has ended already (given up with a lost worker)."""
    with contextlib.suppress(InvalidStateError):
        fut.set_result(result)


def fail(fut: Future, error: BaseException) -> None:
    """End a task's future with an error, unless it has ended already."""
    with contextlib.suppress(InvalidStateError):
        fut.set_exception(error)


class Dispatcher:
    """One query's tasks on their way to its workers; see the module docstring. Everything but
    the following threads runs in the scheduling loop's own thread, the only one that changes
    the query's state."""

    def __init__(
        self,
        state: QueryState,
        slots: Slots,
        cluster: Cluster,
        calls: ThreadPoolExecutor,
        failed: threading.Event,
        inputs_ready: Callable[[StageRun, int], bool],
        wake: Callable[[], None],
    ) -> None:
        self.state = state
        self.slots = slots
        self.cluster = cluster
        self.calls = calls
        self.failed = failed
        self.inputs_ready = inputs_ready
        # launched, not yet sent: by the worker they are pinned to, and the free ones
        self.pinned: dict[int, collections.deque[Queued]] = collections.defaultdict(collections.deque)
        self.free: collections.deque[Queued] = collections.deque()
        self.assigned: dict[Future, int] = {}  # the worker each task sent was sent to
        # (task, worker, when) of tasks their workers reported started, for the loop to take in:
        # the following threads never touch the query's state
        self.started: queue.SimpleQueue[tuple[Queued, int, float]] = queue.SimpleQueue()
        self.wake = wake  # ends the loop's wait: tasks came back to be sent again
        # free tasks sent ahead and not reported started, by worker: what may be stolen
        self.ahead: dict[int, dict[tuple[int, int, int], Queued]] = collections.defaultdict(dict)
        self.ahead_lock = threading.Lock()
        self.stealing: set[tuple[int, int, int]] = set()  # asked back, not answered yet
        self.returned: queue.SimpleQueue[Queued] = queue.SimpleQueue()  # taken back from a worker
        self.held_since: dict[Future, float] = {}  # NASS: when a reducer was first held back

    def add(self, item: Queued) -> None:
        """A task launched: it goes with the next :meth:`dispatch` its worker can take."""
        if item.where is None:
            self.free.append(item)
        else:
            self.pinned[item.where].append(item)

    def dispatch(self) -> None:
        """Send what can go: a task pinned to a worker while that worker's queue has room
        (``Slots.take``), a free task to the worker that has a free slot, each worker's in one
        call. A task's spec is built now, from where its input blocks are now; one whose
        attempt is no longer wanted, or whose inputs are on their way, ends here."""
        batches: dict[int, list[tuple[Queued, dict]]] = {}
        with contextlib.suppress(queue.Empty):
            while True:  # stolen back: sent before anything else
                item = self.returned.get_nowait()
                self.stealing.discard(_key(item))
                item.run.stats.stolen += 1
                self.free.appendleft(item)
        for where, waiting in self.pinned.items():
            while waiting:
                if self._nass_holds(waiting[0], where):
                    break  # the network is saturated: its fetch waits while other queries map
                try:
                    worker = self.slots.take(where)
                except WorkerGoneError as e:  # its pinned worker was lost: placed again by the loop
                    while waiting:
                        fail(waiting.popleft().fut, e)
                    break
                if worker is None:
                    break  # its queue is full: the rest wait here for room
                self._prepare(waiting.popleft(), worker, batches)
        self.slots.waiting(len(self.free))
        while self.free:
            worker = self.slots.take(None)
            if worker is None:
                break  # every slot is taken: free tasks wait for one to free
            self._prepare(self.free.popleft(), worker, batches)
            self.slots.waiting(len(self.free))
        for worker, batch in batches.items():
            self.calls.submit(self._stream, worker, batch)
        self._steal()

    def _nass_holds(self, item: Queued, worker: int) -> bool:
        """NASS: hold a reducer back while the network is saturated, another query shares the
        cluster (its map work takes the slot meanwhile), and the reducer would fetch at least
        ``NASS_MIN_BYTES`` from other hosts; for at most ``NASS_MAX_DELAY`` seconds."""
        shares = self.cluster.shares
        if not shares.nass or not item.run.shuffle_inputs or shares.running() < 2 or worker in self.state.lost:
            return False
        now = time.monotonic()
        since = self.held_since.get(item.fut)
        if since is not None and now - since >= NASS_MAX_DELAY:
            return False
        if not self.cluster.network.saturated([self.state.addresses[w] for w in self.state.live_hosts()]):
            return False
        if sum(b for _, _, b in self._fetches(item, worker)) < NASS_MIN_BYTES:
            return False
        if since is None:
            self.held_since[item.fut] = now
            self.state.sharing.nass_delays += 1
        return True

    def _fetches(self, item: Queued, worker: int) -> list[tuple[str, str, int]]:
        """What a reducer pinned to ``worker`` fetches from other hosts, worked out once."""
        if item.fetches is None:
            item.fetches = self.state.remote_input(item.run, item.index, worker)
        return item.fetches

    def _fetched(self, item: Queued) -> None:
        """A task has ended: its fetches are over."""
        if item.fetching is not None:
            self.cluster.network.end(item.fetching)
            item.fetching = None

    def _steal(self) -> None:
        """Take free tasks back from workers that have not started them: all of them from a
        worker found slow or lagging (LATE copies only tasks that run), and, once nothing is
        left to send, for each worker with a free slot half of what the fullest queue holds, at
        most as many as its free slots."""
        with self.ahead_lock:
            held = {w: [k for k in items if k not in self.stealing] for w, items in self.ahead.items() if items}
        for worker, keys in held.items():
            if keys and self.state.behind(worker):
                self._take_back(worker, keys)
                held[worker] = []
        if self.free:
            return
        open_slots = {w: n for w, n in self.slots.open_slots().items() if not self.state.behind(w)}
        for thief, room in open_slots.items():
            victim = max((w for w, keys in held.items() if w != thief and keys), key=lambda w: len(held[w]), default=None)
            if victim is None:
                return
            count = min(room, max(1, len(held[victim]) // 2))
            keys, held[victim] = held[victim][-count:], held[victim][:-count]
            self._take_back(victim, keys)

    def _take_back(self, worker: int, keys: list[tuple[int, int, int]]) -> None:
        self.stealing.update(keys)
        self.calls.submit(self._withdraw, worker, keys)

    def _withdraw(self, worker: int, keys: list[tuple[int, int, int]]) -> None:
        """Ask ``worker`` for tasks back (a thread of its own). Those it gives back end on their
        call with a ``withdrawn`` event (``_stream``); a failed ask leaves them where they are."""
        with contextlib.suppress(Error):
            self.cluster.pool.get(self.state.addresses[worker]).action(
                "withdraw_tasks", {"query": self.state.query_id, "tasks": [list(k) for k in keys]}
            )

    def started_tasks(self) -> Iterator[tuple[Queued, int, float]]:
        """The tasks reported started since the last look: (task, worker, when)."""
        with contextlib.suppress(queue.Empty):
            while True:
                yield self.started.get_nowait()

    def sent_to(self, fut: Future) -> int | None:
        """The worker a task was sent to, once its future has been taken in (then forgotten)."""
        return self.assigned.pop(fut, None)

    def give_up(self, worker: int, why: str) -> None:
        """Fail every task sent to a lost worker that has not ended: one that hangs may never
        report them. Those it had started are run again by the loop; the others fail as lost."""
        for fut, sent_to in list(self.assigned.items()):
            if sent_to == worker:
                fail(fut, WorkerUnreachableError(why))

    def _prepare(self, item: Queued, worker: int, batches: dict[int, list[tuple[Queued, dict]]]) -> None:
        """Build a task's spec for the worker it was given a place on, or end it here."""
        run, index, attempt = item.run, item.index, item.attempt
        if item.fut.done() or attempt not in run.wanted[index] or not self.inputs_ready(run, index):
            self.slots.release(worker)
            if not item.fut.done():  # not cancelled with its failed query
                fail(item.fut, StaleAttemptError() if attempt not in run.wanted[index] else DeferredTaskError())
            return
        self.assigned[item.fut] = worker
        if self.cluster.shares.nass and item.run.shuffle_inputs:
            item.fetching = self.cluster.network.begin(self._fetches(item, worker), owner=self.state.query_id)
        if not item.fut.running():  # a stolen task is running already
            item.fut.set_running_or_notify_cancel()  # sent: a failed query waits for it to end
        if item.where is None:
            with self.ahead_lock:
                self.ahead[worker][_key(item)] = item
        spec = with_inline_finalize(run, task_spec(self.state, run, index, attempt, run.sql, run.form, item.speculative))
        # The only task of its stage, with no other task of the query running and no other
        # query on the cluster: it may use every core of its host (a final aggregate or sort
        # would otherwise leave all but one idle; TPC-DS SF 1 spends about a tenth of its time
        # in such stages). Tasks of stages that start later share those cores for a while. A
        # range map task is left on one thread: it numbers its rows in scan order to partition them.
        if (
            run.tasks == 1
            and spec["output"]["kind"] != "range"
            and self.slots.running() == 1
            and self.cluster.shares.running() == 1
        ):
            spec["alone"] = True
        batches.setdefault(worker, []).append((item, spec))

    def _stream(self, worker: int, batch: list[tuple[Queued, dict]]) -> None:
        """Send one worker a batch of tasks and follow them (a thread of its own)."""
        address = self.state.addresses[worker]
        open_items = {(spec["stage"], spec["task"], spec["attempt"]): item for item, spec in batch}
        started: dict[tuple[int, int, int], float] = {}
        template, tasks = split_template([spec for _, spec in batch])
        body = {
            "query": self.state.query_id,
            "slots": self.state.options.slots,
            "share": self.cluster.shares.terms(self.state.query_id).to_json(),
            "template": template,
            "tasks": tasks,
        }
        try:
            if self.failed.is_set():
                raise CancelledTaskError()
            for events in self.cluster.pool.get(address).stream("run_tasks", body):
                for event in events:
                    key = (event["stage"], event["task"], event["attempt"])
                    item = open_items.get(key)
                    if item is None:
                        continue
                    now = time.monotonic()
                    if item.where is None:
                        with self.ahead_lock:
                            self.ahead[worker].pop(_key(item), None)
                    if event["event"] == "started":
                        started[key] = now
                        self.started.put((item, worker, now))
                        continue
                    del open_items[key]
                    self.slots.release(worker)
                    self._fetched(item)
                    if event["event"] == "withdrawn":  # stolen: sent again by the loop
                        self.returned.put(item)
                        self.wake()
                        continue
                    if event["event"] == "done":
                        # The time the scheduler saw it run, as paces are measured (``runtime.slow_workers``):
                        # a worker's own clock misses the time a call waited for it to answer.
                        resolve(item.fut, (worker, event["result"], now - started.get(key, now)))
                    else:
                        fail(item.fut, remote_error(event["error"]))
        except (Error, CancelledTaskError) as e:
            self._forget_ahead(worker, open_items.values())
            if isinstance(e, WorkerUnreachableError):
                self.cluster.suspect(address)
            for item in open_items.values():
                self.slots.release(worker)
                self._fetched(item)
                fail(item.fut, e)
        else:
            self._forget_ahead(worker, open_items.values())
            for item in open_items.values():  # a stream that ended early: the worker went away
                self.slots.release(worker)
                self._fetched(item)
                fail(item.fut, WorkerUnreachableError(f"worker {address} stopped reporting its tasks"))

    def _forget_ahead(self, worker: int, items: Iterable[Queued]) -> None:
        """Tasks of a broken call: not to be stolen any more."""
        with self.ahead_lock:
            for item in items:
                self.ahead[worker].pop(_key(item), None)


def _key(item: Queued) -> tuple[int, int, int]:
    """A task attempt as its worker's events name it: (stage, task, attempt)."""
    return item.run.stage.id, item.index, item.attempt
