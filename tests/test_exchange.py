"""The exchange end to end: both shuffle modes, spilling under a small budget, pre-fetch locality."""

from __future__ import annotations

import glob
import os
import re

import pytest

from tests.conftest import assert_same, engine_over

SHUFFLE_QUERY = "SELECT cust_id, count(DISTINCT item_id) AS items, sum(amount) AS total FROM sales GROUP BY cust_id"


@pytest.fixture(scope="module")
def clusters(data_paths):
    made = {}
    try:
        for name, options in {
            "pull": {"shuffle": "pull"},
            "prefetch": {"shuffle": "prefetch"},
            # the sales shuffle is several MB; 64 KB per worker is far below a quarter of it
            "tiny": {"shuffle": "prefetch", "shuffle_memory": "64KB"},
        }.items():
            made[name] = engine_over(data_paths, broadcast_threshold=0, coalesce_size=0, **options)
        yield made
    finally:
        for con in made.values():
            con.close()


def _shuffle_stats(con, sql: str):
    cur = con.execute(sql)
    cur.fetchall()
    return cur.stats


def test_modes_agree_with_duckdb(clusters, oracle) -> None:
    for con in clusters.values():
        assert_same(con, oracle, SHUFFLE_QUERY)


def test_tiny_budget_spills_and_stays_correct(clusters, oracle) -> None:
    stats = _shuffle_stats(clusters["tiny"], SHUFFLE_QUERY)
    shuffled = sum(sum(s.actual) for s in stats.shuffles)
    assert shuffled > 4 * 2 * (64 << 10)  # more than 4x the cluster's total budget
    assert stats.spilled_bytes > 0
    assert_same(clusters["tiny"], oracle, SHUFFLE_QUERY)


def test_spill_files_are_deleted_after_the_query(clusters) -> None:
    con = clusters["tiny"]
    stats = _shuffle_stats(con, SHUFFLE_QUERY)
    assert stats.spilled_bytes > 0
    pool = con._cluster.pool
    for address in con._cluster.addresses:
        reply = pool.get(address).action("ping")
        assert os.path.isdir(reply["spill_dir"])
        assert glob.glob(os.path.join(reply["spill_dir"], "*.arrow")) == []
        assert reply["bytes"] == 0  # nothing of the finished query is held in memory either


def test_prefetch_reducers_read_local_memory(clusters) -> None:
    stats = _shuffle_stats(clusters["prefetch"], SHUFFLE_QUERY)
    main = max(stats.shuffles, key=lambda s: sum(s.actual))
    assert main.placement == "minheap"
    assert main.blocks_total > 0 and main.blocks_local == main.blocks_total
    assert main.predicted is not None and len(main.predicted) == len(main.actual)


def test_prefetch_pushes_only_while_map_tasks_run(clusters, data_paths, oracle) -> None:
    """Reducers placed once every map task has finished (a prefetch fraction of 1) get nothing
    pushed: they read the blocks where they are instead of waiting for a push that overlaps no
    map work. Placed at the default half, they get the rest pushed while it still runs."""
    con = engine_over(data_paths, broadcast_threshold=0, coalesce_size=0, shuffle="prefetch", prefetch_fraction=1.0)
    try:
        late = max(_shuffle_stats(con, SHUFFLE_QUERY).shuffles, key=lambda s: sum(s.actual))
        assert late.map_tasks > 1 and late.placement == "minheap"
        assert late.pushed_tasks == 0
        assert_same(con, oracle, SHUFFLE_QUERY)
    finally:
        con.close()
    many = max(_shuffle_stats(clusters["prefetch"], SHUFFLE_QUERY).shuffles, key=lambda s: sum(s.actual))
    assert many.map_tasks > 1 and many.pushed_tasks > 0


def test_pull_reducers_fetch_remote_blocks(clusters) -> None:
    stats = _shuffle_stats(clusters["pull"], SHUFFLE_QUERY)
    main = max(stats.shuffles, key=lambda s: sum(s.actual))
    assert main.placement == "round-robin"
    assert main.remote_bytes > 0 and main.blocks_local < main.blocks_total


def test_join_inputs_share_one_placement(clusters, oracle) -> None:
    """Both sides of a shuffle join land partition i on the same host (accumulate scheduling),
    and their blocks are pushed there. Both sides scan several splits, so the side whose
    prediction completes the placement still has map tasks running: the push always happens."""
    sql = "SELECT a.store_id, count(*) FROM sales a JOIN sales b ON a.sale_id = b.sale_id GROUP BY a.store_id"
    stats = _shuffle_stats(clusters["prefetch"], sql)
    # the scans' shuffles come first (stage ids are in dependency order); the last is the GROUP BY's
    join_inputs = sorted((s for s in stats.shuffles if s.kind == "hash"), key=lambda s: s.stage)[:2]
    assert all(s.placement == "minheap" and s.map_tasks > 1 for s in join_inputs)
    assert all(s.blocks_local == s.blocks_total for s in join_inputs)
    assert_same(clusters["prefetch"], oracle, sql)


def test_explain_analyze_shows_shuffle_metrics(clusters) -> None:
    lines = [r[0] for r in clusters["prefetch"].execute("EXPLAIN ANALYZE " + SHUFFLE_QUERY).fetchall()]
    shuffle_lines = [line for line in lines if "[shuffle]" in line]
    assert shuffle_lines and all("prediction error" in line and "prefetch hits" in line for line in shuffle_lines)
    assert any("bytes spilled" in line for line in lines)
    # whether a placed shuffle pushed or let its reducers fetch, and why (exchange.push_decision)
    placed = [line for line in shuffle_lines if "placement=minheap" in line]
    assert placed and all(re.search(r"\((pushed|fetched): [0-9.]+s of map work left, ", line) for line in placed), placed


def test_fetch_limiter_bounds_requests_and_bytes() -> None:
    import threading
    import time

    from qengine.runtime.task import FetchLimiter

    limiter = FetchLimiter(per_host=2, total=3, max_bytes=100)
    lock = threading.Lock()
    state = {"per_host": {}, "total": 0, "bytes": 0, "peak": {"total": 0, "bytes": 0, "host": 0}}

    def fetch(host: str, nbytes: int) -> None:
        with limiter.slot(host, nbytes):
            with lock:
                state["per_host"][host] = state["per_host"].get(host, 0) + 1
                state["total"] += 1
                state["bytes"] += nbytes
                peak = state["peak"]
                peak["total"] = max(peak["total"], state["total"])
                peak["host"] = max(peak["host"], state["per_host"][host])
                if state["total"] > 1:
                    peak["bytes"] = max(peak["bytes"], state["bytes"])
            time.sleep(0.01)
            with lock:
                state["per_host"][host] -= 1
                state["total"] -= 1
                state["bytes"] -= nbytes

    jobs = [(f"h{i % 3}", 40 if i % 5 else 150) for i in range(30)]  # some requests exceed the budget alone
    threads = [threading.Thread(target=fetch, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)  # never deadlocks, even with oversized requests
    assert state["peak"]["total"] <= 3 and state["peak"]["host"] <= 2
    assert state["peak"]["bytes"] <= 100  # whenever two or more are in flight


def test_partition_ids_are_learned_safely_by_concurrent_tasks(monkeypatch) -> None:
    # A worker runs several tasks at once, and each hash stage adds its partition-id expression
    # to one shared cache that forgets the oldest; once full, every new stage evicts one.
    import sys
    import threading

    from qengine.runtime.task import PartitionIds
    from qengine.sandbox.connection import safe_connection

    ids = PartitionIds()
    monkeypatch.setattr(PartitionIds, "KEPT", 4)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to meet the race
    errors: list[BaseException] = []

    def stages(worker: int) -> None:
        con = safe_connection()
        try:
            for stage in range(300):
                output = {"key": f"q/{worker}/{stage}", "keys": ["k"], "partitions": 4}
                sql = ids.select(con, "SELECT 1 AS k", output)
                assert con.sql(sql).fetchall()[0][1] in range(4)
        except BaseException as e:  # noqa: BLE001 - reported below, from the test's thread
            errors.append(e)
        finally:
            con.close()

    try:
        threads = [threading.Thread(target=stages, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    assert len(ids._known) <= 4
