"""Task slots: a task free to run anywhere takes the first free slot; a pinned one queues on its
worker; and, end to end, scan tasks spread over both workers by where slots free up."""

from __future__ import annotations

import os

import pytest

from qengine.exchange.store import BlockStore
from qengine.runtime.dispatch import Dispatcher
from qengine.runtime.query_run import QueryRun
from qengine.runtime.slots import Slots, WorkerGoneError
from qengine.runtime.task import TaskRunner
from qengine.transport.rpc import ClientPool
from qengine.transport.wire import table_from_hex
from tests.conftest import assert_same


def test_a_free_task_takes_the_worker_with_a_free_slot() -> None:
    slots = Slots(workers=2, per_worker=1)
    assert slots.take(0) == 0
    assert slots.take(None) == 1  # worker 0's only slot is taken
    slots.release(1)
    assert slots.least_busy() == 1


def test_a_pinned_task_queues_on_its_own_worker_while_free_tasks_go_elsewhere() -> None:
    slots = Slots(workers=2, per_worker=1)
    assert slots.take(0) == 0
    assert slots.take(0) == 0  # pinned: it waits in worker 0's own queue
    assert slots.take(None) == 1
    assert slots.take(None) is None  # no free slot anywhere: a free task waits
    assert slots.idle() == []
    slots.release(1)
    assert slots.idle() == [1]
    slots.release(0)
    assert slots.idle() == [1]  # worker 0 still runs the queued one
    slots.release(0)
    assert slots.idle() == [0, 1]


def test_a_pinned_task_for_a_lost_worker_is_refused() -> None:
    slots = Slots(workers=2, per_worker=1)
    slots.remove(0)
    with pytest.raises(WorkerGoneError):
        slots.take(0)
    assert slots.take(None) == 1


def test_scan_tasks_run_on_whichever_worker_frees_a_slot(default_engine) -> None:
    # The scan's tasks are placed nowhere ahead; they fill both workers' slots as they start.
    placed: list[int | None] = []
    ran: list[int] = []
    original_place, original_commit = QueryRun._place, QueryRun._commit

    def place(self, run, index):
        worker = original_place(self, run, index)
        if run.stage.scans:
            placed.append(worker)
        return worker

    def commit(self, run, index, attempt, worker, result, speculative, seconds):
        if run.stage.scans:
            ran.append(worker)
        return original_commit(self, run, index, attempt, worker, result, speculative, seconds)

    QueryRun._place, QueryRun._commit = place, commit
    try:
        count = default_engine.execute("SELECT count(*) FROM sales WHERE qty > 10").fetchone()[0]
    finally:
        QueryRun._place, QueryRun._commit = original_place, original_commit
    assert count > 0
    assert len(placed) >= 4 and set(placed) == {None}, placed
    assert set(ran) == {0, 1}, ran


def test_a_slow_worker_takes_a_free_task_only_behind_a_long_backlog() -> None:
    """Worker 0 is four times slower: with the fast slots busy, a free task waits for them
    rather than take 0's slot, unless enough tasks wait that it would finish sooner there."""
    slots = Slots(workers=3, per_worker=1)
    slots.set_slow({0: 4.0}, set())
    assert slots.least_busy() == 1
    slots.waiting(3)
    assert sorted([slots.take(None), slots.take(None)]) == [1, 2]
    slots.waiting(1)
    assert slots.take(None) is None  # one task behind two fast slots: it waits for them
    # Seven wait for two fast slots: the last would end after 4.5 task times, the slow worker's after 4.
    slots.waiting(7)
    assert slots.take(None) == 0


def test_a_worker_only_remembered_as_slow_runs_one_free_task_at_a_time() -> None:
    """It gets the first free task (if it is fast again, that task shows it), then no second
    one while that runs; pinned placement (``least_busy``) still leaves it out."""
    slots = Slots(workers=2, per_worker=2)
    slots.set_slow({0: 4.0}, probing={0})
    assert slots.least_busy() == 1
    assert [slots.take(None), slots.take(None), slots.take(None)] == [0, 1, 1]


def test_running_counts_the_tasks_sent_on_every_worker_up_to_its_slots() -> None:
    slots = Slots(workers=2, per_worker=2)
    assert slots.running() == 0
    slots.take(0), slots.take(1)
    assert slots.running() == 2
    assert slots.take(None) == 0  # of equally free workers, the lowest id
    assert slots.running() == 3
    slots.take(1), slots.take(1)  # one runs, one waits in worker 1's queue
    assert slots.running() == 4
    for worker in (0, 0, 1, 1, 1):
        slots.release(worker)
    assert slots.running() == 0


def test_a_task_alone_in_its_query_runs_on_every_core(tmp_path) -> None:
    """A task whose spec says ``alone`` gets a DuckDB connection with the host's cores; any
    other keeps the pool's one thread."""
    runner = TaskRunner(BlockStore(spill_dir=str(tmp_path)), "127.0.0.1:0", ClientPool("token"), threads=1)
    assert runner.host_threads == max(1, len(os.sched_getaffinity(0)))
    seen = {}
    for alone in (False, True):
        key = f"q{int(alone)}/result"
        spec = {
            "query": "q", "stage": 0, "task": 0, "direct": None, "inputs": [], "readable": (), "build_sides": False,
            "sql": "SELECT CAST(current_setting('threads') AS BIGINT) AS threads",
            "output": {"kind": "result", "key": key},
        }
        answer = runner.run(dict(spec, alone=True) if alone else spec)  # a one-row result comes back inline
        seen[alone] = table_from_hex(answer["inline"]).column("threads")[0].as_py()
    assert seen == {False: 1, True: runner.host_threads}


def test_only_one_task_stages_with_nothing_else_running_are_alone(default_engine, oracle) -> None:
    bodies: list[tuple[int, dict]] = []
    original = Dispatcher._stream

    def stream(self, worker, batch):
        bodies.extend((self.state.runs[spec["stage"]].tasks, spec) for _, spec in batch)
        return original(self, worker, batch)

    sql = "SELECT store_id, sum(amount) AS total FROM sales GROUP BY store_id ORDER BY total DESC LIMIT 5"
    Dispatcher._stream = stream
    try:
        assert_same(default_engine, oracle, sql)
    finally:
        Dispatcher._stream = original
    alone = [tasks for tasks, body in bodies if body.get("alone")]
    assert alone, "the final one-task stage should run alone"
    assert all(tasks == 1 for tasks in alone)
    assert any(tasks > 1 for tasks, _ in bodies)  # the scan's tasks shared the cluster


def test_of_workers_as_free_the_fastest_takes_a_single_task() -> None:
    """Worker 0 is not slow enough to be kept off (1.8 times typical) but worker 1 is faster:
    a single-task stage goes to 1, and once 1 is busy, to 2, the faster of the others."""
    slots = Slots(workers=3, per_worker=1)
    slots.set_slow({}, set(), pace={0: 1.8, 1: 0.9, 2: 1.0})
    assert slots.least_busy() == 1
    slots.take(1)
    assert slots.least_busy() == 2
    slots.release(1)
    slots.set_slow({}, set())
    assert slots.least_busy() == 0  # no paces known: the lowest id of equals


def test_a_pinned_task_waits_on_the_coordinator_once_its_worker_s_queue_is_full() -> None:
    slots = Slots(workers=2, per_worker=1)
    depth = Slots.QUEUE_DEPTH
    assert [slots.take(0) for _ in range(depth)] == [0] * depth
    assert slots.take(0) is None  # the rest wait here until one ends
    assert slots.take(1) == 1
    slots.release(0)
    assert slots.take(0) == 0


def test_a_fast_worker_queues_free_tasks_ahead_and_a_slot_that_frees_is_open() -> None:
    slots = Slots(workers=2, per_worker=1, ahead=2)
    assert [slots.take(None) for _ in range(6)] == [0, 1, 0, 1, 0, 1]  # a slot each, then two queued each
    assert slots.take(None) is None
    assert slots.open_slots() == {}
    for _ in range(3):
        slots.release(0)  # worker 0 ends its running task and both queued ones
    assert slots.open_slots() == {0: 1}  # while worker 1 still holds two: they may be stolen
    slots.set_slow({1: 4.0}, set())
    slots.release(1)
    assert slots.take(None) == 0 and slots.take(None) == 0  # a slow worker queues nothing ahead
