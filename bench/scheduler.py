"""The scheduler alone, as the Canary paper measures it: tasks per second, and what a tiny query
costs end to end. A pytest-benchmark suite, not part of the default test run:

    python -m pytest bench/scheduler.py -p no:cacheprovider -s

- ``test_noop_tasks[N]``: a stage of N reduce tasks whose input is empty (a two-row table
  shuffled into N partitions), from one coordinator to 2 local workers; N is 1,000, 10,000 and
  100,000 (``QENGINE_BENCH_TASKS=1000,10000`` for fewer). Tasks per second = N ÷ the stage's time;
  it also prints the CPU the coordinator (this process) and the workers used over each query,
  divided by N.
- ``test_row_group_scan``: a Parquet file of 2,000 row groups of 10 rows, one row group per scan
  task, ``SELECT count(*), sum(a)``; against Spark ``local[2]`` making one task per row group too
  (``spark.sql.files.maxPartitionBytes``), when pyspark is installed.
- ``test_one_row_query``: a query answering one row from a small table, end to end, against
  DuckDB reading the same file in this process.
- ``test_repeated_query``: TPC-DS q3 at SF 0.1 (generated into the cache directory when it is
  not there) with another manufacturer and month each run. A first run of its shape (each
  with another LIMIT, which is part of the shape) against a repeat of one shape, which fills in
  the plan an earlier run left (``planner.templates``). It prints both the whole statement and
  its part outside the cluster's run (parsing, planning, the result's fetch).
- ``test_cli_select_1``: ``qengine sql -c 'select 1'`` against
  ``python -c "import duckdb; duckdb.sql('select 1')"``, wall time of the whole process. The
  ``qengine`` script is the one installed beside the interpreter DuckDB's side runs.

Comparisons run both sides once untimed, then alternate which goes first over the repeats,
and print the medians with their range and the ratio of the medians. Every run checks its
answer.
"""

from __future__ import annotations

import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.cli.common import cache_dir

REPEATS = 5
ROW_GROUPS = 2000
TASKS = [int(n) for n in os.environ.get("QENGINE_BENCH_TASKS", "1000,10000,100000").split(",")]


def spread(times: list[float]) -> str:
    return f"{statistics.median(times):.4f} s ({min(times):.4f}–{max(times):.4f})"


def alternate(a: Callable[[], object], b: Callable[[], object], repeats: int = REPEATS) -> tuple[list[float], list[float]]:
    """Time ``a`` and ``b`` ``repeats`` times each, after one untimed run of each, the one
    that goes first alternating from one repeat to the next."""
    a(), b()
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(repeats):
        order = [(0, a), (1, b)] if r % 2 == 0 else [(1, b), (0, a)]
        for side, fn in order:
            started = time.perf_counter()
            fn()
            times[side].append(time.perf_counter() - started)
    return times


def report(request: pytest.FixtureRequest, what: str, names: tuple[str, str], times: tuple[list[float], list[float]]) -> float:
    ratio = statistics.median(times[0]) / statistics.median(times[1])
    writer = request.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{what}:", f"  {names[0]}: {spread(times[0])}", f"  {names[1]}: {spread(times[1])}",
             f"  {names[0]} ÷ {names[1]}: {ratio:.2f}"]
    for line in lines:
        writer.write_line(line)
    return ratio


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("scheduler")
    tiny = root / "tiny"
    tiny.mkdir()
    for i in range(2):  # two files: two map tasks, so the reducers form a stage of their own
        pq.write_table(pa.table({"k": np.array([i, i + 2], dtype=np.int64)}), tiny / f"part{i}.parquet")
    groups = str(root / "row_groups.parquet")
    rows = ROW_GROUPS * 10
    pq.write_table(pa.table({"a": np.arange(rows, dtype=np.int64), "b": np.arange(rows) * 0.5}), groups, row_group_size=10)
    small = str(root / "small.parquet")
    pq.write_table(pa.table({"id": np.arange(1000, dtype=np.int64), "name": [f"n{i}" for i in range(1000)]}), small)
    return {"root": str(root), "tiny": str(tiny), "row_groups": groups, "small": small}


@pytest.mark.parametrize("tasks", TASKS)
def test_noop_tasks(benchmark, request, data, tasks: int) -> None:
    options = {"partitions": tasks, "coalesce_size": 0, "broadcast_threshold": 0, "replicate_size": 0, "split_size": "1B"}
    with qengine.connect(workers=2, allowed_roots=[data["root"]], **options) as con:
        con.register_parquet("t", data["tiny"])
        cur = con.cursor()
        sql = "SELECT k, count(*) AS n FROM t GROUP BY k"
        workers = [psutil.Process(w.process.pid) for w in con._cluster.workers]
        stage_seconds: list[float] = []
        cpu: list[tuple[float, float]] = []  # (coordinator, workers) CPU seconds a task, per round

        def run() -> list[tuple]:
            before = (_own_cpu(), sum(_cpu(w) for w in workers))
            cur.execute(sql)
            rows = sorted(cur.fetchall())
            cpu.append(((_own_cpu() - before[0]) / tasks, (sum(_cpu(w) for w in workers) - before[1]) / tasks))
            stats = cur._result.stats
            reducers = next(s for s in stats.stages if s.tasks == tasks)
            stage_seconds.append(reducers.seconds)
            return rows

        rounds = 1 if tasks >= 100_000 else 3
        assert benchmark.pedantic(run, rounds=rounds, warmup_rounds=0 if tasks >= 100_000 else 1) == [(k, 1) for k in range(4)]
        timed = stage_seconds[-rounds:]
        rate = tasks / statistics.median(timed)
        coordinator = statistics.median(c for c, _ in cpu[-rounds:]) * 1000
        per_worker = statistics.median(w for _, w in cpu[-rounds:]) * 1000
        benchmark.extra_info["tasks_per_second"] = round(rate)
        request.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"no-op tasks, N={tasks}: stage {spread(timed)}, {rate:.0f} tasks/s (median); CPU a task, whole query: "
            f"coordinator {coordinator:.2f} ms, workers {per_worker:.2f} ms"
        )


def _own_cpu() -> float:
    """CPU seconds this process (the coordinator of a local cluster) has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def test_row_group_scan(benchmark, request, data) -> None:
    expected = (ROW_GROUPS * 10, sum(range(ROW_GROUPS * 10)))
    with qengine.connect(workers=2, split_size="1B", allowed_roots=[data["root"]]) as con:
        con.register_parquet("t", data["row_groups"])
        cur = con.cursor()

        def run() -> tuple:
            cur.execute("SELECT count(*), sum(a) FROM t")
            return cur.fetchone()

        assert benchmark.pedantic(run, rounds=3, warmup_rounds=1) == expected
        stage = next(s for s in cur._result.stats.stages if s.tasks == ROW_GROUPS)
        rate = ROW_GROUPS / benchmark.stats.stats.median
        benchmark.extra_info["tasks_per_second"] = round(rate)
        writer = request.config.pluginmanager.get_plugin("terminalreporter")
        writer.write_line(f"row-group scan: {ROW_GROUPS} tasks, {rate:.0f} tasks/s (median of the query; scan stage {stage.seconds:.3f} s)")
        spark = _spark_local2()
        if spark is None:
            writer.write_line("row-group scan: pyspark is not installed, Spark local[2] not measured")
            return
        try:
            frame = spark.read.parquet(data["row_groups"])
            assert frame.rdd.getNumPartitions() == ROW_GROUPS
            total = frame.selectExpr("count(*)", "sum(a)")
            times = alternate(run, lambda: total.collect())
            report(request, "row-group scan, one task per row group", ("qengine", "Spark local[2]"), times)
        finally:
            spark.stop()


def _spark_local2():
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.files.maxPartitionBytes", "1")
        .config("spark.sql.files.openCostInBytes", "0")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def test_one_row_query(request, data) -> None:
    import duckdb

    sql = "SELECT id, name FROM t WHERE id = 417"
    oracle = duckdb.connect()
    oracle.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{data['small']}')")
    with qengine.connect(workers=2, allowed_roots=[data["root"]]) as con:
        con.register_parquet("t", data["small"])
        cur = con.cursor()

        def ours() -> None:
            assert cur.execute(sql).fetchall() == [(417, "n417")]

        def theirs() -> None:
            assert oracle.execute(sql).fetchall() == [(417, "n417")]

        report(request, "a one-row query, end to end", ("qengine", "DuckDB"), alternate(ours, theirs, repeats=21))


Q3 = """SELECT dt.d_year, item.i_brand_id brand_id, item.i_brand brand, sum(ss_ext_sales_price) sum_agg
FROM date_dim dt, store_sales, item
WHERE dt.d_date_sk = store_sales.ss_sold_date_sk AND store_sales.ss_item_sk = item.i_item_sk
  AND item.i_manufact_id = ? AND dt.d_moy = ?
GROUP BY dt.d_year, item.i_brand, item.i_brand_id
ORDER BY dt.d_year, sum_agg DESC, brand_id
LIMIT {limit}"""
Q3_TABLES = ("date_dim", "store_sales", "item")


def _tpcds_sf01() -> str:
    from tpcds.gen import generate

    path = os.path.join(cache_dir(), "tpcds-sf0.1")
    if not os.path.isdir(os.path.join(path, "store_sales")):
        generate(0.1, path, force=True)
    return path


def test_repeated_query(request) -> None:
    import duckdb

    data = _tpcds_sf01()
    oracle = duckdb.connect()
    for table in Q3_TABLES:
        oracle.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{data}/{table}/*.parquet')")
    values = itertools.cycle([(m, moy) for m in (128, 436, 129, 77, 310, 14) for moy in (11, 12, 1)])
    limits = itertools.count(101)
    times: dict[str, list[tuple[float, float]]] = {"first": [], "repeated": []}  # (whole, outside the run)
    with qengine.connect(workers=2, allowed_roots=[data]) as con:
        for table in Q3_TABLES:
            con.register_parquet(table, f"{data}/{table}")
        cur = con.cursor()
        checks = []

        def run(mode: str) -> None:
            sql = Q3.format(limit=next(limits) if mode == "first" else 100)
            params = next(values)
            started = time.perf_counter()
            rows = cur.execute(sql, params).fetchall()
            whole = time.perf_counter() - started
            times[mode].append((whole, whole - cur._result.stats.seconds))
            checks.append((sql, params, rows))

        run("first"), run("repeated")  # warm-up of both
        for r in range(2 * REPEATS + 1):
            for mode in ("first", "repeated") if r % 2 == 0 else ("repeated", "first"):
                run(mode)
        for sql, params, rows in checks:
            assert rows == oracle.execute(sql, params).fetchall(), (sql, params)
    writer = request.config.pluginmanager.get_plugin("terminalreporter")
    writer.write_line(f"TPC-DS q3 at SF 0.1, another manufacturer and month each run ({len(times['first']) - 1} runs of each after a warm-up):")
    for part, name in ((0, "whole statement"), (1, "outside the cluster's run")):
        first, repeated = ([t[part] for t in times[m][1:]] for m in ("first", "repeated"))
        writer.write_line(f"  {name}: first run of its shape {spread(first)}, repeated {spread(repeated)}, "
                          f"first ÷ repeated {statistics.median(first) / statistics.median(repeated):.2f}")


def test_cli_select_1(request, tmp_path) -> None:
    # The script pip installed beside this interpreter, as DuckDB's side runs that interpreter
    # directly: on PATH there may be a version manager's shim (pyenv's costs 30 to 40 ms).
    beside = os.path.join(os.path.dirname(sys.executable), "qengine")
    qengine_cli = beside if os.access(beside, os.X_OK) else shutil.which("qengine")
    assert qengine_cli is not None, "the qengine command is not installed (pip install -e .)"
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's machine runs it: from compiled modules

    def ours() -> None:
        out = subprocess.run([qengine_cli, "sql", "-c", "select 1"], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert out.returncode == 0 and "│       1 │" in out.stdout and "1 row(s)" in out.stdout, out.stdout + out.stderr

    def theirs() -> None:
        out = subprocess.run([sys.executable, "-c", "import duckdb; print(duckdb.sql('select 1').fetchall())"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
        assert out.returncode == 0 and out.stdout.strip() == "[(1,)]", out.stderr

    report(request, "qengine sql -c 'select 1', whole process", ("qengine", "DuckDB"), alternate(ours, theirs))
