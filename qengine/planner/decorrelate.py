"""Decorrelate what sqlglot's optimizer leaves correlated, or decorrelates expensively.

Scalar aggregate subqueries that sqlglot's optimizer leaves in place:

sqlglot declines any correlated subquery whose WHERE contains an OR (TPC-DS q41). The classic
rewrite still applies when the correlation is a set of equalities ``outer = inner`` among the
WHERE's conjuncts and the subquery returns one aggregate:

    ... WHERE x > (SELECT agg FROM t WHERE t.k = o.k AND p)
    ... LEFT JOIN (SELECT t.k AS _k0, agg AS _v, TRUE AS _m FROM t WHERE p GROUP BY t.k) d
          ON o.k = d._k0
        WHERE x > CASE WHEN d._m THEN d._v ELSE <agg over no rows> END

The value over no rows is the aggregate expression with COUNT as 0 and every other aggregate
NULL, which is what the subquery returns when no inner row matches. Such a subquery makes one
row, so ``x op ANY (...)`` or ``x op ALL (...)`` of it is ``x op CASE ... END`` (left as
``ANY (CASE ... END)``, DuckDB read it as a search of a list).

A correlated scalar subquery of a plain value (no aggregate) may make several rows for an outer
row, where DuckDB fails the query; sqlglot's optimizer is kept off it (planner/unnest.py), and it
is rewritten the same way with the group's row count, the error raised where an outer row reads
a group of more than one row (in the WHERE, or the select list of a SELECT without aggregates):

    ... WHERE x = (SELECT t.v FROM t WHERE t.k = o.k AND p)
    ... LEFT JOIN (SELECT t.k AS _k0, count(*) AS _n, any_value(t.v) AS _v FROM t WHERE p GROUP BY t.k) d
          ON o.k = d._k0
        WHERE x = CASE WHEN d._n > 1 THEN error('More than one row ...') ELSE d._v END

EXISTS with an inequality beside its equalities (TPC-DS q16, q94: another row of the same
order from a different warehouse) is decorrelated by sqlglot into every group's ARRAY_AGG of
the compared column, tested with ARRAY_ANY: raw rows are shuffled for the non-decomposable
aggregate and the lists are built and searched. Whether some value of a group compares true
with ``w`` needs only the group's bounds, so the lists become MIN and MAX, which aggregate
partially before the shuffle:

    ARRAY_ANY(u.a, _x -> w <> _x)   →   (w <> u.a_lo OR w <> u.a_hi)
    ARRAY_ANY(u.a, _x -> w < _x)    →   w < u.a_hi        (and so on for >, <=, >=)

MIN and MAX skip NULLs as the comparison with a NULL does, and a group of NULLs only gives
NULL bounds, so the test is NULL where no element compared true; that equals false only
where the test is a conjunct of a WHERE, so only there is it rewritten.

A subquery correlated through other comparisons (``b.d BETWEEN o.d - 30 AND o.d``, ``b.x <
o.x``) is grouped by the outer values it reads, as DuckDB decorrelates a dependent join over
its "domain": the outer FROM's distinct values of those columns are joined into it,

    ... WHERE x > (SELECT max(b.v) FROM b WHERE b.d < o.d)
    ... LEFT JOIN (SELECT dm._d0 AS _k0, max(b.v) AS _v, TRUE AS _m FROM b,
                   (SELECT DISTINCT o.d AS _d0 FROM o) dm WHERE b.d < dm._d0 GROUP BY dm._d0) d
          ON o.d = d._k0

which holds only where each comparison is NULL wherever its outer value is: an outer NULL,
which ``=`` never matches, then rightly gets the value over no rows. A correlated EXISTS
sqlglot leaves is first counted, ``(SELECT count(*) ...) > 0``.
"""

from __future__ import annotations

import itertools

import sqlglot.expressions as exp

from qengine.planner.expressions import conjuncts, has_aggregate

_ids = itertools.count()
_JOINED = "qengine_decorrelated"  # the meta key marking a join a rewrite added
# DuckDB's own message, for a scalar subquery that makes more than one row.
MULTIPLE_ROWS = "More than one row returned by a subquery used as an expression - scalar subqueries can only return a single row."


def _sources(select: exp.Select) -> list[exp.Expression]:
    """The tables and derived tables of a SELECT's FROM and joins."""
    sources = [select.args["from_"].this] if select.args.get("from_") is not None else []
    return sources + [j.this for j in select.args.get("joins") or []]


def _aliases(select: exp.Select) -> set[str]:
    return {s.alias_or_name.lower() for s in _sources(select)}


def _tables(e: exp.Expression) -> set[str]:
    return {c.table.lower() for c in e.find_all(exp.Column) if c.table}


def _empty_value(e: exp.Expression, alias: str) -> tuple[exp.Expression, list[exp.Expression]]:
    """The value of ``e`` over no rows, and the aggregates it reads as columns ``_a0``,
    ``_a1``… of the joined table ``alias``: a COUNT is 0, any other aggregate its own column,
    which the LEFT JOIN makes NULL where no inner row matched, typed as the aggregate. A bare
    NULL had no type: ``COALESCE(min(d + 30), …) + 1`` over no rows was ``NULL + 1``, an
    INTEGER, which DuckDB refused to mix with the DATE of a match in one CASE."""
    read: list[exp.Expression] = []

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Count):
            return exp.Literal.number(0)
        if isinstance(node, exp.AggFunc):  # the outermost: what is inside it is not visited
            read.append(node.copy())
            return exp.column(f"_a{len(read) - 1}", alias)
        return node

    return e.copy().transform(visit, copy=False), read


def decorrelate(query: exp.Expression) -> exp.Expression:
    """Rewrite every eligible correlated scalar subquery under a SELECT's WHERE, and every
    eligible list search in a WHERE's conjuncts into a comparison with bounds."""
    for select in list(query.find_all(exp.Select)):
        where = select.args.get("where")
        _exists_as_counts(select)
        # ``op ALL (SELECT ...)`` holds its query itself; any other, a Subquery.
        holders = list(where.find_all(exp.Subquery, exp.All)) if where is not None else []
        if not _aggregates(select):  # else the joined columns could not be read after its GROUP BY
            holders += [h for e in select.expressions for h in e.find_all(exp.Subquery)]
        for holder in holders:
            if holder.find_ancestor(exp.Select) is select:
                _rewrite(select, holder)
        for test in conjuncts(where):
            if isinstance(test, exp.ArrayAny):
                _by_bounds(query, select, test)
    return query


def _exists_as_counts(select: exp.Select) -> None:
    """A correlated ``EXISTS (q)`` still here (sqlglot's optimizer decorrelates one with an
    equality and no other comparison, or with one compared inner column) is
    ``(SELECT count(*) ... of q) > 0``, which is never NULL either, and which ``_rewrite``
    decorrelates. Not where ``q`` aggregates: without GROUP BY it makes a row of no rows."""
    places = [select.args.get("where")] if _aggregates(select) else [select.args.get("where"), *select.expressions]
    for place in places:
        for test in list(place.find_all(exp.Exists)) if place is not None else []:
            inner = test.this
            if test.find_ancestor(exp.Select) is not select or not isinstance(inner, exp.Select):
                continue
            if any(inner.args.get(k) for k in ("limit", "offset", "qualify", "with_")) or inner.args.get("from_") is None:
                continue
            if _aggregates(inner) or not _tables(inner) - _aliases(inner):
                continue  # grouped (an aggregate without GROUP BY makes a row of no rows), or not correlated
            counted = exp.select(exp.Count(this=exp.Star()))
            for k in ("from_", "joins", "where"):
                if inner.args.get(k):
                    counted.set(k, inner.args[k].copy())
            test.replace(exp.GT(this=counted.subquery(), expression=exp.Literal.number(0)))


# For ``w op x`` true for some x of a group: the bound it suffices to compare w with.
_BOUND = {exp.LT: "hi", exp.LTE: "hi", exp.GT: "lo", exp.GTE: "lo"}
_MIRROR = {exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.NEQ: exp.NEQ}


def _by_bounds(query: exp.Expression, outer: exp.Select, test: exp.ArrayAny) -> None:
    """``ARRAY_ANY(u.a, _x -> w op _x)`` over ``u.a = ARRAY_AGG(v)`` of a grouped CTE or
    derived table, where nothing else reads ``a``: compare ``w`` with MIN(v)/MAX(v) instead."""
    lists, fn = test.this, test.expression
    if not isinstance(lists, exp.Column) or not lists.table or not isinstance(fn, exp.Lambda) or len(fn.expressions) != 1:
        return
    var = fn.expressions[0].name
    compare = fn.this
    if type(compare) not in _MIRROR:
        return

    def is_var(e: exp.Expression) -> bool:
        return isinstance(e, exp.Identifier | exp.Column) and e.name == var and not (isinstance(e, exp.Column) and e.table)

    if is_var(compare.expression) and not is_var(compare.this):
        op, value = type(compare), compare.this
    elif is_var(compare.this) and not is_var(compare.expression):
        op, value = _MIRROR[type(compare)], compare.expression
    else:
        return
    if any(is_var(e) for e in value.walk()):
        return
    producer = _producer(query, outer, lists.table)
    if producer is None or not producer.args.get("group"):
        return
    name = lists.name
    owned = [p for p in producer.expressions if p.alias_or_name == name]
    if len(owned) != 1 or not isinstance(owned[0], exp.Alias) or type(owned[0].this) is not exp.ArrayAgg:
        return
    if sum(1 for c in query.find_all(exp.Column) if c.name == name) != 1:
        return  # the list itself is read elsewhere
    listed = owned[0].this.this
    owned[0].replace(exp.Min(this=listed.copy()).as_(f"{name}_lo", quoted=True))
    producer.select(exp.Max(this=listed.copy()).as_(f"{name}_hi", quoted=True), copy=False)

    def bound(which: str) -> exp.Column:
        return exp.column(f"{name}_{which}", lists.table, quoted=True)

    if op is exp.NEQ:
        rewritten = exp.paren(exp.or_(exp.NEQ(this=value.copy(), expression=bound("lo")), exp.NEQ(this=value.copy(), expression=bound("hi"))))
    else:
        rewritten = op(this=value.copy(), expression=bound(_BOUND[op]))
    test.replace(rewritten)


def _producer(query: exp.Expression, outer: exp.Select, alias: str) -> exp.Select | None:
    """The SELECT behind ``alias`` in ``outer``'s FROM or joins: a derived table, or the CTE a
    table reference names."""
    for source in _sources(outer):
        if source.alias_or_name != alias:
            continue
        if isinstance(source, exp.Subquery):
            return source.this if isinstance(source.this, exp.Select) else None
        if isinstance(source, exp.Table) and not source.db:
            for cte in query.find_all(exp.CTE):
                if cte.alias_or_name == source.name:
                    return cte.this if isinstance(cte.this, exp.Select) else None
    return None


def _aggregates(select: exp.Select) -> bool:
    return any(select.args.get(k) is not None for k in ("group", "having")) or any(has_aggregate(e) for e in select.expressions)


def _rewrite(outer: exp.Select, sub: exp.Subquery | exp.All) -> None:
    inner = sub.this
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1 or inner.args.get("from_") is None:
        return
    if any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "order", "qualify", "with_", "distinct")):
        return
    value = inner.expressions[0].unalias()
    if value.find(exp.Window):
        return
    # A plain value is the one row's, checked to be one (of a quantified or IN test, the
    # subquery's rows are a list, not one value).
    checked = not has_aggregate(value)
    if checked and (isinstance(sub, exp.All) or isinstance(sub.parent, exp.In | exp.Any)):
        return
    if not checked and not value.find(exp.AggFunc):
        return
    local = _aliases(inner)
    outer_aliases = _aliases(outer)
    where = inner.args.get("where")
    if where is None:
        return
    keys: list[tuple[exp.Expression, exp.Expression]] = []
    rest: list[exp.Expression] = []
    bounds: list[exp.Expression] = []
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
        if not _bounding(c, local, outer_aliases):
            return  # a correlation we cannot turn into a join key or a domain's test
        bounds.append(c)
    if not (keys or bounds) or _tables(value) - local:
        return
    if bounds and (where.find(exp.Subquery, exp.Exists) or any(_tables(j) - local for j in inner.args.get("joins") or [])):
        return  # an outer column the domain's columns would not replace
    joins = [j.copy() for j in inner.args.get("joins") or []]
    if bounds:  # the outer rows' distinct values are joined in, and keys of the groups
        keys, rest, domain = _over_domain(outer, keys, rest + bounds, local)
        joins.append(exp.Join(this=domain))
    alias = f"_dc{next(_ids)}"
    if checked:
        outputs = [exp.Count(this=exp.Star()).as_("_n"), exp.AnyValue(this=value.copy()).as_("_v")]
    else:
        empty, read = _empty_value(value, alias)
        outputs = [value.copy().as_("_v"), exp.true().as_("_m"), *[a.as_(f"_a{i}") for i, a in enumerate(read)]]
    derived = exp.select(*[inner_e.copy().as_(f"_k{i}") for i, (_, inner_e) in enumerate(keys)], *outputs)
    derived.set("from_", inner.args["from_"].copy())
    if joins:
        derived.set("joins", joins)
    if rest:
        derived.where(exp.and_(*[r.copy() for r in rest]), copy=False)
    derived.group_by(*[inner_e.copy() for _, inner_e in keys], copy=False)
    on = exp.and_(*[exp.EQ(this=outer_e.copy(), expression=exp.column(f"_k{i}", alias)) for i, (outer_e, _) in enumerate(keys)])
    outer.join(derived.subquery(alias), on=on, join_type="LEFT", copy=False)
    outer.args["joins"][-1].meta[_JOINED] = True
    if checked:
        several = exp.GT(this=exp.column("_n", alias), expression=exp.Literal.number(1))
        replacement = exp.Case(
            ifs=[exp.If(this=several, true=exp.Anonymous(this="error", expressions=[exp.Literal.string(MULTIPLE_ROWS)]))],
            default=exp.column("_v", alias),
        )
    else:
        replacement = exp.Case(
            ifs=[exp.If(this=exp.column("_m", alias), true=exp.column("_v", alias))],
            default=empty,
        )
    # Of its one row, ``x op ANY (...)`` and ``x op ALL (...)`` are ``x op`` the row's value.
    quantified = sub.parent if isinstance(sub.parent, exp.Any | exp.All) else sub
    alias_arg = sub.args.get("alias")  # a select item's name, which the optimizer puts on the subquery
    value_expr = exp.paren(replacement)
    quantified.replace(exp.alias_(value_expr, alias_arg.this) if alias_arg is not None else value_expr)


# Tests that are not TRUE where an operand is NULL, and the operations that are NULL where an
# operand is: a correlation made of them holds for no inner row where an outer value is NULL.
_TESTS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.Like, exp.ILike)
_STRICT = (exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.DPipe)


def _bounding(test: exp.Expression, local: set[str], outer: set[str]) -> bool:
    """Whether ``test`` correlates through operands that are NULL where an outer value they
    read is NULL (``s.d BETWEEN o.d - 30 AND o.d``). Such a test holds for no inner row of a
    NULL outer value, so the inner query can be grouped by the outer values that occur and
    joined back on ``=``, which never matches NULL: the subquery over no rows is the value."""
    if not isinstance(test, _TESTS) or isinstance(test, exp.Like | exp.ILike) and test.args.get("escape"):
        return False
    return _outer_parts_strict(test, local, outer)


def _outer_parts_strict(e: exp.Expression, local: set[str], outer: set[str]) -> bool:
    """Whether some operand of ``e`` reads outer columns, and each that does is NULL wherever
    one of them is."""
    reading = [p for p in e.args.values() if isinstance(p, exp.Expression) and _tables(p) - local]
    return bool(reading) and all(_strict(p, local, outer) for p in reading)


def _strict(e: exp.Expression, local: set[str], outer: set[str]) -> bool:
    """Whether ``e``, which reads outer columns, is NULL wherever one of them is."""
    if isinstance(e, exp.Column):
        return e.table.lower() in outer
    if isinstance(e, exp.Cast) and not isinstance(e, exp.TryCast) or isinstance(e, _STRICT):
        return _outer_parts_strict(e, local, outer)
    return False


def _over_domain(
    outer: exp.Select, keys: list[tuple[exp.Expression, exp.Expression]], tests: list[exp.Expression], local: set[str]
) -> tuple[list[tuple[exp.Expression, exp.Expression]], list[exp.Expression], exp.Subquery]:
    """Correlate through the outer query's distinct values (DuckDB's "domain" of a dependent
    join): the keys' outer expressions and the outer columns the tests read become columns
    ``_d0``, ``_d1``… of a derived table of the outer FROM's distinct values, which the tests
    read instead. The outer rows are a subset of that FROM's (its joins, and the WHERE's tests
    that read nothing else, are kept), so each outer row finds its own group. The groups are
    keyed by the values' text too, and joined back by it alone: DISTINCT took -0.0 and 0.0 for
    one value, and ``1 / o.f`` then read the one kept for both. Returns the keys as (outer
    expression, domain column), the tests, and the derived table."""
    name = f"_dm{next(_ids)}"
    values: dict[str, int] = {}
    read: list[exp.Expression] = []

    def slot(e: exp.Expression) -> exp.Column:
        spelled = e.sql()
        if spelled not in values:
            values[spelled] = len(read)
            read.append(e)
        return exp.column(f"_d{values[spelled]}", name)

    outer_only = _aliases(outer) - local

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table.lower() in outer_only:
            return slot(node)
        return node

    tests = [exp.EQ(this=slot(o), expression=i.copy()) for o, i in keys] + [t.copy().transform(visit, copy=False) for t in tests]
    texts = [exp.cast(e.copy(), exp.DataType.build("VARCHAR")).as_(f"_t{i}") for i, e in enumerate(read)]
    domain = exp.select(*[e.copy().as_(f"_d{i}") for i, e in enumerate(read)], *texts).distinct(copy=False)
    domain.set("from_", outer.args["from_"].copy())
    joins = [j.copy() for j in outer.args.get("joins") or [] if not j.meta.get(_JOINED)]  # not an earlier rewrite's
    if joins:
        domain.set("joins", joins)
    sources = _aliases(domain)
    kept = [c.copy() for c in conjuncts(outer.args.get("where")) if not c.find(exp.Query, exp.Exists) and _tables(c) <= sources]
    if kept:
        domain.where(exp.and_(*kept), copy=False)
    text = exp.DataType.build("VARCHAR")
    return [(exp.cast(e.copy(), text), exp.column(f"_t{i}", name)) for i, e in enumerate(read)], tests, domain.subquery(name)
