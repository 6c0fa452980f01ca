"""A DuckDB mirror of a session's catalog, for DuckDB to answer questions about the catalog.

DESCRIBE, SHOW TABLES, SHOW ALL TABLES and information_schema should say what DuckDB says about
the same tables: its type names (``DECIMAL(7,2)``, ``TIMESTAMP WITH TIME ZONE``), its result
columns, its ordering. Rather than rebuild each answer, qengine gives DuckDB an empty copy of the
catalog in a fresh sandboxed in-memory database (database ``memory``, schema ``main``, as
DuckDB's own default), an empty table of each table's schema and each view over them, and asks
it. The mirror holds no rows, so it answers in milliseconds and reads no file.

Views are given to DuckDB with their sources expanded as the planner expands them (other views
inlined, read_parquet() and the like as the hidden tables they read), so their columns are typed
exactly as a query over them is. Hidden tables (names starting ``__``) are in the mirror only
where a view or the described query reads them, and are left out of every answer, as
``Session.table_names`` leaves them out.
"""

from __future__ import annotations

import contextlib
import re

import duckdb
import pyarrow as pa
import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog
from qengine.catalog.types import column_type
from qengine.errors import Error, NotSupportedError, ProgrammingError
from qengine.planner.frontend import expand_sources
from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.connection import safe_connection
from qengine.sandbox.quoting import identifier


def visible(column: str) -> str:
    """A filter on a query over the mirror's catalog that leaves the hidden tables out."""
    return f"NOT starts_with({column}, '__')"


def ask(catalog: Catalog, dialect: str, sql: str, reads: exp.Expression | None = None) -> pa.Table:
    """The answer DuckDB gives ``sql`` over an empty mirror of ``catalog``; ``reads`` is the
    expanded query ``sql`` names, if any, whose hidden tables the mirror must also hold.

    A table or view the mirror cannot hold (a view over a dropped table) is left out: a
    statement that needs it finds it missing, and fails with what was wrong with it. A broken
    view is still listed with the columns it had, as DuckDB lists it."""
    left_out: dict[str, Error] = {}
    views = []
    for view in list(catalog.views.values()):
        try:
            views.append((view.name, expand_sources(view.query.copy(), catalog, dialect)))
        except Error as e:  # it reads a table gone since, or itself
            left_out[view.name.lower()] = e
    # Hidden tables (one per read_parquet() call so far, say) only where a view or the query reads them.
    needed = {t.name.lower() for body in [*(b for _, b in views), reads] if body is not None for t in body.find_all(exp.Table)}
    con = safe_connection()
    try:
        for key, source in list(catalog.tables.items()):
            if key.startswith("__") and key not in needed:
                continue
            try:
                if any(pa.types.is_union(f.type) for f in source.schema):
                    # DuckDB cannot scan the sparse union it hands Arrow: the table is declared
                    columns = ", ".join(f"{identifier(f.name)} {column_type(f)}" for f in source.schema)
                    con.execute(f"CREATE TABLE {identifier(source.name)} ({columns})")
                    continue
                con.register("__qengine_empty", source.schema.empty_table())
                # in the DuckDB types the columns carry (a HUGEINT sum travels as a tagged decimal)
                reading = restoring_query("__qengine_empty", source.schema) or "SELECT * FROM __qengine_empty"
                con.execute(f"CREATE TABLE {identifier(source.name)} AS {reading}")
            except (duckdb.Error, pa.ArrowException) as e:
                left_out[source.name.lower()] = NotSupportedError(f"cannot describe table {source.name!r}: {str(e).splitlines()[0]}")
            finally:
                with contextlib.suppress(duckdb.Error):
                    con.unregister("__qengine_empty")
        for name, body in views:  # expanded: each reads tables only
            try:
                con.execute(f"CREATE VIEW {identifier(name)} AS {body.sql(dialect='duckdb')}")
            except duckdb.Error as e:
                left_out[name.lower()] = ProgrammingError(f"cannot describe view {name!r}: {str(e).splitlines()[0]}")
        for view in list(catalog.views.values()):
            if view.name.lower() in left_out and view.columns:
                # a broken view is still listed, with the columns it had (SHOW TABLES,
                # information_schema), as in DuckDB: a stand-in of no rows
                items = ", ".join(f"CAST(NULL AS {kind}) AS {identifier(column)}" for column, kind in view.columns)
                with contextlib.suppress(duckdb.Error):
                    con.execute(f"CREATE VIEW {identifier(view.name)} AS SELECT {items} WHERE false")
        return con.execute(sql).to_arrow_table()
    except duckdb.Error as e:
        missing = next((error for name, error in left_out.items() if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", str(e).lower())), None)
        raise (missing or ProgrammingError(str(e).splitlines()[0])) from e
    finally:
        con.close()


def query_columns(catalog: Catalog, dialect: str, query: exp.Expression) -> pa.Table:
    """DESCRIBE of a query (a copy is expanded): its columns' names and DuckDB types."""
    expanded = expand_sources(query.copy(), catalog, dialect)
    return ask(catalog, dialect, f"DESCRIBE {expanded.sql(dialect='duckdb')}", expanded)
