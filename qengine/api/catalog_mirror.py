"""A DuckDB mirror of a session's catalog, for DuckDB to answer questions about the catalog.

DESCRIBE, SHOW TABLES, SHOW ALL TABLES and information_schema should say what DuckDB says about
the same tables: its type names (``DECIMAL(7,2)``, ``TIMESTAMP WITH TIME ZONE``), its result
columns, its ordering. Rather than rebuild each answer, qengine gives DuckDB an empty copy of the
catalog in a fresh sandboxed in-memory database (database ``memory``, schema ``main``, as
DuckDB's own default), an empty table of each table's schema and each view over them, and asks
it. The mirror holds no rows, so it answers in milliseconds and reads no file.

Views are given to DuckDB with their sources expanded as the planner expands them (other views
inlined, read_parquet() and the like as the hidden tables they read), so their columns are typed
exactly as a query over them is. Hidden tables (names starting ``__``) are left out of every
answer, as ``Session.table_names`` leaves them out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb
import pyarrow as pa
import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog
from qengine.errors import ProgrammingError
from qengine.planner.frontend import expand_sources
from qengine.sandbox.connection import safe_connection
from qengine.sandbox.quoting import identifier


def visible(column: str) -> str:
    """A filter on a query over the mirror's catalog that leaves the hidden tables out."""
    return f"NOT starts_with({column}, '__')"


@contextlib.contextmanager
def mirrored(catalog: Catalog, dialect: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB connection to an empty copy of ``catalog``, closed on leaving."""
    views = [(view.name, expand_sources(view.query.copy(), catalog, dialect)) for view in list(catalog.views.values())]
    con = safe_connection()
    try:
        for source in list(catalog.tables.values()):
            con.register("__qengine_empty", source.schema.empty_table())
            con.execute(f"CREATE TABLE {identifier(source.name)} AS SELECT * FROM __qengine_empty")
            con.unregister("__qengine_empty")
        pending = views
        while pending:  # a view over another view needs it first: define in rounds until none is left
            failed = []
            for name, body in pending:
                try:
                    con.execute(f"CREATE VIEW {identifier(name)} AS {body.sql(dialect='duckdb')}")
                except duckdb.Error as e:
                    failed.append((name, body, e))
            if len(failed) == len(pending):
                name, _, error = failed[0]
                raise ProgrammingError(f"cannot describe view {name!r}: {str(error).splitlines()[0]}") from error
            pending = [(name, body) for name, body, _ in failed]
        yield con
    finally:
        con.close()


def ask(catalog: Catalog, dialect: str, sql: str) -> pa.Table:
    """The answer DuckDB gives ``sql`` over the mirror of ``catalog``."""
    with mirrored(catalog, dialect) as con:
        return run(con, sql)


def run(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """``sql`` run on a mirror; DuckDB's complaint (its first line) as a ProgrammingError."""
    try:
        return con.execute(sql).to_arrow_table()
    except duckdb.Error as e:
        raise ProgrammingError(str(e).splitlines()[0]) from e


def query_columns(catalog: Catalog, dialect: str, query: exp.Expression) -> pa.Table:
    """DESCRIBE of a query (a copy is expanded): its columns' names and DuckDB types."""
    expanded = expand_sources(query.copy(), catalog, dialect)
    return ask(catalog, dialect, f"DESCRIBE {expanded.sql(dialect='duckdb')}")
