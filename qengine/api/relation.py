"""Relations, as DuckDB's Python API has them: ``con.sql(query)`` gives a query not run yet,
which runs when its rows are asked for, as a DataFrame, an Arrow table or Python rows.

A relation holds its text and the Python variables it may read (``api.replacement_scans``);
another statement reads it by the name of the variable holding it, or by the name
``.query(name, sql)`` gives it. Each ``df()``, ``arrow()``, ``pl()``, ``show()`` runs it
afresh; ``fetchone``/``fetchmany`` read on from one run, which ``fetchall`` finishes, as in
DuckDB.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import sqlglot.expressions as exp

from qengine.api.frames import polars_frame
from qengine.api.replacement_scans import ScopedQuery, caller_scope, reads_variables
from qengine.api.statements import checked_sql
from qengine.api.table_text import print_table
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner.frontend import parse
from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.connection import scratch_connection

SHOWN_ROWS = 40  # rows show() and repr() print of a longer result
_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)
_SELF = "__relation"  # a relation's name in the queries it runs over itself, and a materialized one's rows


def relation_or_run(connection: Any, sql: str, scope: Mapping[str, Any]) -> Relation | None:
    """A relation for a query; any other statement runs at once and gives None, as in DuckDB.
    Several statements run at once too; if the last is a query, its rows, read then, are the
    relation's."""
    if _EXPLAIN.match(checked_sql(sql)):
        return Relation(connection, sql, scope)
    statements = parse(sql, connection.session.dialect)
    query_last = isinstance(statements[-1], exp.Query | exp.Values)
    if len(statements) == 1 and query_last:
        return Relation(connection, sql, scope)
    if query_last and not reads_variables(connection):
        raise NotSupportedError("on a standalone cluster sql() takes one query, or statements that return no rows")
    cursor = connection.cursor().execute_scoped(sql, scope)
    if cursor.description is None or isinstance(statements[-1], exp.Copy):  # DuckDB's sql() keeps no COPY count
        return None
    return Relation(connection, f"SELECT * FROM {_SELF}", {_SELF: cursor.fetch_arrow_table()})


class Relation(ScopedQuery):
    """A query on a connection, run when its rows are asked for (see the module docstring)."""

    def __init__(self, connection: Any, sql: str, scope: Mapping[str, Any]) -> None:
        super().__init__(connection, sql, scope)
        self._pending: Any = None  # the run fetchone/fetchmany read on from
        self._schema: pa.Schema | None = None

    def _run(self) -> Any:
        return self.connection.cursor().execute_scoped(self.sql, self.scope)

    def _run_over(self, outer: exp.Select) -> Any:
        """Run ``outer`` with this relation as what it reads FROM."""
        dialect = self.connection.session.dialect
        inner = exp.Subquery(this=parse(self.sql, dialect)[0], alias=exp.TableAlias(this=exp.to_identifier(_SELF)))
        return self.connection.cursor().execute_scoped(outer.from_(inner).sql(dialect=dialect), self.scope)

    @property
    def _explains(self) -> bool:
        """Whether it is an EXPLAIN, which SQL cannot read from."""
        return bool(_EXPLAIN.match(self.sql))

    # ---- rows ------------------------------------------------------------------------------

    def fetchone(self) -> tuple | None:
        if self._pending is None:
            self._pending = self._run()
        return self._pending.fetchone()

    def fetchmany(self, size: int = 1) -> list[tuple]:
        if self._pending is None:
            self._pending = self._run()
        return self._pending.fetchmany(size)

    def fetchall(self) -> list[tuple]:
        """The rows a fetchone/fetchmany left, or all of a new run."""
        cursor, self._pending = self._pending or self._run(), None
        return cursor.fetchall()

    def arrow(self) -> pa.Table:
        """The rows as an Arrow table."""
        return self._run().fetch_arrow_table()

    def df(self) -> Any:
        """The rows as a pandas DataFrame, of the dtypes DuckDB's has."""
        return self._run().fetchdf()

    def pl(self) -> Any:
        """The rows as a polars DataFrame (polars must be installed)."""
        return polars_frame(self.arrow())

    def fetch_record_batch(self, rows_per_batch: int = 1_000_000) -> pa.RecordBatchReader:
        """The rows as an Arrow record batch reader, read from the cluster as it is read."""
        return self._run().fetch_record_batch(rows_per_batch)

    fetchdf = to_df = df
    fetch_arrow_table = to_arrow_table = arrow

    # ---- what it holds ---------------------------------------------------------------------

    def _result_schema(self) -> pa.Schema:
        if self._schema is None:
            cursor = self._run() if self._explains else self._run_over(exp.select("*").limit(0))
            self._schema = cursor.result_schema
        return self._schema

    @property
    def columns(self) -> list[str]:
        return list(self._result_schema().names)

    @property
    def types(self) -> list[str]:
        """The columns' DuckDB types, as DuckDB names them (``BIGINT``, ``DECIMAL(7,2)``)."""
        schema = self._result_schema()
        con = scratch_connection()
        try:
            con.register("result", schema.empty_table())
            return [str(t) for t in con.sql(restoring_query("result", schema) or "SELECT * FROM result").types]
        finally:
            con.close()

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns); the rows are counted by running it."""
        rows = self.arrow().num_rows if self._explains else self._run_over(exp.select("count(*)")).fetchone()[0]
        return rows, len(self.columns)

    def query(self, name: str, sql: str) -> Relation | None:
        """Run ``sql``, in which ``name`` is this relation: a relation again if it is a query."""
        if not isinstance(name, str) or not name:
            raise ProgrammingError(f"a relation's name must be a non-empty string, not {name!r}")
        if not reads_variables(self.connection):
            raise NotSupportedError("on a standalone cluster a statement cannot read a relation by name")
        if name.lower() in (t.lower() for t in self.connection.tables()):
            raise ProgrammingError(f"{name!r} is already a table or view of the connection: give the relation another name")
        return relation_or_run(self.connection, sql, {**caller_scope(sql), name: self})

    # ---- on the screen ---------------------------------------------------------------------

    def _rendered(self, rows: int) -> str:
        cursor = self._run()
        reader = cursor.fetch_record_batch(rows)
        batches: list[pa.RecordBatch] = []
        while sum(b.num_rows for b in batches) < rows and (batch := next(reader, None)) is not None:
            batches.append(batch)
        table = pa.Table.from_batches(batches, schema=reader.schema).slice(0, rows)
        out = io.StringIO()
        print_table(table, out, total=cursor.rowcount)
        cursor.close()
        return out.getvalue()

    def show(self, max_rows: int = SHOWN_ROWS) -> None:
        """Print the first ``max_rows`` rows as a box table, with the number of rows."""
        sys.stdout.write(self._rendered(max_rows))

    def __repr__(self) -> str:
        return self._rendered(SHOWN_ROWS)
