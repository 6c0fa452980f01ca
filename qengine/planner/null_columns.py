"""Columns of untyped NULL: ``VALUES (1, NULL)``, ``SELECT NULL AS x``.

DuckDB gives such a column the type NULL, which takes the type of whatever it meets: compared
with a VARCHAR it is a VARCHAR. Arrow has no such type, so DuckDB hands the column over as an
INTEGER, and a stage reading it across an exchange failed where DuckDB answers ("could not
convert string to INT32"). The planner knows which output columns of a stage are untyped
NULL; the worker tags them and the consuming fragment reads them as a NULL literal again
(:mod:`qengine.sandbox.carried_types`).
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot.expressions as exp

from qengine.planner import logical as lp


def null_columns(node: lp.Node, produced: Mapping[int, frozenset[str]]) -> frozenset[str]:
    """The output columns of ``node`` that are untyped NULL; ``produced`` holds those of the
    stages its exchange reads come from. Anything not proven so is left out."""
    return frozenset(_nulls(node, produced)).intersection(node.columns)


def _nulls(node: lp.Node, produced: Mapping[int, frozenset[str]]) -> set[str]:
    if isinstance(node, lp.Values):
        rows = [r.expressions for r in node.rows.expressions]
        return {n for i, n in enumerate(node.names) if rows and all(isinstance(r[i], exp.Null) for r in rows)}
    if isinstance(node, lp.ExchangeRead):
        nulls = produced.get(node.shuffle_id, frozenset())
        return {alias for name, alias in zip(node.names, node.aliases or node.names, strict=True) if name in nulls}
    if isinstance(node, lp.Project | lp.Aggregate | lp.Window):
        inner = _nulls(node.child, produced)
        exprs = node.keys + node.aggs if isinstance(node, lp.Aggregate) else node.exprs
        own = {name for name, e in exprs if _untyped(e, inner)}
        return own if isinstance(node, lp.Aggregate) or (isinstance(node, lp.Project) and not node.passthrough) else own | inner
    if isinstance(node, lp.Join):
        return _nulls(node.left, produced) | _nulls(node.right, produced)
    if isinstance(node, lp.SetOp):
        inner = [(child.columns, _nulls(child, produced)) for child in node.inputs]
        return {name for i, name in enumerate(node.names) if all(columns[i] in nulls for columns, nulls in inner)}
    if isinstance(node, lp.Filter | lp.Sort | lp.Limit | lp.Distinct | lp.Exchange):
        return _nulls(node.child, produced)
    return set()


# Functions whose DuckDB type is their first argument's, with no other argument that types them:
# max(NULL) is of type NULL, as is the CASE of NULLs, where sum(NULL) is a HUGEINT.
_SAME_TYPE = (exp.Max, exp.Min, exp.AnyValue, exp.First, exp.Last, exp.FirstValue, exp.LastValue, exp.Nullif)


def _untyped(e: exp.Expression, inner: set[str]) -> bool:
    """Whether DuckDB types ``e`` as NULL: the NULL literal, a column of ``inner`` (those of
    type NULL below), or a CASE, COALESCE or aggregate like max() made of such alone. Across
    an exchange such a column came back as INTEGER: ``typeof(max(NULL))`` and the type of
    ``c || 'x'`` over it differed from DuckDB's."""
    while isinstance(e, exp.Paren | exp.Filter | exp.Window | exp.Alias):
        e = e.this
    if isinstance(e, exp.Null):
        return True
    if isinstance(e, exp.Column):
        return lp.plain_column(e) in inner
    if isinstance(e, exp.Case):
        branches = [i.args["true"] for i in e.args.get("ifs") or []] + [e.args.get("default") or exp.null()]
        return all(_untyped(b, inner) for b in branches)
    if isinstance(e, exp.If):
        return all(_untyped(e.args.get(k) or exp.null(), inner) for k in ("true", "false"))
    if isinstance(e, exp.Coalesce | exp.Greatest | exp.Least):
        return all(_untyped(a, inner) for a in [e.this, *e.expressions])
    if isinstance(e, _SAME_TYPE) and not e.expressions and not isinstance(e.this, exp.Distinct | exp.Order):
        return _untyped(e.this, inner)
    return False
