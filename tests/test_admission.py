"""A standalone coordinator started with ``--max-queries-per-user N`` runs at most N of one
user's statements at once: the others wait their turn, first come first served, shown with
their place in the user's queue by ``con.queries()``. Users do not wait for each other, and a
waiting statement can be cancelled like a running one."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import qengine
from qengine.api.admission import Admission
from tests.conftest import assert_same, wait_until
from tests.test_cancellation import CHECK, ENDLESS
from tests.test_multihost import cluster, data_root, register

BOUND = 60.0  # seconds; only guards against hangs


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
