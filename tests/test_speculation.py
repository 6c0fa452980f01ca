"""LATE's choice of straggler from progress rates (``runtime.speculation``), on a made-up
query state: which task gets a copy, and when none does."""

from __future__ import annotations

import functools
import time
from types import SimpleNamespace

from qengine.runtime.query_state import QueryState, TaskTime
from qengine.runtime.speculation import straggler

QUERY = "q1-0"


def state_with(scores: dict[int, float | None], workers: dict[int, int], run_for: float = 1.0, durations=()):
    """One stage whose tasks all started ``run_for`` seconds ago, task i on ``workers[i]``,
    with progress ``scores[i]`` reported just now (None: no report)."""
    now = time.monotonic()
    run = SimpleNamespace(
        submitted=True, done=False, stats=SimpleNamespace(kind="hash"), durations=[TaskTime(w, s) for w, s in durations],
        running={i: {0: (workers[i], now - run_for, False)} for i in scores}, completed=set(), speculated=set(),
        stage=SimpleNamespace(id=3),
    )
    state = SimpleNamespace(options=SimpleNamespace(speculation=True, slots=1), runs=[run], lost=set(), slow={}, lagging={}, query_id=QUERY)
    state.behind = functools.partial(QueryState.behind, state)
    reports = {f"{QUERY}/3/{i}/0": (score, now - 0.01) for i, score in scores.items() if score is not None}
    return state, run, reports


SIX_TASKS = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}  # task → worker


def test_the_slowest_progress_rate_gets_a_copy_on_an_idle_worker() -> None:
    state, run, reports = state_with({0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5, 4: 0.1, 5: 0.12}, SIX_TASKS)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) == (run, 4, 0)


def test_tasks_at_one_pace_get_no_copy() -> None:
    state, _, reports = state_with({i: 0.5 for i in SIX_TASKS}, SIX_TASKS)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None


def test_a_task_nearly_done_gets_no_copy_however_slow() -> None:
    """A copy would take a typical task's time: one that will end sooner is left alone."""
    state, _, reports = state_with({0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2, 4: 0.19, 5: 0.95}, SIX_TASKS, run_for=5.0)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None


def test_without_reports_or_finished_tasks_there_is_nothing_to_go_by() -> None:
    state, _, reports = state_with({i: None for i in SIX_TASKS}, SIX_TASKS)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None


def test_without_reports_finished_tasks_set_the_pace() -> None:
    """Finished tasks took 0.2 s; one that has run 1 s is a straggler."""
    state, run, _ = state_with({4: None}, SIX_TASKS, durations=[(0, 0.2), (1, 0.2), (0, 0.2)])
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress={}) == (run, 4, 0)


def test_a_task_gets_one_copy_at_most() -> None:
    state, run, reports = state_with({0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5, 4: 0.1, 5: 0.1}, SIX_TASKS)
    run.speculated |= {4, 5}
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None


def test_copies_are_capped_at_a_tenth_of_the_slots() -> None:
    state, run, reports = state_with({0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5, 4: 0.1, 5: 0.1}, SIX_TASKS)
    run.running[5][1] = (0, time.monotonic(), True)  # a copy of task 5 already runs
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None
    assert straggler(state, idle=[0], total_slots=20, pace={}, progress=reports) == (run, 4, 0)


def test_a_small_cluster_may_copy_as_many_tasks_as_one_worker_has_slots() -> None:
    """A tenth of 12 slots is one copy; with 2 slots a worker, two copies may run at once
    (both tasks of one slow worker), and not three."""
    seven = {**SIX_TASKS, 6: 2}
    state, run, reports = state_with({0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5, 4: 0.1, 5: 0.1, 6: 0.1}, seven)
    state.options.slots = 2
    run.running[5][1] = (0, time.monotonic(), True)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) in ((run, 4, 0), (run, 6, 0))
    run.running[6][1] = (0, time.monotonic(), True)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None


def test_no_copy_goes_to_a_slow_worker() -> None:
    """SlowNodeThreshold: an idle worker known to be slow gets no copy; a fast one does."""
    state, run, reports = state_with({0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5, 4: 0.1, 5: 0.12}, SIX_TASKS)
    state.slow = {0: 4.0}
    assert straggler(state, idle=[0], total_slots=12, pace={0: 4.0}, progress=reports) is None
    assert straggler(state, idle=[0, 1], total_slots=12, pace={0: 4.0}, progress=reports) == (run, 4, 1)


def test_without_reports_a_slow_workers_pace_makes_its_task_a_straggler_sooner() -> None:
    """Before any report, a task on a worker four times slower is expected to take four typical
    task times: having run 1.5 of them, it has longer left than a copy would take."""
    state, run, _ = state_with({4: None}, SIX_TASKS, run_for=0.3, durations=[(0, 0.2), (1, 0.2), (0, 0.2)])
    assert straggler(state, idle=[0], total_slots=12, pace={2: 4.0}, progress={}) == (run, 4, 0)
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress={}) is None


def test_a_task_on_a_slow_worker_is_a_straggler_before_it_falls_behind_its_stage() -> None:
    """Finished tasks took 0.2 s; one that has run 0.2 s is not behind them, unless its worker
    is known to be slow (three times typical): then it has 0.4 s left, and a copy takes 0.2 s."""
    state, run, _ = state_with({4: None}, SIX_TASKS, run_for=0.2, durations=[(0, 0.2), (1, 0.2), (0, 0.2)])
    assert straggler(state, idle=[0], total_slots=12, pace={2: 3.0}, progress={}) is None
    state.slow = {2: 3.0}
    assert straggler(state, idle=[0], total_slots=12, pace={2: 3.0}, progress={}) == (run, 4, 0)


def test_a_slow_workers_task_whose_own_running_time_set_its_pace_still_gets_a_copy() -> None:
    """Finished tasks took 0.1 s; the slow worker's task has run 0.3 s, nearly all its pace
    (3.1 times typical, raised by this task) says it takes. It is not taken as nearly done: it
    has overrun the stage's median by 0.2 s, longer than a copy would take."""
    state, run, _ = state_with({4: None}, SIX_TASKS, run_for=0.3, durations=[(0, 0.1), (1, 0.1), (0, 0.1)])
    state.slow = {2: 3.1}
    assert straggler(state, idle=[0], total_slots=12, pace={2: 3.1}, progress={}) == (run, 4, 0)


def test_with_too_few_rates_to_rank_a_straggler_must_have_run_behind_its_stage() -> None:
    """Finished tasks took 0.2 s. A task 0.15 s in at a quarter of its work says it will take
    0.6 s, but is no straggler until it has run 1.5 times 0.2 s; then its own estimate of the
    time it has left (0.9 s in all, 0.6 s left) is what copies are ranked by."""
    state, run, reports = state_with({4: 0.25}, SIX_TASKS, run_for=0.15, durations=[(0, 0.2), (1, 0.2)])
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) is None
    state, run, reports = state_with({4: 0.33}, SIX_TASKS, run_for=0.31, durations=[(0, 0.2), (1, 0.2)])
    assert straggler(state, idle=[0], total_slots=12, pace={}, progress=reports) == (run, 4, 0)
