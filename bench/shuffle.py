"""Shuffle benchmark: the prefetch exchange (SCache) against the pull baseline, in one run.

Three jobs over generated Parquet data on a local cluster, each run in both modes, alternately:

- groupby:  one hash shuffle of every row (a non-decomposable aggregate, like Spark's
            GroupByTest), keys drawn from a skewed distribution;
- sort:     a range-partitioned sort of Zipf-skewed keys (s ≈ 1.1), kept distributed (CTAS);
- join:     two hash shuffles feeding one join stage, then an aggregate.

Every job runs once untimed in each mode first (both clusters warm), then ``--repeat`` times
in each mode, the order of the modes alternating from one repeat to the next (pull first, then
prefetch first). Per job and mode it prints medians with their range of job time, map and
reduce stage times, the reducers' shuffle-read wait, the push tail, bytes moved between hosts,
the size-prediction error, reducer load balance (MinHeap next to naive round-robin), bytes
spilled, and the prefetch/pull ratios of the medians. Timings are from this run only. Beside
the JSON report, a PNG of each job's task timelines, pull next to prefetch (its median run in
each mode), shows where prefetch's reducers overlap the map stage.

    python bench/shuffle.py [--rows 2000000] [--workers 2] [--partitions 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from timeline import median_run, plot_timelines

import qengine
from qengine.api.options import DEFAULT_WORKERS
from qengine.cli.common import cache_dir, register_directory
from qengine.exchange.sampling import DEFAULT_SAMPLES_PER_PARTITION
from qengine.runtime.stats import QueryStats
from tpcds.report import write_json

JOBS = {
    "groupby": "SELECT k, length(list(payload)) AS n FROM kv GROUP BY k",
    "sort": "CREATE OR REPLACE TABLE sorted AS SELECT * FROM zipf ORDER BY key",
    "join": (
        "SELECT l.g, count(*) AS n, sum(r.v) AS s FROM lefts l JOIN rights r ON l.k = r.k GROUP BY l.g"
    ),
}


def generate(root: str, rows: int, files: int, seed: int = 7) -> dict[str, str]:
    """Parquet inputs, several files each so every job has several rounds of map tasks."""
    rng = np.random.default_rng(seed)
    paths = {}

    def write(name: str, table: pa.Table) -> None:
        path = os.path.join(root, name)
        os.makedirs(path, exist_ok=True)
        per = -(-table.num_rows // files)
        for i in range(files):
            pq.write_table(table.slice(i * per, per), os.path.join(path, f"part-{i:03d}.parquet"), row_group_size=per)
        paths[name] = path

    payload = pa.array(np.char.mod("%040d", rng.integers(0, 10**12, rows)).astype(object), pa.string())
    skewed = (rng.zipf(1.3, rows) % 50_000).astype(np.int64)
    write("kv", pa.table({"k": skewed, "payload": payload}))
    zipf = rng.zipf(1.1, rows).astype(np.int64)
    write("zipf", pa.table({"key": zipf, "payload": payload}))
    n = rows // 2
    write("lefts", pa.table({"k": rng.integers(0, n, n), "g": rng.integers(0, 100, n), "pad": payload[:n]}))
    write("rights", pa.table({"k": rng.integers(0, n, n), "v": rng.random(n), "pad": payload[n : 2 * n]}))
    return paths


def _values(runs: list[dict], key: str, missing: float | None) -> list[float]:
    """``key`` over ``runs``: None values count as ``missing``, or are dropped when that is None too."""
    return [v for v in (r[key] if r[key] is not None else missing for r in runs) if v is not None]


def median_of(runs: list[dict], key: str, missing: float | None = None) -> float | None:
    """Median of ``key`` over ``runs`` (None values as ``missing``; None when nothing is left).
    Shared with bench/netcluster.py so both summarize alike."""
    values = _values(runs, key, missing)
    return statistics.median(values) if values else None


def spread(runs: list[dict], key: str, unit: str = "s", missing: float | None = None) -> str:
    """``median (min–max)`` of ``key`` over ``runs`` (None values as ``missing``), or "-"."""
    values = _values(runs, key, missing)
    if not values:
        return "-"
    if unit == "MB":
        return f"{statistics.median(values) / 1e6:.1f} ({min(values) / 1e6:.1f}–{max(values) / 1e6:.1f})"
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def mode_order(round_: int) -> tuple[str, str]:
    """The order the two modes run in, repeat by repeat: pull first, then prefetch first, so
    neither always runs on the state the other leaves behind."""
    return ("pull", "prefetch") if round_ % 2 == 0 else ("prefetch", "pull")


def ratio(prefetch: float | None, pull: float | None) -> float | None:
    """prefetch/pull, or None when either is missing or pull is 0 (nothing to compare with)."""
    return prefetch / pull if pull and prefetch is not None else None


def timed_run(con, sql: str) -> tuple[float, QueryStats]:
    """Run ``sql`` to its last row: (seconds, its stats)."""
    t0 = time.perf_counter()
    cur = con.execute(sql)
    if cur.description is not None:
        cur.fetch_arrow_table()
    return time.perf_counter() - t0, cur.stats


def measure(con, job: str, sql: str) -> dict:
    """One timed run of ``job``, summarized for the table and the JSON report."""
    return summarize(job, *timed_run(con, sql))


def summarize(job: str, elapsed: float, stats: QueryStats) -> dict:
    shuffles = [s for s in stats.shuffles if s.map_tasks > 1 or s.remote_bytes]
    main = max(shuffles, key=lambda s: sum(s.actual)) if shuffles else None
    consumers = [st for st in stats.stages if main is not None and st.stage > main.stage]
    reduce_stage = next((st for st in consumers if st.tasks and st.rows_in), None)
    worst, mean = main.prediction_errors() if main else (None, None)
    return {
        "job": job,
        "seconds": elapsed,
        "map_seconds": stats.stages[main.stage].seconds if main else None,
        "reduce_seconds": reduce_stage.seconds if reduce_stage else None,
        "read_wait": sum(s.read_wait_seconds for s in stats.shuffles),
        "push_tail": sum(s.push_tail_seconds for s in stats.shuffles),
        "remote_bytes": sum(s.remote_bytes for s in stats.shuffles),
        "shuffle_bytes": sum(sum(s.actual) for s in stats.shuffles),
        "prediction_max_error": worst,
        "prediction_mean_error": mean,
        "load": main.imbalance(main.host_loads) if main else None,
        "round_robin_load": main.imbalance(main.naive_host_loads) if main else None,
        "spilled": stats.spilled_bytes,
        "recovery": dataclasses.asdict(stats.recovery),
        "hits": f"{sum(s.blocks_local for s in stats.shuffles)}/{sum(s.blocks_total for s in stats.shuffles)}",
        "shuffles": [s.as_dict() for s in stats.shuffles],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=16, help="input files per table (map tasks)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--partitions", type=int, default=16, help="reducers per shuffle")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per job and mode, alternating which mode goes first")
    parser.add_argument("--shuffle-memory", default=None, help="per-worker budget, e.g. 64MB, to exercise spilling")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES_PER_PARTITION, help="s: range samples per reducer per map task (s×p)")
    parser.add_argument("--prefetch-fraction", type=float, default=0.5)
    parser.add_argument("--out", default=None, help="JSON report (default: <cache>/bench-shuffle.json); PNG beside it")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    root = os.path.join(cache_dir(), f"bench-shuffle-{args.rows}-{args.files}")
    if not os.path.isdir(root):
        console.print(f"generating {args.rows:,} rows per table under {root}")
        generate(root, args.rows, args.files)
    jobs = [j for j in args.jobs.split(",") if j]
    results: dict[str, dict[str, list[dict]]] = {j: {"pull": [], "prefetch": []} for j in jobs}
    timed: dict[str, dict[str, list[tuple[float, QueryStats]]]] = {j: {"pull": [], "prefetch": []} for j in jobs}
    clusters = {}
    try:
        for mode in ("pull", "prefetch"):
            clusters[mode] = qengine.connect(
                workers=args.workers, shuffle=mode, partitions=args.partitions, broadcast_threshold=0,
                split_size="1MB", coalesce_size=0, shuffle_memory=args.shuffle_memory,
                samples_per_partition=args.samples, prefetch_fraction=args.prefetch_fraction,
            )
            register_directory(clusters[mode], root)
        for job in jobs:
            for mode in ("pull", "prefetch"):
                timed_run(clusters[mode], JOBS[job])  # warm-up, untimed
            for round_ in range(args.repeat):
                for mode in mode_order(round_):
                    seconds, stats = timed_run(clusters[mode], JOBS[job])
                    results[job][mode].append(summarize(job, seconds, stats))
                    timed[job][mode].append((seconds, stats))
    finally:
        for con in clusters.values():
            con.close()

    def fmt(x: float | None, unit: str = "s") -> str:
        if x is None:
            return "-"
        return f"{x:,.0f}" if unit == "B" else f"{x:.3f}"

    table = Table(title=f"prefetch vs pull: {args.rows:,} rows, {args.workers} workers, {args.partitions} reducers "
                        f"(median (range) of {args.repeat}, seconds)")
    for col in ("job", "mode", "job time", "map stage", "reduce stage", "reducer read wait", "push tail",
                "remote MB", "pred. max err", "load max/mean", "round-robin load", "spilled", "hits"):
        table.add_column(col)
    summary = {}
    for job in jobs:
        for mode in ("pull", "prefetch"):
            runs = results[job][mode]
            last = runs[-1]
            err = last["prediction_max_error"]
            table.add_row(
                job, mode, spread(runs, "seconds"), spread(runs, "map_seconds"), spread(runs, "reduce_seconds"),
                spread(runs, "read_wait"), spread(runs, "push_tail"), spread(runs, "remote_bytes", "MB"),
                "-" if err is None else f"{100 * err:.1f}%", fmt(last["load"], ""), fmt(last["round_robin_load"], ""),
                fmt(last["spilled"], "B"), last["hits"],
            )
        p, q = results[job]["pull"], results[job]["prefetch"]
        ratios = {
            key: ratio(median_of(q, key), median_of(p, key))
            for key in ("seconds", "map_seconds", "reduce_seconds", "read_wait")
        }
        summary[job] = ratios
        table.add_row(job, "prefetch/pull", *[fmt(ratios[k], "") for k in ("seconds", "map_seconds", "reduce_seconds", "read_wait")],
                      "", "", "", "", "", "", "", end_section=True)
    console.print(table)
    out = args.out or os.path.join(cache_dir(), "bench-shuffle.json")
    write_json({"args": vars(args), "ratios": summary, "runs": results}, out)
    chart = os.path.splitext(out)[0] + ".png"
    plot_timelines({job: {mode: median_run(runs) for mode, runs in timed[job].items()} for job in jobs}, chart,
                   f"Task timelines, pull vs prefetch: {args.rows:,} rows, {args.workers} workers, {args.partitions} reducers "
                   f"(the median run of {args.repeat} in each mode)")
    console.print(f"report: {out}\ntimelines: {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
