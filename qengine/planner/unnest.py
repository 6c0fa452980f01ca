"""sqlglot's ``unnest_subqueries`` rule, kept off the subqueries it would turn into something else.

The rule makes joins of subqueries in expressions: ``x IN (SELECT v ...)`` and ``x = ANY (...)``
become a LEFT JOIN to the distinct values of ``v`` tested with ``NOT v IS NULL``, and an
uncorrelated scalar subquery a CROSS JOIN to its one row, read through MAX() where its SELECT
aggregates. Some of these answer differently from the subquery:

* The join's test is FALSE where IN is NULL (``x`` is NULL and the subquery has rows, or ``x`` is
  not found and the subquery has a NULL). The two only agree where the test filters rows: it is
  reached through AND and OR alone from a WHERE, a JOIN's ON, or a CASE WHEN condition evaluated
  on input rows (after a GROUP BY the joined column, no grouping key, cannot be read at all).
  An uncorrelated ``x > ANY (...)`` is taken for the ``= ANY`` of an equality above it, and a
  correlated ``op ALL (...)`` becomes an ARRAY_ALL that DuckDB does not have.
* The values of an IN or ANY subquery without GROUP BY are made distinct by a GROUP BY of its
  item, put into that subquery: its HAVING and window functions then see the groups.
* The MAX() makes a SELECT whose only aggregates are window functions an aggregate query, and
  is put into GROUP BY, where no aggregate may be; over no rows, an aggregating SELECT without
  GROUP BY makes its row with the MAX() NULL, not the subquery's value.
* An uncorrelated EXISTS in an aggregating SELECT (outside its WHERE) becomes a LEFT JOIN ON
  TRUE to every row of the subquery, which multiplies the rows the aggregates see.
* A correlated subquery is grouped by its correlation's columns, its items aggregated per
  group: a window function there, which ran over the rows of one outer row's subquery, runs
  over every group's rows, inside the aggregate where DuckDB refuses it.

Those subqueries are left where they are: the plan builder runs an uncorrelated one as a
broadcast input of the fragment that evaluates it, where DuckDB gives it its own semantics, and
refuses a correlated one. sqlglot's rule passes over any subquery under an anonymous function
(it cannot tell whether that one aggregates), so each is wrapped in one while the rule runs.

An ORDER BY key that repeats a select item holding a subquery is made the item's position
first: the rule would give the two copies of the subquery two names, and a key that no longer
reads as the item could not sort a SELECT DISTINCT.

The rule also passes over a correlated scalar subquery of one aggregate with a FILTER clause,
which the builder cannot plan either: its condition is moved into the subquery's WHERE first.
"""

from __future__ import annotations

import sqlglot.expressions as exp
from sqlglot.optimizer.scope import Scope, ScopeType, find_in_scope, traverse_scope
from sqlglot.optimizer.unnest_subqueries import unnest_subqueries as sqlglot_unnest_subqueries

from qengine.planner.expressions import conjuncts, has_aggregate, is_aggregate
from qengine.planner.templates import slot_kind

_HIDDEN = "__qengine_hidden"


def unnest_subqueries(expression: exp.Expression) -> exp.Expression:
    """sqlglot's rule, run with the subqueries it would misplan hidden from it."""
    _order_by_position(expression)
    hidden = []
    for scope in traverse_scope(expression):
        if scope.scope_type != ScopeType.SUBQUERY:
            continue
        if scope.external_columns:
            _filter_in_where(scope.expression)
        node = _misplanned(scope)
        if node is not None:
            hidden.append(node)
    for node in hidden:
        wrapper = exp.Anonymous(this=_HIDDEN)
        node.replace(wrapper)
        wrapper.set("expressions", [node])
    expression = sqlglot_unnest_subqueries(expression)
    for wrapper in list(expression.find_all(exp.Anonymous)):
        if wrapper.name == _HIDDEN:
            wrapper.replace(wrapper.expressions[0])
    return expression


def _order_by_position(expression: exp.Expression) -> None:
    """Make each ORDER BY key that repeats a select item holding a subquery the item's position.

    The rule would join each copy of the subquery under a name of its own, after which the key
    no longer reads as the item (SELECT DISTINCT then refused it as not selected); by position
    it is the item itself, and the subquery is planned once."""
    for select in expression.find_all(exp.Select):
        order = select.args.get("order")
        if order is None:
            continue
        items = [e.unalias() for e in select.expressions]
        for key in order.expressions:
            if key.this.find(exp.Query) is not None and key.this in items:
                key.set("this", exp.Literal.number(items.index(key.this) + 1))


def _filter_in_where(query: exp.Expression) -> None:
    """Rewrite ``(SELECT agg FILTER (WHERE p) FROM ... WHERE w)`` as ``(SELECT agg FROM ...
    WHERE w AND p)``: one aggregate over the same rows, in a form the rule decorrelates (it
    passes over an aggregate with FILTER)."""
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return
    if any(query.args.get(k) for k in ("group", "having", "qualify", "distinct", "limit", "offset", "windows")):
        return
    value = query.expressions[0].unalias()
    if isinstance(value, exp.Filter) and is_aggregate(value.this) and not value.this.find(exp.Window):
        query.where(value.expression.this, copy=False)
        value.replace(value.this)


def _misplanned(scope: Scope) -> exp.Expression | None:
    """The subquery test or scalar subquery of ``scope`` that the rule would answer wrongly for."""
    query = scope.expression
    holder = query.parent  # a Subquery; ALL (SELECT ...) and EXISTS hold the query itself
    if holder is None:
        return None
    test = holder.parent if isinstance(holder, exp.Subquery) else holder
    # Grouped by its correlation, a correlated subquery's window would run over all groups' rows.
    windowed = bool(scope.external_columns) and find_in_scope(query, exp.Window) is not None
    if isinstance(test, exp.In):
        return test if windowed or _regrouped(query) or not _filters(test) else None
    if isinstance(test, exp.Any | exp.All):
        comparison = test.parent
        # An uncorrelated ANY is read as ``= ANY`` of the nearest equality above it.
        misread = not scope.external_columns and not isinstance(comparison, exp.EQ)
        misplanned = windowed or isinstance(test, exp.All) or misread or _regrouped(query) or not _filters(comparison)
        return comparison if misplanned else None
    if isinstance(holder, exp.Exists) and (windowed or not scope.external_columns or _struct_keyed(scope)):
        return holder
    if isinstance(holder, exp.Subquery) and (
        windowed or not _one_row(scope) or (not scope.external_columns and _misjoins(query.parent_select))
    ):
        return holder
    return None


def _struct_keyed(scope: Scope) -> bool:
    """Whether the rule would search an EXISTS's rows through a list of structs: it tests
    correlated comparisons other than equality on more than one inner expression
    (``s.d < o.d AND s.v <> o.d``). It reads the structs' fields as columns of a table ``_x``,
    which the builder took for a correlated reference; ``planner/decorrelate.py`` counts the
    rows over the outer values instead."""
    query = scope.expression
    if isinstance(query, exp.Select) and query.args.get("group") is None and any(has_aggregate(e) for e in query.expressions):
        return False  # a row even of no rows: the rule makes the EXISTS TRUE
    inner = set()
    for column in scope.external_columns:
        test = column.find_ancestor(exp.Predicate)
        if isinstance(test, exp.Binary) and not isinstance(test, exp.EQ):
            side = test.right if any(node is column for node in test.left.walk()) else test.left
            inner.add(side.sql())
    return len(inner) > 1


def _one_row(scope: Scope) -> bool:
    """Whether the query of ``scope`` provably makes at most one row (for each outer row, if
    correlated): it aggregates without GROUP BY or groups only by keys its WHERE fixes (equal
    to a constant or to outer columns), has LIMIT 0 or 1, has no FROM, or reads nothing but
    one such query (a CTE of one aggregate, say).

    Any other scalar subquery may make more, which DuckDB answers with an error. sqlglot's rule
    would join such a subquery to every row it makes (uncorrelated), or group it by its value
    or read it through MAX() or ARRAY_AGG() (correlated), silently answering with one of the
    values, or all."""
    query = scope.expression
    if not isinstance(query, exp.Select):
        return False
    limit = query.args.get("limit")
    count = limit.args.get("expression") if limit is not None else None
    if isinstance(count, exp.Literal) and count.is_int and int(count.name) <= 1:
        return True
    if any(e.find(exp.Unnest, exp.Explode) for e in query.expressions):
        return False  # a row for each element
    source = query.args.get("from_")
    if source is None:
        return True
    group = query.args.get("group")
    if group is None:
        if any(has_aggregate(e) for e in query.expressions):
            return True
        read = scope.sources.get(source.this.alias_or_name)
        return not query.args.get("joins") and isinstance(read, Scope) and _one_row(read)
    if any(v for k, v in group.args.items() if k != "expressions") or not group.expressions:
        return False  # GROUP BY ALL, ROLLUP, CUBE, GROUPING SETS
    external = {id(c) for c in scope.external_columns}
    fixed = [
        side
        for c in conjuncts(query.args.get("where"))
        if isinstance(c, exp.EQ)
        for side, other in ((c.this, c.expression), (c.expression, c.this))
        if all(isinstance(n, _CONSTANT) or slot_kind(n) for n in other.walk()) and all(id(x) in external for x in other.find_all(exp.Column))
    ]
    return all(key in fixed for key in group.expressions)


# What an expression that is the same for every row of a subquery may be built of: literals,
# casts and outer columns.
_CONSTANT = (exp.Literal, exp.Neg, exp.Paren, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Column, exp.Identifier)


def _regrouped(query: exp.Expression) -> bool:
    """Whether the GROUP BY of its item that the rule gives an IN or ANY subquery without one
    changes what it returns: its HAVING (then no longer over one group of all rows, which exists
    even of no rows) or a window function (of its item or QUALIFY, then over one row per value)
    is evaluated after it."""
    if not isinstance(query, exp.Select) or query.args.get("group") is not None:
        return False
    return query.args.get("having") is not None or find_in_scope(query, exp.Window) is not None


def _filters(test: exp.Expression) -> bool:
    """Whether a NULL of ``test`` acts as FALSE, and it is evaluated on input rows."""
    node = test
    while isinstance(node.parent, exp.And | exp.Or | exp.Paren):
        node = node.parent
    parent = node.parent
    if isinstance(parent, exp.Where) or (isinstance(parent, exp.Join) and node.arg_key == "on"):
        return True
    return isinstance(parent, exp.If) and node.arg_key == "this" and _on_input_rows(parent)


def _on_input_rows(node: exp.Expression) -> bool:
    """Whether ``node`` is evaluated on its SELECT's input rows: it is in a WHERE, a JOIN or an
    aggregate's argument, or its SELECT does not aggregate."""
    select = node.parent_select
    ancestor = node.parent
    while ancestor is not None and ancestor is not select:
        if isinstance(ancestor, exp.Where | exp.Join) or is_aggregate(ancestor):
            return True
        ancestor = ancestor.parent
    return select is None or not _aggregates(select)


def _aggregates(select: exp.Select) -> bool:
    return any(select.args.get(k) is not None for k in ("group", "having")) or any(has_aggregate(e) for e in select.expressions)


def _misjoins(select: exp.Select | None) -> bool:
    """Whether the rule would read a scalar subquery of ``select`` through a MAX() that does not
    belong there: a GROUP BY has a subquery, the only aggregates are window functions, or
    ``select`` aggregates without GROUP BY (over no rows it still makes its one row, where the
    MAX() of the joined value is NULL)."""
    if select is None:
        return False
    group = select.args.get("group")
    if group is not None:
        return group.find(exp.Subquery) is not None
    return _aggregates(select) or any(e.find(exp.Window) for e in select.expressions)
