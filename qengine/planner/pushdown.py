"""Predicate pushdown on the logical plan.

sqlglot's optimizer pushes WHERE conditions into joins and subqueries, but not below GROUP BY,
and it never copies a condition across an equi-join. TPC-DS puts its selective predicates just
there: a year filter on a per-year aggregate CTE that is joined with other per-year CTEs on the
year. DuckDB pushes both ways, so a distributed plan without them scans and shuffles years of
data it then throws away. This pass moves every filter conjunct as low as it can go:

- below projections (column references replaced by the projected expressions),
- below an aggregate, when it uses only grouping keys (and there are no grouping sets),
- below a window, when it uses only the PARTITION BY columns,
- into every input of a set operation,
- into the side of a join it belongs to, where the join kind allows (a filter that no row
  padded with NULLs passes first makes an outer join inner on that side);

and copies a comparison of a join key with a constant to the other side's key, where the join
kind keeps that correct (an inner join both ways; a left, semi or anti join from left to right).

A CTE read more than once is computed once for all its readers, so a reader's filter cannot go
into it; but when every reader filters, the OR of their filters can (as DuckDB's CTE filter
pusher does): TPC-DS's ``year_total`` is read six times, each for one channel and one year.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable

import sqlglot.expressions as exp

from qengine.planner import estimates
from qengine.planner import logical as lp
from qengine.planner.expressions import COMPARISONS, and_all, calls_volatile, conjuncts, in_place_of, null_rejecting
from qengine.planner.logical import col
from qengine.planner.static_types import compared_exactly, same_type_in_every_input, signature
from qengine.planner.templates import slot_kind, value_of


def push_down(root: lp.Node) -> lp.Node:
    """The plan with its filters pushed down (the root may change); estimates are refreshed."""
    pusher = _Pusher()
    root = pusher.push(root, [])
    pusher.push_into_shared()
    for node in lp.walk(root):
        if isinstance(node, lp.SharedScan):
            estimates.refresh(node.producer)
    estimates.refresh(root)
    return root


class _Pusher:
    def __init__(self) -> None:
        # CTE plans already done: every reader of one shares its plan, so nothing is pushed into
        # it from one reader.
        self.shared: dict[int, lp.Node] = {}
        # per CTE plan, each reader and the filters it applies, in the plan's column names
        self.readers: dict[int, dict[int, tuple[lp.SharedScan, list[exp.Expression]]]] = {}

    def push_into_shared(self) -> None:
        """Push the OR of every reader's filters into each CTE plan whose readers all filter."""
        for key, readers in self.readers.items():
            if not all(preds for _, preds in readers.values()):
                continue
            either = exp.or_(*[exp.paren(exp.and_(*preds), copy=False) for _, preds in readers.values()])
            producer = self.push(self.shared[key], [either])
            self.shared[id(producer)] = producer
            for reader, _ in readers.values():
                reader.producer = producer

    def push(self, node: lp.Node, preds: list[exp.Expression]) -> lp.Node:
        """Push ``preds`` (conjuncts over ``node``'s columns) into ``node``; returns its
        replacement."""
        preds = [p for p in preds if not (isinstance(p, exp.Boolean) and p.this)]  # TRUE filters nothing
        for name, sub in list(node.subqueries.items()):
            node.subqueries[name] = self.push(sub, [])
        if isinstance(node, lp.SharedScan):
            key = id(node.producer)
            if key not in self.shared:
                done = self.push(node.producer, [])
                self.shared[key] = self.shared[id(done)] = done  # a reader may be visited again
            node.producer = self.shared[key]
            to_producer = {name: col(source) for source, name in node.column_map.items()}
            down, _ = _split(preds, lambda r: r <= to_producer.keys())
            self.readers.setdefault(id(self.shared[key]), {})[id(node)] = (node, [_substitute(p, to_producer) for p in down])
            return _wrap(node, preds)
        return self._node(node, preds)

    def _node(self, node: lp.Node, preds: list[exp.Expression]) -> lp.Node:
        if isinstance(node, lp.Filter):
            if node.subqueries:  # a condition using a subquery's result stays with the subquery
                node.child = self.push(node.child, [])
                return _wrap(node, preds)
            return self.push(node.child, preds + conjuncts(node.condition))
        if isinstance(node, lp.Project):
            renames = {name: e for name, e in node.exprs}
            through = set(node.child.columns) if node.passthrough else set()
            down, keep = _split(preds, lambda r: all(c in through or (c in renames and movable(renames[c])) for c in r))
            node.child = self.push(node.child, [_substitute(p, renames) for p in down])
            return _wrap(node, keep)
        if isinstance(node, lp.Aggregate):
            keys = {name: e for name, e in node.keys}
            grouped = node.grouping_sets is None and bool(keys)
            down, keep = _split(preds, lambda r: grouped and r <= keys.keys())
            node.child = self.push(node.child, [_substitute(p, keys) for p in down])
            return _wrap(node, keep)
        if isinstance(node, lp.Window):
            down, keep = _split(preds, lambda r: r <= set(node.partition_by))
            node.child = self.push(node.child, down)
            return _wrap(node, keep)
        if isinstance(node, lp.Sort | lp.Distinct):
            node.child = self.push(node.child, preds)
            return node
        if isinstance(node, lp.SetOp):
            alike = {n for i, n in enumerate(node.names) if same_type_in_every_input(node, i)}
            down, keep = _split(preds, lambda r: r <= alike)
            node.inputs = [
                self.push(child, [_substitute(p, {n: col(c) for n, c in zip(node.names, child.columns, strict=True)}) for p in down])
                for child in node.inputs
            ]
            return _wrap(node, keep)
        if isinstance(node, lp.Join):
            return self._join(node, preds)
        if node.children:  # a limit: nothing passes it
            node.replace_children([self.push(child, []) for child in node.children])
        return _wrap(node, preds)

    def _join(self, node: lp.Join, preds: list[exp.Expression]) -> lp.Node:
        left_cols, right_cols = set(node.left.columns), set(node.right.columns)
        node.kind = _without_null_rows(node.kind, preds, left_cols, right_cols)
        to_left, rest = _split(preds, lambda r: r <= left_cols and node.kind in ("inner", "cross", "left", "semi", "anti"))
        to_right, keep = _split(rest, lambda r: r <= right_cols and node.kind in ("inner", "cross", "right"))
        pairs = [
            (lk.name, rk.name)
            for lk, rk in zip(node.left_keys, node.right_keys, strict=True)
            if isinstance(lk, exp.Column) and isinstance(rk, exp.Column)
        ]

        def exact(left: str, right: str) -> bool:
            """Whether equal keys are one number: a fact about one then holds for the other."""
            return compared_exactly(signature(node.left, left), signature(node.right, right))

        node.left = self.push(node.left, to_left)
        if node.kind in ("inner", "left", "semi", "anti"):
            to_right += _across(implied(node.left), dict(pairs), implied(node.right), exact)
        node.right = self.push(node.right, to_right)
        if node.kind in ("inner", "right"):
            derived = _across(implied(node.right), {r: left for left, r in pairs}, implied(node.left), lambda r, left: exact(left, r))
            if derived:
                node.left = self.push(node.left, derived)
        return _wrap(node, keep)


def _without_null_rows(kind: str, preds: list[exp.Expression], left: set[str], right: set[str]) -> str:
    """The join kind once a filter above it drops the rows an outer join pads with NULLs: a
    filter that is never true when one side's columns are NULL (``returned_amount > 10000``
    over ``sales LEFT JOIN returns``) turns that side from optional into required, as
    DuckDB's and Spark's optimizers do; the filter can then go into that side's scan."""
    drops_right = kind in ("left", "full") and any(null_rejecting(p, right, _refs) for p in preds)
    drops_left = kind in ("right", "full") and any(null_rejecting(p, left, _refs) for p in preds)
    if kind == "full":
        return "inner" if drops_left and drops_right else "left" if drops_left else "right" if drops_right else kind
    return "inner" if drops_left or drops_right else kind


def implied(node: lp.Node) -> list[exp.Expression]:
    """Key-against-constant comparisons that hold for every output row of ``node``: the ones a
    join can copy to its other side."""
    if isinstance(node, lp.Filter):
        return [p for p in conjuncts(node.condition) if _copyable(p)] + implied(node.child)
    if isinstance(node, lp.Project):
        renames = node.renames
        return [_substitute(p, {c: col(n) for c, n in renames.items()}) for p in implied(node.child) if _refs(p) <= renames.keys()]
    if isinstance(node, lp.Aggregate):
        if node.grouping_sets is not None:
            return []
        renames = {e.name: name for name, e in node.keys if isinstance(e, exp.Column)}
        return [_substitute(p, {c: col(n) for c, n in renames.items()}) for p in implied(node.child) if _refs(p) <= renames.keys()]
    if isinstance(node, lp.Join):
        if node.kind in ("inner", "cross"):
            return implied(node.left) + implied(node.right)
        if node.kind in ("left", "semi", "anti"):
            return implied(node.left)
        return implied(node.right) if node.kind == "right" else []
    if isinstance(node, lp.Sort | lp.Distinct | lp.Limit | lp.Window):
        return implied(node.child)
    return []


def _across(
    facts: list[exp.Expression], keys: dict[str, str], known: list[exp.Expression], exact: Callable[[str, str], bool]
) -> list[exp.Expression]:
    """``facts`` about join keys, restated on the other side's keys (``keys`` maps them) where
    ``exact(key, other)`` says equal keys are one value, less the ones that side already has."""
    have = {p.sql() for p in known}
    out = []
    for p in facts:
        (column,) = _refs(p)
        if column in keys and exact(column, keys[column]):
            copied = _substitute(p, {column: col(keys[column])})
            if copied.sql() not in have:
                have.add(copied.sql())
                out.append(copied)
    return out


def _copyable(p: exp.Expression) -> bool:
    """A comparison of one column with numeric constants: a candidate to restate on a join key
    of the other side (a string constant compared with a key of another type could fail to
    cast); it is copied to keys compared exactly with its column (``static_types.compared_exactly``)."""
    return _constants(p) is not None


def _constants(p: exp.Expression) -> list[exp.Expression] | None:
    """The numeric constants ``p`` compares its one column with, or None if it is not such a
    comparison."""
    if len(_refs(p)) != 1 or not movable(p):
        return None
    if isinstance(p, COMPARISONS):
        sides = [p.this, p.expression]
    elif isinstance(p, exp.Between):
        sides = [p.this, p.args["low"], p.args["high"]]
    elif isinstance(p, exp.In) and not p.args.get("query"):
        sides = [p.this, *p.expressions]
    else:
        return None
    return sides[1:] if isinstance(sides[0], exp.Column) and all(_numeric(s) for s in sides[1:]) else None


def _numeric(e: exp.Expression) -> bool:
    """A number as written, or the slot of one (``planner.templates``)."""
    if isinstance(e, exp.Neg):
        return _numeric(e.this)
    return _kind(e) == "n"


def movable(e: exp.Expression) -> bool:
    """True when evaluating ``e`` elsewhere gives the same rows: no subquery, aggregate, window,
    unnest (it makes rows, and DuckDB allows it only in a select list) or volatile function."""
    if calls_volatile(e):
        return False
    return not any(isinstance(n, exp.Select | exp.Subquery | exp.Table | exp.AggFunc | exp.Window | exp.Explode | exp.Unnest) for n in e.walk())


def _split(preds: list[exp.Expression], test) -> tuple[list[exp.Expression], list[exp.Expression]]:
    """(what can go below: the movable predicates whose columns pass ``test``, and a weaker
    form of each OR that does not; what stays above: every predicate that does not pass)."""
    down, keep = [], []
    for p in preds:
        if movable(p) and test(_refs(p)):
            down.append(p)
            continue
        keep.append(p)
        weaker = _weaken(p, test) if movable(p) else None
        if weaker is not None:
            down.append(weaker)
    return down, keep


def _weaken(p: exp.Expression, test) -> exp.Expression | None:
    """For ``A1 AND A2 OR B1 AND B2 ...``, the OR of each branch's conjuncts that pass ``test``:
    implied by ``p``, so it may filter below while ``p`` stays above; None if a branch has none
    (``year = 2001 AND total > 0 OR year = 2002`` gives ``year = 2001 OR year = 2002`` below
    an aggregate grouped by year)."""
    if not isinstance(p, exp.Or):
        return None
    branches = []
    for branch in p.flatten():  # the OR's branches
        kept = [c for c in conjuncts(branch) if _refs(c) and test(_refs(c))]
        if not kept:
            return None
        branches.append(exp.paren(exp.and_(*kept), copy=False) if len(kept) > 1 else kept[0])
    return _fold(exp.or_(*branches))


def _refs(e: exp.Expression) -> set[str]:
    return {c.name for c in e.find_all(exp.Column)}


def _substitute(e: exp.Expression, mapping: dict[str, exp.Expression]) -> exp.Expression:
    """``e`` with columns replaced, and comparisons of two constants folded (a union branch's
    ``'s' AS sale_type`` turns ``sale_type = 'w'`` into FALSE, and the branch reads nothing)."""

    def visit(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in mapping:
            return in_place_of(n, mapping[n.name].copy())
        return n

    return _fold(e.copy().transform(visit, copy=False))


_EXACT_NUMBER = re.compile(r"-?\d+(\.\d*)?|-?\.\d+")  # an integer or decimal literal, no exponent


def _fold(e: exp.Expression) -> exp.Expression:
    """Fold ``literal = literal`` and ``literal <> literal`` of one kind, then AND / OR / NOT
    over the results. Nothing else: sqlglot's general folding types dates its own way (see
    ``frontend._RULES``), and the estimates need a constant condition as TRUE or FALSE."""
    if isinstance(e, exp.Paren):
        inner = _fold(e.this)
        return inner if isinstance(inner, exp.Boolean) else exp.paren(inner, copy=False)
    if isinstance(e, exp.EQ | exp.NEQ):
        a, b = e.this, e.expression
        if _kind(a) and _kind(a) == _kind(b):
            a, b = value_of(a), value_of(b)
            if a.is_string:
                same = a.this == b.this
            elif _EXACT_NUMBER.fullmatch(a.this) and _EXACT_NUMBER.fullmatch(b.this):
                # compared exactly, as DuckDB compares integer and decimal literals: as floats,
                # 9007199254740993 = 9007199254740992 was true
                same = decimal.Decimal(a.this) == decimal.Decimal(b.this)
            else:
                return e  # a DOUBLE (1e300): left to DuckDB
            return exp.Boolean(this=same == isinstance(e, exp.EQ))
        return e
    if isinstance(e, exp.Not):
        inner = _fold(e.this)
        return exp.Boolean(this=not inner.this) if isinstance(inner, exp.Boolean) else exp.Not(this=inner)
    if isinstance(e, exp.And | exp.Or):
        absorbing = isinstance(e, exp.Or)  # TRUE absorbs an OR, FALSE an AND
        parts = []
        for part in (_fold(e.left), _fold(e.right)):
            if isinstance(part, exp.Boolean):
                if part.this == absorbing:
                    return exp.Boolean(this=absorbing)
                continue
            parts.append(part)
        if not parts:
            return exp.Boolean(this=not absorbing)
        return parts[0] if len(parts) == 1 else type(e)(this=parts[0], expression=parts[1])
    return e


def _kind(e: exp.Expression) -> str | None:
    """"s" or "n" for a string or numeric constant, or the slot of one; None otherwise."""
    if isinstance(e, exp.Literal):
        return "s" if e.is_string else "n"
    return slot_kind(e)


def _wrap(node: lp.Node, preds: list[exp.Expression]) -> lp.Node:
    if not preds:
        return node
    wrapped = lp.Filter(node, and_all(preds))
    wrapped.est_rows = node.est_rows
    return wrapped
