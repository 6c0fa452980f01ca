"""sqlglot's ``eliminate_subqueries`` (derived tables made CTEs), kept from merging two queries
that call a volatile function.

The rule turns every derived table into a CTE and gives textually equal ones one CTE, which is
computed once. For ``(SELECT id, random() r FROM t) x JOIN (SELECT id, random() r FROM t) y``
that made both sides one set of random values: ``x.r = y.r`` held on every row, where DuckDB
draws each side apart and it holds on none. Each query calling ``random()``, ``uuid()`` and the
like is marked apart for the rule's run, so it is equal to no other; deterministic ones are
still merged.
"""

from __future__ import annotations

import sqlglot.expressions as exp
from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries as sqlglot_eliminate_subqueries

from qengine.planner.expressions import is_volatile_call

_APART = "qengine_volatile_apart"  # an argument the SQL generator does not know: never written


def eliminate_subqueries(expression: exp.Expression) -> exp.Expression:
    """sqlglot's rule, but no query that calls a volatile function is taken for another."""
    marked: dict[int, exp.Query] = {}  # the queries around each volatile call, found in one walk
    for node in expression.walk():
        if is_volatile_call(node):
            around: exp.Expression | None = node
            while around is not None and id(around) not in marked:
                if isinstance(around, exp.Query):
                    marked[id(around)] = around
                around = around.parent
    for i, query in enumerate(marked.values()):
        query.set(_APART, exp.Literal.number(i))
    try:
        return sqlglot_eliminate_subqueries(expression)
    finally:
        for query in marked.values():
            query.set(_APART, None)
