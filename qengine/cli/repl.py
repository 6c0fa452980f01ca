"""The interactive SQL shell of ``qengine sql``: statements ended by ';', history, dot commands."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

import sqlglot.errors
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from qengine.api.trace import chrome_trace
from qengine.catalog.types import column_type
from qengine.cli.common import progress_bar
from qengine.cli.output import write_result
from qengine.errors import Error, ProgrammingError

HISTORY = os.path.expanduser("~/.qengine_history")


def run_statement(con: Any, sql: str, args: argparse.Namespace) -> None:
    """Run each statement of ``sql`` in turn, showing each one's result, as DuckDB's shell
    does (it showed only the last); the first that fails stops the rest."""
    texts = statement_texts(sql, getattr(args, "dialect", None) or "duckdb")
    for number, text in enumerate(texts, 1):
        _run_one(con, text, args, last=number == len(texts))


def statement_texts(sql: str, dialect: str) -> list[str]:
    """``sql`` cut at its top-level semicolons, as written (a ';' inside a string or comment
    does not cut); text sqlglot cannot tokenize is left whole, for its statement to fail."""
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except (sqlglot.errors.SqlglotError, ValueError):
        return [sql]
    texts, start, words = [], 0, False  # words: the statement so far has a token besides ';'
    for token in tokens:
        if token.token_type != TokenType.SEMICOLON:
            words = True
            continue
        if words:
            texts.append(sql[start:token.start])
        start, words = token.start + 1, False
    if words:
        texts.append(sql[start:])
    return texts or [sql]


def _run_one(con: Any, sql: str, args: argparse.Namespace, last: bool = True) -> None:
    with progress_bar(sys.stderr.isatty() and not args.no_progress) as progress:
        cur = con.cursor().execute_scoped(sql, {}, progress=progress)  # no Python variables to read in FROM
    if cur.description is not None:
        write_result(cur.fetch_typed_table(), args.format, args.output)
    elif cur.rowcount >= 0:
        print(f"{cur.rowcount} row(s) affected")
    stats = cur.stats
    if stats is not None and stats.recovery.any():  # a statement that survived a failure says so
        print(stats.recovery.summary(), file=sys.stderr)
    if args.trace and last:  # the last statement's run, as a Chrome trace
        if stats is None:
            raise ProgrammingError("--trace: the statement ran no query to trace")
        with open(args.trace, "w") as f:
            json.dump(chrome_trace(stats), f)


def repl(con: Any, args: argparse.Namespace) -> int:
    try:
        import readline

        with contextlib.suppress(OSError):
            readline.read_history_file(HISTORY)
    except ImportError:  # pragma: no cover - readline missing on some platforms
        readline = None
    print("qengine SQL shell. End statements with ';'. .tables, .schema NAME, .quit (or Ctrl-D); Ctrl-C clears the line")
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("qengine> " if not buffer else "   ...> ")
            except EOFError:
                print()
                break
            except KeyboardInterrupt:  # Ctrl-C at the prompt drops the half-typed statement
                print()
                buffer = []
                continue
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
                except KeyboardInterrupt:  # the query's tasks are stopped on the workers too (QueryRun)
                    print("Interrupted: the query was cancelled", file=sys.stderr)
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
        cols = ",\n  ".join(f"{f.name} {column_type(f)}" for f in schema)
        print(f"CREATE TABLE {parts[1]} (\n  {cols}\n);")
    elif name == ".help":
        print(".tables             list tables\n.schema NAME        show a table's columns\n.quit               leave")
    else:
        print(f"unknown command {name}; try .help", file=sys.stderr)
    return False
