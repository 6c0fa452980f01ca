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
    if isinstance(node, lp.Project | lp.Aggregate):
        inner = _nulls(node.child, produced)
        exprs = node.exprs if isinstance(node, lp.Project) else node.keys
        own = {name for name, e in exprs if isinstance(e, exp.Null) or lp.plain_column(e) in inner}
        return own | inner if isinstance(node, lp.Project) and node.passthrough else own
    if isinstance(node, lp.Join):
        return _nulls(node.left, produced) | _nulls(node.right, produced)
    if isinstance(node, lp.Filter | lp.Sort | lp.Limit | lp.Distinct | lp.Window | lp.Exchange):
        return _nulls(node.child, produced)
    return set()
