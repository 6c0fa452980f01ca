"""Cardinality estimates from catalog row counts and fixed selectivities.

They only need to be good enough to pick a join order (filtered dimensions first) and to decide
whether a join side is small enough to broadcast; the exchange measures real sizes at run time.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.planner import logical as lp

_RANGE = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def selectivity(cond: exp.Expression | None) -> float:
    """A guess at the fraction of rows a predicate keeps."""
    if cond is None:
        return 1.0
    if isinstance(cond, exp.Paren):
        return selectivity(cond.this)
    if isinstance(cond, exp.Boolean):
        return 1.0 if cond.this else 0.0
    if isinstance(cond, exp.And):
        return selectivity(cond.left) * selectivity(cond.right)
    if isinstance(cond, exp.Or):
        return min(1.0, selectivity(cond.left) + selectivity(cond.right))
    if isinstance(cond, exp.Not):
        return 1.0 - selectivity(cond.this) * 0.9
    if isinstance(cond, exp.EQ):
        return 0.05
    if isinstance(cond, exp.In):
        return min(0.5, 0.05 * max(1, len(cond.expressions)))
    if isinstance(cond, _RANGE):
        return 0.3
    if isinstance(cond, exp.Like | exp.ILike):
        return 0.2
    if isinstance(cond, exp.Is):
        return 0.1
    return 0.5


def rows(node: lp.Node) -> float:
    """Estimated output rows of ``node`` given its children's estimates."""
    if isinstance(node, lp.Scan):
        return float(max(1, node.source.rows))
    if isinstance(node, lp.SharedScan):
        return node.producer.est_rows
    if isinstance(node, lp.Values):
        return float(len(node.rows.expressions))
    if isinstance(node, lp.Filter):
        return max(1.0, node.child.est_rows * selectivity(node.condition))
    if isinstance(node, lp.Join):
        left, right = node.left.est_rows, node.right.est_rows
        if node.kind == "cross":
            return left * right
        if node.kind in ("semi", "anti"):
            return max(1.0, left * 0.5)
        if node.kind == "left":
            return left
        if node.kind == "right":
            return right
        base = max(left, right) if node.left_keys else left * right
        est = base * selectivity(node.residual)
        if node.key is not None and node.kind == "inner":
            est = min(est, keyed_rows(left, right, node.key))
        return max(1.0, est)
    if isinstance(node, lp.Aggregate):
        if not node.keys:
            return 1.0
        n = node.child.est_rows * 0.1 * max(1, len(node.grouping_sets or [1]))
        return max(1.0, n)
    if isinstance(node, lp.Distinct):
        return max(1.0, node.child.est_rows * 0.5)
    if isinstance(node, lp.Limit):
        return min(node.child.est_rows, float(node.limit)) if node.limit is not None else node.child.est_rows
    if isinstance(node, lp.SetOp):
        return sum(c.est_rows for c in node.inputs)
    if isinstance(node, lp.Unary):
        return node.child.est_rows
    return 1000.0


def keyed_rows(left: float, right: float, key: tuple[str, float]) -> float:
    """Rows of a join on one side's key: the other side's rows, each kept at most once, thinned
    by the key side's filter selectivity (the share of its table it keeps). The selectivity is
    the planner's, so run-time re-estimates (actual input rows) keep the same model."""
    side, kept = key
    return (left if side == "right" else right) * kept


def key_rows(scan: lp.Scan, column: str) -> float | None:
    """Row count of ``scan``'s table when its ``column`` looks like the table's key; None when
    not. With no statistics a table's first column is taken as its key."""
    first = scan.source.schema[0].name if len(scan.source.schema) else None
    return table_rows(scan) if column == first else None


def scanned_column(node: lp.Node, column: str, across: bool = False) -> tuple[lp.Scan, str] | None:
    """The scan and table column that ``column`` of ``node`` is, through renames, filters and
    limits; None when it is computed or comes from anything else. ``across`` also follows it
    through joins, DISTINCT and grouping keys, which keep a column's values but not whether
    each occurs once."""
    node, name = _unwrapped(node, column)
    while name is not None:
        if isinstance(node, lp.Scan):
            source = next((table_column for table_column, internal in node.column_map.items() if internal == name), None)
            return (node, source) if source is not None else None
        if not across:
            return None
        if isinstance(node, lp.Aggregate):
            node, name = node.child, node.sources.get(name)
        elif isinstance(node, lp.Join):
            node = node.left if name in node.left.columns else node.right
        elif isinstance(node, lp.Distinct):
            node = node.child
        else:
            return None
        node, name = _unwrapped(node, name)
    return None


def distinct_rows(node: lp.Node, column: str) -> float | None:
    """How many values ``column`` of ``node`` can take when each is in one row at most: the
    column is all a DISTINCT keeps or an aggregate's only grouping key (seen through renames,
    filters and limits), as an uncorrelated IN or scalar subquery gives. The table its values
    come from bounds them; None when the column is not unique or not traced to a table.

    A join on such a column is a key join: TPC-DS q6 and q58 select a month or a week of
    dates this way, and taken for many-to-many, that join came after the fact table had met
    every dimension unfiltered."""
    node, name = _unwrapped(node, column)
    if name is None:
        return None
    if isinstance(node, lp.Distinct):
        unique = node.columns == [name]
    else:
        unique = isinstance(node, lp.Aggregate) and node.grouping_sets is None and [n for n, _ in node.keys] == [name]
    hit = scanned_column(node, name, across=True) if unique else None
    return table_rows(hit[0]) if hit is not None else None


def _unwrapped(node: lp.Node, column: str | None) -> tuple[lp.Node, str | None]:
    """``node`` below its renaming projections, filters and limits, and what ``column`` is
    called there (None once a projection computes it)."""
    while isinstance(node, lp.Project | lp.Filter | lp.Limit) and column is not None:
        if isinstance(node, lp.Project):
            column = node.sources.get(column)
        node = node.child
    return node, column


def table_rows(scan: lp.Scan) -> float:
    return float(max(1, scan.source.rows))


def refresh(node: lp.Node) -> None:
    """Recompute estimates bottom-up from the leaves' ``est_rows`` (which the coordinator sets
    to actual input sizes just before a stage runs)."""
    for child in node.children:
        refresh(child)
    for sub in node.subqueries.values():
        refresh(sub)
    if node.children:
        node.est_rows = rows(node)
