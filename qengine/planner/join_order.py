"""sqlglot's ``optimize_joins`` rule, kept off the joins of a SELECT with a SEMI or ANTI join.

The rule moves each conjunct of an inner join's ON that names an earlier cross-joined table into
that cross join's ON, then orders the joins so each comes after the tables its ON names. It
takes a SEMI join for an inner one: from ``a CROSS JOIN b SEMI JOIN c ON a.g = c.g AND b.k <
c.k`` it made ``a SEMI JOIN c ON a.g = c.g JOIN b ON b.k < c.k``, which reads ``c`` where the
SEMI join no longer outputs it. A SEMI or ANTI join only filters the rows before it, so such a
SELECT's joins are left as written: the plan builder and pushdown make join keys of its
conditions all the same.
"""

from __future__ import annotations

import sqlglot.expressions as exp
from sqlglot.optimizer.optimize_joins import optimize_joins as sqlglot_optimize_joins

# The rule leaves alone the joins of a SELECT where one has a side: that of a SEMI or ANTI join
# is set to this while it runs.
_MARK = "__qengine_keep_order"


def optimize_joins(expression: exp.Expression) -> exp.Expression:
    """sqlglot's rule, run with the joins of each SELECT with a SEMI or ANTI join left in place."""
    marked = [j for j in expression.find_all(exp.Join) if j.kind in ("SEMI", "ANTI") and not j.side]
    for join in marked:
        join.set("side", _MARK)
    expression = sqlglot_optimize_joins(expression)
    for join in marked:
        join.set("side", None)
    return expression
