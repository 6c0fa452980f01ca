"""FROM and joins: the relations a SELECT reads, inner joins ordered by estimated result size
(greedy operator ordering), outer, semi and anti joins in their written order, and join keys.

:class:`JoinPlanning` is a part of :class:`qengine.planner.builder.Builder`: it uses the
builder's ``_source``, ``rewrite``, ``_finish`` and ``_project_passthrough``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot.expressions as exp

from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner import estimates
from qengine.planner.expressions import and_all, conjuncts, null_rejecting, source_aliases
from qengine.planner.logical import Aggregate, Distinct, Filter, Join, Node, Project, Scan, Values, col
from qengine.planner.scope import SourceScope
from qengine.planner.static_types import exact_number, signature


@dataclass
class _Item:
    node: Node
    aliases: frozenset[str]


@dataclass
class _Conjunct:
    """A WHERE/ON conjunct with the source aliases it references (and, for ``a = b``, each
    side's), worked out once: join ordering asks about them for every pair of relations."""

    expr: exp.Expression
    used: bool = field(default=False)
    # Of an inner join's ON: one naming no table (``ON 1 = 0``) filters that join's group, not
    # the result of the outer joins after it (a RIGHT JOIN keeps its rows when the group is empty).
    on: bool = field(default=False)
    aliases: frozenset[str] = field(init=False)
    sides: tuple[frozenset[str], frozenset[str]] | None = field(init=False)

    def __post_init__(self) -> None:
        self.aliases = source_aliases(self.expr)
        e = self.expr
        self.sides = (source_aliases(e.this), source_aliases(e.expression)) if isinstance(e, exp.EQ) else None


class JoinPlanning:
    """The FROM clause and join ordering of the plan builder."""

    def _from(self, select: exp.Select) -> tuple[Node, dict[str, SourceScope], list[exp.Expression]]:
        """Plan FROM/JOIN/WHERE; returns the node, the scopes and WHERE conjuncts left to apply."""
        from_ = select.args.get("from_")
        scopes: dict[str, SourceScope] = {}
        if from_ is None:
            name = self.names.new()
            node = self._finish(Values(exp.Values(expressions=[exp.Tuple(expressions=[exp.Literal.number(1)])]), [name]))
            return node, scopes, conjuncts(select.args.get("where"))
        joins = select.args.get("joins") or []
        sides = [(j.args.get("side") or "").upper() for j in joins]
        where = [_Conjunct(c) for c in conjuncts(select.args.get("where"))]
        push_where = not any(s in ("RIGHT", "FULL") for s in sides)

        def add(item: exp.Expression) -> _Item:
            node, scope = self._source(item)
            if scope.alias in scopes:
                raise ProgrammingError(f"duplicate table alias {scope.alias!r}")
            scopes[scope.alias] = scope
            return _Item(node, frozenset([scope.alias]))

        pending = [add(from_.this)]
        pool = list(where) if push_where else []
        current: _Item | None = None
        for join, side in zip(joins, sides, strict=True):
            kind = (join.args.get("kind") or "").upper()
            if join.args.get("using"):
                raise NotSupportedError("JOIN ... USING is not supported after qualification")
            if side == "LEFT" and not kind and push_where and self._required(join.this, where):
                side = ""  # an inner join: it goes into the join group, to be ordered with the rest
            if kind in ("SEMI", "ANTI") or side:
                if pending:
                    current = self._join_group(([current] if current else []) + pending, pool, scopes)
                    pending = []
                right = add(join.this)
                jkind = kind.lower() if kind in ("SEMI", "ANTI") else side.lower()
                current = self._outer_join(current, right, jkind, conjuncts(join.args.get("on")), scopes)
                current = self._apply_ready(current, pool, scopes)
            else:
                if kind == "CROSS" and join.args.get("on"):
                    raise ProgrammingError("CROSS JOIN cannot have an ON clause")
                item = add(join.this)
                pool.extend(_Conjunct(c, on=True) for c in conjuncts(join.args.get("on")))
                pending.append(item)
        if pending:
            current = self._join_group(([current] if current else []) + pending, pool, scopes)
        assert current is not None
        leftover = [c.expr for c in where if not c.used] if push_where else [c.expr for c in where]
        leftover += [c.expr for c in pool if not c.used and c not in where]
        return current.node, scopes, leftover

    @staticmethod
    def _required(item: exp.Expression, where: list[_Conjunct]) -> bool:
        """Whether WHERE drops every row a LEFT JOIN of ``item`` pads with NULLs, which makes it
        an inner join: an IN subquery, which the optimizer makes ``LEFT JOIN _u ... WHERE NOT
        _u.x IS NULL``, so joins in the order the other joins' sizes call for, not last."""
        alias = frozenset([item.alias_or_name.lower()])
        return any(null_rejecting(c.expr, alias, source_aliases) for c in where)

    def _filter(self, item: _Item, conds: list[_Conjunct], scopes: dict[str, SourceScope]) -> _Item:
        if not conds:
            return item
        for c in conds:
            c.used = True
        cond = and_all([self.rewrite(c.expr, scopes, what="WHERE") for c in conds])
        return _Item(self._finish(Filter(item.node, cond)), item.aliases)

    def _apply_ready(self, item: _Item, pool: list[_Conjunct], scopes: dict[str, SourceScope]) -> _Item:
        ready = [c for c in pool if not c.used and c.aliases and c.aliases <= item.aliases]
        return self._filter(item, ready, scopes)

    def _join_group(self, items: list[_Item], pool: list[_Conjunct], scopes: dict[str, SourceScope]) -> _Item:
        """Order a group of inner-joined relations greedily by result size (GOO): repeatedly join
        the connected pair with the smallest estimated result, key joins before many-to-many
        ones. Filtered dimensions so shrink each fact table before fact tables meet, and the
        tree may be bushy, which keeps a big fact table from being shuffled unfiltered. Between
        joins of the same estimated result, the one with the smaller side goes first: it builds
        the smaller hash table and is the likelier to be broadcast, so the fact rows it keeps
        are shuffled (if at all) after the cheap joins, not before them. (A filter pushed into a
        CTE from its readers arrives after this ordering, so such ties are common: TPC-DS q4,
        q11 and q74 joined customer before their year-filtered date_dim.)"""
        items = [self._apply_ready(it, pool, scopes) for it in items]
        keys: dict[int, float | None] = {}  # id(column expression) → its table's rows if a key
        while len(items) > 1:
            best: tuple[tuple[bool, float, float], _Item, _Item, tuple[str, float] | None] | None = None
            for i, a in enumerate(items):
                for b in items[i + 1 :]:
                    edges = [s for c in pool if not c.used and (s := equi_sides(c, a.aliases, b.aliases))]
                    if edges:
                        key = self._join_key(a, b, edges, scopes, keys)
                        ra, rb = a.node.est_rows, b.node.est_rows
                        result = max(1.0, estimates.keyed_rows(ra, rb, key)) if key else max(ra, rb)
                        rank = (key is None, result, min(ra, rb))
                        if best is None or rank < best[0]:
                            best = (rank, a, b, key)
            if best is None:  # nothing left is connected by an equi-join: cross the two smallest
                a, b = sorted(items, key=lambda it: it.node.est_rows)[:2]
                key = None
            else:
                _, a, b, key = best
            if a.node.est_rows < b.node.est_rows:  # the larger input probes
                a, b = b, a
                key = ("left" if key[0] == "right" else "right", key[1]) if key else None
            both = a.aliases | b.aliases
            conds = [c for c in pool if not c.used and c.aliases and c.aliases <= both]
            for c in conds:
                c.used = True
            joined = self._make_join(a, b, "inner" if conds else "cross", conds, scopes, key)
            items = [it for it in items if it is not a and it is not b] + [joined]
        return self._filter(items[0], [c for c in pool if not c.used and c.on and not c.aliases], scopes)

    def _join_key(
        self,
        a: _Item,
        b: _Item,
        edges: list[tuple[exp.Expression, exp.Expression]],
        scopes: dict[str, SourceScope],
        cache: dict[int, float | None],
    ) -> tuple[str, float] | None:
        """Whether ``a ⋈ b`` is on one side's key: ("left" for ``a``, or "right", and that side's
        filter selectivity), or None for a many-to-many join. When both sides of an edge look
        like keys, the smaller table is the key side (a dimension's key against a fact table's
        foreign key); over several edges, the one that keeps the fewest rows."""
        found: list[tuple[str, float]] = []
        for ea, eb in edges:
            ka, kb = (self._key_rows(e, scopes, cache) for e in (ea, eb))
            if ka is not None and (kb is None or ka <= kb):
                found.append(("left", min(1.0, a.node.est_rows / ka)))
            elif kb is not None:
                found.append(("right", min(1.0, b.node.est_rows / kb)))
        if not found:
            return self._composite_key(a, b, edges, scopes) if len(edges) > 1 else None
        return min(found, key=lambda k: estimates.keyed_rows(a.node.est_rows, b.node.est_rows, k))

    @staticmethod
    def _composite_key(
        a: _Item, b: _Item, edges: list[tuple[exp.Expression, exp.Expression]], scopes: dict[str, SourceScope]
    ) -> tuple[str, float] | None:
        """A join of two tables on several columns, none of them a key alone, taken to be on
        the larger table's composite key: TPC-DS's returns meet their sales on item and ticket
        (or order) number, each return matching one sale. Taken for many-to-many, such a join
        came after every key join, so q85 joined its web returns to two customer demographics
        scans (1.9M rows each) before the year's web sales that keep 1 return in 500."""
        tables = []
        for side in zip(*edges, strict=True):
            hits = [JoinPlanning._scanned(e, scopes) for e in side]
            if any(hit is None for hit in hits) or len({id(hit[0]) for hit in hits}) != 1:
                return None  # a side's columns are not all of one table
            tables.append(hits[0][0])
        ta, tb = (estimates.table_rows(t) for t in tables)
        if ta >= tb:
            return ("left", min(1.0, a.node.est_rows / ta))
        return ("right", min(1.0, b.node.est_rows / tb))

    @staticmethod
    def _resolved(e: exp.Expression, scopes: dict[str, SourceScope]) -> tuple[Node, str] | None:
        """The relation a column expression reads and its internal name there."""
        scope = scopes.get(e.table.lower()) if isinstance(e, exp.Column) else None
        internal = scope.lookup(e.name) if scope is not None else None
        return (scope.node, internal) if scope is not None and internal else None

    @staticmethod
    def _scanned(e: exp.Expression, scopes: dict[str, SourceScope]) -> tuple[Scan, str] | None:
        """The scan and table column a column expression reads (see ``estimates.scanned_column``)."""
        found = JoinPlanning._resolved(e, scopes)
        return estimates.scanned_column(*found) if found is not None else None

    @staticmethod
    def _key_rows(e: exp.Expression, scopes: dict[str, SourceScope], cache: dict[int, float | None]) -> float | None:
        """The table's row count when ``e`` looks like its key (see ``estimates.key_rows``), or
        the values it can take when its relation has each once (``estimates.distinct_rows``)."""
        if id(e) not in cache:
            found = JoinPlanning._resolved(e, scopes)
            hit = estimates.scanned_column(*found) if found is not None else None
            if hit is not None:
                cache[id(e)] = estimates.key_rows(*hit)
            else:  # a column read as it is from a scan is no DISTINCT's or grouping's output
                cache[id(e)] = estimates.distinct_rows(*found) if found is not None else None
        return cache[id(e)]

    def _outer_join(
        self, left: _Item, right: _Item, kind: str, on: list[exp.Expression], scopes: dict[str, SourceScope]
    ) -> _Item:
        # ON conjuncts that touch only the non-preserved side filter that side before the join.
        push_to_right = kind in ("left", "semi", "anti")
        kept = []
        for c in on:
            aliases = source_aliases(c)
            if aliases and aliases <= right.aliases and push_to_right:
                right = self._filter(right, [_Conjunct(c)], scopes)
            elif aliases and aliases <= left.aliases and kind == "right":
                left = self._filter(left, [_Conjunct(c)], scopes)
            else:
                kept.append(_Conjunct(c))
        return self._make_join(left, right, kind, kept, scopes)

    def _make_join(
        self,
        left: _Item,
        right: _Item,
        kind: str,
        conds: list[_Conjunct],
        scopes: dict[str, SourceScope],
        key: tuple[str, float] | None = None,
    ) -> _Item:
        lkeys: list[exp.Expression] = []
        rkeys: list[exp.Expression] = []
        residual: list[exp.Expression] = []
        for c in conds:
            sides = equi_sides(c, left.aliases, right.aliases)
            if sides:
                lkeys.append(self.rewrite(sides[0], scopes, what="JOIN"))
                rkeys.append(self.rewrite(sides[1], scopes, what="JOIN"))
            else:
                residual.append(self.rewrite(c.expr, scopes, what="JOIN"))
        lnode, lnames = self._project_passthrough(left.node, lkeys)
        rnode, rnames = self._project_passthrough(right.node, rkeys)
        if kind in ("left", "inner") and _distinct_values(right):
            rnode = self._distinct_as_compared(lnode, lnames, rnode, rnames)
        if kind == "inner" and not lkeys and not residual:
            kind = "cross"
        join = Join(lnode, rnode, kind, [col(n) for n in lnames], [col(n) for n in rnames], and_all(residual), key)
        return _Item(self._finish(join), left.aliases | right.aliases)

    def _distinct_as_compared(self, lnode: Node, lnames: list[str], rnode: Node, rnames: list[str]) -> Node:
        """An IN subquery's distinct values, made distinct again as the join compares them with
        the outer keys: two distinct BIGINTs (2^53 and 2^53 + 1) are one DOUBLE, and an outer
        DOUBLE equal to it matched both, its row returned twice."""
        casts = {}
        for ln, rn in zip(lnames, rnames, strict=True):
            outer, inner = signature(lnode, ln), signature(rnode, rn)
            # DuckDB compares an integer or DECIMAL with a FLOAT or DOUBLE as the latter, which
            # may make distinct values one; any other pair it compares without merging them
            # (a VARCHAR is cast to the other side: '01' and '1' are both 1)
            if outer in ("FLOAT", "DOUBLE") and inner is not None and exact_number(inner):
                casts[rn] = exp.cast(col(rn), exp.DataType.build(outer, dialect="duckdb"))
        if not casts:
            return rnode
        return self._finish(Distinct(self._finish(Project(rnode, [(c, casts.get(c, col(c))) for c in rnode.columns]))))


def _distinct_values(item: _Item) -> bool:
    """Whether ``item`` is the distinct values an IN, ANY or EXISTS subquery was made into
    (sqlglot's ``unnest_subqueries``: a derived table ``_u_N`` grouped by all it selects)."""
    node = item.node
    while isinstance(node, Project | Filter):
        node = node.child
    return len(item.aliases) == 1 and next(iter(item.aliases)).startswith("_u_") and isinstance(node, Aggregate) and not node.aggs


def equi_sides(c: _Conjunct, left: frozenset[str], right: frozenset[str]) -> tuple[exp.Expression, exp.Expression] | None:
    """``a = b`` with ``a`` from ``left`` and ``b`` from ``right`` (either way round) → (a, b)."""
    if c.sides is None:
        return None
    e = c.expr
    a, b = c.sides
    if not a or not b:
        return None
    if a <= left and b <= right:
        return e.this, e.expression
    if a <= right and b <= left:
        return e.expression, e.this
    return None
