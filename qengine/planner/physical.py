"""Physical planning: every operator states the distribution it needs, exchanges fix the rest.

This is the idea of Spark's EnsureRequirements / DataFusion's EnforceDistribution applied to
the logical plan: aggregates become partial → hash exchange → final; joins broadcast a small
side or shuffle both sides on the join keys; windows shuffle on PARTITION BY; ORDER BY uses a
range exchange and ORDER BY … LIMIT a local top-N followed by a gather. Inputs that are already
partitioned the right way get no exchange.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot.expressions as exp

from qengine.catalog.sources import DEFAULT_SPLIT_BYTES
from qengine.catalog.types import is_number
from qengine.planner import estimates
from qengine.planner import logical as lp
from qengine.planner.logical import GROUPING_ID, Exchange, col, not_null_operand, plain_column
from qengine.planner.static_types import compared_exactly, expression_signature, signature
from qengine.planner.templates import slot_kind, value_of

_MAX_BIGINT = 2**63 - 1


@dataclass(frozen=True)
class Dist:
    """How a node's output is spread: hash on ``keys``, range, single, or any (scan splits).

    ``also`` lists other columns the rows are hashed on just as well: after an inner join on
    ``a = b``, rows hashed on ``a`` are hashed on ``b`` too, and a join on either needs no
    shuffle (Spark's PartitioningCollection). ``coalesced`` is a full join's key pairs
    ``(a, b)``: its rows are hashed on neither column (one is NULL where a side had no match)
    but on COALESCE(a, b), which a projection may compute (TPC-DS q51's windows partition by it).
    """

    kind: str
    keys: tuple[str, ...] = ()
    partitions: int = 0
    also: tuple[tuple[str, ...], ...] = ()
    coalesced: tuple[tuple[str, str], ...] = ()

    @property
    def key_sets(self) -> tuple[tuple[str, ...], ...]:
        """Every tuple of columns the rows are hashed on, ``keys`` first."""
        return (self.keys, *self.also) if self.kind == "hash" and self.keys else ()

    def hashed_within(self, columns: list[str]) -> bool:
        """True when rows that agree on ``columns`` are already in the same partition."""
        if self.kind == "single":
            return True
        return any(set(keys) <= set(columns) for keys in self.key_sets)

    def with_sets(self, sets: list[tuple[str, ...]]) -> Dist:
        """This hash distribution with more equivalent key tuples."""
        merged = list(dict.fromkeys([*self.key_sets, *sets]))
        return Dist("hash", merged[0], self.partitions, tuple(merged[1:]))

    def renamed(self, mapping: dict[str, str]) -> Dist:
        """A hash distribution under new column names, keeping the key tuples ``mapping`` covers."""
        sets = [tuple(mapping[k] for k in keys) for keys in self.key_sets if all(k in mapping for k in keys)]
        if not sets:
            return Dist("any", (), self.partitions)
        return Dist("hash", sets[0], self.partitions).with_sets(sets[1:])


SINGLE = Dist("single", (), 1)

_DECOMPOSABLE = {
    exp.Sum: ("SUM", "SUM"),
    exp.Min: ("MIN", "MIN"),
    exp.Max: ("MAX", "MAX"),
    exp.Count: ("COUNT", "SUM"),
    exp.AnyValue: ("ANY_VALUE", "ANY_VALUE"),
    exp.LogicalAnd: ("BOOL_AND", "BOOL_AND"),
    exp.LogicalOr: ("BOOL_OR", "BOOL_OR"),
}


def _summable(e: exp.Expression, child: lp.Node) -> bool:
    """Whether ``e`` (an average's argument over ``child``'s columns) is a number that may be
    summed: arithmetic on columns and constants, none of them a date, time, timestamp or
    interval as far as the plan shows (``planner.static_types``). DuckDB has no sum of those
    (``avg(d + 1)`` of a DATE failed as "sum(DATE)"), and a function may make one of a number
    (``to_days(n)``): an average of anything else is not split."""
    if any(not isinstance(node, _ARITHMETIC) for node in e.walk()) or isinstance(e, _BOOLEAN):
        return False  # DuckDB has no avg() of a BOOLEAN, where it has a sum() of one
    kind = expression_signature(e, child)
    if kind is None:
        return False
    if "=" not in kind:  # a type's name
        return is_number(kind)
    # the shape of what makes it (``static_types.signature``): arithmetic over numbers only; a
    # column made by a function in a subquery (``to_seconds(id)``) is no number
    shape = _READ.sub("", kind)
    return set(_CALLED.findall(shape)) <= _ARITHMETIC_NAMES and all(is_number(t) for t in _READ.findall(kind)) and not any(
        word in shape for word in ("DATE", "TIME", "INTERVAL", "BOOLEAN")
    )


# What an average's argument may be made of to be split into a sum and a count (``_summable``)
_ARITHMETIC = (
    exp.Column, exp.Identifier, exp.Literal, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Add, exp.Sub, exp.Mul,
    exp.Div, exp.IntDiv, exp.Mod, exp.Neg, exp.Paren, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Null,
    exp.Case, exp.If, exp.Coalesce, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Is,
    exp.Boolean,
)
_BOOLEAN = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Is, exp.Boolean)
# Var: a column, as its signature's <TYPE>; an aggregate of numbers (a CTE's sum) is a number
_ARITHMETIC_NAMES = frozenset({kind.__name__ for kind in _ARITHMETIC} | {"Var", "Sum", "Count", "Min", "Max", "Avg", "Star", "Distinct"})
_CALLED = re.compile(r"\b([A-Z][A-Za-z]*)\(")  # the node names in a signature (a tree's repr)
_READ = re.compile(r"<([^<>]+)>")  # the types of the columns a signature reads


class PhysicalPlanner:
    """Inserts exchanges into a logical plan."""

    def __init__(
        self,
        partitions: int,
        broadcast_threshold: int,
        widths: dict[str, float],
        names: lp.Names,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
    ) -> None:
        self.partitions = max(1, partitions)
        self.split_bytes = split_bytes
        self.broadcast_threshold = broadcast_threshold
        self.widths = widths
        self.names = names
        self._producers: dict[int, tuple[Exchange, Dist]] = {}

    def plan(self, node: lp.Node, want: tuple[str, ...] = ()) -> tuple[lp.Node, Dist]:
        """Plan ``node`` and say how its output is spread.

        ``want`` names output columns that an operator above needs rows hashed within (a
        window's PARTITION BY, a join's keys, the keys of a GROUP BY that cannot be split). An
        exchange this node needs anyway hashes on them when they are all among its own keys, so
        one shuffle serves both operators: TPC-DS q51 shuffles each daily total by item alone for the cumulative window
        by item and the join by item and date, and q47's monthly totals by the four columns of
        its windows. Since the operator above needs those very rows together, a shuffle on them
        is no more skewed than that operator already is.
        """
        for name, sub in list(node.subqueries.items()):
            planned, _ = self.plan(sub)
            node.subqueries[name] = self._exchange(planned, "broadcast")[0]
        method = getattr(self, "_" + type(node).__name__.lower())
        return method(node, want)

    # ---- helpers -----------------------------------------------------------------------

    def _bytes(self, node: lp.Node) -> float:
        return node.est_rows * sum(self.widths.get(c, 8.0) for c in node.columns)

    def _exchange(
        self, node: lp.Node, kind: str, keys: list[str] | tuple[str, ...] = (), once: bool = False
    ) -> tuple[lp.Node, Dist]:
        partitions = 1 if kind in ("single", "broadcast") else self.partitions
        ex = Exchange(node, kind, partitions, keys=list(keys), once=once)
        ex.est_rows = node.est_rows
        return ex, Dist("any" if kind == "roundrobin" else kind, tuple(keys), partitions)

    def _gather(self, node: lp.Node, dist: Dist) -> lp.Node:
        return node if dist.kind == "single" else self._exchange(node, "single")[0]

    def _hash_to(self, node: lp.Node, dist: Dist, keys: list[str]) -> tuple[lp.Node, Dist]:
        if not keys:
            return self._gather(node, dist), SINGLE
        if self._hashed_on(dist, keys):
            return node, dist
        return self._exchange(node, "hash", keys)

    def _hashed_on(self, dist: Dist, keys: list[str]) -> bool:
        """Whether rows so distributed are already hashed exactly as a shuffle on ``keys`` would."""
        return dist.partitions == self.partitions and any(list(s) == keys for s in dist.key_sets)

    def _positions(self, dist: Dist, keys: list[str]) -> list[list[int]]:
        """Which of a join side's ``keys`` its rows are hashed on, in hash order, for each key
        tuple it is hashed on that has only keys (a shuffle of the other side on the matching
        keys then pairs them up)."""
        if dist.partitions != self.partitions:
            return []
        return [[keys.index(k) for k in s] for s in dist.key_sets if set(s) <= set(keys)]

    # ---- leaves and pass-through operators ---------------------------------------------

    def _scan(self, node: lp.Scan, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        """A table read in one task (one split) has all its rows in one place: what is computed
        from it alone needs no exchange (TPC-DS q83's three week lists, drawn from date_dim,
        took a partial aggregate, a shuffle and a final aggregate each)."""
        node.single = node.source.single_split(self.split_bytes)
        return node, SINGLE if node.single else Dist("any")

    def _sharedscan(self, node: lp.SharedScan, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        """Plan the shared producer once; readers keep its partitioning under their own names."""
        key = id(node.producer)
        if key not in self._producers:
            planned, dist = self.plan(node.producer)
            # the keys its partitions are hashed on, which the runtime checks against a shuffle's
            # that a stage pairs them with (``query_run._check_hash_keys_meet``)
            ex = Exchange(planned, "materialize", max(1, dist.partitions), list(dist.keys) if dist.kind == "hash" else [])
            ex.est_rows = planned.est_rows
            self._producers[key] = (ex, dist)
        ex, dist = self._producers[key]
        node.producer = ex
        if dist.kind == "hash":
            return node, dist.renamed(node.column_map)
        return node, Dist(dist.kind if dist.kind == "single" else "any", (), dist.partitions)

    def _values(self, node: lp.Values, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        return node, SINGLE

    def _filter(self, node: lp.Filter, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        if isinstance(node.child, lp.Window):
            node.child.keep = _rank_bound(node.condition, node.child)
        node.child, dist = self.plan(node.child, want)
        return node, dist

    def _project(self, node: lp.Project, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        sources = node.sources
        # A wanted column the projection computes cannot be asked of its input.
        wanted = tuple(sources[w] for w in want) if all(w in sources for w in want) else ()
        node.child, dist = self.plan(node.child, wanted)
        if dist.coalesced:
            return node, _coalesced(node, dist)
        return node, dist.renamed(node.renames) if dist.kind == "hash" else dist

    # ---- joins -------------------------------------------------------------------------

    def _join(self, node: lp.Join, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        lkeys = [k.name for k in node.left_keys]
        rkeys = [k.name for k in node.right_keys]
        side = self._broadcast_side(node)
        # which key pairs hold the same values once joined, from the sides' own types (planning
        # the sides puts exchanges in them, through which a signature does not see)
        inner = node.kind == "inner"
        alike = [compared_exactly(signature(node.left, lk), signature(node.right, rk))
                 for lk, rk in zip(lkeys, rkeys, strict=True)] if side is not None and inner else []
        wanted = list(range(len(lkeys)))
        if side is not None:  # the other side's rows stay where they are: it gets the want
            lwant, rwant = (want, ()) if side == "right" else ((), want)
        else:
            shared = [i for i, (lk, rk) in enumerate(zip(lkeys, rkeys, strict=True)) if lk in want or rk in want]
            if want and set(want) <= {lkeys[i] for i in shared} | {rkeys[i] for i in shared}:
                wanted = shared
            lwant, rwant = tuple(lkeys[i] for i in wanted), tuple(rkeys[i] for i in wanted)
        left, ldist = self.plan(node.left, lwant)
        right, rdist = self.plan(node.right, rwant)
        # Two sides in one place join there, but with broadcasts off every equi-join shuffles
        # (that mode exists to take each join through the exchange).
        if ldist.kind == "single" and rdist.kind == "single" and (self.broadcast_threshold > 0 or not lkeys):
            node.left, node.right = left, right
            return node, SINGLE
        lpos, rpos = self._positions(ldist, lkeys), self._positions(rdist, rkeys)
        common = [p for p in lpos if p in rpos]
        # Rows that join already share a partition (two reads of one shared CTE's output, as in
        # TPC-DS q47 and q57): a broadcast would copy all of one side to every task for nothing.
        if side is not None and not common:
            if side == "right":
                node.left, node.right = left, self._exchange(right, "broadcast")[0]
                return node, _equivalents(ldist, lkeys, rkeys, alike) if inner else ldist
            node.left, node.right = self._exchange(left, "broadcast")[0], right
            return node, _equivalents(rdist, rkeys, lkeys, alike) if inner else rdist
        if not lkeys:  # a nested-loop join neither side of which may be copied
            node.left, node.right = self._gather(left, ldist), self._gather(right, rdist)
            return node, SINGLE
        # Both sides hashed on the same key positions: those both are hashed on already, else
        # those one is (the other is shuffled to match), else the wanted ones.
        positions = (common or lpos or rpos or [wanted])[0]
        node.left, ldist = self._hash_to(left, ldist, [lkeys[i] for i in positions])
        node.right, rdist = self._hash_to(right, rdist, [rkeys[i] for i in positions])
        if node.kind == "inner":  # both sides' rows sit by the same hash: all their keys hold
            return node, ldist.with_sets(list(rdist.key_sets))
        if node.kind == "right":
            return node, rdist
        if node.kind == "full":
            return node, Dist("any", (), self.partitions, coalesced=tuple((lkeys[i], rkeys[i]) for i in positions))
        return node, ldist

    def _broadcast_side(self, node: lp.Join) -> str | None:
        """The side to copy to every task ("left" or "right"), or None to shuffle both.

        Without equi-keys the join is a nested loop, so one side must be everywhere if it may
        be; otherwise a side is copied when it is small enough (:meth:`_broadcastable`).
        Decided from the sides' estimates before they are planned, so that only the side
        whose rows stay put is asked to suit the operators above.
        """
        kind = node.kind
        lbytes, rbytes = self._bytes(node.left), self._bytes(node.right)
        threshold = self.broadcast_threshold
        can_right = kind in ("inner", "cross", "left", "semi", "anti")
        can_left = kind in ("inner", "cross", "right")
        if not node.left_keys:
            if can_right and (not can_left or rbytes <= lbytes):
                return "right"
            return "left" if can_left else None
        if threshold > 0:
            right_ok = can_right and self._broadcastable(rbytes, lbytes)
            left_ok = can_left and self._broadcastable(lbytes, rbytes)
            if right_ok and (not left_ok or _prefer_right(node.left, node.right, lbytes, rbytes, threshold)):
                return "right"
            if left_ok:
                return "left"
        return None

    def _broadcastable(self, small: float, big: float) -> bool:
        """Broadcast when the side is under the threshold, or when copying it to every task that
        joins it (about ``partitions`` of them) moves fewer bytes than shuffling the other side,
        up to 8× the threshold. A shuffled byte costs more than a broadcast one: it is hashed,
        split and sent by the map side, then gathered again by its reducer."""
        threshold = self.broadcast_threshold
        if small <= threshold:
            return True
        return small <= 8 * threshold and small * self.partitions < big

    # ---- aggregation -------------------------------------------------------------------

    def _aggregate(self, node: lp.Aggregate, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        node = self._aggregate_before_join(node) or node
        # A grouping set listed twice makes its rows twice; a final aggregate, grouping by the
        # keys and the grouping id, would merge the two, so such an aggregate runs whole.
        sets = node.grouping_sets or []
        repeated = len({tuple(s) for s in sets}) < len(sets)
        split = None if repeated else self._split_aggregates(node)
        # The keys a shuffle would hash on: the wanted ones if they are all plain grouping columns
        # (not with grouping sets, whose rolled-up rows must also be told apart by level).
        columns = node.sources
        hashed = [n for n, _ in node.keys]
        wanted = bool(want) and node.grouping_sets is None and set(want) <= set(columns)
        if wanted:
            hashed = [n for n in hashed if n in want]
        # The input is asked for them when it would move every row anyway: the operator above
        # will (a window, a join), or this aggregate, which cannot be split. A split one moves
        # only its partial rows, often few; hashing all of its input on fewer columns to save
        # that could load a few tasks with most of it (TPC-DS q65: sales by store and item,
        # then averaged by store).
        plain = node.grouping_sets is None and all(n in columns for n in hashed)
        ask = plain and (wanted or split is None)
        child, dist = self.plan(node.child, tuple(columns[n] for n in hashed) if ask else ())
        key_cols = [e.name for _, e in node.keys]
        if node.grouping_sets is None and dist.hashed_within(key_cols):
            node.child = child
            if dist.kind != "hash":
                return node, dist
            return node, dist.renamed({e.name: n for n, e in reversed(node.keys)})  # rows stay hashed on those keys
        if split is None:
            # Not decomposable (DISTINCT, STDDEV, ...): move raw rows, aggregate once.
            if node.grouping_sets is not None:
                node.child = self._gather(child, dist)
                return node, SINGLE
            inputs = dict(node.keys)
            node.child, out = self._hash_to(child, dist, [inputs[n].name for n in hashed])
            return node, Dist("hash", tuple(hashed), out.partitions) if out.kind == "hash" else out
        partial_aggs, final_aggs = split
        partial_keys = [(self.names.new(), e) for _, e in node.keys]
        partial_gid = self.names.new(GROUPING_ID) if node.grouping_sets is not None else None
        partial = lp.Aggregate(child, partial_keys, partial_aggs, node.grouping_sets, partial_gid, phase="partial")
        partial.est_rows = node.est_rows
        partial.subqueries = node.subqueries  # the aggregates' arguments are evaluated there
        renamed = {n: p for (n, _), (p, _) in zip(node.keys, partial_keys, strict=True)}
        shuffle_keys = [renamed[n] for n in hashed] + ([partial_gid] if partial_gid else [])
        moved, out = self._hash_to(partial, dist, shuffle_keys)
        final_keys = [(n, col(renamed[n])) for n, _ in node.keys]
        if partial_gid:
            final_keys.append((node.grouping_id, col(partial_gid)))
        final = lp.Aggregate(moved, final_keys, final_aggs, phase="final")
        final.est_rows = node.est_rows
        if out.kind == "single":
            return final, SINGLE
        return final, Dist("hash", tuple(hashed) + ((node.grouping_id,) if partial_gid else ()), out.partitions)

    def _aggregate_before_join(self, node: lp.Aggregate) -> lp.Aggregate | None:
        """Eager aggregation: a GROUP BY over a join with a whole table (a dimension read with no
        filter) on that table's key first aggregates the other side by its join keys and its own
        grouping columns, then joins, then combines the partial aggregates by the full keys.

        TPC-DS's per-customer totals (q4, q11, q74) group store sales by up to eight customer
        columns: aggregated first by customer key and year, millions of sales become a few
        hundred thousand groups, and the customer table's wide strings join those instead of
        every sale. The answer is the same for any join, even one whose key repeats, as each
        partial row stands for its fact rows at every dimension row they would have met. It is
        applied only where it pays: the dimension is not filtered (a filtered one would drop
        fact rows the pre-aggregation had already paid for), and the pre-aggregation groups by
        fewer columns than the dimension contributes to the GROUP BY.
        """
        join = node.child
        if node.grouping_sets is not None or not isinstance(join, lp.Join) or join.kind != "inner":
            return None
        if join.residual is not None or not join.left_keys or join.key is None:
            return None
        fact_is_left = join.key[0] == "right"
        fact, dimension = (join.left, join.right) if fact_is_left else (join.right, join.left)
        if not _whole_table(dimension):
            return None
        fact_keys = join.left_keys if fact_is_left else join.right_keys
        owned = set(fact.columns)
        used = {c.name for _, e in node.aggs for c in e.find_all(exp.Column)}
        if isinstance(fact, lp.Aggregate) or not used <= owned or not all(isinstance(k, exp.Column) for k in fact_keys):
            return None
        keep = list(dict.fromkeys([k.name for k in fact_keys] + [e.name for _, e in node.keys if e.name in owned]))
        if len(keep) >= sum(e.name not in owned for _, e in node.keys):
            return None  # grouping by the key first is no narrower than by the dimension's columns
        split = self._split_aggregates(node)
        if split is None:
            return None
        partial_aggs, final_aggs = split
        partial = lp.Aggregate(fact, [(name, col(name)) for name in keep], partial_aggs, phase="partial")
        partial.est_rows = estimates.rows(partial)
        left, right = (partial, join.right) if fact_is_left else (join.left, partial)
        joined = lp.Join(left, right, "inner", join.left_keys, join.right_keys, key=join.key)
        joined.est_rows = estimates.rows(joined)
        final = lp.Aggregate(joined, node.keys, final_aggs, phase="final")
        final.est_rows = node.est_rows
        return final

    def _split_aggregates(
        self, node: lp.Aggregate
    ) -> tuple[list[tuple[str, exp.Expression]], list[tuple[str, exp.Expression]]] | None:
        """Partial and final forms of every aggregate, or None if one cannot be split."""
        partial: list[tuple[str, exp.Expression]] = []
        final: list[tuple[str, exp.Expression]] = []
        for name, e in node.aggs:
            self.names.origins.setdefault(name, e)  # what EXPLAIN calls the final form
            agg = e.this if isinstance(e, exp.Filter) else e
            if isinstance(agg, exp.IgnoreNulls):  # any_value(x), as sqlglot reads DuckDB's
                agg = agg.this
            if isinstance(agg.this, exp.Distinct) or agg.args.get("distinct"):
                return None
            if isinstance(agg, exp.Avg):
                if not _summable(agg.this, node.child):
                    return None  # avg of dates, times or intervals: a sum of them does not exist
                s, c = self.names.new(), self.names.new()
                partial.append((s, _with_filter(e, exp.Sum(this=agg.this.copy()))))
                partial.append((c, _with_filter(e, exp.Count(this=agg.this.copy()))))
                # In DOUBLE: DuckDB divides an integer or DECIMAL sum in long double on x86-64, so
                # the last bit of a quotient can differ from DuckDB's there (not on ARM)
                final.append((name, exp.Div(
                    this=exp.cast(exp.Sum(this=col(s)), "DOUBLE"),
                    expression=exp.Nullif(this=exp.Sum(this=col(c)), expression=exp.Literal.number(0)),
                )))
                continue
            forms = _DECOMPOSABLE.get(type(agg))
            if forms is None or len(list(agg.iter_expressions())) > 1 or isinstance(agg.this, exp.Order):
                return None  # an ORDER BY inside (any_value(x ORDER BY y)) orders all the rows, not a task's
            p = self.names.new()
            partial.append((p, e.copy()))
            combined = exp.func(forms[1], col(p))
            if isinstance(agg, exp.Count):
                combined = exp.cast(exp.Coalesce(this=combined, expressions=[exp.Literal.number(0)]), "BIGINT")
            final.append((name, combined))
        return partial, final

    def _distinct(self, node: lp.Distinct, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        child, dist = self.plan(node.child)
        if dist.hashed_within(node.columns):
            node.child = child
            return node, dist
        node.child, out = self._distinct_to_hash(child, dist)
        return node, out

    def _distinct_to_hash(self, node: lp.Node, dist: Dist) -> tuple[lp.Node, Dist]:
        """``node``'s rows hashed on all its columns, each task's duplicates dropped before they
        are shuffled (for DISTINCT and for set operations, which compare distinct rows); rows
        hashed so already, or unique already, are left as they are."""
        if not self._hashed_on(dist, node.columns) and not _unique_rows(node):
            node = lp.Distinct(node)
            node.est_rows = estimates.rows(node)
        return self._hash_to(node, dist, node.columns)

    # ---- windows, sorting, limits ------------------------------------------------------

    def _window(self, node: lp.Window, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        keys = node.partition_by
        if want and set(want) <= set(keys):
            keys = [k for k in keys if k in want]
        child, dist = self.plan(node.child, tuple(keys))
        if dist.hashed_within(node.partition_by):
            node.child = child
            return node, dist
        if node.keep is not None:
            child = self._top_ranked(child, node)
        node.child, out = self._hash_to(child, dist, keys)
        return node, out

    def _top_ranked(self, child: lp.Node, window: lp.Window) -> lp.Node:
        """Each task keeps the rows ranked at most ``window.keep`` among its own rows of their
        partition before the shuffle (Spark's WindowGroupLimit): a row's rank among all rows of
        its partition is at least its rank among one task's, so no row the query keeps is
        dropped. TPC-DS q67 ranks half a million rollup rows in a dozen categories, keeping 100
        of each: the shuffle then moves a few thousand rows to a few skewed reducers."""
        rank = self.names.new()
        ranked = lp.Window(child, [(rank, window.exprs[0][1].copy())], window.partition_by)
        kept = lp.Filter(ranked, exp.LTE(this=col(rank), expression=exp.Literal.number(window.keep)))
        top = lp.Project(kept, [(c, col(c)) for c in child.columns])
        for node in (ranked, kept, top):
            node.est_rows = child.est_rows
        return top

    def _sort(self, node: lp.Sort, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        child, dist = self.plan(node.child)
        if dist.kind == "single":
            node.child = child
            return node, SINGLE
        ex = Exchange(child, "range", self.partitions, order=node.order)
        ex.est_rows = child.est_rows
        node.child = ex
        return node, Dist("range", (), self.partitions)

    def _limit(self, node: lp.Limit, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        sort = node.child if isinstance(node.child, lp.Sort) else None
        child, dist = self.plan(sort.child if sort else node.child)
        if dist.kind == "single":
            if sort:
                sort.child = child
                child = sort
            node.child = child
            return node, SINGLE
        keep = None if node.limit is None else node.limit + node.offset
        if keep is not None and keep > _MAX_BIGINT:  # DuckDB's LIMIT is a BIGINT: each task keeps all it has
            keep = None
        local: lp.Node = child
        if sort:
            local = lp.Sort(child, sort.order)
        if keep is not None:
            local = lp.Limit(local, keep, 0)
        gathered = self._exchange(local, "single")[0]
        node.child = lp.Sort(gathered, sort.order) if sort else gathered
        return node, SINGLE

    # ---- set operations ----------------------------------------------------------------

    def _setop(self, node: lp.SetOp, want: tuple[str, ...]) -> tuple[lp.Node, Dist]:
        planned = [self.plan(c) for c in node.inputs]
        if all(d.kind == "single" for _, d in planned):
            node.inputs = [n for n, _ in planned]
            return node, SINGLE
        if node.kind == "union" and not node.distinct:
            node.inputs = [n for n, _ in planned]
            scanned = [_scan_fragment(n) for n in node.inputs]
            if any(scanned) and all(s or self._bytes(n) <= self.broadcast_threshold for n, s in zip(node.inputs, scanned, strict=True)):
                # Like Spark's UnionExec: no exchange, each task reads a split of one input. A
                # small input that is not a scan joins them whole in one task (TPC-DS q5's
                # returns joined to sales, beside the raw sales it would otherwise have made
                # every split shuffle).
                node.inputs = [n if s else self._exchange(n, "broadcast", once=True)[0] for n, s in zip(node.inputs, scanned, strict=True)]
                node.concat = True
                return node, Dist("any")
            # Inputs already spread over the query's partitions (aggregates, shuffled joins) are
            # read partition by partition as they are; the others are dealt out round-robin.
            # TPC-DS q80 and q5 union three channels' totals, each hashed by its own final
            # aggregate: dealt out again, that took a stage per union.
            node.inputs = [
                n if d.kind in ("hash", "any") and d.partitions == self.partitions else self._exchange(n, "roundrobin")[0]
                for n, (_, d) in zip(node.inputs, planned, strict=True)
            ]
            return node, Dist("any", (), self.partitions)
        if node.distinct and node.kind != "union":
            # INTERSECT and EXCEPT compare sets, typically of a few attribute values drawn from
            # many rows (TPC-DS q14's brand/class/category of 1.6M sales: 6,300 to 7,700 rows each); a
            # UNION's inputs are more often distinct rows already (q75's sales lines of three
            # channels), where a local pass costs more than it drops.
            node.inputs = [self._distinct_to_hash(n, d)[0] for n, d in planned]
        else:
            node.inputs = [self._hash_to(n, d, n.columns)[0] for n, d in planned]
        return node, Dist("hash", tuple(node.names), self.partitions)


def _equivalents(dist: Dist, keys: list[str], other: list[str], alike: list[bool]) -> Dist:
    """An inner join's output keeps ``dist`` (its staying side's) and is hashed as well on the
    other side's join keys matching any of its key tuples, where those columns hold the same
    values: the pairs ``alike`` says DuckDB compares without rounding either side. A VARCHAR key
    equal to an INTEGER one ('1' and '01' both match 1), or an INTEGER one equal to a FLOAT, is
    not its partner's value: grouping on the partner after the join left one group per
    partition of the staying side."""
    if dist.kind != "hash":
        return dist
    same = {k for k, a in zip(keys, alike, strict=True) if a}
    return dist.with_sets([tuple(other[keys.index(k)] for k in s) for s in dist.key_sets if set(s) <= same])


def _unique_rows(node: lp.Node) -> bool:
    """True when no two rows of ``node`` are equal: a DISTINCT, or an aggregate (with no
    grouping sets) whose every key is among the columns."""
    if isinstance(node, lp.Distinct):
        return True
    names = set(node.columns)
    if isinstance(node, lp.Project):
        names = set(node.renames)
        node = node.child
    return isinstance(node, lp.Aggregate) and node.grouping_sets is None and {n for n, _ in node.keys} <= names


def _prefer_right(left: lp.Node, right: lp.Node, lbytes: float, rbytes: float, threshold: int) -> bool:
    """Of two sides that could both be broadcast, whether to broadcast the right one.

    A small table, filtered and projected, has the size the catalog says; what a filter or join
    leaves of a table bigger than the threshold is a guess, and a guess that comes out too low
    would copy a fact table to every task and run the whole join in as many tasks as the small
    table has splits (often one). So the known small table is broadcast; otherwise the smaller.
    """
    lknown, rknown = _small_table(left, threshold), _small_table(right, threshold)
    if lknown != rknown:
        return rknown
    return rbytes <= lbytes


def _small_table(node: lp.Node, threshold: int) -> bool:
    """True when ``node`` only filters and projects one table of at most ``threshold`` bytes."""
    scan = lp.table_read(node)
    return scan is not None and scan.read_bytes <= threshold


def _rank_bound(condition: exp.Expression, window: lp.Window) -> int | None:
    """N when ``condition`` keeps only rows with ``rank <= N`` (or ``< N + 1``) of a window whose
    one function is RANK or DENSE_RANK; None otherwise (other functions would see fewer rows)."""
    if len(window.exprs) != 1:
        return None
    name, e = window.exprs[0]
    if not isinstance(e, exp.Window) or not isinstance(e.this, exp.Rank | exp.DenseRank) or e.args.get("spec"):
        return None
    bounds = []
    for c in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        if isinstance(c, exp.LTE | exp.LT | exp.GTE | exp.GT) and (isinstance(c.this, exp.Literal) or slot_kind(c.this)):
            # N >= r → r <= N; N < r is a lower bound, which limits nothing (it failed with a KeyError)
            c = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}[type(c)](this=c.expression, expression=c.this)
        if not isinstance(c, exp.LTE | exp.LT) or not isinstance(c.this, exp.Column) or c.this.name != name:
            continue
        value = value_of(c.expression)
        if isinstance(value, exp.Literal) and value.is_int:
            bounds.append(int(value.this) - (1 if isinstance(c, exp.LT) else 0))
    return min(bounds) if bounds else None


def _whole_table(node: lp.Node) -> bool:
    """Whether ``node`` reads every row of one table (it only projects it)."""
    while isinstance(node, lp.Project) and not node.subqueries:
        node = node.child
    return isinstance(node, lp.Scan) and not node.subqueries


# The operators :func:`_split_tables` knows to run right in a concatenated UNION ALL's stage.
_SPLIT_SAFE = (lp.Filter, lp.Project, lp.Join, lp.SetOp, lp.Aggregate, lp.Distinct, lp.Window, lp.Sort, lp.Limit)


def _scan_fragment(node: lp.Node) -> bool:
    """True when ``node`` can run in a concatenated UNION ALL's scan stage (see ``_setop``).

    Each task of that stage reads one split of one input's table and finds every other table of
    the stage empty, so the input's rows must be the union of what it makes of each split alone,
    and it must make nothing of none. That is proved operator by operator (:func:`_split_tables`)
    rather than assumed of all but known exceptions: a join of two one-split tables met each
    with the other empty, and a GROUP BY without keys made a row of no rows, in every task.
    """
    return bool(_split_tables(node))


def _split_tables(node: lp.Node) -> int | None:
    """How many tables ``node`` reads split by split in its stage; None unless its rows are
    provably the union of its rows over each split alone, and none of none.

    Filters, projections and UNION ALL treat rows one by one, over any number of tables. Any
    other operator listed may read one table: a join with a broadcast treats that table's rows
    one by one too, and the rest, with no exchange under them, read all of it in one task (a
    table of one split, planned single). Each is right where it makes nothing of an empty table
    and the broadcasts (the same in every task) make nothing by themselves. Exchanges other than
    broadcasts start stages of their own; shared scans and VALUES are read whole by every task.
    """
    if isinstance(node, Exchange):
        return 0 if node.kind == "broadcast" else None
    if isinstance(node, lp.Scan):
        return 1
    if not isinstance(node, _SPLIT_SAFE):
        return None
    counts = [_split_tables(c) for c in node.children]
    if None in counts:
        return None
    tables = sum(counts)
    if isinstance(node, lp.Filter | lp.Project) or (isinstance(node, lp.SetOp) and node.kind == "union" and not node.distinct):
        return tables
    if tables != 1:
        return None
    if isinstance(node, lp.Aggregate) and (not node.keys or [] in (node.grouping_sets or [])):
        return None
    # Inputs whose rows are output without a match (an outer or anti join's kept side, EXCEPT's
    # first input, any of a UNION's) or once per task that matches them (a semi join's left) must
    # hold the table: a broadcast there would output its rows from every task.
    if isinstance(node, lp.Join):
        kept = {"left": [0], "semi": [0], "anti": [0], "right": [1], "full": [0, 1]}.get(node.kind, [])
    elif isinstance(node, lp.SetOp):
        kept = {"union": list(range(len(counts))), "except": [0]}.get(node.kind, [])
    else:
        kept = []
    return 1 if all(counts[i] for i in kept) else None


def _with_filter(original: exp.Expression, agg: exp.Expression) -> exp.Expression:
    """Carry an aggregate's FILTER (WHERE …) clause over to a derived aggregate."""
    if isinstance(original, exp.Filter):
        return exp.Filter(this=agg, expression=original.expression.copy())
    return agg


def _coalesced(node: lp.Project, dist: Dist) -> Dist:
    """A full join's output (``dist.coalesced``) under a projection: hashed on the columns it
    computes as COALESCE of each key pair, when it computes them all; else as before if it
    passes every column on, and spread anyhow if not."""
    names = []
    for a, b in dist.coalesced:
        name = next((n for n, e in node.exprs if _coalesces(e, a, b)), None)
        if name is None:
            return dist if node.passthrough else Dist("any", (), dist.partitions)
        names.append(name)
    return Dist("hash", tuple(names), dist.partitions)


def _coalesces(e: exp.Expression, a: str, b: str) -> bool:
    """Whether ``e`` is COALESCE(a, b) or COALESCE(b, a), also written as the optimizer's
    ``CASE WHEN NOT x IS NULL THEN x ELSE y END``: the two are equal where both are set, since
    the join matched them."""
    if isinstance(e, exp.Coalesce) and len(e.expressions) == 1:
        pair = {plain_column(e.this), plain_column(e.expressions[0])}
    elif isinstance(e, exp.Case) and e.this is None and len(e.args.get("ifs") or []) == 1:
        test = e.args["ifs"][0]
        tested, kept = not_null_operand(test.this), test.args.get("true")
        if tested is None or plain_column(tested) != plain_column(kept):
            return False
        pair = {plain_column(kept), plain_column(e.args.get("default"))}
    else:
        return False
    return pair == {a, b}
