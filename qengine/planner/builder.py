"""Optimized sqlglot AST → logical plan.

The input is what :func:`qengine.planner.frontend.optimize_query` returns: every column is
qualified with its source alias and most subqueries are already joins. The builder resolves
names to internal columns, orders inner joins greedily along equi-join edges, splits SELECT
into aggregate / window / projection / sort / limit operators, and turns any remaining
uncorrelated subquery into a placeholder table fed by its own plan.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import duckdb
import sqlglot
import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import Source
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner import estimates
from qengine.planner.frontend import unparen
from qengine.planner.logical import (
    Aggregate,
    Distinct,
    Filter,
    Join,
    Limit,
    Names,
    Node,
    Project,
    Scan,
    SetOp,
    SharedScan,
    Sort,
    Values,
    Window,
    col,
    not_null_operand,
    walk,
)


@functools.cache
def duckdb_aggregate_names() -> frozenset[str]:
    """Aggregate function names DuckDB knows, for functions sqlglot parses as Anonymous."""
    con = duckdb.connect()
    try:
        rows = con.execute("SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'aggregate'").fetchall()
    finally:
        con.close()
    return frozenset(r[0].lower() for r in rows)


def is_aggregate(e: exp.Expression) -> bool:
    if isinstance(e, exp.Filter):
        return is_aggregate(e.this)
    if isinstance(e, exp.AggFunc):
        return True
    return isinstance(e, exp.Anonymous) and e.name.lower() in duckdb_aggregate_names()


def conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    if isinstance(e, exp.Where):
        e = e.this
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    if isinstance(e, exp.And):
        return conjuncts(e.left) + conjuncts(e.right)
    return [e]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    return functools.reduce(lambda a, b: exp.and_(a, b, copy=False), parts) if parts else None


COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
# Tests that are NULL for a NULL operand, and expressions that are NULL whenever an operand is:
# a filter built only of these, over a column of the padded side, is NULL (so false) on every
# padded row.
_STRICT_TESTS = (*COMPARISONS, exp.Between, exp.Like, exp.ILike)
_STRICT = (exp.Column, exp.Identifier, exp.Literal, exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div,
           exp.Mod, exp.Cast, exp.DataType, exp.DataTypeParam, *_STRICT_TESTS)


def null_rejecting(p: exp.Expression, padded: AbstractSet[str], refs: Callable[[exp.Expression], AbstractSet[str]]) -> bool:
    """Whether filter ``p`` is never true on a row an outer join padded with NULLs for the
    side ``padded`` names (its columns or its aliases, as ``refs`` finds them in ``p``)."""
    tested = not_null_operand(p)
    if tested is not None:
        p = tested
    elif isinstance(p, exp.In) and not p.args.get("query"):
        p = p.this  # x IN (...) is NULL for a NULL x
    elif not isinstance(p, _STRICT_TESTS):
        return False
    return bool(refs(p) & padded) and all(isinstance(n, _STRICT) for n in p.walk())


def source_aliases(e: exp.Expression) -> frozenset[str]:
    """Aliases an expression refers to, ignoring columns inside nested subqueries."""
    out = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Column):
            if node.table:
                out.add(node.table.lower())
            continue
        if isinstance(node, exp.Query):
            continue
        stack.extend(node.iter_expressions())
    return frozenset(out)


@dataclass
class Rel:
    """A planned relation: its operator and the display names of its columns."""

    node: Node
    names: list[str]


@dataclass
class SourceScope:
    """One FROM item visible under an alias. Scans allocate internal columns on first use."""

    alias: str
    node: Node
    fixed: dict[str, str] | None = None
    scan: Scan | None = None
    builder: Builder | None = None

    def lookup(self, name: str) -> str | None:
        key = name.lower()
        if self.fixed is not None:
            return self.fixed.get(key)
        assert self.scan is not None and self.builder is not None
        source = self.scan.source
        actual = next((f.name for f in source.schema if f.name.lower() == key), None)
        if actual is None:
            return None
        if actual not in self.scan.column_map:
            internal = self.builder.names.new()
            self.scan.column_map[actual] = internal
            self.builder.widths[internal] = source.column_width(actual)
        return self.scan.column_map[actual]


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
    aliases: frozenset[str] = field(init=False)
    sides: tuple[frozenset[str], frozenset[str]] | None = field(init=False)

    def __post_init__(self) -> None:
        self.aliases = source_aliases(self.expr)
        e = self.expr
        self.sides = (source_aliases(e.this), source_aliases(e.expression)) if isinstance(e, exp.EQ) else None


class Builder:
    """Builds the logical plan of one query."""

    def __init__(self, catalog: Catalog, names: Names | None = None) -> None:
        self.catalog = catalog
        self.names = names or Names()
        self.widths: dict[str, float] = {}
        self._ctes: list[dict[str, exp.Expression]] = [{}]
        self._subquery_ids = itertools.count()
        self._pending_subqueries: dict[str, Node] = {}
        self._cte_refs: dict[int, int] = {}
        self._shared: dict[int, Rel] = {}

    # ---- entry points ------------------------------------------------------------------

    def build(self, query: exp.Expression) -> Rel:
        """Plan a query expression (SELECT, set operation, VALUES, possibly WITH)."""
        with_ = query.args.get("with_")
        if with_ is not None:
            if with_.args.get("recursive"):
                raise NotSupportedError("WITH RECURSIVE is not supported")
            self._ctes.append(dict(self._ctes[-1]))
            references = Counter(t.name.lower() for t in query.find_all(exp.Table) if not t.args.get("db"))
            for cte in with_.expressions:
                name = cte.alias_or_name.lower()
                self._ctes[-1][name] = cte.this
                self._cte_refs[id(cte.this)] = references[name]
            try:
                return self._build_body(query)
            finally:
                self._ctes.pop()
        return self._build_body(query)

    def _build_body(self, query: exp.Expression) -> Rel:
        if isinstance(query, exp.Subquery):
            rel = self.build(query.this)
            return self._order_limit(rel, query)
        if isinstance(query, exp.Select):
            return self._select(query)
        if isinstance(query, exp.Union | exp.Intersect | exp.Except):
            return self._setop(query)
        if isinstance(query, exp.Values):
            return self._values(query)
        raise NotSupportedError(f"{type(query).__name__} is not supported as a query")

    # ---- helpers -----------------------------------------------------------------------

    def _finish(self, node: Node) -> Node:
        """Attach collected subquery plans and compute the estimate."""
        if self._pending_subqueries:
            node.subqueries.update(self._pending_subqueries)
            self._pending_subqueries = {}
        node.est_rows = estimates.rows(node)
        return node

    def _project_passthrough(self, node: Node, exprs: list[exp.Expression]) -> tuple[Node, list[str]]:
        """Make every expression a bare column of the returned node, projecting where needed."""
        names: list[str] = []
        extra: list[tuple[str, exp.Expression]] = []
        for e in exprs:
            if isinstance(e, exp.Column) and not e.table and e.name in node.columns:
                names.append(e.name)
                continue
            match = next((n for n, x in extra if x == e), None)
            if match is None:
                match = self.names.new()
                extra.append((match, e))
            names.append(match)
        if not extra:
            return node, names
        return self._finish(Project(node, extra, passthrough=True)), names

    def rewrite(
        self,
        e: exp.Expression,
        scopes: dict[str, SourceScope] | None,
        mapping: dict[exp.Expression, str] | None = None,
        what: str = "expression",
    ) -> exp.Expression:
        """Resolve columns to internal names; ``mapping`` first replaces whole subexpressions."""

        def visit(node: exp.Expression) -> exp.Expression:
            if mapping and not isinstance(node, exp.Identifier | exp.Literal) and node in mapping:
                return col(mapping[node])
            if isinstance(node, exp.Column):
                return self._resolve_column(node, scopes, what)
            if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Query):
                name, rel = self._subquery(node.this)
                return exp.Subquery(this=exp.select(*[col(c) for c in rel.node.columns]).from_(name))
            if isinstance(node, exp.Exists) and isinstance(node.this, exp.Query):
                name, _ = self._subquery(node.this)
                return exp.Exists(this=exp.select("*").from_(name))
            return node

        return e.copy().transform(visit, copy=False)

    def _resolve_column(self, column: exp.Column, scopes: dict[str, SourceScope] | None, what: str) -> exp.Expression:
        if scopes is None:
            raise ProgrammingError(
                f"column {column.sql()} must appear in the GROUP BY clause or be used in an aggregate function"
            )
        table = column.table.lower()
        if not table:
            found = [s.lookup(column.name) for s in scopes.values()]
            found = [f for f in found if f]
            if len(found) == 1:
                return col(found[0])
            raise ProgrammingError(f"column {column.name!r} in {what} is {'ambiguous' if found else 'not found'}")
        scope = scopes.get(table)
        if scope is None:
            raise NotSupportedError(f"correlated reference to {column.sql()} in a subquery is not supported")
        internal = scope.lookup(column.name)
        if internal is None:
            raise ProgrammingError(f"column {column.name!r} not found in {column.table!r}")
        return col(internal)

    def _subquery(self, query: exp.Expression) -> tuple[str, Rel]:
        saved = self._pending_subqueries
        self._pending_subqueries = {}
        try:
            rel = self.build(query)
        finally:
            self._pending_subqueries = saved
        name = f"__sq{next(self._subquery_ids)}"
        self._pending_subqueries[name] = rel.node
        return name, rel

    # ---- FROM and joins ----------------------------------------------------------------

    def _source(self, item: exp.Expression) -> tuple[Node, SourceScope]:
        alias = item.alias_or_name.lower()
        alias_arg = item.args.get("alias")
        column_aliases = [c.name for c in alias_arg.columns] if isinstance(alias_arg, exp.TableAlias) else []
        if isinstance(item, exp.Table):
            if not isinstance(item.this, exp.Identifier):
                raise NotSupportedError(f"table function {item.this.sql()} is not supported")
            cte = self._ctes[-1].get(item.name.lower())
            if cte is not None and not item.args.get("db"):
                rel = self._cte(cte)
            else:
                source: Source = self.catalog.table(item.name)
                scan = Scan(source, {})
                self._finish(scan)
                scope = SourceScope(alias, scan, scan=scan, builder=self)
                return scan, scope
        elif isinstance(item, exp.Subquery):
            rel = self.build(item.this)
            rel = self._order_limit(rel, item)
        elif isinstance(item, exp.Values):
            rel = self._values(item)
        else:
            raise NotSupportedError(f"{type(item).__name__} in FROM is not supported")
        names = column_aliases + rel.names[len(column_aliases):]
        fixed: dict[str, str] = {}
        for display, internal in zip(names, rel.node.columns, strict=True):
            fixed.setdefault(display.lower(), internal)
        return rel.node, SourceScope(alias, rel.node, fixed=fixed)

    def _cte(self, cte: exp.Expression) -> Rel:
        """Plan a CTE reference: inline if used once, else read one shared, computed-once plan."""
        if self._cte_refs.get(id(cte), 1) < 2:
            return self.build(cte)
        producer = self._shared.get(id(cte))
        if producer is None:
            producer = self.build(cte)
            expensive = (Join, Aggregate, Window, SetOp, Distinct)
            if not any(isinstance(n, expensive) for n in walk(producer.node)):
                return producer  # a filtered scan: cheaper to read again than to materialize
            self._shared[id(cte)] = producer
        column_map = {}
        for c in producer.node.columns:
            column_map[c] = self.names.new()
            self.widths[column_map[c]] = self.widths.get(c, 8.0)
        return Rel(self._finish(SharedScan(producer.node, column_map)), producer.names)

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
                pool.extend(_Conjunct(c) for c in conjuncts(join.args.get("on")))
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
                    edges = [s for c in pool if not c.used and (s := _equi_sides(c, a.aliases, b.aliases))]
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
        return items[0]

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
            hits = [Builder._scanned(e, scopes) for e in side]
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
        found = Builder._resolved(e, scopes)
        return estimates.scanned_column(*found) if found is not None else None

    @staticmethod
    def _key_rows(e: exp.Expression, scopes: dict[str, SourceScope], cache: dict[int, float | None]) -> float | None:
        """The table's row count when ``e`` looks like its key (see ``estimates.key_rows``), or
        the values it can take when its relation has each once (``estimates.distinct_rows``)."""
        if id(e) not in cache:
            found = Builder._resolved(e, scopes)
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
            sides = _equi_sides(c, left.aliases, right.aliases)
            if sides:
                lkeys.append(self.rewrite(sides[0], scopes, what="JOIN"))
                rkeys.append(self.rewrite(sides[1], scopes, what="JOIN"))
            else:
                residual.append(self.rewrite(c.expr, scopes, what="JOIN"))
        lnode, lnames = self._project_passthrough(left.node, lkeys)
        rnode, rnames = self._project_passthrough(right.node, rkeys)
        if kind == "inner" and not lkeys and not residual:
            kind = "cross"
        join = Join(lnode, rnode, kind, [col(n) for n in lnames], [col(n) for n in rnames], and_all(residual), key)
        return _Item(self._finish(join), left.aliases | right.aliases)

    # ---- SELECT ------------------------------------------------------------------------

    def _select(self, select: exp.Select) -> Rel:
        if select.args.get("distinct") is not None and select.args["distinct"].args.get("on"):
            raise NotSupportedError("DISTINCT ON is not supported")
        node, scopes, where = self._from(select)
        if where:
            cond = and_all([self.rewrite(c, scopes, what="WHERE") for c in where])
            node = self._finish(Filter(node, cond))

        outputs = [unparen(e.unalias()) for e in select.expressions]
        display = [e.alias_or_name for e in select.expressions]
        order = select.args.get("order")
        order_exprs = [self._order_target(o.this, select.expressions) for o in order.expressions] if order else []
        having = select.args.get("having")
        qualify = select.args.get("qualify")

        aggs: list[exp.Expression] = []
        for e in [*outputs, *order_exprs, *([having.this] if having else [])]:
            _collect_aggregates(e, aggs)
        group = select.args.get("group")
        if group is not None and group.args.get("all"):
            plain = [o for o in outputs if not _has_aggregate(o) and not o.find(exp.Window)]
            group = exp.Group(expressions=[o.copy() for o in plain]) if plain else None
        post: Callable[[exp.Expression, str], exp.Expression]
        if group is not None or aggs:
            node, mapping, grouping = self._aggregate(node, scopes, group, aggs)

            def post(e: exp.Expression, what: str) -> exp.Expression:
                return grouping(self.rewrite(e, None, mapping, what))
        else:
            def post(e: exp.Expression, what: str) -> exp.Expression:
                return self.rewrite(e, scopes, what=what)

        if having is not None:
            node = self._finish(Filter(node, post(having.this, "HAVING")))
        resolved = [post(e, "SELECT") for e in outputs]
        resolved_order = [post(e, "ORDER BY") for e in order_exprs]
        resolved_qualify = post(qualify.this, "QUALIFY") if qualify is not None else None
        node, replaced = self._windows(node, [*resolved, *resolved_order, *([resolved_qualify] if qualify else [])])
        resolved = replaced[: len(resolved)]
        resolved_order = replaced[len(resolved): len(resolved) + len(resolved_order)]
        if qualify is not None:
            node = self._finish(Filter(node, replaced[-1]))

        names = [self.names.new() for _ in resolved]
        exprs = list(zip(names, resolved, strict=True))
        for n, e in exprs:
            self.widths[n] = self.widths.get(e.name, 8.0) if isinstance(e, exp.Column) else 8.0
        hidden: list[tuple[str, exp.Expression]] = []
        sort_cols: list[str] = []
        for e in resolved_order:
            match = next((n for n, x in exprs + hidden if x == e), None)
            if match is None:
                match = self.names.new()
                hidden.append((match, e))
            sort_cols.append(match)
        distinct = select.args.get("distinct") is not None
        if hidden and distinct:
            raise ProgrammingError("for SELECT DISTINCT, ORDER BY expressions must appear in the select list")
        node = self._finish(Project(node, exprs + hidden))
        if distinct:
            node = self._finish(Distinct(node))
        rel = Rel(node, display)
        if order:
            ordered = [
                exp.Ordered(this=col(c), desc=bool(o.args.get("desc")), nulls_first=bool(o.args.get("nulls_first")))
                for c, o in zip(sort_cols, order.expressions, strict=True)
            ]
            rel = Rel(self._finish(Sort(rel.node, ordered)), display)
        rel = self._limit(rel, select)
        if hidden:
            rel = Rel(self._finish(Project(rel.node, [(n, col(n)) for n in names])), display)
        return rel

    def _order_target(self, target: exp.Expression, select_exprs: list[exp.Expression]) -> exp.Expression:
        """ORDER BY may name output aliases or positions; inline them as the select expression."""
        if isinstance(target, exp.Literal) and not target.is_string:
            pos = int(target.name)
            if not 1 <= pos <= len(select_exprs):
                raise ProgrammingError(f"ORDER BY position {pos} is not in the select list")
            return select_exprs[pos - 1].unalias().copy()
        aliases = {e.alias.lower(): e.unalias() for e in select_exprs if e.alias}

        def inline(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
                return aliases[node.name.lower()].copy()
            return node

        return target.copy().transform(inline, copy=False)

    def _aggregate(
        self,
        node: Node,
        scopes: dict[str, SourceScope],
        group: exp.Group | None,
        aggs: list[exp.Expression],
    ) -> tuple[Node, dict[exp.Expression, str], Callable[[exp.Expression], exp.Expression]]:
        key_exprs, sets = _grouping_sets(group)
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

    def _windows(self, node: Node, exprs: list[exp.Expression]) -> tuple[Node, list[exp.Expression]]:
        """Compute every window function once, one Window operator per PARTITION BY."""
        found: list[exp.Window] = []
        for e in exprs:
            for w in e.find_all(exp.Window):
                if w not in found:
                    found.append(w)
        if not found:
            return node, exprs
        mapping: dict[exp.Expression, str] = {}
        by_partition: dict[tuple[str, ...], list[exp.Window]] = {}
        for w in found:
            key = tuple(p.sql() for p in w.args.get("partition_by") or [])
            by_partition.setdefault(key, []).append(w)
        for windows in by_partition.values():
            parts = list(windows[0].args.get("partition_by") or [])
            node, part_cols = self._project_passthrough(node, parts)
            out = []
            for w in windows:
                name = self.names.new()
                w2 = w.copy()
                if parts:
                    w2.set("partition_by", [col(c) for c in part_cols])
                out.append((name, w2))
                mapping[w] = name
            node = self._finish(Window(node, out, part_cols))
        return node, [e.copy().transform(lambda n: col(mapping[n]) if isinstance(n, exp.Window) else n) for e in exprs]

    def _limit(self, rel: Rel, query: exp.Expression) -> Rel:
        limit = query.args.get("limit")
        offset = query.args.get("offset")
        if limit is None and offset is None:
            return rel
        n = _int_clause(limit, "LIMIT") if limit is not None else None
        m = _int_clause(offset, "OFFSET") if offset is not None else 0
        return Rel(self._finish(Limit(rel.node, n, m)), rel.names)

    def _order_limit(self, rel: Rel, query: exp.Expression) -> Rel:
        """ORDER BY / LIMIT attached to a set operation or parenthesized query."""
        order = query.args.get("order")
        if order is not None:
            lookup = {n.lower(): c for n, c in zip(rel.names, rel.node.columns, strict=True)}
            ordered = []
            for o in order.expressions:
                t = o.this
                if isinstance(t, exp.Literal) and not t.is_string:
                    c = rel.node.columns[int(t.name) - 1]
                elif isinstance(t, exp.Column) and t.name.lower() in lookup:
                    c = lookup[t.name.lower()]
                else:
                    raise NotSupportedError(f"ORDER BY {t.sql()} on a set operation must name an output column")
                ordered.append(exp.Ordered(this=col(c), desc=bool(o.args.get("desc")), nulls_first=bool(o.args.get("nulls_first"))))
            rel = Rel(self._finish(Sort(rel.node, ordered)), rel.names)
        return self._limit(rel, query)

    def _setop(self, query: exp.Expression) -> Rel:
        kind = {exp.Union: "union", exp.Intersect: "intersect", exp.Except: "except"}[type(query)]
        left = self.build(query.this)
        right = self.build(query.expression)
        if len(left.names) != len(right.names):
            raise ProgrammingError(
                f"{kind.upper()} inputs have {len(left.names)} and {len(right.names)} columns; they must match"
            )
        if query.args.get("by_name"):
            raise NotSupportedError(f"{kind.upper()} BY NAME is not supported")
        distinct = query.args.get("distinct") is not False
        names = [self.names.new() for _ in left.names]
        node = self._finish(SetOp(kind, distinct, [left.node, right.node], names))
        return self._order_limit(Rel(node, left.names), query)

    def _values(self, values: exp.Values) -> Rel:
        rows = values.expressions
        width = len(rows[0].expressions) if rows else 0
        if any(len(r.expressions) != width for r in rows):
            raise ProgrammingError("VALUES rows must all have the same number of columns")
        alias = values.args.get("alias")
        display = [c.name for c in alias.columns] if alias is not None and alias.columns else []
        display += [f"col{i}" for i in range(len(display), width)]
        names = [self.names.new() for _ in range(width)]
        node = self._finish(Values(exp.Values(expressions=[r.copy() for r in rows]), names))
        return Rel(node, display)


def _equi_sides(c: _Conjunct, left: frozenset[str], right: frozenset[str]) -> tuple[exp.Expression, exp.Expression] | None:
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


def _has_aggregate(e: exp.Expression) -> bool:
    found: list[exp.Expression] = []
    _collect_aggregates(e, found)
    return bool(found)


def _collect_aggregates(e: exp.Expression, out: list[exp.Expression]) -> None:
    if isinstance(e, exp.Query):
        return
    if isinstance(e, exp.Window):
        for arg in e.this.iter_expressions():
            _collect_aggregates(arg, out)
        for part in e.args.get("partition_by") or []:
            _collect_aggregates(part, out)
        if e.args.get("order") is not None:
            _collect_aggregates(e.args["order"], out)
        return
    if is_aggregate(e):
        if e not in out:
            out.append(e)
        return
    for child in e.iter_expressions():
        _collect_aggregates(child, out)


def _grouping_sets(group: exp.Group | None) -> tuple[list[exp.Expression], list[list[int]] | None]:
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


def _int_clause(clause: exp.Expression, what: str) -> int:
    value = clause.args.get("expression") or clause.this
    if not isinstance(value, exp.Literal) or value.is_string:
        raise NotSupportedError(f"{what} must be an integer literal")
    n = int(value.name)
    if n < 0:
        raise ProgrammingError(f"{what} must not be negative")
    return n
