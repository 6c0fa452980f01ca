"""TeraSort benchmark: qengine (pull and prefetch) against DuckDB, and Spark where installed.

    python bench/terasort.py [--records 10000000] [--workers 2] [--skew] [--shuffle-memory 256MB]

One run generates (or reuses) the records under the cache directory, sorts them with
``qengine terasort run`` in both shuffle modes (alternating), with DuckDB's single-process
``ORDER BY key`` from Parquet to Parquet, and with Spark ``local[2]`` if pyspark is installed.
Every output is validated like valsort. Peak resident memory is sampled for every process of
each run. For qengine the table shows the largest worker's peak (the coordinator, this process,
also holds the benchmark's own checksums; its peak goes to the JSON report), set against the
fixed overhead: a worker's peak in the same sort over 10,000 records, which is what a worker
holds whatever the data (interpreter, libraries, buffers of one task).
It prints a table with the ratios and writes a JSON report and, beside it, a PNG of the task
timelines of pull and prefetch side by side (the median run of each).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import psutil
from timeline import median_run, plot_timelines

from qengine.api.options import DEFAULT_WORKERS
from qengine.cli.common import cache_dir
from qengine.exchange.sampling import DEFAULT_SAMPLES_PER_PARTITION
from qengine.runtime.stats import QueryStats
from sortbench.gensort import generate
from sortbench.sortjob import sort
from sortbench.valsort import summarize, validate
from tpcds.report import write_json

DUCKDB_SORT = """
import duckdb, sys
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(f"COPY (SELECT key, payload FROM read_parquet('{sys.argv[1]}/*.parquet') ORDER BY key) TO '{sys.argv[2]}/part-00000.parquet' (FORMAT parquet)")
"""

SPARK_SORT = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("terasort")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.read.parquet(sys.argv[1]).orderBy("key").write.mode("overwrite").parquet(sys.argv[2])
spark.stop()
"""


class PeakMemory:
    """Samples the resident memory of this process and all its children; keeps each one's peak."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            procs = [me, *me.children(recursive=True)]
            for p in procs:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), rss)
            self._stop.wait(0.05)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, exclude: int | None = None) -> int:
        return max((v for pid, v in self.peaks.items() if pid != exclude), default=0)


FIXED_RECORDS = 10_000


def measured_sort(data: str, out: str, options: dict[str, Any]) -> tuple[float, Any, int, int]:
    """``qengine terasort run`` into a fresh ``out``: (seconds, stats, the largest worker's peak
    RSS, this process's (the coordinator's) peak RSS)."""
    shutil.rmtree(out, ignore_errors=True)
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        _, stats = sort(data, out, options)
        elapsed = time.perf_counter() - t0
    return elapsed, stats, mem.peak(exclude=os.getpid()), mem.peaks.get(os.getpid(), 0)


def fixed_overhead(options: dict[str, Any]) -> int:
    """The largest worker's peak resident memory in a sort over FIXED_RECORDS records."""
    root = os.path.join(cache_dir(), f"terasort-{FIXED_RECORDS}")
    data = os.path.join(root, "in")
    if not os.path.isdir(data):
        generate(FIXED_RECORDS, data, seed=1)
    return measured_sort(data, os.path.join(root, "out"), options)[2]


def timed_subprocess(code: str, *args: str) -> tuple[float, int]:
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, *args], check=True)
        elapsed = time.perf_counter() - t0
    return elapsed, mem.peak(exclude=os.getpid())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--skew", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--shuffle-memory", default=None)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES_PER_PARTITION, help="s for the range bounds (s×p samples per map task)")
    parser.add_argument("--no-spark", action="store_true", help="skip Spark even where pyspark is installed")
    parser.add_argument("--out", default=None, help="JSON report (default: <cache>/bench-terasort.json); PNG beside it")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 180)
    root = os.path.join(cache_dir(), f"terasort-{args.records}{'-skew' if args.skew else ''}")
    data = os.path.join(root, "in")
    if not os.path.isdir(data):
        console.print(f"generating {args.records:,} records into {data}")
        generate(args.records, data, seed=1, skew=args.skew)
    data_bytes = args.records * 100
    runs: list[dict[str, Any]] = []
    timed: dict[str, list[tuple[float, QueryStats]]] = {"pull": [], "prefetch": []}  # per mode: (seconds, stats) of each run
    inputs = summarize(data)  # read and checksummed once, not once per engine

    def record(engine: str, seconds: float, peak: int, out: str, extra: dict | None = None) -> None:
        verdict = validate(data, out, inputs)
        runs.append({"engine": engine, "seconds": seconds, "peak_rss": peak, "valid": verdict.ok,
                     "problems": verdict.problems, **(extra or {})})
        console.print(f"{engine}: {seconds:.2f}s, peak RSS {peak / 2**20:,.0f} MiB, valid={verdict.ok}")

    options = {"workers": args.workers, "shuffle_memory": args.shuffle_memory, "samples_per_partition": args.samples}
    fixed = fixed_overhead(options)
    console.print(f"fixed overhead (peak RSS sorting {FIXED_RECORDS:,} records): {fixed / 2**20:,.0f} MiB")
    for _ in range(args.repeat):
        for mode in ("pull", "prefetch"):
            out = os.path.join(root, f"out-{mode}")
            elapsed, stats, peak, coordinator_peak = measured_sort(data, out, {**options, "shuffle": mode})
            timed[mode].append((elapsed, stats))
            shuffle = next(s for s in stats.shuffles if s.kind == "range")
            record(f"qengine {mode}", elapsed, peak, out, {
                "coordinator_peak_rss": coordinator_peak,
                "map_seconds": stats.stages[shuffle.stage].seconds,
                "reduce_seconds": stats.stages[-1].seconds,
                "reducer_read_wait": shuffle.read_wait_seconds,
                "load_max_over_mean": shuffle.imbalance(shuffle.actual),
                "spilled": stats.spilled_bytes,
                "shuffle": shuffle.as_dict(),
            })
    out = os.path.join(root, "out-duckdb")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    seconds, peak = timed_subprocess(DUCKDB_SORT, data, out)
    record("duckdb", seconds, peak, out)
    if args.no_spark:
        console.print("Spark skipped (--no-spark)")
    elif importlib.util.find_spec("pyspark") is None:
        console.print("pyspark is not installed: Spark local[2] skipped")
    else:
        out = os.path.join(root, "out-spark")
        shutil.rmtree(out, ignore_errors=True)
        seconds, peak = timed_subprocess(SPARK_SORT, data, out)
        record("spark local[2]", seconds, peak, out)

    def best(engine: str) -> dict | None:
        mine = [r for r in runs if r["engine"] == engine]
        return min(mine, key=lambda r: r["seconds"]) if mine else None

    duck = best("duckdb")
    table = Table(title=f"TeraSort {args.records:,} records ({data_bytes / 2**30:.2f} GiB), {args.workers} workers")
    for col in ("engine", "seconds", "÷ duckdb", "map", "reduce", "reducer read wait", "load max/mean",
                "peak RSS MiB", "peak ÷ (data/workers)", "(peak − fixed) ÷ (data/workers)", "spilled", "valid"):
        table.add_column(col)
    per_worker = data_bytes / args.workers

    def memory(r: dict) -> float:
        """The memory target's measure: peak ≤ 1.5 × data/workers + the fixed overhead."""
        return (r["peak_rss"] - fixed) / per_worker

    for engine in ("qengine pull", "qengine prefetch", "duckdb", "spark local[2]"):
        r = best(engine)
        if r is None:
            continue
        table.add_row(
            engine, f"{r['seconds']:.2f}", f"{r['seconds'] / duck['seconds']:.2f}",
            f"{r.get('map_seconds', 0):.2f}" if "map_seconds" in r else "-",
            f"{r.get('reduce_seconds', 0):.2f}" if "reduce_seconds" in r else "-",
            f"{r['reducer_read_wait']:.3f}" if "reducer_read_wait" in r else "-",
            f"{r['load_max_over_mean']:.3f}" if r.get("load_max_over_mean") else "-",
            f"{r['peak_rss'] / 2**20:,.0f}", f"{r['peak_rss'] / per_worker:.2f}",
            f"{memory(r):.2f}" if engine.startswith("qengine") else "-",
            f"{r.get('spilled', 0):,}", str(r["valid"]),
        )
    console.print(table)
    pull, pre = best("qengine pull"), best("qengine prefetch")
    ratios = {
        "prefetch_over_pull": pre["seconds"] / pull["seconds"],
        "prefetch_over_duckdb": pre["seconds"] / duck["seconds"],
        "pull_over_duckdb": pull["seconds"] / duck["seconds"],
        "prefetch_memory_over_data_per_worker": memory(pre),
        "pull_memory_over_data_per_worker": memory(pull),
    }
    spark = best("spark local[2]")
    if spark is not None:
        ratios["spark_over_prefetch"] = spark["seconds"] / pre["seconds"]
    console.print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    report = args.out or os.path.join(cache_dir(), "bench-terasort.json")
    write_json({"args": vars(args), "ratios": ratios, "fixed_overhead": fixed, "runs": runs}, report)
    chart = os.path.splitext(report)[0] + ".png"
    best_times = ", ".join(f"{engine} {best(engine)['seconds']:.2f} s" for engine in dict.fromkeys(r["engine"] for r in runs))
    plot_timelines({"TeraSort": {mode: median_run(timed[mode]) for mode in timed}}, chart,
                   f"TeraSort {args.records:,} records, {args.workers} workers: task timelines (the median run of {args.repeat} "
                   f"in each mode)\nbest times: {best_times}")
    console.print(f"report: {report}\ntimelines: {chart}")
    return 0 if all(r["valid"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
