"""``qengine terasort gen|run|validate``."""

from __future__ import annotations

import argparse
import sys

from qengine.cli.common import add_cluster_arguments, connection_options, progress_bar


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("terasort", help="TeraSort: generate gensort records, sort them through the engine, validate")
    tp = p.add_subparsers(dest="terasort_cmd", required=True)
    gen = tp.add_parser("gen", help="write records in the gensort layout")
    gen.add_argument("--records", type=int, required=True, help="number of 100-byte records")
    gen.add_argument("--out", required=True)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--skew", action="store_true", help="draw keys so some key ranges are far denser")
    gen.add_argument("--raw", action="store_true", help="flat binary gensort files instead of Parquet")
    gen.add_argument("--per-file", type=int, default=1_000_000, help="records per file (default 1,000,000)")
    gen.add_argument("--force", action="store_true", help="overwrite a non-empty output directory")
    gen.set_defaults(func=cmd_gen)
    run = tp.add_parser("run", help="sort the records with the engine (range exchange + local sorts)")
    run.add_argument("--in", dest="input", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--force", action="store_true", help="replace the part files of a non-empty output directory")
    add_cluster_arguments(run)
    run.set_defaults(func=cmd_run)
    val = tp.add_parser("validate", help="check order, record count and checksum, as valsort does")
    val.add_argument("--in", dest="input", required=True)
    val.add_argument("--out", required=True)
    val.set_defaults(func=cmd_validate)


def cmd_gen(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from sortbench.gensort import generate

    with Progress(transient=True) as bar:
        task = bar.add_task("gensort", total=args.records)
        paths = generate(args.records, args.out, args.seed, args.skew, args.raw, args.per_file, args.force,
                         progress=lambda done, total: bar.update(task, completed=done))
    print(f"wrote {args.records:,} records in {len(paths)} files to {args.out}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console

    from qengine.planner.explain import shuffle_summary
    from sortbench.sortjob import sort

    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.perf_counter()
    with progress_bar(True, "sorting") as progress:
        count, stats = sort(args.input, args.out, connection_options(args), args.force, progress=progress)
    console.print(f"sorted {count:,} records into {args.out} in {time.perf_counter() - started:.2f}s")
    for s in stats.stages:
        d = s.as_dict()
        console.print(f"stage {d['stage']} ({d['output']}): {d['tasks']} tasks, {d['rows']:,} rows, {d['seconds']:.2f}s")
    for shuffle in stats.shuffles:
        console.print("shuffle: " + shuffle_summary(shuffle.as_dict()), highlight=False)
    console.print(f"spilled: {stats.spilled_bytes:,} bytes")
    console.print(stats.recovery.summary())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from sortbench.valsort import validate

    verdict = validate(args.input, args.out)
    i, o = verdict.input, verdict.output
    print(f"input:  {i.records:,} records in {i.files} files, checksum {i.checksum:x}")
    print(f"output: {o.records:,} records in {o.files} files, checksum {o.checksum:x}, duplicate keys {o.duplicates:,}")
    if verdict.ok:
        print("SUCCESS: globally sorted, same record count, same checksum")
        return 0
    for problem in verdict.problems:
        print(f"FAILURE: {problem}", file=sys.stderr)
    return 1
