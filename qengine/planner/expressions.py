"""Helpers over sqlglot expressions that every planning step asks: is it an aggregate, its
AND-ed conjuncts, the source aliases it reads, whether it rejects NULL-padded rows."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet

import duckdb
import sqlglot.expressions as exp

from qengine.planner.logical import not_null_operand
from qengine.planner.templates import slot_kind


@functools.cache
def duckdb_aggregate_names() -> frozenset[str]:
    """Aggregate function names DuckDB knows, for functions sqlglot parses as Anonymous: its
    aggregates, and its macros made of them (``geomean(x)`` is ``exp(avg(ln(x)))``, which was
    taken for a scalar function, and its GROUP BY failed)."""
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT DISTINCT function_name, function_type, macro_definition FROM duckdb_functions() "
            "WHERE function_type IN ('aggregate', 'macro')"
        ).fetchall()
    finally:
        con.close()
    names = {name.lower() for name, kind, _ in rows if kind == "aggregate"}
    macros = [(name.lower(), set(_CALLED.findall((body or "").lower()))) for name, kind, body in rows if kind == "macro"]
    grown = True
    while grown:  # a macro made of an aggregate macro is one too
        before = len(names)
        names |= {name for name, calls in macros if calls & names}
        grown = len(names) > before
    return frozenset(names)


_CALLED = re.compile(r"(\w+)\(")


def is_aggregate(e: exp.Expression) -> bool:
    if isinstance(e, exp.Filter):
        # sqlglot reads DuckDB's any_value(x) as any_value(x) IGNORE NULLS: under a FILTER, that
        # wrapper is the aggregate's too, not an expression whose aggregate leaves the FILTER out
        inner = e.this
        while isinstance(inner, exp.IgnoreNulls | exp.RespectNulls):
            inner = inner.this
        return is_aggregate(inner)
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
STRICT = (exp.Column, exp.Identifier, exp.Literal, exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div,
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
    return bool(refs(p) & padded) and all(isinstance(n, STRICT) or slot_kind(n) for n in p.walk())


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
        for operand in window_operands(e):
            collect_aggregates(operand, out)
        return
    if is_aggregate(e):
        if e not in out:
            out.append(e)
        return
    for child in e.iter_expressions():
        collect_aggregates(child, out)


def window_operands(w: exp.Window) -> list[exp.Expression]:
    """What a window evaluates on each row: its function's arguments, its FILTER condition,
    PARTITION BY, ORDER BY and frame; not the function itself.

    The function sits under IGNORE NULLS, RESPECT NULLS and FILTER wrappers. It is not an
    aggregate of the SELECT it appears in, even where an equal aggregate is one (``count(*)``
    and ``count(*) OVER ()`` side by side), so what walks a SELECT for its aggregates, or
    replaces them by their columns, must step over it to reach these.
    """
    out = [v for k, v in w.args.items() if k != "this" and isinstance(v, exp.Expression)]
    out += [p for p in w.args.get("partition_by") or []]
    function = w.this
    while isinstance(function, exp.IgnoreNulls | exp.RespectNulls | exp.Filter):
        if isinstance(function, exp.Filter):
            out.append(function.expression)
        function = function.this
    return [*function.iter_expressions(), *out]


# How tightly DuckDB binds each operator (PostgreSQL's table), weakest first. A binary operator
# not named here (||, the bitwise ones, @>, …) binds as PostgreSQL's "any other operator": above
# the comparisons, below + and -.
_BINDING: tuple[tuple[type[exp.Expression], ...], ...] = (
    (exp.Or,),
    (exp.Xor,),
    (exp.And,),
    (exp.Not,),
    (exp.Is, exp.NullSafeEQ, exp.NullSafeNEQ),
    (*COMPARISONS, exp.Like, exp.ILike, exp.SimilarTo, exp.Glob, exp.In, exp.Between),
    (),
    (exp.Add, exp.Sub),
    (exp.Mul, exp.Div, exp.IntDiv, exp.Mod),
    (exp.Neg, exp.BitwiseNot),
    (exp.Collate, exp.Bracket, exp.Dot),
)
_OTHER_OPERATOR = 6
_LEFT_ASSOCIATIVE = (exp.Or, exp.Xor, exp.And, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod)
# Binary nodes written as a function call or a named argument: they delimit their operands.
_DELIMITED = (exp.Func, exp.PropertyEQ, exp.Kwarg, exp.Slice)


def _binding(e: exp.Expression) -> int | None:
    """The level in :data:`_BINDING` of ``e`` written as an operator; None when it is written
    self-contained (a column, a literal, a function call, CASE, a parenthesized expression)."""
    for level, kinds in enumerate(_BINDING):
        if kinds and isinstance(e, kinds):
            return level
    if isinstance(e, exp.Binary) and not isinstance(e, _DELIMITED):
        return _OTHER_OPERATOR
    return None


def in_place_of(node: exp.Expression, replacement: exp.Expression) -> exp.Expression:
    """``replacement`` as it must stand where ``node`` is: parenthesized when the operator
    ``node`` is an operand of binds tighter than it.

    sqlglot writes a tree without regard to precedence, so a column replaced by the expression
    it names would otherwise be reparsed differently: ``NOT (s = 1)`` put in for ``c`` in
    ``c IS TRUE`` reads as ``NOT ((s = 1) IS TRUE)``, which is TRUE where ``s`` is NULL.
    """
    inner, outer = _binding(replacement), _binding(node.parent) if node.parent is not None else None
    if inner is None or outer is None:
        return replacement
    if node.arg_key in ("expressions", "query") and isinstance(node.parent, exp.In):
        return replacement  # the IN list is delimited
    if inner > outer or (inner == outer and node.arg_key == "this" and isinstance(node.parent, _LEFT_ASSOCIATIVE)):
        return replacement
    return exp.paren(replacement, copy=False)


# Functions whose every call gives another value (DuckDB's now() is the statement's, not these).
_VOLATILE_CALLS = (exp.Rand, exp.Randn, exp.Uuid)
_VOLATILE_NAMES = frozenset({"random", "gen_random_uuid", "uuid", "uuidv4", "uuidv7", "nextval", "setseed"})


def calls_volatile(e: exp.Expression) -> bool:
    """Whether ``e`` calls a function whose value changes from call to call: a query over it
    must be computed once however often it is read, and its columns not copied into each use."""
    return any(is_volatile_call(node) for node in e.walk())


def is_volatile_call(node: exp.Expression) -> bool:
    """Whether ``node`` itself is such a call (:func:`calls_volatile`)."""
    if isinstance(node, _VOLATILE_CALLS):
        return True
    return isinstance(node, exp.Func) and (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower() in _VOLATILE_NAMES
