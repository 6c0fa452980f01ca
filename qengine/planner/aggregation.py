"""GROUP BY: grouping keys and aggregates become an Aggregate operator, ROLLUP, CUBE and
GROUPING SETS become its sets, and GROUPING() is read off the grouping id after it.

:class:`AggregatePlanning` is a part of :class:`qengine.planner.builder.Builder`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import sqlglot
import sqlglot.expressions as exp

from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner.expressions import in_place_of
from qengine.planner.frontend import position, unparen
from qengine.planner.logical import GROUPING_ID, Aggregate, Node, col
from qengine.planner.scope import SourceScope

# GROUPING(k, ...) and its other name GROUPING_ID(k, ...): which keys a row's grouping set left out
_GROUPING = (exp.Grouping, exp.GroupingId)


class AggregatePlanning:
    """The GROUP BY part of the plan builder."""

    def _aggregate(
        self,
        node: Node,
        scopes: dict[str, SourceScope],
        group: exp.Group | None,
        aggs: list[exp.Expression],
        outputs: list[exp.Expression],
    ) -> tuple[Node, dict[exp.Expression, str], Callable[[exp.Expression], exp.Expression]]:
        """``outputs`` are the select items, which numbers inside ROLLUP, CUBE and GROUPING
        SETS name by position."""
        key_exprs, sets = grouping_sets(group, outputs)
        # GROUPING(k) is read off the grouping id after the aggregate (``grouping`` below), not
        # computed by it: left in, it would make the aggregate impossible to split.
        aggs = [a for a in aggs if not isinstance(a, _GROUPING)]
        resolved_keys = [self.rewrite(k, scopes, what="GROUP BY") for k in key_exprs]
        resolved_aggs = [self.rewrite(a, scopes, what="aggregate") for a in aggs]
        node, key_cols = self._project_passthrough(node, resolved_keys)
        mapping: dict[exp.Expression, str] = {}
        keys: list[tuple[str, exp.Expression]] = []
        for original, key_col in zip(key_exprs, key_cols, strict=True):
            name = self.names.new()
            self.widths[name] = self.widths.get(key_col, 8.0)
            keys.append((name, col(key_col)))
            mapping.setdefault(original, name)
        agg_list: list[tuple[str, exp.Expression]] = []
        for original, resolved in zip(aggs, resolved_aggs, strict=True):
            if original in mapping:
                continue
            name = self.names.new()
            agg_list.append((name, resolved))
            mapping[original] = name
        gid = self.names.new(GROUPING_ID) if sets is not None else None
        agg = self._finish(Aggregate(node, keys, agg_list, sets, gid))

        def grouping(e: exp.Expression) -> exp.Expression:
            def visit(n: exp.Expression) -> exp.Expression:
                if not isinstance(n, _GROUPING):
                    return n
                if gid is None:
                    return in_place_of(n, sqlglot.parse_one("CAST(0 AS BIGINT)", read="duckdb"))
                bits = []
                for arg in map(unparen, n.expressions):
                    idx = next((i for i, (k, _) in enumerate(keys) if arg.name == k), None)
                    if idx is None or not isinstance(arg, exp.Column):
                        raise ProgrammingError(f"GROUPING argument {arg.sql()} is not a GROUP BY key")
                    bits.append(f"(({gid} >> {len(key_exprs) - 1 - idx}) & 1)")
                terms = [f"({b} << {len(bits) - 1 - i})" for i, b in enumerate(bits)]
                return in_place_of(n, sqlglot.parse_one(f"CAST({' | '.join(terms)} AS BIGINT)", read="duckdb"))

            return e.copy().transform(visit, copy=False)

        return agg, mapping, grouping


def grouping_sets(
    group: exp.Group | None, outputs: list[exp.Expression] = ()
) -> tuple[list[exp.Expression], list[list[int]] | None]:
    """The distinct key expressions and, for ROLLUP/CUBE/GROUPING SETS, the sets as indexes.

    Inside ROLLUP, CUBE and GROUPING SETS a number is a select item's position (``outputs``),
    as it is in a plain GROUP BY, and a parenthesized list is one element: ``ROLLUP ((a, b))``
    groups by both or neither. ``GROUP BY a, b WITH ROLLUP`` (MySQL's and Spark's spelling) is
    ``ROLLUP (a, b)``; ``GROUP BY DISTINCT`` drops grouping sets that repeat, as PostgreSQL's
    does.
    """
    if group is None:
        return [], None
    keys: list[exp.Expression] = []

    def index(e: exp.Expression) -> int:
        number = position(e)
        if number is not None:
            if not 1 <= number <= len(outputs):
                raise ProgrammingError(f"GROUP BY position {number} is not in the select list")
            e = outputs[number - 1]
        e = unparen(e)
        if e not in keys:
            keys.append(e)
        return keys.index(e)

    def element(e: exp.Expression) -> list[int]:
        """The keys one item of a ROLLUP, CUBE or grouping set stands for."""
        e = unparen(e)
        return [index(x) for x in e.expressions] if isinstance(e, exp.Tuple) else [index(e)]

    def sets_of(g: exp.Expression) -> list[list[int]] | None:
        """The grouping sets a ROLLUP, CUBE or GROUPING SETS (nested in each other or not)
        stands for; None for a plain key."""
        if isinstance(g, exp.Rollup):
            items = [element(x) for x in g.expressions]
            return [list(itertools.chain.from_iterable(items[:i])) for i in range(len(items), -1, -1)]
        if isinstance(g, exp.Cube):
            items = [element(x) for x in g.expressions]
            return [[k for j, item in enumerate(items) if mask >> j & 1 for k in item] for mask in range(2 ** len(items) - 1, -1, -1)]
        if isinstance(g, exp.GroupingSets):
            return [s for member in g.expressions for s in sets_of(member) or [element(member)]]
        return None

    elements = list(group.expressions)
    modifiers = [*(group.args.get("rollup") or []), *(group.args.get("cube") or [])]
    if modifiers:  # WITH ROLLUP / WITH CUBE: over the keys before it
        if len(modifiers) > 1 or any(m.expressions for m in modifiers) or any(sets_of(g) is not None for g in elements):
            raise NotSupportedError("WITH ROLLUP or WITH CUBE after anything but plain keys: write GROUP BY ROLLUP (…) or CUBE (…)")
        elements = [type(modifiers[0])(expressions=elements)]
    factors: list[list[list[int]]] = []
    plain = True
    # GROUP BY () is the one empty grouping set: no key (beside others), one row of no rows
    empty = [g for g in elements if isinstance(g, exp.Tuple) and not g.expressions]
    if empty and len(empty) == len(elements):
        return [], [[]]
    for g in elements:
        if any(g is e for e in empty):
            continue
        found = sets_of(g)
        plain = plain and found is None
        factors.append([element(g)] if found is None else found)
    if plain:
        return keys, None
    sets = [sorted(set(itertools.chain.from_iterable(combo))) for combo in itertools.product(*factors)]
    if group.args.get("all") is False:  # GROUP BY DISTINCT
        sets = [list(s) for s in dict.fromkeys(map(tuple, sets))]
    return keys, sets
