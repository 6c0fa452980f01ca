"""Helpers over sqlglot expressions that every planning step asks: is it an aggregate, its
AND-ed conjuncts, the source aliases it reads, whether it rejects NULL-padded rows."""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Set as AbstractSet

import duckdb
import sqlglot.expressions as exp

from qengine.planner.logical import not_null_operand


@functools.cache
def duckdb_aggregate_names() -> frozenset[str]:
    """Aggregate function names DuckDB knows, for functions sqlglot parses as Anonymous."""
    con = duckdb.connect()
    try:
        rows = con.execute("SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'aggregate'").fetchall()
    finally:
        con.close()
    return frozenset(r[0].lower() for r in rows)


def is_aggregate(e: exp.Expression) -> bool:
    if isinstance(e, exp.Filter):
        return is_aggregate(e.this)
    if isinstance(e, exp.AggFunc):
        return True
    return isinstance(e, exp.Anonymous) and e.name.lower() in duckdb_aggregate_names()


def conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.Where):
        e = e.this
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    if isinstance(e, exp.And):
        return conjuncts(e.left) + conjuncts(e.right)
    return [e]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    return functools.reduce(lambda a, b: exp.and_(a, b, copy=False), parts) if parts else None


COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
# Tests that are NULL for a NULL operand, and expressions that are NULL whenever an operand is:
# a filter built only of these, over a column of the padded side, is NULL (so false) on every
# padded row.
_STRICT_TESTS = (*COMPARISONS, exp.Between, exp.Like, exp.ILike)
_STRICT = (exp.Column, exp.Identifier, exp.Literal, exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div,
           exp.Mod, exp.Cast, exp.DataType, exp.DataTypeParam, *_STRICT_TESTS)


def null_rejecting(p: exp.Expression, padded: AbstractSet[str], refs: Callable[[exp.Expression], AbstractSet[str]]) -> bool:
    """Whether filter ``p`` is never true on a row an outer join padded with NULLs for the
    side ``padded`` names (its columns or its aliases, as ``refs`` finds them in ``p``)."""
    tested = not_null_operand(p)
    if tested is not None:
        p = tested
    elif isinstance(p, exp.In) and not p.args.get("query"):
        p = p.this  # x IN (...) is NULL for a NULL x
    elif not isinstance(p, _STRICT_TESTS):
        return False
    return bool(refs(p) & padded) and all(isinstance(n, _STRICT) for n in p.walk())


def source_aliases(e: exp.Expression) -> frozenset[str]:
    """Aliases an expression refers to, ignoring columns inside nested subqueries."""
    out = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Column):
            if node.table:
                out.add(node.table.lower())
            continue
        if isinstance(node, exp.Query):
            continue
        stack.extend(node.iter_expressions())
    return frozenset(out)


def has_aggregate(e: exp.Expression) -> bool:
    found: list[exp.Expression] = []
    collect_aggregates(e, found)
    return bool(found)


def collect_aggregates(e: exp.Expression, out: list[exp.Expression]) -> None:
    if isinstance(e, exp.Query):
        return
    if isinstance(e, exp.Window):
        for arg in e.this.iter_expressions():
            collect_aggregates(arg, out)
        for part in e.args.get("partition_by") or []:
            collect_aggregates(part, out)
        if e.args.get("order") is not None:
            collect_aggregates(e.args["order"], out)
        return
    if is_aggregate(e):
        if e not in out:
            out.append(e)
        return
    for child in e.iter_expressions():
        collect_aggregates(child, out)
