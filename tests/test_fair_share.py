"""Sharing the workers' slots between queries and users (``runtime.fair_queue`` on a worker,
``runtime.shares`` on the coordinator): weighted fair by slot time, or first come first served."""

from __future__ import annotations

import heapq
import threading

import pytest

import qengine
from qengine.runtime.fair_queue import FairQueue, ShareTerms
from qengine.runtime.shares import Shares
from tests.test_cli import run_cli
from tests.test_multihost import cluster, data_root, register
from tpcds.compare import compare


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def slot_time(queue: FairQueue, clock: Clock, capacity: int, work: dict[str, list[float]], until: float) -> dict[str, float]:
    """Slot time per query up to ``until``, counted from the tasks' own starts and ends."""
    spans: dict[str, float] = dict.fromkeys(work, 0.0)
    starts: dict[int, tuple[str, float]] = {}
    running: list[tuple[float, int]] = []
    ids = iter(range(10**9))
    while True:
        while len(running) < capacity and (ready := [q for q, tasks in work.items() if tasks]):
            query = queue.pick(ready)
            task = next(ids)
            queue.started(query, task)
            starts[task] = (query, clock.now)
            heapq.heappush(running, (clock.now + work[query].pop(0), task))
        if not running or running[0][0] > until:
            for query, since in starts.values():
                spans[query] += until - since
            return spans
        clock.now, task = heapq.heappop(running)
        query, since = starts.pop(task)
        spans[query] += clock.now - since
        queue.ended(query, task)


@pytest.mark.parametrize("capacity", [1, 2, 4])
def test_slot_time_follows_the_weights(capacity: int) -> None:
    """Two queries that always have work, weighted 3 to 1, get three quarters and one quarter
    of the slot time, whatever the number of slots (counting running tasks alone, two slots
    would be split one each, for ever)."""
    clock = Clock()
    queue = FairQueue(clock)
    queue.terms("heavy", ShareTerms(weight=3.0, order=0))
    queue.terms("light", ShareTerms(weight=1.0, order=1))
    spans = slot_time(queue, clock, capacity, {"heavy": [1.0] * 10_000, "light": [1.0] * 10_000}, until=400.0)
    assert spans["heavy"] / (spans["heavy"] + spans["light"]) == pytest.approx(0.75, abs=0.02)


def test_short_tasks_do_not_buy_a_larger_share_than_long_ones() -> None:
    """Equal weights, one query's tasks ten times as long as the other's: slot time is split
    evenly (a share of task starts would give the long query ten times the slot time)."""
    clock = Clock()
    queue = FairQueue(clock)
    queue.terms("long", ShareTerms(order=0))
    queue.terms("short", ShareTerms(order=1))
    spans = slot_time(queue, clock, 2, {"long": [1.0] * 10_000, "short": [0.1] * 100_000}, until=300.0)
    assert spans["long"] / (spans["long"] + spans["short"]) == pytest.approx(0.5, abs=0.03)


def test_a_query_that_arrives_late_starts_level_and_does_not_take_every_slot() -> None:
    """A query arriving after another has used the worker for 100 s shares it from then on,
    rather than running alone until it has caught up with slot time it never asked for."""
    clock = Clock()
    queue = FairQueue(clock)
    queue.terms("early", ShareTerms(order=0))
    slot_time(queue, clock, 2, {"early": [1.0] * 200}, until=100.0)
    queue.terms("late", ShareTerms(order=1))
    first_starts = []
    for _ in range(10):
        query = queue.pick(["early", "late"])
        first_starts.append(query)
        queue.started(query, len(first_starts))
        clock.now += 0.5
    assert 4 <= first_starts.count("late") <= 6, first_starts


def test_fifo_runs_the_earliest_query_first() -> None:
    clock = Clock()
    queue = FairQueue(clock)
    queue.terms("second", ShareTerms(order=7, policy="fifo"))
    queue.terms("first", ShareTerms(order=3, policy="fifo"))
    spans = slot_time(queue, clock, 2, {"first": [1.0] * 10, "second": [1.0] * 10}, until=5.0)
    assert spans == {"first": 10.0, "second": 0.0}


def test_a_user_s_queries_share_the_user_s_weight() -> None:
    """alice weighs 3 and runs three queries, bob weighs 1 and runs one: each of alice's
    queries weighs 1, as bob's does, so alice gets three quarters of the cluster, not nine tenths."""
    shares = Shares("fair", {"alice": 3.0})
    with shares.claim("a1", "alice"), shares.claim("a2", "alice"), shares.claim("a3", "alice"), shares.claim("b1", "bob"):
        assert [shares.terms(q).weight for q in ("a1", "a2", "a3", "b1")] == [1.0, 1.0, 1.0, 1.0]
        with shares.claim("b2", "bob"):
            assert shares.terms("b1").weight == 0.5
        orders = [shares.terms(q).order for q in ("a1", "a2", "a3", "b1")]
        assert orders == sorted(orders)
        assert shares.running() == 4
    assert shares.running() == 0
    with shares.claim("a4", "alice"):
        assert shares.terms("a4").weight == 3.0  # alice's only query


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user-weight", "alice=0"], "positive weight"),
        (["--user-weight", "alice"], "USER=WEIGHT"),
        (["--user-weight", "=2"], "USER=WEIGHT"),
        (["--scheduling", "lottery"], "invalid choice"),
    ],
)
def test_bad_sharing_settings_are_refused_in_the_user_s_terms(args: list[str], message: str) -> None:
    done = run_cli("coordinator", "--data-root", "/tmp", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_weighted_users_on_one_cluster_get_right_answers(tmp_path, data_paths, oracle) -> None:
    """Two users of different weights, two statements each at once, on a standalone
    coordinator that shares its workers by weight: every answer equals DuckDB's."""
    sql = (
        "SELECT c.city, count(*) AS n, sum(s.amount) AS total FROM sales s "
        "JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city"
    )
    expected = oracle.execute(sql).to_arrow_table()
    args = ["--scheduling", "fair", "--user-weight", "alice=3", "--user-weight", "bob=1"]
    with cluster(tmp_path, 2, data_roots=data_root(data_paths), coordinator_args=args) as c:
        connections = [c.connect(user=user, broadcast_threshold=0) for user in ("alice", "alice", "bob", "bob")]
        try:
            for con in connections:
                register(con, data_paths)
            results: list = [None] * len(connections)
            errors: list[BaseException] = []

            def run(i: int) -> None:
                try:
                    results[i] = connections[i].execute(sql).fetch_arrow_table()
                except BaseException as e:  # noqa: BLE001 - handed to the test
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(connections))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert not errors, errors
            for got in results:
                result = compare(got, expected, sql)
                assert result.ok, result.message
        finally:
            for con in connections:
                con.close()


@pytest.mark.parametrize(("policy", "weights", "message"), [("lottery", {}, "must be one of fair, fifo"), ("fair", {"bob": 0}, "positive number")])
def test_bad_shares_are_refused_with_a_programming_error(policy: str, weights: dict, message: str) -> None:
    with pytest.raises(qengine.ProgrammingError, match=message):
        Shares(policy, weights)
