"""A standalone coordinator started with ``--max-queries-per-user N`` runs at most N of one
user's statements at once: the others wait their turn, first come first served, shown with
their place in the user's queue by ``con.queries()``. Users do not wait for each other, and a
waiting statement can be cancelled like a running one. With memory budgets on its workers, a
query whose predicted memory does not fit beside the running ones waits for room."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

import qengine
from qengine.api.admission import Admission
from tests.conftest import assert_same, wait_until
from tests.test_cancellation import CHECK, ENDLESS
from tests.test_cli import ok, run_cli
from tests.test_multihost import cluster, data_root, register

BOUND = 60.0  # seconds; only guards against hangs
JOIN = "SELECT c.city, count(*) AS n, sum(s.qty) AS q FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city"


def _run(con, sql: str) -> tuple[threading.Thread, list, list[BaseException]]:
    """Run ``sql`` in a thread of its own; its rows or its error land in the lists."""
    rows: list = []
    errors: list[BaseException] = []
    cur = con.cursor()

    def run() -> None:
        try:
            rows.extend(cur.execute(sql).fetchall())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: cur.query_id is not None, BOUND, "the statement to be sent")
    thread.cur = cur  # type: ignore[attr-defined]
    return thread, rows, errors


def _states(con) -> dict[str, dict]:
    return {q["query"]: q for q in con.queries()}


@pytest.fixture
def alice(tmp_path, data_paths) -> Iterator[tuple]:
    """A standalone cluster that runs one statement of a user at a time, and two connections
    of alice's with the test tables registered: (cluster, first, second)."""
    args = ["--max-queries-per-user", "1"]
    with (
        cluster(tmp_path, 2, data_roots=data_root(data_paths), coordinator_args=args) as c,
        c.connect(user="alice") as first,
        c.connect(user="alice") as second,
    ):
        register(first, data_paths)
        register(second, data_paths)
        yield c, first, second


def test_a_user_s_second_statement_waits_its_turn_and_others_do_not(alice, data_paths, oracle) -> None:
    c, first, second = alice
    with c.connect(user="bob") as other:
        register(other, data_paths)
        endless, _, endless_errors = _run(first, ENDLESS)
        wait_until(lambda: _states(other).get(endless.cur.query_id, {}).get("state") == "running", BOUND, "alice's first to run")
        waiting, rows, waiting_errors = _run(second, CHECK)
        wait_until(lambda: endless.cur.query_id in _states(other) and waiting.cur.query_id in _states(other), BOUND, "both to show")
        shown = _states(other)[waiting.cur.query_id]
        assert (shown["state"], shown["user"], shown["position"]) == ("queued", "alice", 1)
        assert_same(other, oracle, CHECK)  # bob does not wait behind alice
        assert waiting.is_alive(), "alice's second statement ran beside her first"
        assert other.cancel(endless.cur.query_id) is True
        for thread in (endless, waiting):
            thread.join(BOUND)
            assert not thread.is_alive()
        assert len(endless_errors) == 1 and "query cancelled" in str(endless_errors[0])
        assert not waiting_errors and sorted(rows, key=repr) == sorted(oracle.execute(CHECK).fetchall(), key=repr)


def test_a_waiting_statement_can_be_cancelled(alice, oracle) -> None:
    _, first, second = alice
    endless, _, _ = _run(first, ENDLESS)
    wait_until(lambda: _states(second).get(endless.cur.query_id, {}).get("state") == "running", BOUND, "the first to run")
    waiting, _, errors = _run(second, CHECK)
    wait_until(lambda: _states(first).get(waiting.cur.query_id, {}).get("state") == "queued", BOUND, "the second to queue")
    assert first.cancel(waiting.cur.query_id) is True
    waiting.join(BOUND)
    assert len(errors) == 1 and "query cancelled" in str(errors[0])
    assert waiting.cur.query_id not in _states(first)
    assert first.cancel(endless.cur.query_id) is True
    endless.join(BOUND)
    assert_same(second, oracle, CHECK)


def test_the_queue_is_first_come_first_served() -> None:
    admission = Admission(per_user=1)
    order: list[str] = []
    with admission.admitted("u", "a"):
        threads = []
        for name in ("b", "c", "d"):
            def run(name: str = name) -> None:
                with admission.admitted("u", name):
                    order.append(name)
            threads.append(threading.Thread(target=run))
            threads[-1].start()
            wait_until(lambda name=name: any(w["query"] == name for w in admission.waiting()), BOUND, f"{name} to queue")
        assert [(w["query"], w["position"]) for w in admission.waiting()] == [("b", 1), ("c", 2), ("d", 3)]
        with admission.admitted("v", "other user"):  # does not wait behind u's queue
            pass
    for t in threads:
        t.join(BOUND)
    assert order == ["b", "c", "d"]


def test_user_is_for_a_standalone_cluster_only() -> None:
    with pytest.raises(qengine.ProgrammingError, match="user applies to a standalone cluster"):
        qengine.connect(user="alice")


def test_memory_is_admitted_first_come_first_served_and_a_lone_query_always_runs() -> None:
    admission = Admission()
    budget = lambda: 100  # noqa: E731 - the workers' budgets together
    order: list[str] = []
    with admission.memory("u", "big", 500, budget):  # more than the budget, but alone: it runs
        assert admission.held() == 500
        threads = []
        for name, needs in (("b", 60), ("c", 10), ("d", 30)):
            def run(name: str = name, needs: int = needs) -> None:
                with admission.memory("v", name, needs, budget):
                    order.append(name)
                    wait_until(lambda: len(order) == 3 or admission.held() > needs, BOUND, "the others to be admitted")
            threads.append(threading.Thread(target=run))
            threads[-1].start()
            wait_until(lambda name=name: any(w["query"] == name for w in admission.waiting()), BOUND, f"{name} to queue")
        assert [(w["query"], w["position"], w["waits_for"], w["needs_bytes"]) for w in admission.waiting()] == [
            ("b", 1, "memory", 60), ("c", 2, "memory", 10), ("d", 3, "memory", 30)
        ]
    for t in threads:
        t.join(BOUND)
    assert order == ["b", "c", "d"]  # c fits beside b, and d beside both: all three ran at once
    assert admission.held() == 0


def test_a_query_waiting_for_memory_can_be_cancelled() -> None:
    admission = Admission()
    cancelled = threading.Event()
    errors: list[BaseException] = []
    with admission.memory("u", "first", 80, lambda: 100):
        def run() -> None:
            try:
                with admission.memory("u", "second", 50, lambda: 100, cancelled):
                    pass
            except qengine.OperationalError as e:
                errors.append(e)
        thread = threading.Thread(target=run)
        thread.start()
        wait_until(lambda: admission.waiting() != [], BOUND, "the second to queue")
        cancelled.set()
        thread.join(BOUND)
        assert admission.waiting() == []
    assert len(errors) == 1 and "cancelled (while it waited for memory)" in str(errors[0])


def test_a_query_that_does_not_fit_beside_a_running_one_waits_for_memory(tmp_path, data_paths, oracle) -> None:
    """Workers with 700 KB budgets: while alice's endless query holds its predicted memory, bob's
    join (whose shuffles are predicted at more than what is left) waits, shown as waiting for
    memory; once alice's is cancelled it runs and answers as DuckDB does."""
    with (
        cluster(tmp_path, 2, data_roots=data_root(data_paths), worker_args=["--memory-budget", "700KB"]) as c,
        c.connect(user="alice") as alice,
        c.connect(user="bob", broadcast_threshold=0) as bob,
    ):
        register(alice, data_paths)
        register(bob, data_paths)
        endless, _, endless_errors = _run(alice, ENDLESS)
        wait_until(lambda: _states(bob).get(endless.cur.query_id, {}).get("state") == "running", BOUND, "alice's query to run")
        waiting, rows, errors = _run(bob, JOIN)
        wait_until(lambda: _states(alice).get(waiting.cur.query_id, {}).get("state") == "queued", BOUND, "bob's to queue")
        shown = _states(alice)[waiting.cur.query_id]
        assert (shown["user"], shown["waits_for"], shown["position"]) == ("bob", "memory", 1)
        assert shown["needs_bytes"] > 0
        listed = json.loads(ok(run_cli("queries", "--cluster", c.address, "--token-file", c.token_file, "--format", "json")))
        by_id = {row["query"]: row for row in listed}
        assert (by_id[endless.cur.query_id]["state"], by_id[endless.cur.query_id]["user"]) == ("running", "alice")
        assert by_id[endless.cur.query_id]["weight"] == 1.0  # no --user-weight: every user weighs 1
        assert (by_id[waiting.cur.query_id]["state"], by_id[waiting.cur.query_id]["waits_for"]) == ("queued", "memory")
        assert waiting.is_alive()
        assert bob.cancel(endless.cur.query_id) is True
        for thread in (endless, waiting):
            thread.join(BOUND)
            assert not thread.is_alive()
        assert len(endless_errors) == 1 and "query cancelled" in str(endless_errors[0])
        assert not errors, errors
        assert sorted(rows, key=repr) == sorted(oracle.execute(JOIN).fetchall(), key=repr)


@pytest.mark.parametrize(("rows", "expected"), [(10.0, 10 * 16 * 2), (0.0, 0), (float("nan"), 0), (float("inf"), 1 << 60), (1e300, 1 << 60)])
def test_a_prediction_is_a_finite_number_of_bytes_whatever_the_estimate(rows: float, expected: int) -> None:
    """A cross join's row estimate can overflow, or be undefined: admission still gets bytes."""
    from types import SimpleNamespace

    from qengine.planner.stages import _predicted_bytes

    assert _predicted_bytes(SimpleNamespace(est_rows=rows, columns=["a", "b"])) == expected
