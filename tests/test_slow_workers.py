"""Slow workers (``runtime.slow_workers``): paces measured from finished and running tasks,
remembered across queries and fading with age, and which workers new work keeps away from."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from qengine.runtime.network_load import NetworkLoad
from qengine.runtime.query_state import QueryState, ReducerPlacement, StageRun, TaskTime
from qengine.runtime.shuffle_driver import ShuffleDriver
from qengine.runtime.slow_workers import (
    COLD_ALLOWANCE,
    PACE_HALF_LIFE,
    SLOW_PACE,
    STILL_SLOW_PACE,
    PaceMemory,
    measured,
    paces,
    settled_paces,
    slow,
)

ADDRESSES = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]


def state_with(runs: list[SimpleNamespace], lost: set[int] | None = None) -> QueryState:
    state = QueryState("q1-0", SimpleNamespace(speculation=True), None, list(ADDRESSES), None)
    state.runs = runs
    state.lost = lost or set()
    return state


def warm_memory() -> PaceMemory:
    """A memory in which every worker finished a task long ago: none of the tests' tasks is a cold start."""
    memory = PaceMemory()
    for address in ADDRESSES:
        memory.warmed(address, now=-1e9)
    return memory


def stage(durations: list[tuple[int, float]], running: dict[int, tuple[int, float]] | None = None) -> SimpleNamespace:
    """A stage with finished (worker, seconds) and running task → (worker, started)."""
    return SimpleNamespace(
        durations=[TaskTime(w, s) for w, s in durations], outrun=[], done=False, completed=set(),
        running={i: {0: (w, started, False)} for i, (w, started) in (running or {}).items()},
    )


def test_a_workers_pace_is_its_median_ratio_to_its_stages_median_times() -> None:
    state = state_with([
        stage([(0, 1.0), (1, 1.0), (2, 4.0)]),
        stage([(0, 2.0), (1, 3.0), (2, 8.0)]),
        stage([(1, 9.0)]),  # one finished task says nothing about its worker's pace
    ])
    # Each worker's ratios with one typical task added: w0 [1, 2/3], w1 [1, 1], w2 [4, 8/3].
    assert measured(state) == {0: pytest.approx(1.0), 1: pytest.approx(1.0), 2: pytest.approx(8 / 3)}


def test_one_slow_task_makes_a_worker_slow_only_if_it_is_far_behind() -> None:
    """A single task at 2.5 times typical is not enough (the worker's pace is 1.75); at 3 times
    it is (2.0); so are two at twice typical."""
    assert measured(state_with([stage([(0, 1.0), (1, 1.0), (2, 2.5)])]))[2] == pytest.approx(1.75)
    assert measured(state_with([stage([(0, 1.0), (1, 1.0), (2, 3.0)])]))[2] == pytest.approx(2.0)
    two = state_with([stage([(0, 1.0), (1, 1.0), (2, 2.0)]), stage([(0, 1.0), (1, 1.0), (2, 2.0)])])
    assert measured(two)[2] == pytest.approx(2.0)


def test_times_under_the_floor_count_as_the_floor() -> None:
    """Tasks of 5 ms and 40 ms are both 50 ms as far as paces go: jitter, not a slow worker."""
    assert measured(state_with([stage([(0, 0.005), (1, 0.005), (2, 0.04)])]))[2] == pytest.approx(1.0)


def test_an_attempt_a_copy_beat_counts_as_long_as_it_had_run() -> None:
    """Worker 2's task was beaten by a copy after 0.4 s: it finished nothing, but that task
    took at least four typical task times (with one typical task added, a pace of 2.5)."""
    run = stage([(0, 0.1), (1, 0.1), (1, 0.1)])
    run.outrun.append(TaskTime(2, 0.4))
    assert measured(state_with([run]))[2] == pytest.approx(2.5)


def test_a_cold_start_is_allowed_its_warm_up() -> None:
    """A worker's first tasks (started before it finished any) take a fresh process's imports
    and first connections: a quarter of a second over a 50 ms typical does not make the worker
    slow, where the same time on a warm worker would. A worker slow from its start still is, and
    so is one whose cold attempts lost to copies started after them."""
    fast = [TaskTime(0, 0.05), TaskTime(1, 0.05), TaskTime(0, 0.05), TaskTime(1, 0.05)]
    cold = SimpleNamespace(durations=[*fast, TaskTime(2, 0.3, cold=True), TaskTime(2, 0.3, cold=True)], outrun=[])
    assert measured(state_with([cold]))[2] == pytest.approx(1.0)
    warm = SimpleNamespace(durations=[*fast, TaskTime(2, 0.3), TaskTime(2, 0.3)], outrun=[])
    assert measured(state_with([warm]))[2] == pytest.approx(6.0)
    beaten = SimpleNamespace(durations=fast, outrun=[TaskTime(2, 0.3), TaskTime(2, 0.3)])
    assert measured(state_with([beaten]))[2] == pytest.approx(6.0)
    stalled = SimpleNamespace(durations=[*fast, TaskTime(2, 2.0, cold=True)], outrun=[])
    assert measured(state_with([stalled]))[2] == pytest.approx((1 + (2.0 - COLD_ALLOWANCE) / 0.05) / 2)


def test_a_task_is_a_cold_start_until_its_worker_has_finished_one() -> None:
    memory = PaceMemory()
    assert memory.cold(ADDRESSES[0], 5.0)
    memory.warmed(ADDRESSES[0], now=10.0)
    memory.warmed(ADDRESSES[0], now=20.0)  # warm from the first task it finished
    assert memory.cold(ADDRESSES[0], 9.0) and not memory.cold(ADDRESSES[0], 11.0)
    assert memory.cold(ADDRESSES[1], 11.0)  # a worker of its own


def test_a_cold_task_still_running_is_allowed_its_warm_up() -> None:
    """Worker 2's first task has run 0.6 s where its stage's tasks took 0.1 s: on a worker not
    yet warm that is 0.1 s of work, and it does not lag; on a warm one it lags six times."""
    now = 100.0
    state = state_with([stage([(0, 0.1), (1, 0.1), (0, 0.1), (1, 0.1)], running={6: (2, now - 0.6)})])
    memory = PaceMemory()
    for address in ADDRESSES[:2]:
        memory.warmed(address, now=0.0)
    assert 2 not in paces(state, memory, now)[0]
    memory.warmed(ADDRESSES[2], now=0.0)
    assert paces(state, memory, now)[0][2] == pytest.approx(6.0)


def test_a_lost_worker_has_no_pace() -> None:
    state = state_with([stage([(0, 0.1), (1, 0.1), (2, 0.4)])], lost={2})
    assert set(measured(state)) == {0, 1}


def test_a_task_running_past_its_stages_median_raises_its_workers_pace() -> None:
    """Worker 2 has finished nothing, but its task has run ten times the stage's median."""
    now = 100.0
    state = state_with([stage([(0, 0.1), (1, 0.1)], running={2: (2, now - 1.0)})])
    pace, remembered = paces(state, warm_memory(), now)
    assert pace[2] == pytest.approx(10.0) and not remembered
    assert slow(pace, state.live_hosts()) == {2: pytest.approx(10.0)}


def test_a_task_that_has_just_started_says_nothing() -> None:
    now = 100.0
    state = state_with([stage([(0, 0.1), (1, 0.1)], running={2: (2, now - 0.01)})])
    assert paces(state, warm_memory(), now) == ({0: 1.0, 1: 1.0}, set())


def test_a_query_starts_from_the_paces_earlier_queries_saw() -> None:
    memory = warm_memory()
    memory.learn({ADDRESSES[1]: 4.0}, now=0.0)
    state = state_with([])
    assert paces(state, memory, 0.0) == ({1: 4.0}, {1})
    assert slow(paces(state, memory, 0.0)[0], state.live_hosts()) == {1: 4.0}


def test_what_is_measured_in_the_query_wins_over_what_was_remembered() -> None:
    memory = warm_memory()
    memory.learn({ADDRESSES[1]: 4.0}, now=0.0)
    state = state_with([stage([(0, 0.1), (1, 0.1), (2, 0.1)])])
    assert paces(state, memory, 0.0) == ({0: 1.0, 1: 1.0, 2: 1.0}, set())


def test_a_worker_remembered_as_slow_stays_slow_on_a_slow_but_diluted_first_task() -> None:
    """Worker 2 was seen four times slower. Its first task here, 2.5 times typical, gives a pace
    of 1.75 (with one typical task): not enough to find a worker slow, but enough to keep one
    that was slow when the query started (as remembered) slow."""
    memory = warm_memory()
    memory.learn({ADDRESSES[2]: 4.0}, now=0.0)
    state = state_with([])
    before = slow(paces(state, memory, 0.0)[0], state.live_hosts())
    assert before == {2: 4.0}
    state.runs = [stage([(0, 1.0), (1, 1.0), (2, 2.5)])]
    pace = paces(state, memory, 0.0)[0]
    assert pace[2] == pytest.approx(1.75)
    assert slow(pace, state.live_hosts()) == {}
    assert slow(pace, state.live_hosts(), before) == {2: pytest.approx(1.75)}


def test_a_remembered_pace_fades_halfway_back_to_typical_every_half_life() -> None:
    memory = warm_memory()
    memory.learn({ADDRESSES[0]: 5.0}, now=10.0)
    assert memory.recall(ADDRESSES[0], now=10.0) == pytest.approx(5.0)
    assert memory.recall(ADDRESSES[0], now=10.0 + PACE_HALF_LIFE) == pytest.approx(3.0)
    assert memory.recall(ADDRESSES[0], now=10.0 + 2 * PACE_HALF_LIFE) == pytest.approx(2.0)
    assert memory.recall(ADDRESSES[1], now=10.0) is None


def test_slow_is_twice_the_median_worker_and_never_most_workers() -> None:
    live = [0, 1, 2]
    assert slow({0: 0.4, 1: 1.0, 2: SLOW_PACE}, live) == {2: pytest.approx(SLOW_PACE)}
    assert slow({0: 0.3, 1: 1.2, 2: SLOW_PACE * 1.25}, live) == {2: pytest.approx(SLOW_PACE * 1.25 / 1.2)}
    assert slow({0: 0.3, 1: 1.2, 2: SLOW_PACE * 1.1}, live) == {}  # 1.83 times the median worker
    assert slow({0: 0.3, 1: 1.0, 2: SLOW_PACE * 0.95}, live) == {}  # one fast outlier does not make the rest slow
    assert slow({0: 8.0, 1: 8.0, 2: 1.0}, live) == {}  # most workers behind: the cluster is slow, not they
    assert slow({0: 6.4, 1: 5.2, 2: 5.3, 3: 4.3}, [0, 1, 2, 3]) == {}
    assert slow({0: 1.0, 1: 1.0, 2: 4.0, 3: 4.0}, [0, 1, 2, 3]) == {2: 4.0, 3: 4.0}  # half of them may be
    assert slow({0: 8.0, 1: 8.0, 2: 8.0}, live) == {}  # all alike: nobody is kept off
    assert slow({0: 8.0}, [0]) == {}
    assert slow({0: 8.0, 1: 1.0}, [0, 1, 2]) == {0: 8.0}  # an unknown worker counts as typical
    assert slow({0: 0.4, 1: 0.4 * SLOW_PACE}, [0, 1]) == {1: pytest.approx(SLOW_PACE)}  # of two, the faster is the measure


def test_a_worker_found_slow_stays_slow_until_it_is_under_the_lower_line() -> None:
    """At 1.8 times typical a worker is not found slow, but one already slow stays slow; just
    under the lower line it is cleared."""
    live = [0, 1, 2]
    assert slow({0: 1.0, 1: 1.0, 2: 1.8}, live) == {}
    assert slow({0: 1.0, 1: 1.0, 2: 1.8}, live, before={2: 3.0}) == {2: pytest.approx(1.8)}
    assert slow({0: 1.0, 1: 1.0, 2: STILL_SLOW_PACE * 0.95}, live, before={2: 3.0}) == {}
    assert slow({0: 1.0, 1: 1.8, 2: 1.0}, live, before={2: 3.0}) == {}  # only the one slow before


def test_placeable_hosts_leave_out_the_slow_unless_all_are() -> None:
    state = state_with([], lost={2})
    state.slow = {1: 3.0}
    assert state.placeable_hosts() == [0]
    state.slow = {0: 3.0, 1: 3.0}
    assert state.placeable_hosts() == [0, 1]


def test_blocks_pushed_to_a_slow_worker_are_read_from_their_senders_copies() -> None:
    """Partition 0's reducer moved off slow worker 2: the block task 0 (sent from worker 0,
    which kept a copy) pushed there is read from worker 0 now; task 1's copy is on worker 1,
    which is slow too, and task 2 kept none: both are still read on worker 2. Partition 1's
    reducer did not move: its block stays where it is."""
    run = SimpleNamespace(
        blocks={0: {0: (2, 0, 100, 10), 1: (2, 0, 100, 10), 2: (2, 1, 100, 10)}, 1: {0: (2, 0, 50, 5)}},
        backups={0: {0: (0, 0), 1: (1, 0)}, 1: {0: (0, 0)}},
    )
    run.copy_holder = functools.partial(StageRun.copy_holder, run)
    assert StageRun.read_backups(run, [0], away={2}, avoid={1, 2}) == 1
    assert run.blocks[0] == {0: (0, 0, 100, 10), 1: (2, 0, 100, 10), 2: (2, 1, 100, 10)}
    assert run.blocks[1] == {0: (2, 0, 50, 5)}
    assert run.backups[0] == {1: (1, 0)}  # a copy now read is no longer a spare


def test_blocks_pushed_to_a_lost_worker_are_read_from_their_senders_copies() -> None:
    """Worker 2 is lost. Task 0's block pushed there is read from the copy worker 0 kept; task
    1's copy is of another attempt, and task 2 kept none: both stay recorded on worker 2, for the
    lineage to make again. A copy the lost worker held is forgotten."""
    run = SimpleNamespace(
        blocks={0: {0: (2, 0, 100, 10), 1: (2, 1, 100, 10), 2: (2, 0, 100, 10)}, 1: {0: (1, 0, 50, 5)}},
        backups={0: {0: (0, 0), 1: (0, 0)}, 1: {0: (2, 0)}},
    )
    run.read_backups = functools.partial(StageRun.read_backups, run)
    run.copy_holder = functools.partial(StageRun.copy_holder, run)
    assert StageRun.fall_back_to_backups(run, {2}) == 1
    assert run.blocks[0] == {0: (0, 0, 100, 10), 1: (2, 1, 100, 10), 2: (2, 0, 100, 10)}
    assert run.backups == {0: {1: (0, 0)}, 1: {}}


def test_blocks_pushed_after_their_reducer_moved_are_read_from_the_senders_copy() -> None:
    """Partition 0's reducer was on worker 2 and moved to worker 1 (worker 2 found slow) while
    task 0's push to worker 2 was on its way. When the push reports, the block is read from the
    copy its sender, worker 0, kept. Partition 1's reducer stayed on worker 2: its block is read there."""
    state = state_with([])
    state.slow = {2: 4.0}
    state.consumer_of = {0: 1}
    state.placements = {1: ReducerPlacement([[0], [1]], [1, 2], ADDRESSES, push=True)}
    run = SimpleNamespace(stage=SimpleNamespace(id=0), blocks={0: {0: (2, 0, 100, 10)}, 1: {0: (2, 0, 50, 5)}}, backups={})
    run.read_backups = functools.partial(StageRun.read_backups, run)
    run.copy_holder = functools.partial(StageRun.copy_holder, run)
    StageRun.record_backups(run, 0, 0, 0, [0, 1])
    ShuffleDriver(state, aux=lambda *a: None, network=NetworkLoad()).read_moved_from_backups(run, {0: 2, 1: 2})
    assert run.blocks == {0: {0: (0, 0, 100, 10)}, 1: {0: (2, 0, 50, 5)}}
    assert state.recovery.from_backups == 1


def test_of_two_finished_tasks_the_faster_is_typical() -> None:
    """A stage with two finished tasks, 0.1 s and 0.3 s: the slower one is three times typical,
    not 1.5 times their mean, and its worker (with one typical task added) has a pace of 2."""
    assert measured(state_with([stage([(0, 0.1), (2, 0.3)])]))[2] == pytest.approx(2.0)


def test_while_most_of_a_stage_runs_its_running_tasks_count_in_what_is_typical() -> None:
    """Two tasks finished in 0.1 s, but four have run 0.5 s: 0.5 s is typical, and the task
    at 0.6 s is 1.2 times that, not slow. Once the others have finished in 0.1 s, the same task is."""
    now = 100.0
    crowd = {i: (i % 3, now - 0.5) for i in range(2, 6)} | {6: (2, now - 0.6)}
    state = state_with([stage([(0, 0.1), (1, 0.1)], running=crowd)])
    pace = paces(state, warm_memory(), now)[0]
    assert pace[2] == pytest.approx(1.2) and slow(pace, state.live_hosts()) == {}
    alone = state_with([stage([(0, 0.1), (1, 0.1), (0, 0.1), (1, 0.1)], running={6: (2, now - 0.6)})])
    assert paces(alone, warm_memory(), now)[0][2] == pytest.approx(6.0)


def test_a_task_that_read_more_is_allowed_longer() -> None:
    """Worker 2's reducer read three times the median rows and took three times as long: its
    work, not its worker, made it long. One that read a third as much is held to the median."""
    run = SimpleNamespace(durations=[TaskTime(0, 0.1, 100), TaskTime(1, 0.1, 100), TaskTime(2, 0.3, 300)], outrun=[], done=True, completed=set(), running={})
    assert measured(state_with([run]))[2] == pytest.approx(1.0)
    run.durations = [TaskTime(0, 0.1, 100), TaskTime(1, 0.1, 100), TaskTime(2, 0.3, 30)]
    assert measured(state_with([run]))[2] == pytest.approx(2.0)


def test_running_tasks_alone_do_not_keep_a_worker_off_new_work() -> None:
    """Worker 2's task has run ten times the median: it lags (LATE copies it sooner), but until
    something has ended to say so, its settled pace is typical and new work may go to it."""
    now = 100.0
    state = state_with([stage([(0, 0.1), (1, 0.1)], running={2: (2, now - 1.0)})])
    assert slow(paces(state, warm_memory(), now)[0], state.live_hosts()) == {2: pytest.approx(10.0)}
    settled, remembered = settled_paces(state, warm_memory(), now)
    assert settled == {0: 1.0, 1: 1.0} and not remembered
    assert slow(settled, state.live_hosts()) == {}
