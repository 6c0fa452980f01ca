"""One-task work spreads over the cluster: a query places a task, of workers with as many free
slots of its own, on the one the coordinator's other queries load least, then on the one sent
the fewest tasks so far (``runtime.cluster_load``). Every one-task query had gone to the lowest
worker id: tasks run per worker over 8 connections' queries were [170, 0, 0]."""

from __future__ import annotations

import threading

import qengine
from qengine.runtime.cluster_load import ClusterLoad
from qengine.runtime.slots import Slots
from tests.conftest import assert_same
from tests.test_multihost import cluster, data_root, register

ONE_TASK = "SELECT category, count(*) AS n, max(list_price) AS top FROM items GROUP BY category"  # one file: one task


def _tasks_run(pool, addresses: list[str]) -> list[int]:
    return [int(pool.get(a).action("ping")["tasks_run"]) for a in addresses]


def test_queries_that_follow_each_other_take_turns_on_the_workers(data_paths, oracle) -> None:
    con = qengine.connect(workers=3)
    try:
        register(con, data_paths)
        addresses = con._cluster.addresses
        before = _tasks_run(con._cluster.pool, addresses)
        for _ in range(12):
            assert_same(con, oracle, ONE_TASK)
        ran = [after - b for after, b in zip(_tasks_run(con._cluster.pool, addresses), before, strict=True)]
        assert sum(ran) == 12 and max(ran) - min(ran) <= 1, ran
    finally:
        con.close()


def test_connections_at_once_share_a_standalone_cluster_s_workers(tmp_path, data_paths, oracle) -> None:
    with cluster(tmp_path, 3, data_roots=data_root(data_paths)) as c:
        addresses = [m["address"] for m in c.members()]
        before = [int(c.client(a).action("ping")["tasks_run"]) for a in addresses]
        errors: list[BaseException] = []

        def client() -> None:
            try:
                with c.connect() as con:
                    register(con, data_paths)
                    for _ in range(6):
                        con.execute(ONE_TASK).fetchall()
            except BaseException as e:  # noqa: BLE001 - handed to the test
                errors.append(e)

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        ran = [int(c.client(a).action("ping")["tasks_run"]) - b for a, b in zip(addresses, before, strict=True)]
        assert sum(ran) == 18 and min(ran) >= 4, ran  # an even share is 6 each
        with c.connect() as con:
            register(con, data_paths)
            assert_same(con, oracle, ONE_TASK)


def test_a_query_s_tasks_leave_the_cluster_s_load_when_it_ends_however_it_ends() -> None:
    load = ClusterLoad()
    addresses = ["a:1", "b:2"]
    first = Slots(2, 2, load=load, addresses=addresses)
    assert first.take(None) == 0 and load.order("a:1") == (1, 1)
    second = Slots(2, 2, load=load, addresses=addresses)
    assert second.take(None) == 1, "the worker another query loads less"
    assert second.take(None) == 0 and second.take(None) == 1
    first.close()  # ended without its task reporting: a failed query
    assert load.order("a:1") == (1, 2)
    first.release(0)  # a late end changes nothing
    assert load.order("a:1") == (1, 2)
    for worker in (1, 0, 1):
        second.release(worker)
    assert load.order("a:1")[0] == 0 and load.order("b:2")[0] == 0
