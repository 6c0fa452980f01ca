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
from collections.abc import Mapping, Sequence
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
from qengine.transport.wire import empty_table

SHOWN_ROWS = 40  # rows show() and repr() print of a longer result
_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)
_SELF = "__relation"  # a relation's name in the queries it runs over itself, and a materialized one's rows


def relation_or_run(
    connection: Any, sql: str, scope: Mapping[str, Any], params: Sequence[Any] | Mapping[str, Any] | None = None
) -> Relation | None:
    """A relation for a query; any other statement runs at once and gives None, as in DuckDB.
    Several statements run at once too; if the last is a query, its rows, read then, are the
    relation's. So does a query given ``params``, as DuckDB's ``sql(query, params=...)`` does."""
    if params is not None:
        cursor = connection.cursor().execute_scoped(sql, scope, params)
        return None if cursor.description is None else Relation(connection, f"SELECT * FROM {_SELF}", {_SELF: cursor.fetch_arrow_table()})
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

    def _over(self, outer: exp.Select) -> str:
        """The text of ``outer`` with this relation as what it reads FROM."""
        if self._explains:
            raise NotSupportedError("an EXPLAIN's rows cannot be queried further")
        dialect = self.connection.session.dialect
        inner = exp.Subquery(this=parse(self.sql, dialect)[0], alias=exp.TableAlias(this=exp.to_identifier(_SELF)))
        return outer.from_(inner).sql(dialect=dialect)

    def _run_over(self, outer: exp.Select) -> Any:
        """Run ``outer`` with this relation as what it reads FROM."""
        return self.connection.cursor().execute_scoped(self._over(outer), self.scope)

    def _derived(self, outer: exp.Select) -> Relation:
        """A relation of ``outer`` over this one, not run yet."""
        return Relation(self.connection, self._over(outer), self.scope)

    def _part(self, text: str, what: str) -> exp.Expression:
        """An expression given as SQL text (a filter, a column list), read as DuckDB would."""
        if not isinstance(text, str) or not text.strip():
            raise ProgrammingError(f"{what} must be SQL text, such as 'qty > 5', not {text!r}")
        try:
            return exp.maybe_parse(text, dialect=self.connection.session.dialect)
        except Exception as e:  # sqlglot's parse errors: the user's text in the user's terms
            raise ProgrammingError(f"cannot read {what} {text!r}: {str(e).splitlines()[0]}") from e

    # ---- building on it, as DuckDB's relational API does ----------------------------------------

    def filter(self, condition: str) -> Relation:
        """The rows for which ``condition`` holds."""
        return self._derived(exp.select("*").where(self._part(condition, "a filter")))

    def project(self, *columns: str) -> Relation:
        """Only ``columns``: SQL text, each one or several expressions (``"b, a * 2 AS a2"``)."""
        if not columns:
            raise ProgrammingError("project() takes at least one column")
        return self._derived(exp.select(*[e for c in columns for e in self._list(c, "the columns")]))

    select = project

    def _list(self, text: str, what: str) -> list[exp.Expression]:
        """Comma-separated expressions given as SQL text."""
        if not isinstance(text, str) or not text.strip():
            raise ProgrammingError(f"{what} must be SQL text, such as 'city, sum(qty) AS q', not {text!r}")
        return self._part(f"SELECT {text}", what).expressions

    def order(self, keys: str) -> Relation:
        """The rows in the order of ``keys`` (``"qty DESC, sale_id"``)."""
        ordered = exp.maybe_parse(f"SELECT * ORDER BY {keys}", dialect=self.connection.session.dialect) if isinstance(keys, str) else None
        if ordered is None or not keys.strip():
            raise ProgrammingError(f"order() takes SQL text such as 'qty DESC', not {keys!r}")
        return self._derived(exp.select("*").order_by(*ordered.args["order"].expressions))

    def limit(self, n: int, offset: int = 0) -> Relation:
        """At most ``n`` rows, after the first ``offset``."""
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (n, offset)):
            raise ProgrammingError(f"limit() takes whole numbers of rows, not {n!r} and {offset!r}")
        return self._derived(exp.select("*").limit(n).offset(offset) if offset else exp.select("*").limit(n))

    def aggregate(self, aggregates: str, groups: str = "") -> Relation:
        """``aggregates`` (``"city, sum(qty) AS q"``) grouped by ``groups`` (none: one row)."""
        outer = exp.select(*self._list(aggregates, "the aggregates"))
        if groups:
            outer = outer.group_by(*self._list(groups, "the groups"))
        return self._derived(outer)

    def write_parquet(self, path: str) -> None:
        """Write the rows to one Parquet file (COPY, inside the connection's output roots)."""
        self._copy(path, "parquet")

    def write_csv(self, path: str) -> None:
        """Write the rows to one CSV file with a header (COPY, inside the output roots)."""
        self._copy(path, "csv")

    to_parquet, to_csv = write_parquet, write_csv

    def _copy(self, path: str, fmt: str) -> None:
        if not isinstance(path, str) or not path:
            raise ProgrammingError(f"the file to write must be a path, not {path!r}")
        query = parse(self._over(exp.select("*")), self.connection.session.dialect)[0]
        copy = exp.Copy(this=exp.Subquery(this=query), files=[exp.Literal.string(path)], kind=False,
                        params=[exp.CopyParameter(this=exp.var("FORMAT"), expression=exp.var(fmt))])
        self.connection.cursor().execute_scoped(copy.sql(dialect=self.connection.session.dialect), self.scope)

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

    def to_arrow_table(self) -> pa.Table:
        """The rows as an Arrow table."""
        return self._run().fetch_arrow_table()

    def df(self) -> Any:
        """The rows as a pandas DataFrame, of the dtypes DuckDB's has."""
        return self._run().fetchdf()

    def pl(self) -> Any:
        """The rows as a polars DataFrame (polars must be installed)."""
        return polars_frame(self.to_arrow_table())

    def fetch_record_batch(self, rows_per_batch: int = 1_000_000) -> pa.RecordBatchReader:
        """The rows as an Arrow record batch reader, read from the cluster as it is read."""
        return self._run().fetch_record_batch(rows_per_batch)

    fetchdf = to_df = df
    fetch_arrow_table = to_arrow_table
    # as DuckDB 1.5 has them: arrow() is a reader
    arrow = to_arrow_reader = fetch_record_batch

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
            con.register("result", empty_table(schema))
            return [str(t) for t in con.sql(restoring_query("result", schema) or "SELECT * FROM result").types]
        finally:
            con.close()

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns); the rows are counted by running it."""
        rows = self.to_arrow_table().num_rows if self._explains else self._run_over(exp.select("count(*)")).fetchone()[0]
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
