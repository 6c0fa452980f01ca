"""Micro-benchmarks of the engine's hot parts: the scheduler's cost per task, hash and range
partitioning, reducer placement, size prediction and block transport over Arrow Flight.

Run from a checkout (not part of the default test run):

    python -m pytest bench/micro --benchmark-only

Each benchmark also checks its result, so a faster but wrong version cannot pass as an
improvement. pytest-benchmark prints min, median, max and rounds; compare two versions with
``--benchmark-save`` and ``--benchmark-compare``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.exchange import partitioner
from qengine.exchange.placement import Reducer, accumulate, min_heap
from qengine.exchange.prediction import coalesce, hash_prediction
from qengine.runtime.slots import Slots
from qengine.runtime.worker import WorkerServer
from qengine.sandbox.connection import safe_connection
from qengine.transport.rpc import Client

ROWS = 1_000_000


@pytest.fixture(scope="module")
def table() -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({"k": rng.integers(0, 1 << 40, ROWS), "v": rng.random(ROWS)})


def test_hash_partition_ids(benchmark, table) -> None:
    con = safe_connection()
    con.register("t", table)
    sql = f"SELECT {partitioner.hash_sql({'k': 'BIGINT'}, ['k'], 16)} AS p FROM t"

    def run() -> np.ndarray:
        return con.sql(sql).fetchnumpy()["p"]

    ids = benchmark(run)
    counts = np.bincount(ids, minlength=16)
    assert counts.sum() == ROWS and counts.min() > ROWS / 16 * 0.9  # every partition gets its share


def test_split_into_partitions(benchmark, table) -> None:
    ids = np.random.default_rng(1).integers(0, 16, ROWS)
    parts = benchmark(partitioner.split, table, ids, 16)
    assert sum(p.num_rows for p in parts) == ROWS


def test_min_heap_placement(benchmark) -> None:
    rng = np.random.default_rng(3)
    reducers = [Reducer(p, float(s)) for p, s in enumerate(rng.pareto(1.5, 2000) * 1e6)]
    placed = benchmark(min_heap, reducers, list(range(16)), 64)
    assert sorted(placed.hosts) == list(range(2000))


def test_accumulate_placement_of_a_join(benchmark) -> None:
    rng = np.random.default_rng(4)
    left = [Reducer(p, float(s), 1.0, int(h)) for p, (s, h) in enumerate(zip(rng.random(500) * 1e6, rng.integers(0, 8, 500), strict=True))]
    right = [Reducer(p, float(s)) for p, s in enumerate(rng.random(500) * 1e6)]
    previous = {r.rid: r for r in left}
    placed = benchmark(accumulate, right, list(range(8)), 32, previous)
    assert sorted(placed.hosts) == list(range(500))


def test_hash_prediction_and_coalescing(benchmark) -> None:
    rng = np.random.default_rng(5)
    finished = [(t % 4, list(rng.integers(0, 1 << 20, 200))) for t in range(64)]

    def run() -> list[list[int]]:
        predicted = hash_prediction(finished, 128, 200)
        return coalesce([r.size for r in predicted], 32 << 20, 4)

    groups = benchmark(run)
    assert sorted(p for g in groups for p in g) == list(range(200))


def test_slot_hold_and_release(benchmark) -> None:
    slots = Slots(workers=4, per_worker=2)

    def run() -> None:
        for _ in range(1000):
            with slots.hold(None):
                pass

    benchmark(run)
    assert slots.running() == 0


def test_flight_block_fetch(benchmark, table) -> None:
    server = WorkerServer("127.0.0.1", 0, "bench-token", 0, None, None, None)
    try:
        server.store.put("q/0", 0, table)
        client = Client(server.address, "bench-token")
        got = benchmark(client.get, {"key": "q/0", "partition": 0})
        assert got.num_rows == ROWS
        client.close()
    finally:
        server.shutdown()
        server.store.close()


def test_scheduler_cost_per_scan_task(benchmark, tmp_path) -> None:
    """Many tiny scan tasks: what remains is the cluster's cost per task (issue: Canary)."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": np.arange(4000)}), path, row_group_size=10)
    with qengine.connect(workers=2, split_size="1KB") as con:
        con.register_parquet("t", str(path))
        cur = con.cursor()

        def run() -> tuple:
            return cur.execute("SELECT count(*), sum(a) FROM t").fetchone()

        assert benchmark.pedantic(run, rounds=3, warmup_rounds=1) == (4000, sum(range(4000)))
