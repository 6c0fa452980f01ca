"""Slow workers: each worker's pace, and which workers new work keeps away from.

LATE (second half of ``rdd-spark.txt``) keeps speculative copies off slow nodes
(SlowNodeThreshold). qengine goes one step further with the same measure: while speculation is
on, a worker at least ``SLOW_PACE`` times slower than typical is given no reducer,
no single-task stage and a scan split only when the fast workers' backlog is long enough for it
to finish one sooner. Most stages of an analytical query last tens of milliseconds, far below
the time a straggler must run before it can be told from a normal task, so copies alone cannot
save them; keeping their tasks off the slow worker can.

A worker's pace is the median, over its finished tasks and one typical task more, of each
task's time over its stage's median time (1 is typical, 4 four times slower; times under
``PACE_FLOOR`` count as it), less what the task read beyond the stage's median: one slow task
does not make a worker slow unless it is far behind, and a reducer given a larger partition
does not make its worker look slow.
A task still running past that median (and past ``SLOW_EVIDENCE_AFTER``) tells too: its time
so far over the median is a lower bound. That median counts the stage's running tasks at their
times so far: the first tasks to finish are the short ones, and against them alone every task
of a stage still mostly running looked slow. What running tasks tell is quick but rough (on
four workers sharing two cores, a tenth of a second's delay made a worker look twice as slow
just as its shuffle's reducers were placed, and left it without any), so it only makes
LATE copy the worker's tasks sooner and send it no copy (``QueryState.lagging``); keeping a
worker off new work (``QueryState.slow``) takes what has ended: finished tasks, attempts
a copy beat, and memory. Queries run one after another on the
same workers, so what one query saw is remembered (:class:`PaceMemory`, per address) and fades
with a half-life of ``PACE_HALF_LIFE`` seconds. The next query places its reducers and
single-task stages by it before its own tasks tell, but still gives a worker only remembered
as slow one scan split at a time: if it has become fast again, its first task says so.

A fresh worker process's first tasks (those that start before it has finished any) import
modules and open its first DuckDB connections: on a busy host they ran 0.1 to 0.25 s longer
than the same tasks on a warm worker, two or three times a short stage's typical time, and a
healthy worker that happened to start last was found slow and kept off work. Such a cold task,
finished or running, is allowed ``COLD_ALLOWANCE`` seconds more: a worker really slow from its
start still shows it. An attempt a copy beat is not: it lost a race to a copy that started
after it, and a slow worker's first tasks are often cut short so.

A worker found slow (in this query, or as remembered when it starts) stays slow until its pace
falls under ``STILL_SLOW_PACE``: the tasks that reveal a slow worker are often cut short by
their copies or diluted by the typical task a pace starts from, and a pace that crosses the
line back and forth would have reducers and single tasks placed on the worker between looks.
"""

from __future__ import annotations

import statistics
import threading
import time

from qengine.runtime.query_state import QueryState, StageRun

SLOW_PACE = 2.0  # a worker this many times slower than typical is slow
STILL_SLOW_PACE = 1.25  # a worker found slow stays slow until it is under this
PACE_HALF_LIFE = 30.0  # seconds over which a remembered pace fades halfway back to typical
# Task times below this count as this: a few milliseconds either way is noise on a busy host,
# not a slow worker, and costs a query nothing.
PACE_FLOOR = 0.05
SLOW_EVIDENCE_AFTER = 0.1  # seconds a running task must have run before its time tells anything
COLD_ALLOWANCE = 0.5  # seconds more a worker's first tasks may take (warming up) before they tell


class PaceMemory:
    """Each worker's pace as the last queries that ran tasks on it saw it, and when it first
    finished a task (before then its tasks are cold starts), by address.

    A coordinator keeps one for its lifetime; queries read it as they start and add what they
    measured as they end. Thread-safe: concurrent queries share it.
    """

    def __init__(self) -> None:
        self._paces: dict[str, tuple[float, float]] = {}  # address → (pace, when it was seen)
        self._warm: dict[str, float] = {}  # address → when it first finished a task
        self._lock = threading.Lock()

    def warmed(self, address: str, now: float | None = None) -> None:
        """A task on ``address`` has finished: the worker is warm from now on, if not before."""
        with self._lock:
            self._warm.setdefault(address, time.monotonic() if now is None else now)

    def cold(self, address: str, started: float) -> bool:
        """Whether a task that started on ``address`` at ``started`` (``time.monotonic``) started
        before the worker had finished any task: a cold start."""
        with self._lock:
            warm = self._warm.get(address)
        return warm is None or started < warm

    def recall(self, address: str, now: float | None = None) -> float | None:
        """The pace last seen for ``address``, faded toward 1 with age; None if never seen."""
        with self._lock:
            seen = self._paces.get(address)
        if seen is None:
            return None
        pace, at = seen
        age = max(0.0, (time.monotonic() if now is None else now) - at)
        return 1.0 + (pace - 1.0) * 0.5 ** (age / PACE_HALF_LIFE)

    def learn(self, paces: dict[str, float], now: float | None = None) -> None:
        """Remember the paces a query measured, by address."""
        at = time.monotonic() if now is None else now
        with self._lock:
            self._paces.update({address: (pace, at) for address, pace in paces.items()})


def _typical(run: StageRun) -> float:
    """A stage's median time of its finished tasks, at least ``PACE_FLOOR``: what 1 means in a
    pace. The lower median: of two tasks, one of which ran on a slow worker, the other is typical."""
    return max(PACE_FLOOR, statistics.median_low(t.seconds for t in run.durations))


def _warm_seconds(seconds: float, cold: bool) -> float:
    """A task's time as its worker's pace counts it: a cold start's less ``COLD_ALLOWANCE``, and
    never under ``PACE_FLOOR``."""
    return max(PACE_FLOOR, seconds - COLD_ALLOWANCE if cold else seconds)


def measured(state: QueryState) -> dict[int, float]:
    """Each live worker's pace from the query's finished tasks, for workers that finished a task
    of a stage with at least two finished tasks. An attempt a copy beat counts as a task that
    took as long as it had run: at least that."""
    ratios: dict[int, list[float]] = {}
    for run in state.runs:
        if len(run.durations) < 2:
            continue
        typical = _typical(run)
        rows = max(1, statistics.median_low(t.read for t in run.durations))
        # A task that read more than the stage's median is allowed that much longer (its work,
        # not its worker, made it long: range partitions differ by a fifth or more); one that
        # read less is not held to less, since its fixed costs remain.
        for t in run.durations:
            ratios.setdefault(t.worker, []).append(_warm_seconds(t.seconds, t.cold) / typical / max(1.0, t.read / rows))
        for t in run.outrun:
            ratios.setdefault(t.worker, []).append(max(PACE_FLOOR, t.seconds) / typical)
    # One typical task counted for each worker: a single slow task is not enough to call it
    # slow unless it is far behind (3 times typical), two that are twice typical are.
    return {w: statistics.median([1.0, *r]) for w, r in ratios.items() if w not in state.lost}


def settled_paces(state: QueryState, memory: PaceMemory, now: float) -> tuple[dict[int, float], set[int]]:
    """Each live worker's pace from what has ended, and the workers whose pace is only
    remembered: measured in this query if the worker has finished tasks here, else as
    remembered (``now`` is ``time.monotonic``)."""
    found = measured(state)
    remembered = set()
    for worker in state.live_hosts():
        if worker not in found:
            pace = memory.recall(state.addresses[worker], now)
            if pace is not None:
                found[worker] = pace
                remembered.add(worker)
    return found, remembered


def paces(
    state: QueryState, memory: PaceMemory, now: float, settled: tuple[dict[int, float], set[int]] | None = None
) -> tuple[dict[int, float], set[int]]:
    """Each live worker's pace now, and the workers whose pace is only remembered: the settled
    pace (``settled_paces``, or as given), raised by any of the worker's tasks running past its
    stage's median time."""
    found, remembered = settled if settled is not None else settled_paces(state, memory, now)
    found, remembered = dict(found), set(remembered)
    for run in state.runs:
        if len(run.durations) < 2 or run.done:
            continue
        running = [
            (worker, now - started, memory.cold(state.addresses[worker], started))
            for index, attempts in run.running.items()
            if index not in run.completed
            for worker, started, _ in attempts.values()
            if worker not in state.lost
        ]
        # The tasks that finish first are the short ones: while most of a stage still runs,
        # its running tasks' times so far count in what is typical (each took at least that).
        typical = max(PACE_FLOOR, statistics.median_low([t.seconds for t in run.durations] + [s for _, s, _ in running]))
        for worker, elapsed, cold in running:
            elapsed = _warm_seconds(elapsed, cold)
            if elapsed > max(typical, SLOW_EVIDENCE_AFTER):
                found[worker] = max(found.get(worker, 1.0), elapsed / typical)
                remembered.discard(worker)
    return found, remembered


def slow(pace: dict[int, float], live: list[int], before: dict[int, float] | None = None) -> dict[int, float]:
    """The slow live workers, each with how many times slower it is than the median worker (the
    lower median: with two workers, the faster), as LATE ranks nodes against each other.
    Slow is ``SLOW_PACE`` times that, or ``STILL_SLOW_PACE`` for a worker slow ``before``. Never
    most of them: when most workers are behind their stages' typical times (four workers sharing
    two cores, whose tasks all run past the few that finished first), the cluster is slow, not
    one worker, and keeping work off all but one made a job twice as slow. The fastest is never
    slow. A worker with no pace known counts as typical (1)."""
    if len(live) < 2:
        return {}
    before = before or {}
    known = [pace.get(w, 1.0) for w in live]
    middle = max(statistics.median_low(known), 1e-3)
    fastest = min(known)
    return {
        w: p / middle
        for w, p in zip(live, known, strict=True)
        if p >= (STILL_SLOW_PACE if w in before else SLOW_PACE) * middle and p > fastest
    }
