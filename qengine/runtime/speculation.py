"""LATE speculation: which straggler gets a copy, and on which worker.

As in the LATE paper (second half of ``rdd-spark.txt``): when a slot is free, the running task
with the longest estimated time left gets a copy on a fast worker; at most ``SPECULATIVE_CAP``
of the slots run copies, none goes to a slow worker (SlowNodeThreshold, see
``runtime.slow_workers``), and only tasks well behind their stage's pace are copied
(SlowTaskThreshold).

A running task's progress rate is its progress score (``runtime.progress``, polled from the
workers) over the time it has run, and its time left (1 − score) over that rate; tasks in the
slowest quarter of their stage's rates are the stragglers (SlowTaskThreshold). Before a task has
reported, its stage's finished tasks set the pace: a task is expected to take its stage's median
time at its worker's pace (``runtime.slow_workers``). The scheduling loop (:mod:`qengine.runtime.query_run`) polls the
scores, launches the copy and commits whichever attempt ends first.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from qengine.runtime.query_state import QueryState, StageRun

# LATE's SpeculativeCap: at most this share of the slots runs copies; on a small cluster, as
# many as one worker has slots, so that every task of one slow worker can have its copy.
SPECULATIVE_CAP = 0.1
SPECULATE_AFTER = 0.25  # seconds a task runs before it may be taken for a straggler
# ... or, on a slow worker (``runtime.slow_workers``), this: Spark's minTaskRuntime. Below it a
# copy rarely pays, and on a healthy cluster copies of tasks that are merely unlucky cost more
# than they save.
SLOW_WORKER_SPECULATE_AFTER = 0.1
SLOW_TASK_FACTOR = 1.5  # a task is a straggler once it has run this many times its expected time
PROGRESS_EVERY = 0.2  # seconds between polls of the workers' progress scores
MIN_RATES = 4  # progress rates a stage needs before its slowest quarter (SlowTaskThreshold) means anything


def straggler(
    state: QueryState,
    idle: list[int],
    total_slots: int,
    pace: dict[int, float],
    progress: dict[str, tuple[float, float]] | None = None,
) -> tuple[StageRun, int, int] | None:
    """The (stage, task, worker) of the copy to launch now, or None.

    ``idle`` are the live workers with a free slot no other task waits for; ``total_slots``
    the slots of the live workers; ``pace`` each worker's pace (``runtime.slow_workers``);
    ``progress`` the last progress score reported for each running attempt, by task key, with
    when it was seen (``time.monotonic``).
    """
    if not state.options.speculation or not idle:
        return None
    copies = sum(1 for r in state.runs for attempts in r.running.values() for a in attempts.values() if a[2])
    if copies >= max(state.options.slots, int(SPECULATIVE_CAP * total_slots)):
        return None
    targets = sorted((w for w in idle if not state.behind(w)), key=lambda w: pace.get(w, 1.0))
    if not targets:
        return None
    now = time.monotonic()
    best: tuple[float, StageRun, int, int] | None = None
    for run in state.runs:
        if not run.submitted or run.done or run.stats.kind in ("files", "table"):
            continue  # a file or session-table writer must not run twice at once
        for index, left, worker, typical in _estimates(state, run, pace, progress or {}, now):
            target = next((w for w in targets if w != worker), None)
            if target is None or left <= typical * pace.get(target, 1.0):
                continue  # a copy would not finish sooner
            if best is None or left > best[0]:
                best = (left, run, index, target)
    return None if best is None else best[1:]


def _estimates(
    state: QueryState, run: StageRun, pace: dict[int, float], progress: dict[str, tuple[float, float]], now: float
) -> list[tuple[int, float, int, float]]:
    """The stragglers of a stage: (task, estimated seconds left, its worker, a typical task's
    seconds) for each task whose single running attempt is slow.

    With a progress score, LATE's own rule: progress rate = score ÷ time run, time left =
    (1 − score) ÷ rate, and a straggler's rate is in the stage's slowest quarter
    (SlowTaskThreshold) when enough rates are known to rank; with fewer, a straggler has run
    ``SLOW_TASK_FACTOR`` times the median of the stage's finished tasks, and its time left is
    still its own estimate (DuckDB's progress is too rough to make a task a straggler by itself:
    it made copies of healthy tasks). Without a score (no report yet, or DuckDB cannot tell),
    its time left is that median at its worker's pace, less what it has run, and at least what
    it has overrun the median by. A task on a slow
    worker (``runtime.slow_workers``) is a straggler whatever its rate.
    """
    seen: dict[int, tuple[int, float, float | None, float | None]] = {}  # task → worker, elapsed, rate, total
    for index, attempts in run.running.items():
        # One copy per task, as Spark makes: a copy that fails or cannot start yet (its
        # inputs being made again) must not be followed by another, and another.
        if index in run.completed or index in run.speculated or len(attempts) != 1:
            continue
        ((attempt, (worker, started, _)),) = attempts.items()
        report = progress.get(f"{state.query_id}/{run.stage.id}/{index}/{attempt}")
        if report is not None and report[0] > 0 and report[1] > started:
            score, at = report
            rate = score / (at - started)
            seen[index] = (worker, now - started, rate, (at - started) / score)
        else:
            seen[index] = (worker, now - started, None, None)
    totals = [total for *_, total in seen.values() if total is not None]
    if run.durations:
        typical = statistics.median(t.seconds for t in run.durations)
    elif len(totals) >= 2:
        typical = statistics.median(totals)
    else:
        return []
    rates = [rate for _, _, rate, _ in seen.values() if rate is not None]
    slow_rate = statistics.quantiles(rates, n=4)[0] if len(rates) >= MIN_RATES else None
    out = []
    for index, (worker, elapsed, rate, total) in seen.items():
        on_slow = state.behind(worker)  # its tasks are stragglers as soon as they may be
        if elapsed < (SLOW_WORKER_SPECULATE_AFTER if on_slow else SPECULATE_AFTER):
            continue
        if rate is not None and total is not None and slow_rate is not None:
            if rate > slow_rate and not on_slow:
                continue
            left = max(0.0, total - elapsed)
        else:
            if elapsed < SLOW_TASK_FACTOR * typical and not on_slow:
                continue
            if total is not None:  # too few rates to rank, but the task's own says how long it has left
                left = max(0.0, total - elapsed)
            else:
                # What its worker's pace predicts is left, but at least its overrun: a pace
                # raised by this very task (``runtime.slow_workers``) predicts it is nearly done.
                left = max(typical * pace.get(worker, 1.0) - elapsed, elapsed - typical)
        out.append((index, left, worker, typical))
    return out


class ProgressReports:
    """The progress scores of a query's running attempts, polled from their workers (the
    ``progress`` action, ``runtime.progress``) at most every ``PROGRESS_EVERY`` seconds, and
    only while a copy could be launched: a slot is idle and some attempt has run long enough to
    be a straggler soon. Polls are answered in the background; the scheduling loop never waits."""

    def __init__(self, state: QueryState, call: Callable[[int, str, dict], Any], executor: Executor) -> None:
        self.state = state
        self._call = call
        self._executor = executor
        self._scores: dict[str, tuple[float, float]] = {}  # task key → (score, when it was seen)
        self._asked: set[int] = set()  # workers whose answer is awaited
        self._polled = 0.0
        self._lock = threading.Lock()

    def poll(self, idle: bool) -> None:
        """Ask the workers running old enough attempts for their scores, if it is time."""
        now = time.monotonic()
        if not idle or not self.state.options.speculation or now - self._polled < PROGRESS_EVERY:
            return
        self._polled = now
        workers = {
            worker
            for run in self.state.runs
            for attempts in run.running.values()
            for worker, started, _ in attempts.values()
            if now - started >= (SLOW_WORKER_SPECULATE_AFTER if self.state.behind(worker) else SPECULATE_AFTER) / 2
            and worker not in self.state.lost
        }
        with self._lock:
            workers -= self._asked
            self._asked |= workers
        for worker in workers:
            fut = self._executor.submit(self._call, worker, "progress", {"query": self.state.query_id})
            fut.add_done_callback(lambda f, w=worker: self._took(w, f))

    def _took(self, worker: int, fut: Future) -> None:
        seen = time.monotonic()
        try:
            scores = fut.result()
        except Exception:  # noqa: BLE001 - a worker that does not answer reports nothing
            scores = {}
        with self._lock:
            self._asked.discard(worker)
            self._scores.update({key: (float(score), seen) for key, score in scores.items()})

    def scores(self) -> dict[str, tuple[float, float]]:
        with self._lock:
            return dict(self._scores)
