"""The column a ``JOIN ... USING (k)`` (or a NATURAL join) gives ``k`` as, as DuckDB gives it.

sqlglot's qualifier writes every reference to a USING column, and each one a star selects, as
``COALESCE(a.k, b.k)``: the keys' common type. DuckDB gives the left table's column for an
inner or left join (a DATE key joined to a TIMESTAMP one stays a DATE) and the right table's
for a right join; only a full join coalesces. Where a query's USING and NATURAL joins are all
of one of those kinds, the coalesce the qualifier wrote is replaced by that side's column. A
COALESCE the user wrote stays.
"""

from __future__ import annotations

import inspect
from typing import Any

import sqlglot.expressions as exp
from sqlglot.optimizer.qualify import qualify

_WRITTEN = "qengine_written_coalesce"


def qualify_with_using_sides(expression: exp.Expression, **kwargs: Any) -> exp.Expression:
    """sqlglot's ``qualify``, then each query's USING columns as DuckDB's side of its joins."""
    sides = {}
    for select in expression.find_all(exp.Select):
        joins = [j for j in select.args.get("joins") or [] if j.args.get("using") or j.method.upper() == "NATURAL"]
        if joins:
            sides[id(select)] = {(j.side or "INNER").upper() if j.kind.upper() not in ("SEMI", "ANTI") else "SEMI" for j in joins}
    if not sides:
        return qualify(expression, **kwargs)
    for written in expression.find_all(exp.Coalesce):
        written.meta[_WRITTEN] = True
    qualified = qualify(expression, **kwargs)
    for select in qualified.find_all(exp.Select):
        kinds = sides.get(id(select))
        if kinds is None or len(kinds) != 1 or next(iter(kinds)) not in ("INNER", "LEFT", "RIGHT"):
            continue
        pick = -1 if kinds == {"RIGHT"} else 0
        for node in _own_nodes(select):
            if isinstance(node, exp.Coalesce) and not node.meta.get(_WRITTEN) and _same_named_columns(node):
                node.replace(([node.this, *node.expressions][pick]).copy())
    return qualified


# the optimizer passes a rule the arguments its signature names: qualify's, not **kwargs
qualify_with_using_sides.__signature__ = inspect.signature(qualify)  # type: ignore[attr-defined]


def _own_nodes(select: exp.Select) -> list[exp.Expression]:
    """The nodes of ``select`` outside the queries nested in it."""
    return list(select.walk(prune=lambda n: n is not select and isinstance(n, exp.Query)))


def _same_named_columns(node: exp.Coalesce) -> bool:
    """Whether ``node`` coalesces one column name of several tables, as USING does."""
    parts = [node.this, *node.expressions]
    return (
        len(parts) > 1
        and all(isinstance(p, exp.Column) and p.table for p in parts)
        and len({p.name.lower() for p in parts}) == 1
        and len({p.table for p in parts}) == len(parts)
    )
