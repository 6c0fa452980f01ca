"""Reducers start as their own blocks land (prefetch), not after the stage's last push, and
still answer as DuckDB does; and a shuffle whose links are too slow for the map work left is
fetched instead of pushed (``exchange.push_decision``).

One worker's pushes are slowed by the fault hook (``QENGINE_FAULT``, ``runtime.faults``): each
waits a second before it sends. The reducers placed on that worker receive nothing from it
(its own blocks stay put), so they may run while its pushes to the others are still on their
way; those others' reducers must wait for them. Speculation is off: a worker that starts its
first task late can be found slow, and its reducers are then placed on the others
(``QueryRun._find_slow``), which would leave none of them free of the slow pushes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.runtime import query_run, shuffle_driver
from qengine.runtime.faults import ENV
from tpcds.compare import compare

SLOW_PUSHER = 1
QUERY = "SELECT k % 101 AS g, count(*) AS n, sum(v) AS total, count(DISTINCT v % 1000) AS d FROM t GROUP BY g ORDER BY g"


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """12 Parquet files of 20,000 rows: 12 map tasks."""
    root = tmp_path_factory.mktemp("early-reducers")
    for f in range(12):
        start = f * 20_000
        keys = pa.array(range(start, start + 20_000), pa.int64())
        pq.write_table(pa.table({"k": keys, "v": pa.array([(i * 7919) % 100_003 for i in range(start, start + 20_000)], pa.int64())}),
                       root / f"part-{f:02d}.parquet")
    return str(root)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[float, str, int]]]:
    """(time, what, stage) of every committed task and every push that landed, in this process
    (a local cluster's coordinator)."""
    seen: list[tuple[float, str, int]] = []
    commit, aux_done = query_run.QueryRun._commit, shuffle_driver.ShuffleDriver.aux_done

    def on_commit(self, run, *args, **kwargs):
        seen.append((time.monotonic(), "task", run.stage.id))
        return commit(self, run, *args, **kwargs)

    def on_aux_done(self, run, kind, *args, **kwargs):
        if kind == "push":
            seen.append((time.monotonic(), "push", run.stage.id))
        return aux_done(self, run, kind, *args, **kwargs)

    monkeypatch.setattr(query_run.QueryRun, "_commit", on_commit)
    monkeypatch.setattr(shuffle_driver.ShuffleDriver, "aux_done", on_aux_done)
    yield seen


def test_a_reducer_whose_blocks_have_landed_runs_before_the_last_push(table_dir: str, events, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"worker={SLOW_PUSHER};phase=push;action=slow;seconds=1.0")
    con = qengine.connect(workers=3, shuffle="prefetch", slots=1, prefetch_fraction=0.1, split_size="64KB", speculation=False)
    try:
        con.register_parquet("t", os.path.join(table_dir, "*.parquet"))
        cur = con.cursor()
        got = cur.execute(QUERY).fetch_arrow_table()
        shuffle = max(cur.stats.shuffles, key=lambda s: s.pushed_tasks)
    finally:
        con.close()
    oracle = duckdb.connect()
    expected = oracle.execute(QUERY.replace("FROM t", f"FROM read_parquet('{table_dir}/*.parquet')")).to_arrow_table()
    result = compare(got, expected, QUERY)
    assert result.ok, result.message
    assert shuffle.pushed_tasks > 0, "nothing was pushed: the test shows nothing"
    source = shuffle.stage
    pushes = [t for t, what, stage in events if what == "push" and stage == source]
    readers = [t for t, what, stage in events if what == "task" and stage > source]
    assert pushes and readers
    assert min(readers) < max(pushes), "every reducer waited for the stage's last push"


def test_a_shuffle_whose_links_are_too_slow_for_the_map_work_left_is_fetched(table_dir: str) -> None:
    """Once every worker's pushes are known to crawl (1 KB/s), no map work left can hide a
    transfer: the shuffle is placed but fetched, nothing is pushed, EXPLAIN ANALYZE says why,
    and the answer is still DuckDB's. With the rates unknown, the same query pushes."""
    con = qengine.connect(workers=3, shuffle="prefetch", slots=1, prefetch_fraction=0.1, split_size="64KB")
    try:
        con.register_parquet("t", os.path.join(table_dir, "*.parquet"))
        cur = con.cursor()
        cur.execute(QUERY).fetch_arrow_table()
        assert max(s.pushed_tasks for s in cur.stats.shuffles) > 0  # unknown rates: it pushes to learn them
        rates = con._cluster.network.rates
        for address in con._cluster.addresses:
            rates.learn(address, 1000.0)
        got = cur.execute(QUERY).fetch_arrow_table()
        placed = [s for s in cur.stats.shuffles if s.placement == "minheap"]
        assert placed and all(s.pushed_tasks == 0 and s.push_decision.startswith("fetched: ") for s in placed)
        lines = [r[0] for r in con.execute("EXPLAIN ANALYZE " + QUERY).fetchall()]
        assert any("(fetched: " in line and "s of map work left, transfer ≈ " in line for line in lines), lines
    finally:
        con.close()
    expected = duckdb.connect().execute(QUERY.replace("FROM t", f"FROM read_parquet('{table_dir}/*.parquet')")).to_arrow_table()
    assert compare(got, expected, QUERY).ok
