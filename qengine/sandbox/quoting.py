"""DuckDB SQL text for names and strings that qengine splices into the SQL it generates.

Workers quote every scanned column and file path of every task; building a sqlglot expression
for each and generating it took about 9 µs a name (``timeit``), and showed in py-spy profiles
of small TPC-DS tasks.
"""

from __future__ import annotations


def identifier(name: str) -> str:
    """``name`` as a quoted DuckDB identifier (double quotes, inner ones doubled)."""
    return '"' + name.replace('"', '""') + '"'


def string_literal(text: str) -> str:
    """``text`` as a DuckDB string literal (single quotes, inner ones doubled)."""
    return "'" + text.replace("'", "''") + "'"
