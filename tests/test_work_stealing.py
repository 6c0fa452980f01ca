"""Work stealing (Canary): scan tasks are queued ahead on the workers, and a worker with a free
slot takes back the ones a slow worker has not started; the answer is the same as DuckDB's and
no task runs twice."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import qengine
from qengine.runtime.faults import ENV


def test_an_idle_worker_steals_scan_tasks_queued_on_a_slow_one(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": list(range(24_000)), "b": [i % 7 for i in range(24_000)]}), path, row_group_size=1000)
    monkeypatch.setenv(ENV, "worker=1;phase=task;after=1;action=slow;seconds=0.4")
    sql = "SELECT b, count(*), sum(a) FROM t GROUP BY b ORDER BY b"
    with qengine.connect(workers=2, split_size="1KB", speculation=False, allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", str(path))
        cur = con.cursor()
        rows = cur.execute(sql).fetchall()
        stats = cur.stats
        lines = [r[0] for r in con.execute("EXPLAIN ANALYZE " + sql).fetchall()]
    assert rows == duckdb.sql(sql.replace("FROM t", f"FROM read_parquet('{path}')")).fetchall()
    scan = next(s for s in stats.stages if s.tasks == 24)
    assert scan.stolen >= 1, stats.stages
    assert any("stolen=" in line for line in lines), lines
