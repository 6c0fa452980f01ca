"""DESCRIBE, SHOW and SUMMARIZE: what a DuckDB user types first to look at the data.

DESCRIBE and SHOW are answered by DuckDB over an empty mirror of the catalog
(:mod:`qengine.api.catalog_mirror`), so their columns, type names and order are DuckDB's.
SUMMARIZE reads the data: it is rewritten as one aggregate query that the cluster runs like any
other (scans spread over the workers), and its single row of aggregates is turned into DuckDB's
one row per column here. The aggregates are those DuckDB 1.5 runs for SUMMARIZE.
"""

from __future__ import annotations

import pyarrow as pa
import sqlglot.errors
import sqlglot.expressions as exp

from qengine.api import catalog_mirror
from qengine.catalog.catalog import Catalog
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner.table_sources import file_kind
from qengine.sandbox.quoting import identifier

# What DuckDB's SHOW lists besides tables, which sqlglot leaves as a bare command.
_OTHER_SHOWS = ("DATABASES", "SCHEMAS", "VARIABLES", "FUNCTIONS", "ALL")


def describe(st: exp.Describe, catalog: Catalog, dialect: str) -> pa.Table:
    """DESCRIBE table-or-view, or DESCRIBE query."""
    target = st.this
    if st.args.get("style") or st.args.get("kind"):
        raise NotSupportedError(f"DESCRIBE {st.args.get('style') or st.args.get('kind')} is not supported (DESCRIBE name or query is)")
    if isinstance(target, exp.Table) and isinstance(target.this, exp.Identifier):
        return describe_table(target, catalog, dialect)
    if isinstance(target, exp.Query):
        return catalog_mirror.query_columns(catalog, dialect, target)
    raise NotSupportedError(f"DESCRIBE {target.sql(dialect=dialect)} is not supported")


def describe_table(table: exp.Table, catalog: Catalog, dialect: str) -> pa.Table:
    """DESCRIBE name: a table, a view, an information_schema table, or a file (``'x.parquet'``)."""
    if _is_file(table, catalog):
        return catalog_mirror.query_columns(catalog, dialect, exp.select("*").from_(table.copy()))
    _check_exists(table, catalog)
    if not table.args.get("db") and table.name.lower() in catalog.views:
        # its query, expanded: a view over a table dropped since fails here, as in DuckDB (the
        # mirror lists it with the columns it had)
        return catalog_mirror.query_columns(catalog, dialect, exp.select("*").from_(table.copy()))
    return catalog_mirror.ask(catalog, dialect, f"DESCRIBE {table.sql(dialect='duckdb')}")


def _is_file(table: exp.Table, catalog: Catalog) -> bool:
    """A file named as a table (``DESCRIBE 'x.parquet'``), which no catalog table's name is."""
    name = table.name.lower()
    return not table.args.get("db") and name not in catalog.tables and name not in catalog.views and file_kind(name) is not None


def _check_exists(table: exp.Table, catalog: Catalog) -> None:
    """A catalog table or view that does not exist is named as the planner names it."""
    if not table.args.get("db") and table.name.lower() not in catalog.views:
        catalog.table(table.name)


def show(st: exp.Show | exp.Command, catalog: Catalog, dialect: str) -> pa.Table:
    """SHOW TABLES, SHOW ALL TABLES, and SHOW name (which is DESCRIBE name)."""
    if isinstance(st, exp.Command):
        text = (st.expression.name if isinstance(st.expression, exp.Expression) else str(st.expression)).strip().rstrip(";").strip()
        if text.upper() in _OTHER_SHOWS:
            raise NotSupportedError(f"SHOW {text.upper()} is not supported (SHOW TABLES, SHOW ALL TABLES and SHOW name are)")
        try:
            table = exp.to_table(text, dialect=dialect)
        except sqlglot.errors.ParseError as e:
            raise ProgrammingError(f"SHOW takes a table name, TABLES or ALL TABLES, not {text!r}") from e
        return describe_table(table, catalog, dialect)
    what = st.name.upper()
    if what in ("TABLES", "ALL TABLES") and not st.args.get("db") and not st.args.get("like"):
        return catalog_mirror.ask(catalog, dialect, f"SELECT * FROM (SHOW {what}) WHERE {catalog_mirror.visible('name')}")
    raise NotSupportedError(f"SHOW {what} is not supported (SHOW TABLES, SHOW ALL TABLES and SHOW name are)")


def is_show(st: exp.Expression) -> bool:
    """A SHOW statement: sqlglot keeps ``SHOW name`` as a bare command."""
    return isinstance(st, exp.Show) or (isinstance(st, exp.Command) and st.name.upper() == "SHOW")


# ---- SUMMARIZE ---------------------------------------------------------------------------------

_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
            "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")
_TEMPORAL = ("DATE", "TIME", "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "TIME_NS",
             "TIMESTAMP WITH TIME ZONE", "TIME WITH TIME ZONE")
SUMMARY_COLUMNS = ("column_name", "column_type", "min", "max", "approx_unique", "avg", "std", "q25", "q50", "q75", "count",
                   "null_percentage")


def _is(type_name: str, kinds: tuple[str, ...]) -> bool:
    return type_name in kinds or type_name.split("(")[0] in kinds


def summary_query(st: exp.Summarize, catalog: Catalog, dialect: str) -> tuple[exp.Select, pa.Table]:
    """The aggregate query SUMMARIZE runs, and the summarized query's columns (DESCRIBE's rows).

    Per column, as DuckDB: min and max as text, approx_count_distinct, avg (numbers and times),
    stddev (numbers), approx_quantile at 0.25, 0.5 and 0.75 (numbers and times), the row count and
    the share of NULLs. Columns are read by position (the derived table renames them c0, c1 …), so
    any name, repeated or not, summarizes."""
    target = st.this
    if isinstance(target, exp.Literal) and target.is_string:  # SUMMARIZE 'file.parquet'
        target = exp.Table(this=exp.to_identifier(target.name, quoted=True))
    if isinstance(target, exp.Table) and isinstance(target.this, exp.Identifier):
        query: exp.Expression = exp.select("*").from_(target.copy())
    elif isinstance(target, exp.Query):
        query = target
    else:
        raise NotSupportedError(f"SUMMARIZE {target.sql(dialect=dialect)} is not supported")
    if isinstance(target, exp.Table) and not _is_file(target, catalog):
        _check_exists(target, catalog)
    columns = catalog_mirror.query_columns(catalog, dialect, query)
    types = columns.column("column_type").to_pylist()
    items = ["count_star()"]
    for i, kind in enumerate(types):
        c = identifier(f"c{i}")
        numeric, temporal = _is(kind, _NUMERIC), _is(kind, _TEMPORAL)
        items += [
            f"CAST(min({c}) AS VARCHAR)",
            f"CAST(max({c}) AS VARCHAR)",
            f"CAST(approx_count_distinct({c}) AS BIGINT)",
            f"CAST(avg({c}) AS VARCHAR)" if numeric or temporal else "CAST(NULL AS VARCHAR)",
            f"CAST(stddev({c}) AS VARCHAR)" if numeric else "CAST(NULL AS VARCHAR)",
            *(f"CAST(approx_quantile({c}, CAST({q} AS FLOAT)) AS VARCHAR)" if numeric or temporal else "CAST(NULL AS VARCHAR)"
              for q in ("0.25", "0.50", "0.75")),
            f"CAST(CASE WHEN count_star() > 0 THEN (CAST(1 AS DOUBLE) - CAST(count({c}) AS DOUBLE) / "
            f"CAST(count_star() AS DOUBLE)) * CAST(100 AS DOUBLE) ELSE NULL END AS DECIMAL(9, 2))",
        ]
    select = exp.select(*[f"{item} AS {identifier(f'v{i}')}" for i, item in enumerate(items)], dialect="duckdb")
    select = select.from_(exp.Subquery(this=query.copy(), alias=exp.TableAlias(
        this=exp.to_identifier("summarize_tbl"), columns=[exp.to_identifier(f"c{i}") for i in range(len(types))])))
    return select, columns


_PER_COLUMN = 9  # values of each column in the aggregate row, after the row count


def summary_table(columns: pa.Table, row: tuple) -> pa.Table:
    """SUMMARIZE's result from the aggregate query's one row: one row per summarized column."""
    count, values = row[0], row[1:]
    out: dict[str, list] = {name: [] for name in SUMMARY_COLUMNS}
    for i, (name, kind) in enumerate(zip(columns.column("column_name").to_pylist(), columns.column("column_type").to_pylist(),
                                         strict=True)):
        mine = values[i * _PER_COLUMN:(i + 1) * _PER_COLUMN]
        for key, value in zip(("min", "max", "approx_unique", "avg", "std", "q25", "q50", "q75", "null_percentage"), mine,
                              strict=True):
            out[key].append(value)
        out["column_name"].append(name)
        out["column_type"].append(kind)
        out["count"].append(count)
    types = {"approx_unique": pa.int64(), "count": pa.int64(), "null_percentage": pa.decimal128(9, 2)}
    return pa.table({name: pa.array(out[name], types.get(name, pa.string())) for name in SUMMARY_COLUMNS})
