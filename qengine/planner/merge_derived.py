"""sqlglot's ``merge_subqueries`` rule, kept off derived tables that an outer join pads with NULLs
where their projections would not be NULL.

The rule inlines a derived table (or a CTE read once) into the query that reads it, its
projections put in for the columns that name them, so they are evaluated above the join. On a
row the outer join padded, a projection that is NULL whenever its columns are (``k``, ``k + 1``)
is NULL there too; any other (a constant ``1 AS c``, ``coalesce(k, 0)``, ``k IS NULL``) is not,
where the derived table's own column would have been: ``LEFT JOIN (SELECT k, 1 AS c ...)``
showed ``c = 1`` on rows that matched nothing. Such a derived table is left as it is.

Nor is one whose sources, once merged, would capture a correlated reference. The rule renames
an inner source that clashes with a source of the query reading it, but not one named like a
table of a query around that one: in ``(SELECT max(x.id) FROM (SELECT * FROM t) x WHERE x.id <
t.id)`` under ``FROM t``, merging made the condition ``t.id < t.id``, and every row's maximum
NULL.

Nor is a CTE read more than once: sqlglot counts the reads of a CTE among a query's sources,
which leave out a SEMI or ANTI join's table, so it merged ``w0`` into ``FROM w0 a ANTI JOIN w0
b`` and dropped its WITH, leaving the second read of a table that does not exist.

Nor is one computing a value anew at each call (``random()``, ``gen_random_uuid()``): merged,
each reference to its column called the function again, so ``r - r`` was not 0.
"""

from __future__ import annotations

from typing import Any

import sqlglot.expressions as exp
from sqlglot.optimizer.merge_subqueries import merge_subqueries as sqlglot_merge_subqueries
from sqlglot.optimizer.scope import Scope, traverse_scope

from qengine.planner.expressions import STRICT, calls_volatile

# Set while the rule runs on a SELECT it must not merge: any value of this argument stops it.
_MARK_ARG = "kind"
_MARK = "__qengine_unmergeable"


def merge_subqueries(expression: exp.Expression, **kwargs: Any) -> exp.Expression:
    """sqlglot's rule, run with the derived tables it would answer wrongly for marked unmergeable."""
    scopes = traverse_scope(expression)
    for scope in scopes:
        select = scope.expression
        if not isinstance(select, exp.Select) or select.args.get(_MARK_ARG):
            continue
        if (_padded(scope, scopes) and not _null_propagating(select)) or _captures(scope, scopes) or calls_volatile(select) or _read_twice(scope):
            select.set(_MARK_ARG, _MARK)
    expression = sqlglot_merge_subqueries(expression, **kwargs)
    for select in expression.find_all(exp.Select):
        if select.args.get(_MARK_ARG) == _MARK:
            select.set(_MARK_ARG, None)
    return expression


def _padded(scope: Scope, scopes: list[Scope]) -> bool:
    """Whether some reader of ``scope`` (a derived table, or a CTE) may see it padded with NULLs
    by an outer join: directly, or through a derived table or CTE reading it that is itself
    padded, into which it would be merged first (``LEFT JOIN (SELECT * FROM (SELECT k, 1 AS c
    FROM x) q1) q2``: merged into q2, q1's constant reached the join)."""
    if scope.is_derived_table and _padded_source(scope.expression.parent):
        return True
    if scope.is_cte and any(_padded_source(t) for t in _cte_reads(scope)):
        return True
    return any(_padded(reader, scopes) for reader in _readers(scope, scopes) if reader.is_derived_table or reader.is_cte)


def _readers(scope: Scope, scopes: list[Scope]) -> list[Scope]:
    """The scopes that name ``scope`` among their sources."""
    return [reader for reader in scopes if any(source is scope for _, source in reader.selected_sources.values())]


def _merged_names(scope: Scope) -> set[str]:
    """The source names ``scope`` has once the derived tables and CTEs it reads are merged
    into it: its own, and theirs."""
    names = set(scope.selected_sources)
    for _, source in scope.selected_sources.values():
        if isinstance(source, Scope):
            names |= _merged_names(source)
    return names


def _cte_reads(scope: Scope) -> list[exp.Table]:
    """The tables naming CTE ``scope`` in the query holding it."""
    name = scope.expression.parent.alias_or_name
    root = scope.expression.parent.parent.parent  # CTE → WITH → the query holding it
    return [t for t in root.find_all(exp.Table) if t.name == name and not t.args.get("db")]


def _padded_source(source: exp.Expression | None) -> bool:
    """Whether the FROM item ``source`` is on a side an outer join pads with NULLs."""
    if source is None:
        return False
    holder = source.parent
    if isinstance(holder, exp.Join):
        if holder.side in ("LEFT", "FULL"):
            return True
        select = holder.parent
        later = (select.args.get("joins") or [])[select.args["joins"].index(holder) + 1:] if isinstance(select, exp.Select) else []
    elif isinstance(holder, exp.From) and isinstance(holder.parent, exp.Select):
        later = holder.parent.args.get("joins") or []
    else:
        return False
    return any(j.side in ("RIGHT", "FULL") for j in later)


def _null_propagating(select: exp.Select) -> bool:
    """Whether every projection of ``select`` is NULL when the columns it reads are."""
    for projection in select.selects:
        value = projection.unalias()
        if not value.find(exp.Column) or not all(isinstance(n, STRICT) for n in value.walk()):
            return False
    return True


def _captures(inner: Scope, scopes: list[Scope]) -> bool:
    """Whether a source of ``inner`` (a derived table or CTE), merged into a query that reads
    it, would come between a column of that query (or of a subquery in it) and the source of
    an enclosing query the column names. The sources counted are those ``inner`` has once
    what it reads is merged into it too: in ``(SELECT max(x.id) FROM (SELECT * FROM (SELECT *
    FROM t) x0) x WHERE x.id < t.id)``, x0 merged into x brings t."""
    names = _merged_names(inner)
    for reader in _readers(inner, scopes):
        for scope in scopes:
            if scope is inner or _within(scope, inner) or not (scope is reader or _within(scope, reader)):
                continue
            if any(column.table in names and _names_outside(column.table, scope, reader) for column in scope.columns):
                return True
    return False


def _within(scope: Scope, ancestor: Scope) -> bool:
    parent = scope.parent
    while parent is not None and parent is not ancestor:
        parent = parent.parent
    return parent is ancestor


def _names_outside(name: str, scope: Scope, reader: Scope) -> bool:
    """Whether ``name``, in a column of ``scope`` (``reader`` or a scope within it), names a
    source of a query around ``reader``: no scope from ``scope`` up to ``reader`` has one."""
    current: Scope | None = scope
    while current is not None:
        if name in current.selected_sources:
            return False
        if current is reader:
            return True
        current = current.parent
    return True



def _read_twice(scope: Scope) -> bool:
    """Whether ``scope`` is a CTE that the query holding it names more than once."""
    return scope.is_cte and len(_cte_reads(scope)) > 1
