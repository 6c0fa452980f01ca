"""Render a stage's fragment as DuckDB SQL.

Each operator becomes one SELECT over its child's SELECT; column names are query-unique, so no
qualification is needed. The fragment reads its inputs as tables registered under the names in
:func:`input_name`: ``s`` for the scan split (``s1``, ``s2``… for the others of a concatenated
union), ``x<shuffle>`` for exchange inputs and the placeholder names of subqueries.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.errors import InternalError
from qengine.planner import logical as lp
from qengine.planner.logical import col

# Join kinds that can swap inputs: A LEFT JOIN B is B RIGHT JOIN A.
_FLIPPED = {"inner": "inner", "left": "right", "right": "left", "full": "full"}
# What sqlglot's Select.join makes of each join kind, built directly: parsing the type's text on
# every join (and "*" on every SELECT *) was a third of the time rendering a stage took.
_JOIN_ARGS = {
    "inner": {"kind": "INNER"}, "semi": {"kind": "SEMI"}, "anti": {"kind": "ANTI"}, "cross": {"kind": "CROSS"},
    "left": {"side": "LEFT"}, "right": {"side": "RIGHT"}, "full": {"side": "FULL"},
}


def render(node: lp.Node) -> str:
    # The tree is built here and thrown away, so the generator need not copy it first.
    return _render(node).sql(dialect="duckdb", copy=False)


def join_sides(node: lp.Node) -> tuple[bool, ...]:
    """Which joins of the fragment :func:`render` swaps, the only thing in its SQL that the
    estimates decide: a fragment rendered ahead of time is still right while these agree."""
    return tuple(_swapped(n) for n in lp.walk(node) if isinstance(n, lp.Join))


def _swapped(join: lp.Join) -> bool:
    # DuckDB builds its hash table on the right input, and most fragments run with its choice
    # of sides off (it sees no sizes of Arrow inputs), so the smaller side goes right.
    return join.kind in _FLIPPED and join.left.est_rows < join.right.est_rows


def _select_all() -> exp.Select:
    return exp.Select(expressions=[exp.Star()])


def _join(select: exp.Select, other: exp.Expression, kind: str, on: exp.Expression | None = None) -> exp.Select:
    """``select`` joined to ``other``, as ``Select.join(other, on=on, join_type=kind)``."""
    select.append("joins", exp.Join(this=other, on=on, **_JOIN_ARGS[kind]))
    return select


def _from(node: lp.Node) -> exp.Select:
    """SELECT * FROM (child) — the starting point most operators add a clause to."""
    return _select_all().from_(_render(node).subquery("t", copy=False), copy=False)


def _render(node: lp.Node) -> exp.Query:
    if isinstance(node, lp.Scan):
        return exp.select(*[col(c) for c in node.columns] or ["*"]).from_(exp.to_identifier(node.table))
    if isinstance(node, lp.ExchangeRead):
        if node.aliases:
            cols = [col(n).as_(a, quoted=False) for n, a in zip(node.names, node.aliases, strict=True)]
            return exp.select(*cols).from_(exp.to_identifier(node.table))
        return _select_all().from_(exp.to_identifier(node.table))
    if isinstance(node, lp.Values):
        alias = exp.TableAlias(this=exp.to_identifier("v"), columns=[exp.to_identifier(n) for n in node.names])
        values = node.rows.copy()
        values.set("alias", alias)
        return _select_all().from_(values, copy=False)
    if isinstance(node, lp.Filter):
        # set, not .where(): a condition may be a bare scalar subquery, which sqlglot's builder refuses
        filtered = _from(node.child)
        filtered.set("where", exp.Where(this=node.condition.copy()))
        return filtered
    if isinstance(node, lp.Project):
        exprs = [e.copy().as_(n, quoted=False, copy=False) for n, e in node.exprs]
        if node.passthrough:
            exprs.insert(0, exp.Star())
        inner = node.child
        order, limit = _ordering(inner)
        if order is not None:
            # Keep the order: project in the same SELECT that sorts.
            base = inner.child if isinstance(inner, lp.Sort) else inner.child.child
            return _order_limit(exp.select(*exprs).from_(_render(base).subquery("t"), copy=False), order, limit)
        return exp.select(*exprs).from_(_render(inner).subquery("t", copy=False), copy=False)
    if isinstance(node, lp.Join):
        left = _render(node.left).subquery("l", copy=False)
        right = _render(node.right).subquery("r", copy=False)
        conds = [exp.EQ(this=a.copy(), expression=b.copy()) for a, b in zip(node.left_keys, node.right_keys, strict=True)]
        if node.residual is not None:
            conds.append(node.residual.copy())
        on = exp.and_(*conds) if len(conds) > 1 else conds[0] if conds else None  # and_ refuses a lone subquery
        if node.kind == "cross" or on is None:
            if node.kind not in ("cross", "inner"):
                on = exp.true()
            else:
                return _join(_select_all().from_(left, copy=False), right, "cross")
        if _swapped(node):
            cols = [col(c) for c in node.columns]
            return _join(exp.select(*cols).from_(right, copy=False), left, _FLIPPED[node.kind], on)
        return _join(_select_all().from_(left, copy=False), right, node.kind, on)
    if isinstance(node, lp.Aggregate):
        keys = [e.copy().as_(n, quoted=False, copy=False) for n, e in node.keys]
        aggs = [e.copy().as_(n, quoted=False, copy=False) for n, e in node.aggs]
        select = exp.select(*keys, *aggs).from_(_render(node.child).subquery("t", copy=False), copy=False)
        key_exprs = [e.copy() for _, e in node.keys]
        if node.grouping_sets is not None:
            sets = [exp.Tuple(expressions=[key_exprs[i].copy() for i in s]) for s in node.grouping_sets]
            select.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
            gid = exp.Grouping(expressions=[k.copy() for k in key_exprs]) if key_exprs else exp.Literal.number(0)
            select.select(gid.as_(node.grouping_id, quoted=False), copy=False)
        elif key_exprs:
            select.group_by(*key_exprs, copy=False)
        return select
    if isinstance(node, lp.Window):
        exprs = [e.copy().as_(n, quoted=False, copy=False) for n, e in node.exprs]
        return exp.select("*", *exprs).from_(_render(node.child).subquery("t", copy=False), copy=False)
    if isinstance(node, lp.Sort | lp.Limit):
        order, limit = _ordering(node)
        if order is None:
            return _order_limit(_from(node.child), None, limit)
        base = node.child if isinstance(node, lp.Sort) else node.child.child
        return _order_limit(_from(base), order, limit)
    if isinstance(node, lp.Distinct):
        return _from(node.child).distinct(copy=False)
    if isinstance(node, lp.SetOp):
        branches = [
            exp.select(*[col(c).as_(n, quoted=False) for c, n in zip(child.columns, node.names, strict=True)]).from_(
                _render(child).subquery("t", copy=False), copy=False
            )
            for child in node.inputs
        ]
        op = {"union": exp.union, "intersect": exp.intersect, "except": exp.except_}[node.kind]
        return _select_all().from_(op(*branches, distinct=node.distinct).subquery("u", copy=False), copy=False)
    raise InternalError(f"cannot render {type(node).__name__}")


def _ordering(node: lp.Node) -> tuple[list[exp.Ordered] | None, lp.Limit | None]:
    """The ORDER BY and LIMIT a Sort / Limit(Sort) / Limit node applies."""
    if isinstance(node, lp.Sort):
        return node.order, None
    if isinstance(node, lp.Limit):
        if isinstance(node.child, lp.Sort):
            return node.child.order, node
        return None, node
    return None, None


def _order_limit(select: exp.Select, order: list[exp.Ordered] | None, limit: lp.Limit | None) -> exp.Select:
    if order:
        select = select.order_by(*[o.copy() for o in order], copy=False)
    if limit is not None:
        if limit.limit is not None:
            select = select.limit(limit.limit, copy=False)
        if limit.offset:
            select = select.offset(limit.offset, copy=False)
    return select
