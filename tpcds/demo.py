"""``qengine demo``: generate TPC-DS data, run queries on a local cluster, check them against DuckDB.

The README's first command runs this, so a new user sees the whole path at once: generated
Parquet data, a cluster of worker processes, distributed plans with exchanges, answers that
match DuckDB's, and the time each engine took.
"""

from __future__ import annotations

import argparse
import os
import time

import qengine
from tpcds.compare import compare

# A tenth of the default split size and broadcast threshold: they treat SF 0.1 as the defaults
# treat SF 1 (see run).
SPLIT_SIZE = "12MB"
BROADCAST_THRESHOLD = "1MB"

SHOWCASE = {
    "revenue by store and year (join + aggregate + sort)": """
        SELECT s_store_name, d_year, count(*) AS sales, sum(ss_net_paid) AS revenue
        FROM store_sales JOIN store ON ss_store_sk = s_store_sk
                         JOIN date_dim ON ss_sold_date_sk = d_date_sk
        GROUP BY s_store_name, d_year
        ORDER BY revenue DESC
        LIMIT 10""",
    "top customers per state (window over a shuffle join)": """
        SELECT * FROM (
            SELECT ca_state, c_customer_id, sum(ss_net_paid) AS spent,
                   rank() OVER (PARTITION BY ca_state ORDER BY sum(ss_net_paid) DESC) AS rnk
            FROM store_sales JOIN customer ON ss_customer_sk = c_customer_sk
                             JOIN customer_address ON c_current_addr_sk = ca_address_sk
            GROUP BY ca_state, c_customer_id) t
        WHERE rnk = 1
        ORDER BY spent DESC
        LIMIT 10""",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="generate TPC-DS data and run queries on a local cluster, checked against DuckDB")
    p.add_argument("--sf", type=float, default=0.1, help="TPC-DS scale factor (default 0.1)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--split-size", default=SPLIT_SIZE, help=f"bytes of table data per scan task (default {SPLIT_SIZE})")
    p.add_argument("--data", help="data directory (default: the cache directory)")
    p.add_argument("--queries", default="3,7,42,55,96", help="TPC-DS query numbers to run as well")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from qengine.cli.common import cache_dir, register_directory
    from qengine.cli.output import print_table
    from tpcds.extension import queries as tpcds_queries
    from tpcds.gen import generate
    from tpcds.run import parse_selection, reference

    console = Console()
    data = args.data or os.path.join(cache_dir(), f"tpcds-sf{args.sf:g}")
    if not os.path.isdir(data) or not os.listdir(data):
        console.print(f"Generating TPC-DS at scale factor {args.sf:g} into {data} …")
        with console.status("dsdgen") as status:
            generate(args.sf, data, progress=lambda table, i, n: status.update(f"writing {table} ({i}/{n})"))
    console.print(f"Data: {data}")
    ref = reference(data)
    work = dict(SHOWCASE)
    texts = tpcds_queries()
    # An empty --queries runs the showcase only (parse_selection would read it as all 99).
    for n in parse_selection(args.queries) if args.queries.strip() else []:
        work[f"TPC-DS query {n}"] = texts[n]
    summary = Table(title="qengine vs DuckDB on the same Parquet")
    for column in ("query", "rows", "stages", "tasks", "shuffled", "qengine s", "duckdb s", "answer"):
        summary.add_column(column)
    failures = 0
    started = time.perf_counter()
    # The demo's tables are small: at the default split size every one would be a single
    # split, read in one task, and a fact table's few columns would be broadcast: with smaller
    # splits and threshold the demo shows the distributed plans SF 1 runs.
    with qengine.connect(workers=args.workers, split_size=args.split_size, broadcast_threshold=BROADCAST_THRESHOLD) as con:
        console.print(f"Local cluster: {args.workers} worker processes, started in {time.perf_counter() - started:.2f}s")
        register_directory(con, data)
        first = True
        for title, sql in work.items():
            t0 = time.perf_counter()
            cur = con.execute(sql)
            got = cur.fetch_arrow_table()
            t1 = time.perf_counter()
            expected = ref.execute(sql).to_arrow_table()
            t2 = time.perf_counter()
            verdict = compare(got, expected, sql)
            failures += not verdict.ok
            stats = cur.stats
            summary.add_row(title, str(got.num_rows), str(len(stats.stages)), str(stats.tasks), f"{stats.shuffle_bytes:,}",
                            f"{t1 - t0:.2f}", f"{t2 - t1:.2f}", "matches" if verdict.ok else f"WRONG: {verdict.message}")
            if first:
                console.rule(title)
                print_table(got, console.file)
                console.rule("EXPLAIN ANALYZE")
                for (line,) in con.execute("EXPLAIN ANALYZE " + sql).fetchall():
                    console.print(line, markup=False, highlight=False)
                first = False
    console.print(summary)
    console.print("all answers match DuckDB" if not failures else f"{failures} answer(s) differ from DuckDB")
    return 1 if failures else 0
