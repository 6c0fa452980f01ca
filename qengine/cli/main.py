"""The ``qengine`` command line: ``sql`` (one-shot or REPL), ``coordinator``, ``worker``, and the
sub-commands other packages declare in the ``qengine.commands`` entry-point group (the TPC-DS and
TeraSort harnesses, the demo). Discovering them by entry point keeps the arrows pointing one way:
the harnesses import the engine, never the reverse."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Any

import qengine
from qengine.cli import cluster, serve
from qengine.cli.common import add_cluster_arguments, announce_ui, connection_options, register_directory
from qengine.cli.repl import repl, run_statement
from qengine.errors import Error

COMMANDS_GROUP = "qengine.commands"


def _connect(args: argparse.Namespace, one_statement: bool) -> Any:
    """A local cluster, or with --cluster the standalone coordinator at HOST:PORT. A local
    cluster that serves one statement starts its workers only if the statement needs them."""
    options = connection_options(args)
    if not args.cluster:
        con = qengine.connect(**options, output_roots=args.output_root, lazy_start=one_statement)
        announce_ui(con)
        return con
    if args.ui:
        raise qengine.ProgrammingError("--ui serves a local cluster's web UI; a standalone coordinator serves its own (qengine coordinator --ui HOST:PORT)")
    if args.output_root:
        raise qengine.ProgrammingError("--output-root is set on the coordinator (qengine coordinator --output-root DIR), not with --cluster")
    del options["workers"], options["shuffle_memory"], options["ui"]
    root = cluster.read_pem(args.tls_ca) if args.tls_ca else None
    return qengine.connect(f"qengine://{args.cluster}", token=cluster.read_token(args.token_file), tls_root_certs=root, **options)


def cmd_sql(args: argparse.Namespace) -> int:
    sql = args.command or args.sql
    with _connect(args, one_statement=sql is not None or not sys.stdin.isatty()) as con:
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
    sql.add_argument("--trace", metavar="FILE",
                     help="write the statement's run as a Chrome trace (chrome://tracing, Perfetto): tasks per worker slot")
    sql.add_argument("--output-root", action="append", metavar="DIR",
                     help="a directory COPY may write below (repeatable; default: the current directory)")
    sql.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cluster_arguments(sql)
    sql.add_argument("--cluster", metavar="HOST:PORT", help="run on the standalone coordinator at HOST:PORT instead of a local cluster")
    sql.add_argument("--token-file", help="with --cluster: file holding the cluster token")
    sql.add_argument("--tls-ca", help="with --cluster: PEM root certificates to verify the coordinator with (turns TLS on)")
    sql.set_defaults(func=cmd_sql)

    cluster.add_parsers(sub)
    serve.add_parser(sub)
    for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        command.load()(sub)
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
