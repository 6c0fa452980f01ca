"""Column aliases on a table, a derived table or a WITH query (``FROM t AS x(a, b)``): checked
against what they rename, and a WITH query's bound by position, as DuckDB binds them.

sqlglot's qualifier binds the new names of a WITH query's reference to the WITH query's columns
of those names (renaming ``k, g`` to ``g, k`` read each as the other), and drops, or fails
inside on, more names than there are columns.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner import table_sources


def is_listed_star(star: exp.Expression) -> bool:
    return isinstance(star, exp.Star) and bool(star.args.get("except_") or star.args.get("replace"))


def check_alias_widths(query: exp.Expression, schema: dict[str, dict[str, str]]) -> None:
    """Refuse more column aliases than a derived table or a WITH query has columns, as DuckDB
    does: sqlglot's qualifier dropped the extra names, or failed inside on them. Table
    functions and files renamed by their aliases take more names, as in DuckDB."""
    for node in query.find_all(exp.Subquery):
        alias = node.args.get("alias")
        if alias is None or not alias.columns or node.meta.get(table_sources.SOURCE_ALIASES):
            continue
        inner = _output_names(node.this, schema)
        if inner is None:
            continue
        if len(alias.columns) > len(inner):
            raise ProgrammingError(f'table "{alias.name}" has {len(inner)} columns available but {len(alias.columns)} columns specified')
        names = [c.name.lower() for c in alias.columns] + [n.lower() for n in inner[len(alias.columns):]]
        repeated = next((n for n in names if names.count(n) > 1), None)
        if repeated is not None:  # sqlglot's qualifier failed inside on a star over it
            raise NotSupportedError(f'column aliases that leave table "{alias.name}" two columns named {repeated!r}')


def _output_names(query: exp.Expression, schema: dict[str, dict[str, str]]) -> list[str] | None:
    """The names of what ``query`` selects, where they show without qualifying it: its select
    list without a star, or ``SELECT * FROM`` a table or a WITH query; None otherwise."""
    if not isinstance(query, exp.Query):
        return None
    stars = [e for e in query.selects if e.unalias().is_star]
    if not stars:
        return [e.alias_or_name for e in query.selects]
    source = query.args.get("from_") if isinstance(query, exp.Select) else None
    star = query.selects[0] if len(query.selects) == 1 else None
    if star is None or is_listed_star(star) or source is None or query.args.get("joins") or not isinstance(source.this, exp.Table):
        return None
    cte = cte_of(source.this) if not source.this.args.get("db") else None
    if cte is None:  # a table's columns, as sql_schema names them (quoted where not plain)
        columns = schema.get(source.this.name.lower()) if not source.this.args.get("db") else None
        return [schema_name(c) for c in columns] if columns is not None else None
    names = _output_names(cte.this, schema)
    for renamed in (cte.args.get("alias") if cte is not None else None, source.this.args.get("alias")):
        if names is not None and renamed is not None and renamed.columns:
            names = [c.name for c in renamed.columns] + names[len(renamed.columns):]
    return names


def schema_name(column: str) -> str:
    """A column's name from its key in ``sql_schema`` (quoted there where it is not plain)."""
    return column[1:-1].replace('""', '"') if column.startswith('"') else column


def cte_aliases_as_derived_tables(query: exp.Expression) -> None:
    """``c AS x(g, k)`` over a WITH query ``c`` as ``(SELECT * FROM c) AS x(g, k)``: sqlglot's
    qualifier bound the new names to the WITH query's columns of those names, so renaming
    ``k, g`` to ``g, k`` read each as the other; a derived table's aliases it binds by position."""
    for table in list(query.find_all(exp.Table)):
        alias = table.args.get("alias")
        if alias is None or not alias.columns or table.args.get("db") or cte_of(table) is None:
            continue
        source = table.copy()
        source.set("alias", None)
        table.replace(exp.Subquery(this=exp.select("*").from_(source), alias=alias.copy()))


def cte_of(table: exp.Table, within: exp.Expression | None = None) -> exp.CTE | None:
    """The WITH entry ``table`` names, the nearest one around it (below ``within``, if given);
    None if none."""
    name = table.name.lower()
    node = table.parent
    while node is not None and node is not within:
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        cte = next((c for c in with_.expressions if c.alias_or_name.lower() == name), None) if with_ is not None else None
        if cte is not None:
            return cte
        node = node.parent
    return None
