"""sqlglot's ``eliminate_joins`` rule, kept off LEFT JOINs of a UNION, INTERSECT or EXCEPT ALL.

The rule drops a LEFT JOIN none of whose columns are read when the joined query is unique on the
join keys: then each row before the join matches at most one row, and the join neither adds nor
drops rows. It takes a set operation for a distinct one whenever its ``distinct`` argument is
set at all, which it is (to False) for UNION ALL too: ``t1 LEFT JOIN (SELECT g FROM x UNION ALL
SELECT g FROM x) ON t1.g = t2.g`` lost the join, and ``count(*)`` counted each matched row of
``t1`` once instead of once per match. Such joins are left in place; the rule's other proofs of
uniqueness (DISTINCT, GROUP BY, LIMIT 1, an aggregate's one row) hold.
"""

from __future__ import annotations

import sqlglot.expressions as exp
from sqlglot.optimizer.eliminate_joins import eliminate_joins as sqlglot_eliminate_joins
from sqlglot.optimizer.scope import Scope, traverse_scope

# The rule passes over a join with this argument set (an ASOF join's): it is set while it runs.
_MARK_ARG = "nearest"
_MARK = "__qengine_keep_join"


def eliminate_joins(expression: exp.Expression) -> exp.Expression:
    """sqlglot's rule, run with the joins of set operations that keep duplicates marked kept."""
    marked = []
    for scope in traverse_scope(expression):
        for join in scope.expression.args.get("joins") or []:
            source = scope.sources.get(join.alias_or_name)
            if not join.args.get(_MARK_ARG) and isinstance(source, Scope) and _keeps_duplicates(source.expression):
                join.set(_MARK_ARG, _MARK)
                marked.append(join)
    expression = sqlglot_eliminate_joins(expression)
    for join in marked:
        join.set(_MARK_ARG, None)
    return expression


def _keeps_duplicates(query: exp.Expression) -> bool:
    """Whether ``query`` is a set operation that may return a row more than once (ALL)."""
    return isinstance(query, exp.SetOperation) and query.args.get("distinct") is not True
