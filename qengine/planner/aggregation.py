"""GROUP BY: grouping keys and aggregates become an Aggregate operator, ROLLUP, CUBE and
GROUPING SETS become its sets, and GROUPING() is read off the grouping id after it.

:class:`AggregatePlanning` is a part of :class:`qengine.planner.builder.Builder`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import sqlglot
import sqlglot.expressions as exp

from qengine.errors import ProgrammingError
from qengine.planner.logical import Aggregate, Node, col
from qengine.planner.scope import SourceScope


class AggregatePlanning:
    """The GROUP BY part of the plan builder."""

    def _aggregate(
        self,
        node: Node,
        scopes: dict[str, SourceScope],
        group: exp.Group | None,
        aggs: list[exp.Expression],
    ) -> tuple[Node, dict[exp.Expression, str], Callable[[exp.Expression], exp.Expression]]:
        key_exprs, sets = grouping_sets(group)
        # GROUPING(k) is read off the grouping id after the aggregate (``grouping`` below), not
        # computed by it: left in, it would make the aggregate impossible to split.
        aggs = [a for a in aggs if not isinstance(a, exp.Grouping)]
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
        gid = self.names.new() if sets is not None else None
        agg = self._finish(Aggregate(node, keys, agg_list, sets, gid))

        def grouping(e: exp.Expression) -> exp.Expression:
            def visit(n: exp.Expression) -> exp.Expression:
                if not isinstance(n, exp.Grouping):
                    return n
                if gid is None:
                    return exp.Literal.number(0)
                bits = []
                for arg in n.expressions:
                    idx = next((i for i, (k, _) in enumerate(keys) if arg.name == k), None)
                    if idx is None or not isinstance(arg, exp.Column):
                        raise ProgrammingError(f"GROUPING argument {arg.sql()} is not a GROUP BY key")
                    bits.append(f"(({gid} >> {len(key_exprs) - 1 - idx}) & 1)")
                terms = [f"({b} << {len(bits) - 1 - i})" for i, b in enumerate(bits)]
                return sqlglot.parse_one(" | ".join(terms), read="duckdb")

            return e.copy().transform(visit, copy=False)

        return agg, mapping, grouping


def grouping_sets(group: exp.Group | None) -> tuple[list[exp.Expression], list[list[int]] | None]:
    """The distinct key expressions and, for ROLLUP/CUBE/GROUPING SETS, the sets as indexes."""
    if group is None:
        return [], None
    keys: list[exp.Expression] = []

    def index(e: exp.Expression) -> int:
        e = e.this if isinstance(e, exp.Paren) else e
        if e not in keys:
            keys.append(e)
        return keys.index(e)

    factors: list[list[list[int]]] = []
    plain = True
    for g in group.expressions:
        if isinstance(g, exp.Rollup):
            items = [index(x) for x in g.expressions]
            factors.append([items[:i] for i in range(len(items), -1, -1)])
            plain = False
        elif isinstance(g, exp.Cube):
            items = [index(x) for x in g.expressions]
            factors.append([[x for j, x in enumerate(items) if mask >> j & 1] for mask in range(2 ** len(items) - 1, -1, -1)])
            plain = False
        elif isinstance(g, exp.GroupingSets):
            sets = []
            for s in g.expressions:
                members = s.expressions if isinstance(s, exp.Tuple) else [s]
                sets.append([index(x) for x in members])
            factors.append(sets)
            plain = False
        else:
            factors.append([[index(g)]])
    for kind in ("rollup", "cube"):
        for g in group.args.get(kind) or []:
            items = [index(x) for x in g.expressions]
            if kind == "rollup":
                factors.append([items[:i] for i in range(len(items), -1, -1)])
            else:
                factors.append([[x for j, x in enumerate(items) if m >> j & 1] for m in range(2 ** len(items) - 1, -1, -1)])
            plain = False
    if plain:
        return keys, None
    sets = [sorted(set(itertools.chain.from_iterable(combo))) for combo in itertools.product(*factors)]
    return keys, sets
