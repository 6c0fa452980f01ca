"""``qengine tpcds gen|run``."""

from __future__ import annotations

import argparse
import os

from qengine.cli.common import add_cluster_arguments, cache_dir, connection_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tpcds", help="TPC-DS: generate data, run the 99 queries checked against DuckDB")
    tp = p.add_subparsers(dest="tpcds_cmd", required=True)
    gen = tp.add_parser("gen", help="generate TPC-DS Parquet data with DuckDB's dsdgen")
    gen.add_argument("--sf", type=float, default=1.0, help="scale factor (default 1)")
    gen.add_argument("--out", required=True, help="output directory (one Parquet directory per table)")
    gen.add_argument("--force", action="store_true", help="overwrite a non-empty output directory")
    gen.set_defaults(func=cmd_gen)
    run = tp.add_parser("run", help="run TPC-DS queries on a local cluster and check them against DuckDB")
    run.add_argument("--data", required=True, help="directory written by `qengine tpcds gen`")
    run.add_argument("--queries", help="e.g. 1-10,42 (default: all 99)")
    run.add_argument("--repeat", type=int, default=3,
                     help="timed runs of each query in each engine, after one untimed warm-up in each; the order alternates (default 3)")
    run.add_argument("--out", help="JSON report path (default: <cache>/tpcds-report.json); the PNG goes beside it")
    add_cluster_arguments(run)
    run.set_defaults(func=cmd_run)


def cmd_gen(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from tpcds.gen import generate

    with Progress(transient=True) as bar:
        task = bar.add_task(f"dsdgen sf={args.sf:g}", total=None)

        def progress(table: str, done: int, total: int) -> None:
            bar.update(task, description=f"writing {table}", completed=done, total=total)

        tables = generate(args.sf, args.out, force=args.force, progress=progress)
    print(f"wrote {len(tables)} tables to {args.out}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    from rich.table import Table

    from tpcds.report import plot_tpcds, write_json
    from tpcds.run import parse_selection, run

    console = Console()
    selection = parse_selection(args.queries)
    options = connection_options(args)
    with Progress("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("TPC-DS", total=len(selection))

        def progress(done: int, entry) -> None:
            bar.update(task, completed=done, description=f"q{entry.query} {'ok' if entry.ok else 'FAILED'}")
            if not entry.ok:
                bar.console.print(f"[red]q{entry.query}[/red] {entry.error}", markup=True, highlight=False)

        report = run(args.data, selection, options, progress, repeat=args.repeat)
    out = args.out or os.path.join(cache_dir(), "tpcds-report.json")
    data = report.as_dict()
    write_json(data, out)
    png = os.path.splitext(out)[0] + ".png"
    plot_tpcds(report, png, f"TPC-DS on {args.workers} workers vs DuckDB ({os.path.basename(os.path.abspath(args.data))})")
    totals = data["totals"]
    table = Table(title=f"TPC-DS: medians of {args.repeat} alternated runs per query, both engines warm")
    table.add_column("total")
    table.add_column("value", justify="right")
    for key in ("queries", "correct", "qengine_seconds", "duckdb_seconds", "ratio_qengine_over_duckdb", "ratio_range_over_repeats",
                "geomean_ratio", "small_queries", "small_overhead_ms"):
        value = totals[key]
        table.add_row(key.replace("_", " "), "–".join(map(str, value)) if isinstance(value, list) else str(value))
    console.print(table)
    console.print(f"report: {out}\nplot:   {png}")
    failed = len(report.queries) - report.correct
    if failed:
        console.print(f"[red]{failed} of {len(selection)} queries failed[/red]")
        return 1
    return 0


