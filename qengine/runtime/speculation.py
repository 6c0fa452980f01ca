"""LATE speculation: which straggler gets a copy, and on which worker.

As in the LATE paper (second half of ``rdd-spark.txt``): when a slot is free, the running task
with the longest estimated time left gets a copy on a fast worker; at most ``SPECULATIVE_CAP``
of the slots run copies, none goes to a worker slower than the others' ``SLOW_NODE_QUARTILE``-rd quartile
(SlowNodeThreshold), and only tasks well behind their stage's pace are copied (SlowTaskThreshold).

A task reports no progress while it runs, so progress rates come from finished tasks: each
worker's pace is the median ratio of its tasks' times to their stages' median times, and a
running task is expected to take its stage's median time at its worker's pace. The scheduling
loop (:mod:`qengine.runtime.query_run`) launches the copy and commits whichever attempt ends first.
"""

from __future__ import annotations

import statistics
import time

from qengine.runtime.query_state import QueryState, StageRun

SPECULATIVE_CAP = 0.1  # LATE's SpeculativeCap: at most this share of the slots runs copies
SPECULATE_AFTER = 0.25  # seconds a task runs before it may be taken for a straggler
SLOW_TASK_FACTOR = 1.5  # a task is a straggler once it has run this many times its expected time
SLOW_NODE_QUARTILE = 3  # LATE's SlowNodeThreshold: no copies on workers slower than the 3rd quartile (75th percentile)


def straggler(state: QueryState, idle: list[int], total_slots: int) -> tuple[StageRun, int, int] | None:
    """The (stage, task, worker) of the copy to launch now, or None.

    ``idle`` are the live workers with a free slot no other task waits for; ``total_slots``
    the slots of the live workers.
    """
    if not state.options.speculation or not idle:
        return None
    copies = sum(1 for r in state.runs for attempts in r.running.values() for a in attempts.values() if a[2])
    if copies >= max(1, int(SPECULATIVE_CAP * total_slots)):
        return None
    pace = paces(state)
    slow = statistics.quantiles(pace.values(), n=4)[SLOW_NODE_QUARTILE - 1] if len(pace) >= 2 else float("inf")
    targets = sorted((w for w in idle if pace.get(w, 1.0) <= max(1.0, slow)), key=lambda w: pace.get(w, 1.0))
    if not targets:
        return None
    now = time.monotonic()
    best: tuple[float, StageRun, int, int] | None = None
    for run in state.runs:
        if not run.submitted or run.done or run.stats.kind in ("files", "table") or not run.durations:
            continue  # a file or session-table writer must not run twice at once
        typical = statistics.median(seconds for _, seconds in run.durations)
        for index, attempts in run.running.items():
            # One copy per task, as Spark makes: a copy that fails or cannot start yet (its
            # inputs being made again) must not be followed by another, and another.
            if index in run.completed or index in run.speculated or len(attempts) != 1:
                continue
            ((worker, started, _),) = attempts.values()
            elapsed = now - started
            expected = typical * pace.get(worker, 1.0)
            if elapsed < SPECULATE_AFTER or elapsed < SLOW_TASK_FACTOR * typical:
                continue
            left = expected - elapsed if expected > elapsed else elapsed - typical
            target = next((w for w in targets if w != worker), None)
            if target is None or left <= typical * pace.get(target, 1.0):
                continue  # a copy would not finish sooner
            if best is None or left > best[0]:
                best = (left, run, index, target)
    return None if best is None else best[1:]


def paces(state: QueryState) -> dict[int, float]:
    """Each live worker's pace: the median of its finished tasks' times over their stages'
    median times (1 is typical, 4 four times slower)."""
    ratios: dict[int, list[float]] = {}
    for run in state.runs:
        if len(run.durations) < 2:
            continue
        typical = statistics.median(seconds for _, seconds in run.durations) or 1e-3
        for worker, seconds in run.durations:
            ratios.setdefault(worker, []).append(seconds / typical)
    return {w: statistics.median(r) for w, r in ratios.items() if w not in state.lost}
