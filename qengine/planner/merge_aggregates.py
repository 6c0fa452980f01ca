"""Merge single-row aggregate subqueries over the same tables into one, so the tables are read
once (Spark's MergeScalarSubqueries, SPARK-34079).

TPC-DS q9 asks 15 scalar subqueries of store_sales, three for each of 5 quantity ranges, and
q88 eight joins of it with the same dimensions that differ in an hour of the day: each was a
stage that read the whole fact table. After the optimizer they are CTEs that one SELECT cross
joins (``FROM reason CROSS JOIN _u_0 CROSS JOIN _u_1 ...``). Those that read the same tables
under the same aliases, keep one row (aggregates, no GROUP BY) and are read nowhere else become
one CTE (see :func:`_batches` for which): its WHERE keeps the conjuncts they share and the OR of
the rest, and each aggregate sees only its own subquery's rows through ``CASE WHEN rest THEN x
END`` (the aggregates merged are those that ignore NULLs, so that is what FILTER would do).
"""

from __future__ import annotations

import itertools
from collections import Counter

import sqlglot.expressions as exp

from qengine.planner.expressions import and_all, conjuncts
from qengine.planner.templates import valued_sql

# Aggregates that skip NULL inputs: fed NULL for the rows of other subqueries, each gives what
# it gave over its own subquery's rows (including on none: NULL, or 0 for COUNT).
_NULL_SKIPPING = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Stddev, exp.StddevSamp, exp.StddevPop,
                  exp.Variance, exp.VariancePop)
_PARTS = {"expressions", "from_", "joins", "where"}  # a merged subquery has no other clause


def merge_scalar_aggregates(query: exp.Expression) -> exp.Expression:
    """Merge, in place, the mergeable CTEs that each SELECT of ``query`` cross joins."""
    with_ = query.args.get("with_")
    if not isinstance(with_, exp.With) or with_.recursive:
        return query
    ctes = {cte.alias_or_name.lower(): cte for cte in with_.expressions}
    reads = Counter(t.name.lower() for t in query.find_all(exp.Table) if not t.args.get("db"))
    names = (name for n in itertools.count() if (name := f"_merged_{n}") not in ctes)
    for select in list(query.find_all(exp.Select)):
        groups: dict[tuple, list[tuple[exp.Table, exp.Select]]] = {}
        for table in _cross_joined(select):
            cte = ctes.get(table.name.lower())
            if cte is not None and reads[table.name.lower()] == 1 and (key := _mergeable(cte.this, ctes)) is not None:
                groups.setdefault(key, []).append((table, cte.this))
        for tables, members in groups.items():
            for batch in _batches(tables, members):
                _merge(with_, select, batch, next(names))
    return query


def _batches(tables: tuple, members: list[tuple[exp.Table, exp.Select]]) -> list[list[tuple[exp.Table, exp.Select]]]:
    """The members to merge together. Over a join, all: the join is the work, done once, and
    each aggregate's CASE is cheap beside it (q88: 0.66 s to 0.27 s). Over one table, those
    with the same WHERE: scanning it once per filter, pushed into the scan, costs less than a
    CASE per aggregate and row (q9's 15 subqueries over 5 ranges took 477 ms in DuckDB as one
    scan with CASEs, 5 filtered scans 410 ms)."""
    if len(tables) > 1:
        return [members] if len(members) > 1 else []
    same: dict[tuple[str, ...], list[tuple[exp.Table, exp.Select]]] = {}
    for member in members:
        same.setdefault(tuple(sorted(valued_sql(c) for c in conjuncts(member[1].args.get("where")))), []).append(member)
    return [batch for batch in same.values() if len(batch) > 1]


def _cross_joined(select: exp.Select) -> list[exp.Table]:
    """The tables ``select`` reads as FROM items joined by plain cross joins."""
    from_ = select.args.get("from_")
    if from_ is None:
        return []
    items = [from_.this] + [j.this for j in select.args.get("joins") or [] if _is_cross(j)]
    return [t for t in items if isinstance(t, exp.Table) and not t.args.get("db") and isinstance(t.this, exp.Identifier)]


def _is_cross(join: exp.Join) -> bool:
    kind = (join.args.get("kind") or "").upper()
    return not join.args.get("side") and kind in ("", "CROSS", "INNER") and not join.args.get("on") and not join.args.get("using")


def _mergeable(body: exp.Expression, ctes: dict[str, exp.CTE]) -> tuple | None:
    """The tables (name, alias) a one-row aggregate reads, when it can be merged with others
    that read the same; None when it cannot."""
    if not isinstance(body, exp.Select) or any(v for k, v in body.args.items() if k not in _PARTS):
        return None
    joins = body.args.get("joins") or []
    if not all(_is_cross(j) for j in joins) or body.args.get("from_") is None:
        return None
    tables = [body.args["from_"].this] + [j.this for j in joins]
    if not all(isinstance(t, exp.Table) and t.name.lower() not in ctes and not t.args.get("db") for t in tables):
        return None
    for e in body.expressions:
        agg = e.this if isinstance(e, exp.Alias) else None
        # An ORDER BY inside the aggregate cannot be wrapped in the CASE that keeps each member's rows
        if not isinstance(agg, _NULL_SKIPPING) or agg.find(exp.Query, exp.Window, exp.Order) or len(list(agg.find_all(exp.AggFunc))) > 1:
            return None
        if isinstance(agg.this, exp.Distinct) and len(agg.this.expressions) != 1:
            return None
    return tuple(sorted((t.name.lower(), t.alias_or_name.lower()) for t in tables))


def _merge(with_: exp.With, select: exp.Select, members: list[tuple[exp.Table, exp.Select]], name: str) -> None:
    """Replace the member CTEs by one named ``name``, where the first of them was, and
    ``select``'s reads of them by one read of it, their columns by its."""
    filters = [conjuncts(body.args.get("where")) for _, body in members]
    shared = set.intersection(*({valued_sql(c) for c in f} for f in filters))
    rests = [and_all([c.copy() for c in f if valued_sql(c) not in shared]) for f in filters]
    projections: list[exp.Expression] = []
    renames: dict[tuple[str, str], str] = {}
    for (table, body), rest in zip(members, rests, strict=True):
        for e in body.expressions:
            column = f"_m{len(projections)}"
            renames[(table.alias_or_name.lower(), e.alias_or_name.lower())] = column
            projections.append(exp.alias_(_only_where(e.this.copy(), rest), column, quoted=True))
    first = members[0][1]
    where = [c.copy() for c in filters[0] if valued_sql(c) in shared]
    if all(r is not None for r in rests):  # else one member reads every row the others share
        unique = {valued_sql(r): r for r in rests}
        where.append(exp.paren(exp.or_(*[exp.paren(r, copy=False) for r in unique.values()], copy=False), copy=False))
    merged = exp.select(*projections).from_(first.args["from_"].this.copy(), copy=False)
    for join in first.args.get("joins") or []:
        merged.append("joins", join.copy())
    if where:
        merged.where(and_all(where), copy=False)
    gone = {table.name.lower() for table, _ in members}
    position = min(i for i, cte in enumerate(with_.expressions) if cte.alias_or_name.lower() in gone)
    kept = [cte for cte in with_.expressions if cte.alias_or_name.lower() not in gone]
    kept.insert(position, exp.CTE(this=merged, alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True))))
    with_.set("expressions", kept)
    read = exp.Table(this=exp.to_identifier(name, quoted=True), alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True)))
    _replace_items(select, [table for table, _ in members], read)
    aliases = {table.alias_or_name.lower() for table, _ in members}
    for column in list(select.find_all(exp.Column)):
        new = renames.get((column.table.lower(), column.name.lower())) if column.table.lower() in aliases else None
        if new is not None:
            column.replace(exp.column(new, name, quoted=True))


def _only_where(agg: exp.Expression, rest: exp.Expression | None) -> exp.Expression:
    """``agg`` over just the rows where ``rest`` holds (all rows when None)."""
    if rest is None:
        return agg
    if isinstance(agg, exp.Count) and isinstance(agg.this, exp.Star):
        agg.set("this", exp.case().when(rest.copy(), exp.Literal.number(1)))
        return agg
    target = agg.this.expressions[0] if isinstance(agg.this, exp.Distinct) else agg.this
    target.replace(exp.case().when(rest.copy(), target.copy()))
    return agg


def _replace_items(select: exp.Select, tables: list[exp.Table], merged: exp.Table) -> None:
    """Drop ``tables`` from ``select``'s FROM items and cross join ``merged`` where the first was."""
    from_ = select.args["from_"]
    items = [from_.this] + [j.this for j in select.args.get("joins") or []]
    joins = [None] + list(select.args.get("joins") or [])
    out: list[tuple[exp.Expression, exp.Join | None]] = []
    placed = False
    for item, join in zip(items, joins, strict=True):
        if any(item is t for t in tables):
            if not placed:
                out.append((merged, None))
                placed = True
            continue
        out.append((item, join))
    head, _ = out[0]
    from_.set("this", head)
    rest = [join if join is not None else exp.Join(this=item, kind="CROSS") for item, join in out[1:]]
    select.set("joins", rest or None)
