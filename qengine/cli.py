"""The ``qengine`` command line: ``sql`` (one-shot or REPL), ``demo``, and the harnesses."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

import qengine
from qengine.errors import Error
from qengine.options import DEFAULT_WORKERS, SessionSettings

HISTORY = os.path.expanduser("~/.qengine_history")


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


def register_directory(con: Any, directory: str) -> list[str]:
    """Register every Parquet/CSV file or directory of Parquet files under ``directory`` as a table."""
    if not os.path.isdir(directory):
        raise qengine.ProgrammingError(f"data directory {directory} does not exist")
    names = []
    con.session.allow_root(directory)
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        stem, ext = os.path.splitext(entry)
        if entry.startswith((".", "_")):
            continue
        if os.path.isdir(path):
            has_parquet = any(f.endswith((".parquet", ".parq")) for _, _, files in os.walk(path) for f in files)
            if has_parquet:
                con.register_parquet(entry, path)
                names.append(entry)
        elif ext in (".parquet", ".parq"):
            con.register_parquet(stem, path)
            names.append(stem)
        elif ext in (".csv", ".tsv"):
            con.register_csv(stem, path, delimiter="\t" if ext == ".tsv" else ",")
            names.append(stem)
    return names


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
    }


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
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


# ---- output ----------------------------------------------------------------------------


def write_result(table: pa.Table, fmt: str, output: str | None) -> None:
    if fmt == "parquet":
        if not output:
            raise qengine.ProgrammingError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq

        pq.write_table(table, output)
        return
    with _open_output(output) as out:
        if fmt == "csv":
            import pyarrow.csv as pacsv

            buf = pa.BufferOutputStream()
            pacsv.write_csv(table, buf)
            out.write(buf.getvalue().to_pybytes().decode())
        elif fmt == "json":
            columns = table.column_names
            rows = [dict(zip(columns, r, strict=True)) for r in zip(*[c.to_pylist() for c in table.columns], strict=True)]
            out.write(json.dumps(rows, default=str, indent=None) + "\n")
        else:
            print_table(table, out)


@contextlib.contextmanager
def _open_output(output: str | None) -> Iterator[Any]:
    if output:
        with open(output, "w") as f:
            yield f
    else:
        yield sys.stdout


def print_table(table: pa.Table, out: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, width=None if out.isatty() else 250)
    shown = table.slice(0, 1000)
    view = Table(show_header=True, header_style="bold")
    for f in table.schema:
        view.add_column(Text(f"{f.name}\n{qengine.types.type_code(f.type).lower()}"), justify="right" if qengine.types.type_code(f.type) == qengine.NUMBER else "left")
    for row in zip(*[c.to_pylist() for c in shown.columns], strict=True):
        view.add_row(*[Text("NULL" if v is None else str(v)) for v in row])
    console.print(view)
    more = f" (first {shown.num_rows} shown)" if shown.num_rows < table.num_rows else ""
    console.print(f"{table.num_rows} row(s){more}")


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


# ---- sql ---------------------------------------------------------------------------------


def run_statement(con: Any, sql: str, args: argparse.Namespace) -> None:
    with progress_bar(sys.stderr.isatty() and not args.no_progress) as progress:
        cur = con.cursor().execute(sql, progress=progress)
    if cur.description is not None:
        write_result(cur.fetch_arrow_table(), args.format, args.output)
    elif cur.rowcount >= 0:
        print(f"{cur.rowcount} row(s) affected")


def repl(con: Any, args: argparse.Namespace) -> int:
    try:
        import readline

        with contextlib.suppress(OSError):
            readline.read_history_file(HISTORY)
    except ImportError:  # pragma: no cover - readline missing on some platforms
        readline = None
    print("qengine SQL shell. End statements with ';'. .tables, .schema NAME, .quit")
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("qengine> " if not buffer else "   ...> ")
            except EOFError:
                print()
                break
            stripped = line.strip()
            if not buffer and stripped.startswith("."):
                if _dot_command(con, stripped, args):
                    break
                continue
            buffer.append(line)
            if stripped.endswith(";"):
                sql = "\n".join(buffer)
                buffer = []
                try:
                    run_statement(con, sql, args)
                except Error as e:
                    print(f"Error: {e}", file=sys.stderr)
                except KeyboardInterrupt:
                    print("interrupted", file=sys.stderr)
    finally:
        if readline is not None:
            with contextlib.suppress(OSError):
                readline.write_history_file(HISTORY)
    return 0


def _dot_command(con: Any, command: str, args: argparse.Namespace) -> bool:
    """Run a dot command; True means quit."""
    parts = command.split()
    name = parts[0].lower()
    if name in (".quit", ".exit"):
        return True
    if name == ".tables":
        for t in con.tables():
            print(t)
    elif name == ".schema":
        if len(parts) != 2:
            print("usage: .schema NAME", file=sys.stderr)
            return False
        try:
            schema = con.session.table_schema(parts[1])
        except Error as e:
            print(f"Error: {e}", file=sys.stderr)
            return False
        cols = ",\n  ".join(f"{f.name} {qengine.types.type_code(f.type)}" for f in schema)
        print(f"CREATE TABLE {parts[1]} (\n  {cols}\n);")
    elif name == ".help":
        print(".tables             list tables\n.schema NAME        show a table's columns\n.quit               leave")
    else:
        print(f"unknown command {name}; try .help", file=sys.stderr)
    return False


def _connect(args: argparse.Namespace) -> Any:
    """A local cluster, or with --cluster the standalone coordinator at HOST:PORT."""
    options = connection_options(args)
    if not args.cluster:
        return qengine.connect(**options)
    from qengine.cluster_cli import read_pem, read_token

    del options["workers"], options["shuffle_memory"]
    root = read_pem(args.tls_ca) if args.tls_ca else None
    return qengine.connect(f"qengine://{args.cluster}", token=read_token(args.token_file), tls_root_certs=root, **options)


def cmd_sql(args: argparse.Namespace) -> int:
    sql = args.command or args.sql
    with _connect(args) as con:
        for directory in args.data or []:
            register_directory(con, directory)
        if sql is None:
            if not sys.stdin.isatty():
                sql = sys.stdin.read()
            else:
                return repl(con, args)
        run_statement(con, sql, args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qengine", description="A distributed SQL engine over Parquet.")
    sub = parser.add_subparsers(dest="cmd", required=True)

    sql = sub.add_parser("sql", help="run SQL (or start a REPL) on a local cluster")
    sql.add_argument("sql", nargs="?", help="the SQL to run; omit for a REPL")
    sql.add_argument("-c", "--command", help="the SQL to run")
    sql.add_argument("-d", "--data", action="append", help="register every Parquet/CSV file or directory under DIR")
    sql.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    sql.add_argument("-o", "--output", help="write the result to FILE")
    sql.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cluster_arguments(sql)
    sql.add_argument("--cluster", metavar="HOST:PORT", help="run on the standalone coordinator at HOST:PORT instead of a local cluster")
    sql.add_argument("--token-file", help="with --cluster: file holding the cluster token")
    sql.add_argument("--tls-ca", help="with --cluster: PEM root certificates to verify the coordinator with (turns TLS on)")
    sql.set_defaults(func=cmd_sql)

    from qengine import cluster_cli

    cluster_cli.add_parsers(sub)

    from qengine import demo

    demo.add_parser(sub)
    try:
        from tpcds import cli as tpcds_cli
    except ImportError:  # pragma: no cover - the harness ships with the package
        tpcds_cli = None
    if tpcds_cli is not None:
        tpcds_cli.add_parser(sub)
    try:
        from bench import terasort_cli
    except ImportError:  # pragma: no cover - the harness ships with the package
        terasort_cli = None
    if terasort_cli is not None:
        terasort_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except Error as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
