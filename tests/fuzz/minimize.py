"""Shrink a failing query while it still fails the same way.

The query is parsed with sqlglot and reduced greedily: each step tries candidates from coarse to
fine (a set operation's branch alone, a CTE, join, WHERE, GROUP BY, HAVING, ORDER BY or select
item dropped, an AND/OR replaced by one side, a function or operator replaced by one of its
arguments) and keeps the first one that is shorter and still fails. Candidates that would make
the answer nondeterministic are never tried: a LIMIT or OFFSET without ORDER BY, and dropping DISTINCT or
GROUP BY keys under an order-sensitive window function (whose ORDER BY is total only because
rows were unique).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import sqlglot
import sqlglot.expressions as exp

DIALECT = "duckdb"
# window functions whose value depends on the order among peers: they need a total ORDER BY
ORDER_SENSITIVE = (exp.RowNumber, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.Ntile)
_SELECT_PARTS = ("where", "having", "qualify", "distinct", "with_")
_SIMPLIFIABLE = (exp.Func, exp.Binary, exp.Neg, exp.Not, exp.Filter, exp.Window, exp.Case, exp.Cast, exp.TryCast)


def shrink(sql: str, fails: Callable[[str], bool], budget: int = 150) -> str:
    """The shortest variant of ``sql`` found for which ``fails`` holds, trying at most ``budget`` candidates."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except sqlglot.errors.ParseError:
        return sql
    best = tree.sql(DIALECT)
    if best != sql:
        budget -= 1
        if not fails(best):
            return sql  # the query does not survive sqlglot's round trip: leave it as it is
    tried = {best}
    progress = True
    while progress and budget > 0:
        progress = False
        for candidate in _candidates(sqlglot.parse_one(best, read=DIALECT)):
            text = candidate.sql(DIALECT)
            if text in tried or len(text) >= len(best) or not _deterministic(candidate):
                continue
            tried.add(text)
            budget -= 1
            if fails(text):
                best, progress = text, True
                break
            if budget <= 0:
                break
    return best


def _deterministic(tree: exp.Expression) -> bool:
    """False if some LIMIT or OFFSET has no ORDER BY: its rows would be any rows."""
    for node in tree.walk():
        if isinstance(node, exp.Query) and (node.args.get("limit") or node.args.get("offset")) and not node.args.get("order"):
            return False
    return True


def _candidates(tree: exp.Expression) -> Iterator[exp.Expression]:
    """Reduced copies of ``tree``, coarse reductions of every node first."""
    count = sum(1 for _ in tree.walk())
    windows = any(isinstance(n, ORDER_SENSITIVE) for n in tree.walk())
    for reduce in (_set_branches, _select_parts, _select_lists, _connectors, _operands):
        for i in range(count):
            yield from reduce(tree, i, windows)


def _node(tree: exp.Expression, i: int) -> tuple[exp.Expression, exp.Expression]:
    """A fresh copy of ``tree`` and its ``i``-th node in walk order."""
    copy = tree.copy()
    for j, node in enumerate(copy.walk()):
        if j == i:
            return copy, node
    raise IndexError(i)


def _replace(root: exp.Expression, node: exp.Expression, new: exp.Expression) -> exp.Expression:
    """``root`` with ``node`` replaced by ``new``; the new root if ``node`` was the root."""
    if node is root:
        return new
    node.replace(new)
    return root


def _set_branches(tree: exp.Expression, i: int, windows: bool) -> Iterator[exp.Expression]:
    """A set operation replaced by one branch, keeping its WITH, ORDER BY and LIMIT."""
    _, node = _node(tree, i)
    if not isinstance(node, exp.SetOperation):
        return
    for side in ("this", "expression"):
        root, node = _node(tree, i)
        branch = node.args[side]
        if not isinstance(branch, exp.Select):
            continue
        for part in ("with_", "order", "limit", "offset"):
            if node.args.get(part):
                branch.set(part, node.args[part])
        yield _replace(root, node, branch)


def _select_parts(tree: exp.Expression, i: int, windows: bool) -> Iterator[exp.Expression]:
    """A SELECT without one clause, join or CTE (DISTINCT only if no order-sensitive window relies on it); an outer join made inner."""
    _, node = _node(tree, i)
    if not isinstance(node, exp.Select | exp.SetOperation):
        return
    for part in _SELECT_PARTS + ("order",):
        if node.args.get(part) and not (part == "distinct" and windows):
            root, copy = _node(tree, i)
            copy.set(part, None)
            yield root
    if node.args.get("limit"):
        root, copy = _node(tree, i)
        copy.set("limit", None)
        copy.set("offset", None)
        copy.set("order", None)
        yield root
    for j, join in enumerate(node.args.get("joins") or []):
        root, copy = _node(tree, i)
        copy.args["joins"][j].pop()
        yield root
        if join.args.get("side") or join.args.get("kind"):
            root, copy = _node(tree, i)
            copy.args["joins"][j].set("side", None)
            copy.args["joins"][j].set("kind", None)
            if not copy.args["joins"][j].args.get("on") and not copy.args["joins"][j].args.get("using"):
                copy.args["joins"][j].set("on", exp.true())
            yield root
    with_ = node.args.get("with_")
    for j in range(len(with_.expressions) if with_ else 0):
        root, copy = _node(tree, i)
        copy.args["with_"].expressions[j].pop()
        yield root


def _select_lists(tree: exp.Expression, i: int, windows: bool) -> Iterator[exp.Expression]:
    """Select items and GROUP BY keys dropped one at a time; keys only if no order-sensitive window relies on them."""
    _, node = _node(tree, i)
    if not isinstance(node, exp.Select):
        return
    for j in range(len(node.expressions) if len(node.expressions) > 1 else 0):
        root, copy = _node(tree, i)
        copy.expressions[j].pop()
        yield root
    group = node.args.get("group")
    if group is None or windows:
        return
    root, copy = _node(tree, i)
    copy.set("group", None)
    yield root
    for part in ("rollup", "cube", "grouping_sets"):
        for item in group.args.get(part) or []:
            root, copy = _node(tree, i)
            flat = list(item.find_all(exp.Column))
            copy.set("group", exp.Group(expressions=[c.copy() for c in flat]) if flat else None)
            yield root
    for j in range(len(group.expressions)):
        root, copy = _node(tree, i)
        copy.args["group"].expressions[j].pop()
        yield root


def _connectors(tree: exp.Expression, i: int, windows: bool) -> Iterator[exp.Expression]:
    """An AND or OR replaced by either side."""
    _, node = _node(tree, i)
    if not isinstance(node, exp.Connector):
        return
    for side in ("this", "expression"):
        root, copy = _node(tree, i)
        yield _replace(root, copy, copy.args[side])


def _operands(tree: exp.Expression, i: int, windows: bool) -> Iterator[exp.Expression]:
    """A function, operator, CASE, cast or window replaced by one of its operands; a scalar subquery by NULL."""
    _, node = _node(tree, i)
    if isinstance(node, exp.Subquery) and not isinstance(node.parent, exp.From | exp.Join):
        root, copy = _node(tree, i)
        yield _replace(root, copy, exp.null())
        return
    if not isinstance(node, _SIMPLIFIABLE) or isinstance(node, exp.Connector) or _in_window_order(node):
        return
    if isinstance(node, exp.Case):
        operands = [(k, j) for k in ("ifs",) for j in range(len(node.args["ifs"]))] + ([("default", None)] if node.args.get("default") else [])
    else:
        operands = [(k, j) for k, v in node.args.items() if v is not None
                    for j in (range(len(v)) if isinstance(v, list) else [None])
                    if isinstance(v[j] if isinstance(v, list) else v, exp.Expression) and k not in ("to", "order", "spec", "partition_by", "over")]
    for key, j in operands:
        root, copy = _node(tree, i)
        value = copy.args[key] if j is None else copy.args[key][j]
        if isinstance(value, exp.If):
            value = value.args["true"]
        if isinstance(value, exp.Where):
            continue
        yield _replace(root, copy, value)


def _in_window_order(node: exp.Expression) -> bool:
    """Whether ``node`` is inside a window's PARTITION BY or ORDER BY, which the shrinker leaves alone."""
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.Window) and child.arg_key in ("order", "partition_by"):
            return True
        child, parent = parent, parent.parent
    return False
