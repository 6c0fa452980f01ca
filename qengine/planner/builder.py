"""Optimized sqlglot AST → logical plan.

The input is what :func:`qengine.planner.frontend.optimize_query` returns: every column is
qualified with its source alias and most subqueries are already joins. The builder resolves
names to internal columns, orders inner joins greedily along equi-join edges, splits SELECT
into aggregate / window / projection / sort / limit operators, and turns any remaining
uncorrelated subquery into a placeholder table fed by its own plan.
"""

from __future__ import annotations

import decimal
import itertools
from collections import Counter
from collections.abc import Callable

import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import Source
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner import estimates
from qengine.planner.aggregation import AggregatePlanning
from qengine.planner.expressions import and_all, calls_volatile, collect_aggregates, has_aggregate, in_place_of, window_operands
from qengine.planner.frontend import position, unparen
from qengine.planner.joins import JoinPlanning
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
    evaluated,
    made_up,
    walk,
)
from qengine.planner.scope import Rel, SourceScope


class Builder(JoinPlanning, AggregatePlanning):
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
        if isinstance(query, exp.Table) and query.args.get("joins"):
            raise NotSupportedError(f"a parenthesized join in FROM ({query.sql(dialect='duckdb')}) is not supported: "
                                    "write it as a subquery, (SELECT * FROM ...) AS name, or without the parentheses")
        raise NotSupportedError(f"{type(query).__name__} is not supported as a query")

    # ---- helpers -----------------------------------------------------------------------

    def _finish(self, node: Node) -> Node:
        """Attach the collected subquery plans the node's own expressions read, and compute the
        estimate. A subquery goes to the operator that evaluates it, not to the first one made
        after it was planned: that may be one below, across an exchange from it (the projection
        under a window's shuffle, or a join key's under a join's), where its table is not read."""
        if self._pending_subqueries:
            read = {t.name for e in evaluated(node) for t in e.find_all(exp.Table)}
            for name in [n for n in self._pending_subqueries if n in read]:
                node.subqueries[name] = self._pending_subqueries.pop(name)
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
            if mapping and isinstance(node, exp.IgnoreNulls) and node.this in mapping:
                # sqlglot reads any_value(x) as IGNORE NULLS around it: around the aggregate's
                # column, the wrapper is left out of the SQL with a notice on stderr
                return col(mapping[node.this])
            if isinstance(node, exp.Window):
                # rewritten piece by piece, so that its function is never taken for an equal aggregate
                window = node.copy()
                for operand in window_operands(window):
                    operand.replace(self.rewrite(operand, scopes, mapping, what))
                return window
            if isinstance(node, exp.Column):
                return self._resolve_column(node, scopes, what)
            if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Query):
                return exp.Subquery(this=self._subquery_read(node.this))
            if isinstance(node, exp.All) and isinstance(node.this, exp.Query):  # ALL (SELECT ...) holds it bare
                return exp.All(this=self._subquery_read(node.this))
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

    def _subquery_read(self, query: exp.Expression) -> exp.Select:
        """Plan an uncorrelated subquery; the SELECT that reads its placeholder table."""
        name, rel = self._subquery(query)
        return exp.select(*[col(c) for c in rel.node.columns]).from_(name)

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

    # ---- FROM items ---------------------------------------------------------------------

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
                if isinstance(rel.node, SharedScan) and not made_up(alias):  # its own columns, read as alias.column
                    self.names.labels.update({i: f"{alias}.{n}" for n, i in zip(rel.names, rel.node.columns, strict=True)})
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
            if not any(isinstance(n, expensive) for n in walk(producer.node)) and not calls_volatile(cte):
                return producer  # a filtered scan: cheaper to read again than to materialize (random() must not be drawn again)
            self._shared[id(cte)] = producer
        column_map = {}
        for c in producer.node.columns:
            column_map[c] = self.names.new()
            self.widths[column_map[c]] = self.widths.get(c, 8.0)
        return Rel(self._finish(SharedScan(producer.node, column_map)), producer.names)


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
        order_exprs = [unparen(self._order_target(o.this, select.expressions, scopes)) for o in order.expressions] if order else []
        having = select.args.get("having")
        qualify = select.args.get("qualify")
        if qualify is not None and not any(e.find(exp.Window) for e in [*select.expressions, qualify.this]):
            raise ProgrammingError("QUALIFY needs a window function in the select list or in QUALIFY itself: use WHERE or HAVING")

        aggs: list[exp.Expression] = []
        for e in [*outputs, *order_exprs, *([having.this] if having else [])]:
            collect_aggregates(e, aggs)
        group = select.args.get("group")
        if group is not None and group.args.get("all"):
            if group.expressions:
                raise NotSupportedError("GROUP BY ALL followed by keys: DuckDB's GROUP BY ALL groups by every select item "
                                        "that is not an aggregate; write either GROUP BY ALL or the keys")
            plain = [o for o in outputs if not has_aggregate(o) and not o.find(exp.Window)]
            group = exp.Group(expressions=[o.copy() for o in plain]) if plain else None
        if group is None and not aggs and having is not None:  # a HAVING makes one group of all rows, as GROUP BY () does
            group = exp.Group(expressions=[exp.Tuple(expressions=[])])
        post: Callable[[exp.Expression, str], exp.Expression]
        if group is not None or aggs:
            _refuse_outer_references([*outputs, *order_exprs, *([having.this] if having else [])], scopes)
            node, mapping, grouping = self._aggregate(node, scopes, group, aggs, outputs)

            def post(e: exp.Expression, what: str) -> exp.Expression:
                return grouping(self.rewrite(e, None, mapping, what))
        else:
            def post(e: exp.Expression, what: str) -> exp.Expression:
                return self.rewrite(e, scopes, what=what)

        if having is not None:
            node = self._finish(Filter(node, post(having.this, "HAVING")))
        resolved = [post(e, "SELECT") for e in outputs]
        # An ORDER BY key that is a select item (by position, alias or repetition) is that item:
        # resolved again, a subquery in it would be planned again under a new name, and the key
        # would no longer match its select item (SELECT DISTINCT then refuses it).
        resolved_order = [resolved[outputs.index(e)] if e in outputs else post(e, "ORDER BY") for e in order_exprs]
        resolved_qualify = post(qualify.this, "QUALIFY") if qualify is not None else None
        node, replaced = self._windows(node, [*resolved, *resolved_order, *([resolved_qualify] if qualify else [])])
        resolved = replaced[: len(resolved)]
        resolved_order = replaced[len(resolved): len(resolved) + len(resolved_order)]
        if qualify is not None:
            node = self._finish(Filter(node, replaced[-1]))

        names = [self.names.new(d) for d in display]
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
            # Computed over the distinct rows, from the select items it is made of, as DuckDB
            # binds such a key (ORDER BY a DESC, CASE WHEN a = 0 THEN b END); any other is refused.
            over_items = [_over_items(e, exprs) for _, e in hidden]
            if any(e is None for e in over_items):
                raise ProgrammingError("for SELECT DISTINCT, ORDER BY expressions must appear in the select list")
            node = self._finish(Distinct(self._finish(Project(node, exprs))))
            node = self._finish(Project(node, [(n, col(n)) for n, _ in exprs] + [(h, e) for (h, _), e in zip(hidden, over_items, strict=True)]))
        else:
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

    def _order_target(self, target: exp.Expression, select_exprs: list[exp.Expression], scopes: dict[str, SourceScope]) -> exp.Expression:
        """ORDER BY may name select items by position or alias; inline them as the select
        expression. As in DuckDB, a term that is only a name (parenthesized or not) is the
        alias; a name inside an expression is the FROM item's column where one has it
        (``SELECT -v AS v ... ORDER BY v + 0`` orders by the column v), else the alias."""
        target = unparen(target)
        pos = _order_position(target, len(select_exprs))
        if pos is not None:
            return select_exprs[pos - 1].unalias().copy()
        aliases = {e.alias.lower(): e.unalias() for e in select_exprs if e.alias}
        if isinstance(target, exp.Column) and not target.table and target.name.lower() in aliases:
            return aliases[target.name.lower()].copy()

        def inline(node: exp.Expression) -> exp.Expression:
            if not (isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases):
                return node
            owners = [alias for alias, scope in scopes.items() if scope.has(node.name)]
            if len(owners) == 1:
                return exp.column(node.name, table=owners[0], quoted=True)
            return in_place_of(node, aliases[node.name.lower()].copy())

        return target.copy().transform(inline, copy=False)

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
                t = unparen(o.this)
                pos = _order_position(t, len(rel.names))
                if pos is not None:
                    c = rel.node.columns[pos - 1]
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
        distinct = query.args.get("distinct") is not False
        names = [self.names.new(n) for n in left.names]
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
        # DuckDB's names for VALUES' columns where the optimizer gave them its own ("_col_0")
        names = [self.names.new(f"col{i}" if made_up(d) else d) for i, d in enumerate(display)]
        node = self._finish(Values(exp.Values(expressions=[r.copy() for r in rows]), names))
        return Rel(node, display)


def _int_clause(clause: exp.Expression, what: str) -> int:
    """A LIMIT, OFFSET or FETCH count: a number written in the query, rounded half away from
    zero as DuckDB casts it (``LIMIT 2.5`` keeps 3 rows; ``int('2.7')`` failed)."""
    value = clause.args.get("expression") or clause.args.get("count") or clause.this
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal) and not value.this.is_string:
        raise ProgrammingError(f"{what} must not be negative")
    if not isinstance(value, exp.Literal) or value.is_string:
        raise NotSupportedError(f"{what} must be a number written in the query")
    n = int(decimal.Decimal(value.name).to_integral_value(decimal.ROUND_HALF_UP))
    if n < 0:
        raise ProgrammingError(f"{what} must not be negative")
    return n


def _refuse_outer_references(exprs: list[exp.Expression], scopes: dict[str, SourceScope]) -> None:
    """Refuse a reference to an outer query's column in an aggregating subquery's own
    expressions (``(SELECT max(b.id) > a.id FROM t b)``) as the correlation it is: past the
    aggregation it was reported as a column that "must appear in the GROUP BY clause"."""
    for e in exprs:
        inner = {id(c) for q in e.find_all(exp.Query, exp.Subquery) if q is not e for c in q.find_all(exp.Column)}
        for column in e.find_all(exp.Column):
            if column.table and column.table.lower() not in scopes and id(column) not in inner:
                raise NotSupportedError(f"correlated reference to {column.sql()} in a subquery is not supported")


def _order_position(term: exp.Expression, items: int) -> int | None:
    """The select item (from 1) an ORDER BY constant names by position (``frontend.position``);
    None for a term that is not a constant. A constant that is not a position in the list is
    refused, as DuckDB refuses it, rather than ordering nothing."""
    pos = position(term)
    if pos is None:
        if isinstance(term, exp.Null) or isinstance(term.this if isinstance(term, exp.Neg) else term, exp.Literal):
            raise ProgrammingError(f"ORDER BY {term.sql()}: a constant that is not a select item's position orders nothing")
        return None
    if not 1 <= pos <= items:
        raise ProgrammingError(f"ORDER BY position {pos} is not in the select list (1 to {items})")
    return pos


def _over_items(e: exp.Expression, items: list[tuple[str, exp.Expression]]) -> exp.Expression | None:
    """``e`` with each part that is a select item's expression as that item's column, or None
    when anything else of the row is left in it (a column, an aggregate, a window, a subquery)."""
    by_expression = [(x, n) for n, x in items]

    def swap(node: exp.Expression) -> exp.Expression:
        return next((col(n) for x, n in by_expression if x == node), node)

    rewritten = e.copy().transform(swap)
    names = {n for n, _ in items}
    if any(isinstance(n, exp.Subquery | exp.AggFunc | exp.Window) for n in rewritten.walk()):
        return None
    if any(c.table or c.name not in names for c in rewritten.find_all(exp.Column)):
        return None
    return rewritten
