"""Copies of small map output on a second worker (``runtime.block_copies``): which tasks are
copied and where, and which copies the coordinator counts on."""

from __future__ import annotations

import functools
from types import SimpleNamespace

from qengine.runtime import block_copies
from qengine.runtime.block_copies import copy_calls, record_copies
from qengine.runtime.query_state import QueryState, StageRun
from qengine.runtime.task_specs import pinned_blocks

ADDRESSES = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
KB = 1 << 10


def state_of(lost: set[int] | None = None, slow: dict[int, float] | None = None) -> QueryState:
    state = QueryState("q1-0", SimpleNamespace(speculation=True), None, list(ADDRESSES), None)
    state.lost = lost or set()
    state.slow = slow or {}
    return state


def finished_stage(blocks: dict[int, dict[int, tuple[int, int, int, int]]], placement: list[int], kind: str = "hash") -> SimpleNamespace:
    """A stage of map tasks that have all committed attempt 0, their blocks where they ran."""
    run = SimpleNamespace(
        stage=SimpleNamespace(id=4, output=SimpleNamespace(kind=kind)),
        blocks=blocks, backups={}, placement=placement, pushed=set(),
        completed=set(range(len(placement))), committed=dict.fromkeys(range(len(placement)), 0),
    )
    run.read_backups = functools.partial(StageRun.read_backups, run)
    run.copy_holder = functools.partial(StageRun.copy_holder, run)
    return run


def three_tasks() -> SimpleNamespace:
    # task t ran on worker t; partition 0 has a block of each, partition 1 of tasks 0 and 2
    return finished_stage({0: {0: (0, 0, KB, 10), 1: (1, 0, KB, 10), 2: (2, 0, KB, 10)}, 1: {0: (0, 0, KB, 10), 2: (2, 0, KB, 10)}}, [0, 1, 2])


def test_each_worker_copies_to_the_next_round_the_ring() -> None:
    calls = copy_calls(state_of(), three_tasks())
    assert [(w, body["to"], body["tasks"]) for w, body in calls] == [
        (0, ADDRESSES[1], {"0": 0}), (1, ADDRESSES[2], {"1": 0}), (2, ADDRESSES[0], {"2": 0}),
    ]
    assert all(body["key"] == "q1-0/4" for _, body in calls)


def test_slow_and_lost_workers_take_no_copies_and_lost_ones_send_none() -> None:
    calls = copy_calls(state_of(slow={1: 4.0}), three_tasks())
    assert [(w, body["peer"]) for w, body in calls] == [(0, 2), (1, 2), (2, 0)]  # a slow worker still sends
    calls = copy_calls(state_of(lost={2}), three_tasks())
    assert [(w, body["peer"]) for w, body in calls] == [(0, 1), (1, 0)]
    assert copy_calls(state_of(lost={2}, slow={1: 4.0}), three_tasks()) == []  # nowhere else to go


def test_large_copied_or_unfinished_output_and_results_are_not_copied(monkeypatch) -> None:
    monkeypatch.setattr(block_copies, "COPY_TASK_BYTES", 2 * KB)
    run = three_tasks()
    run.blocks[1][1] = (1, 0, 2 * KB, 10)  # task 1 now holds 3 KB: over the limit
    assert [body["tasks"] for _, body in copy_calls(state_of(), run)] == [{"0": 0}, {"2": 0}]
    run.backups = {0: {0: (1, 0), 2: (0, 0)}, 1: {0: (1, 0), 2: (1, 0)}}  # every block has a copy already
    assert copy_calls(state_of(), run) == []
    # Task 0 pushed partition 0 to worker 1 (its sender kept a copy); partition 1, for a reducer
    # on its own host, stayed: that block has no copy, and is copied.
    run.blocks[0][0], run.backups = (1, 0, KB, 10), {0: {0: (0, 0), 2: (0, 0)}, 1: {2: (1, 0)}}
    run.pushed.add(0)
    assert [(w, body["tasks"]) for w, body in copy_calls(state_of(), run)] == [(0, {"0": 0})]
    run = three_tasks()
    run.completed.discard(2)  # being made again: the new attempt is copied, if at all, once its stage ends again
    assert [body["tasks"] for _, body in copy_calls(state_of(), run)] == [{"0": 0}, {"1": 0}]
    run.stage.output = None  # a query's result
    assert copy_calls(state_of(), run) == []


def test_only_copies_of_the_committed_attempt_count() -> None:
    state, run = state_of(), three_tasks()
    body = {"peer": 1, "tasks": {"0": 0, "2": 0}}
    run.committed[2] = 1  # task 2 was made again meanwhile: its old attempt's copy is useless
    assert record_copies(state, run, body, {"kept": {"0": [0, 1], "2": [0, 1]}}) == 2
    assert run.backups == {0: {0: (1, 0)}, 1: {0: (1, 0)}}
    state.lost = {1}
    run.backups = {}
    assert record_copies(state, run, body, {"kept": {"0": [0, 1]}}) == 0  # the copy's holder is gone


def test_a_lost_holders_blocks_are_read_from_their_copies() -> None:
    """Worker 0 is lost after its task's blocks were copied to worker 1: they are read there,
    and nothing of task 0 is left on worker 0 for the lineage to make again."""
    state, run = state_of(), three_tasks()
    record_copies(state, run, {"peer": 1, "tasks": {"0": 0}}, {"kept": {"0": [0, 1]}})
    assert StageRun.fall_back_to_backups(run, {0}) == 2
    assert run.blocks[0][0] == (1, 0, KB, 10) and run.blocks[1][0] == (1, 0, KB, 10)
    assert not any(host == 0 for per_task in run.blocks.values() for host, *_ in per_task.values())


def test_a_slow_holders_blocks_are_read_from_their_copies() -> None:
    """Worker 2 is slow: once a copy of its blocks is on record, readers are sent to the copy,
    so that tasks copied off the slow worker do not wait on it for their input."""
    state, run = state_of(slow={2: 4.0}), three_tasks()
    record_copies(state, run, {"peer": 0, "tasks": {"2": 0}}, {"kept": {"2": [0, 1]}})
    assert run.blocks[0][2] == (0, 0, KB, 10) and run.blocks[1][2] == (0, 0, KB, 10)
    assert state.recovery.from_backups == 2


def test_a_speculative_copy_reads_the_stragglers_blocks_from_their_copies() -> None:
    """A reducer straggles on worker 2, which holds task 2's blocks (and drops them once its
    attempt has loaded them): the copy racing it reads them where a copy is kept, worker 0,
    and everything else where it is. The record is left as it was: only the copy reads there."""
    state, run = state_of(), three_tasks()
    run.backups = {0: {2: (0, 0)}}  # partition 0's block of task 2 has a copy; partition 1's has not
    blocks, sizes = pinned_blocks(state, run, [0, 1], avoid=frozenset({2}))
    assert blocks == {
        "0": {ADDRESSES[0]: [[0, 0], [2, 0]], ADDRESSES[1]: [[1, 0]]},
        "1": {ADDRESSES[0]: [[0, 0]], ADDRESSES[2]: [[2, 0]]},  # no copy: read at the straggler
    }
    assert sizes["0"] == {ADDRESSES[0]: 2 * KB, ADDRESSES[1]: KB}
    assert run.blocks[0][2] == (2, 0, KB, 10)
    assert pinned_blocks(state, run, [0], avoid=frozenset())[0] == {"0": {a: [[t, 0]] for t, a in enumerate(ADDRESSES)}}
    run.backups = {0: {2: (0, 1)}}  # a copy of another attempt is no copy
    assert pinned_blocks(state, run, [0], avoid=frozenset({2}))[0]["0"][ADDRESSES[2]] == [[2, 0]]
