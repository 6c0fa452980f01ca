"""What the ``qengine`` sub-commands share: the cache directory, data registration, the cluster
flags and the progress bar. The harnesses (``tpcds``, ``terasort``, ``demo``) import these, so
every command reads the same flags and writes under the same cache."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import qengine
from qengine.api.options import DEFAULT_WORKERS, SessionSettings
from qengine.catalog.access import inside
from qengine.planner.table_sources import SUFFIXES

PARQUET = SUFFIXES["parquet"]  # what a Parquet table's files are called


def cache_dir() -> str:
    """Where generated data, reports and plots go (never into git): $QENGINE_CACHE or ./.qengine-cache."""
    return os.environ.get("QENGINE_CACHE") or os.path.abspath(".qengine-cache")


def prepare_output_dir(out: str, force: bool) -> None:
    """Create ``out`` for a generator, refusing to clobber a non-empty one unless ``force`` (then wiped).

    Shared by ``tpcds gen`` and ``terasort gen`` so both refuse and overwrite the same way.
    """
    if os.path.isdir(out) and os.listdir(out):
        if not force:
            raise qengine.ProgrammingError(f"{out} exists and is not empty; pass --force to overwrite it")
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)


def directory_tables(directory: str) -> list[tuple[str, str, str]]:
    """The tables under ``directory`` as (name, kind, path): every Parquet or CSV file, and every
    directory holding Parquet files, named after it (kind "parquet", "csv" or "tsv").

    A directory of Parquet files is one table, a hive-partitioned dataset (``sales/y=2024/...``)
    included; ``directory`` itself is one, named after it, where its own subdirectories are
    partitions (``key=value``). An entry that links out of ``directory`` is skipped, and said so.
    """
    if not os.path.isdir(directory):
        raise qengine.ProgrammingError(f"data directory {directory} does not exist")
    tables = []
    entries = [e for e in sorted(os.listdir(directory)) if not e.startswith((".", "_"))]
    root = os.path.realpath(directory)
    leaving = {e: link for e in entries if (link := _link_out(os.path.join(directory, e), root))}
    for entry, link in leaving.items():  # a link out of the directory: serving it would read outside what was given
        print(f"qengine: skipped {os.path.join(directory, entry)}: {link} leads to {os.path.realpath(link)}, "
              f"outside {directory}", file=sys.stderr)
    entries = [e for e in entries if e not in leaving]
    partitions = {e for e in entries if "=" in e and _has_parquet(os.path.join(directory, e))}
    if partitions:
        tables.append((os.path.basename(os.path.normpath(os.path.abspath(directory))), "parquet", directory))
    for entry in entries:
        path = os.path.join(directory, entry)
        stem, ext = os.path.splitext(entry)
        if entry in partitions:
            continue
        if os.path.isdir(path):
            if _has_parquet(path):
                tables.append((entry, "parquet", path))
        elif ext in PARQUET:
            tables.append((stem, "parquet", path))
        elif ext in (".csv", ".tsv"):
            tables.append((stem, ext[1:], path))
    return tables


def _link_out(path: str, root: str) -> str | None:
    """The first path at or below ``path`` that leads out of ``root`` and that its table would
    read (a Parquet file not named ``.…`` or ``_…``; links to directories are not followed), if
    any: a table of a directory holding one such link failed every statement of a session it
    was registered in."""
    if not inside(os.path.realpath(path), [root]):
        return path
    for top, _, files in os.walk(path):
        for name in sorted(files):
            read = name.endswith(PARQUET) and not name.startswith((".", "_"))
            if read and not inside(os.path.realpath(os.path.join(top, name)), [root]):
                return os.path.join(top, name)
    return None


def register_directory(con: Any, directory: str) -> list[str]:
    """Register every table under ``directory`` (:func:`directory_tables`) with a connection."""
    tables = directory_tables(directory)
    con.session.allow_root(directory)
    for name, kind, path in tables:
        if kind == "parquet":
            con.register_parquet(name, path)
        else:
            con.register_csv(name, path, delimiter="\t" if kind == "tsv" else None)
    return [name for name, _, _ in tables]


def _has_parquet(path: str) -> bool:
    return os.path.isdir(path) and any(f.endswith(PARQUET) for _, _, files in os.walk(path) for f in files)


def connection_options(args: argparse.Namespace) -> dict[str, Any]:
    """``qengine.connect`` keyword arguments from the shared cluster flags."""
    return {
        "workers": args.workers,
        "dialect": args.dialect,
        "broadcast_threshold": args.broadcast_threshold,
        "replicate_size": args.replicate_size,
        "partitions": args.partitions,
        "split_size": args.split_size,
        "shuffle": args.shuffle,
        "shuffle_memory": args.shuffle_memory,
        "prefetch_fraction": args.prefetch_fraction,
        "speculation": args.speculation,
        "ui": args.ui or False,
    }


def announce_ui(con: Any) -> None:
    """Say where a connection's web UI is (``--ui``), on stderr: stdout holds results."""
    if con.ui_url is not None:
        print(f"qengine web UI: {con.ui_url}", file=sys.stderr, flush=True)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ui", nargs="?", const=True, metavar="HOST:PORT",
                        help="serve the local cluster's web UI (default 127.0.0.1, a free port) and print its URL on stderr")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help=f"worker processes of the local cluster (default {DEFAULT_WORKERS})")
    parser.add_argument("--partitions", type=int, default=None, help="reduce partitions per shuffle (default 2 per worker)")
    parser.add_argument(
        "--broadcast-threshold", default=SessionSettings.broadcast_threshold, help="max estimated bytes of a broadcast join side; 0 turns broadcast off"
    )
    parser.add_argument(
        "--replicate-size", default=SessionSettings.replicate_size,
        help="a broadcast Parquet table up to these bytes is read whole by each task that joins it; 0 never",
    )
    parser.add_argument(
        "--split-size", default=SessionSettings.split_size,
        help="bytes of table data per scan task, e.g. 64MB; a table of one split is read by one task",
    )
    parser.add_argument("--dialect", default="duckdb", help="SQL dialect of the input (default duckdb)")
    parser.add_argument("--shuffle", choices=["prefetch", "pull"], default="prefetch",
                        help="exchange mode: prefetch (SCache, default) or pull (Spark-like baseline)")
    parser.add_argument("--shuffle-memory", default=None, help="per-worker shuffle memory budget, e.g. 256MB (default: unlimited)")
    parser.add_argument("--prefetch-fraction", type=float, default=0.5,
                        help="share of map tasks that must finish before reducers are placed (default 0.5)")
    parser.add_argument("--no-speculation", dest="speculation", action="store_false",
                        help="launch no speculative copies of straggling tasks (LATE; on by default)")


@contextlib.contextmanager
def progress_bar(enabled: bool, description: str = "tasks") -> Iterator[Callable[[int, int], None] | None]:
    """A transient task progress bar on stderr, for interactive terminals.

    ``description`` labels the bar, so other commands (``terasort run``) can share it.
    """
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, console=None) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
