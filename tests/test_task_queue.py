"""A worker's own task queue (Canary): the tasks of one call run from the worker's queue, at
most ``slots`` of a query at once, each reporting its start and its end on that call; a batch
of tasks travels as one template and what each task adds."""

from __future__ import annotations

import threading
import time

import pytest

from qengine.errors import DataError, OperationalError
from qengine.runtime.task_queue import TaskQueue
from qengine.runtime.task_specs import split_template
from qengine.transport.rpc import RemoteTaskError, remote_error


def events_of(stream) -> list[dict]:
    return [event for message in stream for event in message]


def test_tasks_run_at_most_slots_at_once_and_report_start_and_end() -> None:
    running, peak, lock = 0, 0, threading.Lock()

    def run(spec: dict) -> dict:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return {"rows": spec["task"]}

    queue = TaskQueue(run)
    specs = [{"stage": 0, "task": i, "attempt": 0} for i in range(8)]
    events = events_of(queue.run("q", 2, specs))
    assert peak == 2
    for i in range(8):
        mine = [e for e in events if e["task"] == i]
        assert [e["event"] for e in mine] == ["started", "done"]
        assert mine[1]["result"] == {"rows": i}


def test_a_failing_task_reports_its_error_and_the_others_run_on() -> None:
    def run(spec: dict) -> dict:
        if spec["task"] == 1:
            raise DataError("Conversion Error: could not convert\nLINE 1: SELECT ...")
        return {}

    events = events_of(TaskQueue(run).run("q", 1, [{"stage": 3, "task": i, "attempt": 2} for i in range(3)]))
    ends = {e["task"]: e for e in events if e["event"] != "started"}
    assert [ends[i]["event"] for i in range(3)] == ["done", "failed", "done"]
    error = remote_error(ends[1]["error"])
    assert isinstance(error, DataError) and str(error) == "Conversion Error: could not convert"
    assert isinstance(error.__cause__, RemoteTaskError) and "LINE 1" in str(error.__cause__)


def test_queries_share_the_worker_s_slots_and_do_not_wait_behind_each_other_s_queues() -> None:
    """Two queries each queue eight tasks on a worker with two slots: the worker runs at most
    three at once (two slots, and one for the query that had none running), and the second
    query's tasks start long before the first's queue has drained (with per-query slots it ran
    four at once; with one queue, all eight of the first query's before any of the second's)."""
    running, peak, order, lock = 0, 0, [], threading.Lock()

    def run(spec: dict) -> dict:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            order.append(spec["query"])
        time.sleep(0.01)
        with lock:
            running -= 1
        return {}

    queue = TaskQueue(run)
    first = queue.run("first", 2, [{"query": "first", "stage": 0, "task": i, "attempt": 0} for i in range(8)])
    second = queue.run("second", 2, [{"query": "second", "stage": 0, "task": i, "attempt": 0} for i in range(8)])
    assert len(events_of(first)) == len(events_of(second)) == 16
    assert peak == 3
    assert "second" in order[:6], order


def test_a_query_with_nothing_running_starts_a_task_beside_another_s_long_ones() -> None:
    """Running tasks are not preempted: a query whose tasks hold every slot for a long time
    does not keep another query's first task from starting."""
    release = threading.Event()
    long_done: list[int] = []

    def run(spec: dict) -> dict:
        if spec["query"] == "long":
            release.wait(30)
            long_done.append(spec["task"])
        return {}

    queue = TaskQueue(run)
    long = queue.run("long", 2, [{"query": "long", "stage": 0, "task": i, "attempt": 0} for i in range(4)])
    short = events_of(queue.run("short", 2, [{"query": "short", "stage": 0, "task": i, "attempt": 0} for i in range(3)]))
    assert not long_done  # the short query finished while every long task still held its slot
    assert [e["event"] for e in short].count("done") == 3
    release.set()
    assert [e["event"] for e in events_of(long)].count("done") == 4


@pytest.mark.parametrize("count", [1, 3])
def test_a_batch_travels_as_a_template_and_what_each_task_adds(count: int) -> None:
    specs = [
        {"query": "q", "stage": 2, "sql": "SELECT 1", "output": {"kind": "hash", "partitions": 4}, "task": i,
         "inputs": [{"name": "x0", "partitions": [i]}], **({"alone": True} if i == 0 else {})}
        for i in range(count)
    ]
    template, tasks = split_template(specs)
    assert [dict(template, **task) for task in tasks] == specs
    if count > 1:
        assert template == {"query": "q", "stage": 2, "sql": "SELECT 1", "output": {"kind": "hash", "partitions": 4}}
        assert tasks[0] == {"task": 0, "inputs": [{"name": "x0", "partitions": [0]}], "alone": True}


def test_tasks_not_started_can_be_taken_back_and_end_withdrawn() -> None:
    """Work stealing: the coordinator asks for queued tasks back; those not started end on
    their call as withdrawn and never run here, the running one runs on."""
    release, ran = threading.Event(), []

    def run(spec: dict) -> dict:
        ran.append(spec["task"])
        release.wait(5)
        return {"rows": 0}

    queue = TaskQueue(run)
    stream = queue.run("q", 1, [{"stage": 3, "task": i, "attempt": 0} for i in range(4)])
    first = next(stream)
    assert [(e["event"], e["task"]) for e in first] == [("started", 0)]
    assert sorted(queue.withdraw("q", {(3, 0, 0), (3, 2, 0), (3, 3, 0), (3, 9, 0)})) == [(3, 2, 0), (3, 3, 0)]
    release.set()
    events = first + events_of(stream)
    assert {e["task"] for e in events if e["event"] == "withdrawn"} == {2, 3}
    assert {e["task"] for e in events if e["event"] == "done"} == {0, 1}
    assert sorted(ran) == [0, 1]
    assert queue.withdraw("q", {(3, 1, 0)}) == []  # the query has nothing queued any more


def test_cancelling_a_query_ends_its_queued_tasks_at_once_and_spares_other_queries() -> None:
    """A cancelled query's tasks that wait unstarted end with its error at once: they are not
    started one by one only to be refused, which held the call open for seconds."""
    release = threading.Event()
    started: list[tuple[str, int]] = []

    def run(spec: dict) -> dict:
        started.append((spec["query"], spec["task"]))
        release.wait(10)
        return {}

    queue = TaskQueue(run)
    stream = queue.run("q", 1, [{"query": "q", "stage": 0, "task": i, "attempt": 0} for i in range(50)])
    other = queue.run("other", 1, [{"query": "other", "stage": 0, "task": 0, "attempt": 0}])
    assert queue.cancel("q", OperationalError("query q was cancelled")) == 49  # all but the running one
    assert queue.cancel("absent", OperationalError("query absent was cancelled")) == 0
    release.set()
    ends = {e["task"]: e for e in events_of(stream) if e["event"] != "started"}
    assert ends[0]["event"] == "done" and started.count(("q", 0)) == 1
    assert all(ends[i]["event"] == "failed" for i in range(1, 50))
    assert "cancelled" in str(remote_error(ends[1]["error"]))
    assert [(q, t) for q, t in started if q == "q"] == [("q", 0)]
    assert [e["event"] for e in events_of(other)] == ["started", "done"]
