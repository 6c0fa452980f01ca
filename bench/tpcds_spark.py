"""TPC-DS on Spark ``local[2]`` against qengine and DuckDB, in one run.

    python bench/tpcds_spark.py --data /tmp/ds1 [--queries 1-10,42] [--repeat 3] [--out report.json]

qengine and DuckDB run through ``tpcds.run`` (every qengine answer is checked against DuckDB;
each query warmed up in both, then timed ``--repeat`` times in alternating order). Spark, in a
session of its own afterwards, runs each query once untimed and then ``--repeat`` times; its
time is the median. Spark runs the same query texts, transpiled from DuckDB's dialect by sqlglot, over the same
Parquet files. A query Spark cannot run is reported with its error and left out of the totals,
so the ratio compares the same queries. It needs pyspark and a Java runtime.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import sqlglot

from qengine.api.options import DEFAULT_WORKERS
from qengine.cli.common import cache_dir
from tpcds.extension import queries as all_queries
from tpcds.report import write_json
from tpcds.run import parse_selection, run, table_directories


def spark_times(data: str, selection: list[int], repeat: int) -> dict[int, float | str]:
    """Median seconds per query on Spark local[2] over ``repeat`` runs after an untimed one, or
    the error text of a query it could not run."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("tpcds")
             .config("spark.driver.memory", "8g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for table, path in table_directories(data).items():
            spark.read.parquet(path).createOrReplaceTempView(table)
        texts = all_queries()
        out: dict[int, float | str] = {}
        for number in selection:
            sql = sqlglot.transpile(texts[number], read="duckdb", write="spark")[0]
            times = []
            try:
                for _ in range(repeat + 1):  # the first one warms up
                    t0 = time.perf_counter()
                    spark.sql(sql).collect()
                    times.append(time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001 - any Spark failure is reported per query
                out[number] = str(e).splitlines()[0][:300]
            else:
                out[number] = statistics.median(times[1:])
            print(f"spark q{number}: {out[number] if isinstance(out[number], str) else f'{out[number]:.2f}s'}", flush=True)
        return out
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="TPC-DS Parquet from `qengine tpcds gen`")
    parser.add_argument("--queries", default=None, help="e.g. 1-10,42 (default: all 99)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each query in each engine, after a warm-up")
    parser.add_argument("--out", default=None, help="JSON report (default: <cache>/bench-tpcds-spark.json)")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("pyspark") is None:
        print("pyspark is not installed: pip install pyspark (it needs a Java runtime)", file=sys.stderr)
        return 2
    selection = parse_selection(args.queries)
    report = run(args.data, selection, {"workers": args.workers}, repeat=args.repeat)
    spark = spark_times(args.data, selection, args.repeat)
    common = [q for q in report.queries
              if q.ok and q.qengine_seconds is not None and not isinstance(spark[q.query], str)]
    totals = {
        "queries": len(selection),
        "qengine_correct": report.correct,
        "spark_ran": sum(not isinstance(v, str) for v in spark.values()),
        "compared": len(common),
        "qengine_seconds": sum(q.qengine_seconds for q in common),
        "duckdb_seconds": sum(q.duckdb_seconds for q in common),
        "spark_seconds": sum(spark[q.query] for q in common),
    }
    totals["spark_over_qengine"] = totals["spark_seconds"] / totals["qengine_seconds"]
    totals["qengine_over_duckdb"] = totals["qengine_seconds"] / totals["duckdb_seconds"]
    print(", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in totals.items()))
    path = args.out or os.path.join(cache_dir(), "bench-tpcds-spark.json")
    write_json({"totals": totals, "spark": {str(k): v for k, v in spark.items()}, **report.as_dict()}, path)
    print(f"report: {path}")
    return 0 if report.correct == len(selection) else 1


if __name__ == "__main__":
    sys.exit(main())
