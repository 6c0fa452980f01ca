"""Decorrelate scalar aggregate subqueries that sqlglot's optimizer leaves in place.

sqlglot declines any correlated subquery whose WHERE contains an OR (TPC-DS q41). The classic
rewrite still applies when the correlation is a set of equalities ``outer = inner`` among the
WHERE's conjuncts and the subquery returns one aggregate:

    ... WHERE x > (SELECT agg FROM t WHERE t.k = o.k AND p)
    ... LEFT JOIN (SELECT t.k AS _k0, agg AS _v, TRUE AS _m FROM t WHERE p GROUP BY t.k) d
          ON o.k = d._k0
        WHERE x > CASE WHEN d._m THEN d._v ELSE <agg over no rows> END

The value over no rows is the aggregate expression with COUNT as 0 and every other aggregate
NULL, which is what the subquery returns when no inner row matches.
"""

from __future__ import annotations

import itertools

import sqlglot.expressions as exp

from qengine.planner.builder import conjuncts

_ids = itertools.count()


def _aliases(select: exp.Select) -> set[str]:
    sources = []
    if select.args.get("from_") is not None:
        sources.append(select.args["from_"].this)
    sources += [j.this for j in select.args.get("joins") or []]
    return {s.alias_or_name.lower() for s in sources}


def _tables(e: exp.Expression) -> set[str]:
    return {c.table.lower() for c in e.find_all(exp.Column) if c.table}


def _empty_value(e: exp.Expression) -> exp.Expression:
    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Count):
            return exp.Literal.number(0)
        if isinstance(node, exp.AggFunc):
            return exp.Null()
        return node

    return e.copy().transform(visit, copy=False)


def decorrelate(query: exp.Expression) -> exp.Expression:
    """Rewrite every eligible correlated scalar subquery under a SELECT's WHERE."""
    for select in list(query.find_all(exp.Select)):
        where = select.args.get("where")
        if where is None:
            continue
        for sub in list(where.find_all(exp.Subquery)):
            if sub.find_ancestor(exp.Select) is select:
                _rewrite(select, sub)
    return query


def _rewrite(outer: exp.Select, sub: exp.Subquery) -> None:
    inner = sub.this
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
        return
    if any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "order", "qualify", "with_", "distinct")):
        return
    value = inner.expressions[0].unalias()
    if not value.find(exp.AggFunc) or value.find(exp.Window):
        return
    local = _aliases(inner)
    outer_aliases = _aliases(outer)
    where = inner.args.get("where")
    if where is None:
        return
    keys: list[tuple[exp.Expression, exp.Expression]] = []
    rest: list[exp.Expression] = []
    for c in conjuncts(where):
        tables = _tables(c)
        if tables <= local:
            rest.append(c)
            continue
        if isinstance(c, exp.EQ):
            a, b = _tables(c.this), _tables(c.expression)
            if a and b and a <= outer_aliases and b <= local:
                keys.append((c.this, c.expression))
                continue
            if a and b and b <= outer_aliases and a <= local:
                keys.append((c.expression, c.this))
                continue
        return  # a correlation we cannot turn into a join key
    if not keys or _tables(value) - local:
        return
    alias = f"_dc{next(_ids)}"
    derived = exp.select(
        *[inner_e.copy().as_(f"_k{i}") for i, (_, inner_e) in enumerate(keys)],
        value.copy().as_("_v"),
        exp.true().as_("_m"),
    )
    derived.set("from_", inner.args["from_"].copy())
    if inner.args.get("joins"):
        derived.set("joins", [j.copy() for j in inner.args["joins"]])
    if rest:
        derived.where(exp.and_(*[r.copy() for r in rest]), copy=False)
    derived.group_by(*[inner_e.copy() for _, inner_e in keys], copy=False)
    on = exp.and_(*[exp.EQ(this=outer_e.copy(), expression=exp.column(f"_k{i}", alias)) for i, (outer_e, _) in enumerate(keys)])
    outer.join(derived.subquery(alias), on=on, join_type="LEFT", copy=False)
    replacement = exp.Case(
        ifs=[exp.If(this=exp.column("_m", alias), true=exp.column("_v", alias))],
        default=_empty_value(value),
    )
    sub.replace(exp.paren(replacement))
