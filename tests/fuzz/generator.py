"""A seeded random SQL generator over the fuzz schema.

Queries are built as text, tracking every expression's type so that most of them are valid, and
every column's join domain and distinct count so that joins match rows without blowing up. What
the generator leaves out is what would make the answer nondeterministic: LIMIT without an ORDER
BY, order-sensitive window functions (ROW_NUMBER, LAG, FIRST_VALUE, ROWS frames) over an order
that is not total, and floating-point sums over columns that hold int64 extremes (their rounding
depends on the order rows arrive in). The same seed and case number always give the same query.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
from dataclasses import dataclass, field

from tests.fuzz.schema import BOOL, DATE, DEC, FLOAT, INT, STR, Table

MAX_ROWS = 20_000  # estimated rows a FROM clause may produce: keeps joins small and fast
MAX_DEPTH = 2  # levels of nested queries below the statement
EXPR_NDV = 5  # distinct values assumed of a computed column: few, so that joins on it are estimated big
SQL_TYPES = {INT: "BIGINT", FLOAT: "DOUBLE", DEC: "DECIMAL(18,2)", STR: "VARCHAR", DATE: "DATE", BOOL: "BOOLEAN"}
TYPE_WEIGHTS = {INT: 30, FLOAT: 14, DEC: 14, STR: 20, DATE: 10, BOOL: 12}
JOIN_KINDS = ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN", ",", "SEMI JOIN", "ANTI JOIN", "NATURAL JOIN"]
JOIN_WEIGHTS = [30, 20, 12, 12, 8, 6, 3, 3, 2]
TABLE_WEIGHTS = {"nums": 3, "dups": 3, "tiny": 2, "empty": 0.6, "store_sales": 2.5, "item": 2, "date_dim": 1.5, "customer": 1.5, "store": 1}

_LITERALS = {
    INT: ["0", "1", "-1", "2", "3", "5", "10", "100"],
    FLOAT: ["CAST(0.5 AS DOUBLE)", "CAST(-2.5 AS DOUBLE)", "CAST(0 AS DOUBLE)", "CAST('-0.0' AS DOUBLE)", "CAST('NaN' AS DOUBLE)",
            "CAST('Infinity' AS DOUBLE)", "CAST('-Infinity' AS DOUBLE)", "CAST(100 AS DOUBLE)"],
    DEC: ["1.50", "-0.01", "0.00", "99.99", "CAST(12.345 AS DECIMAL(10,3))"],
    STR: ["''", "'a'", "'B'", "'abc'", "'ü'", "'Books'", "' '", "'N'"],
    DATE: ["DATE '2000-01-01'", "DATE '1998-06-15'", "DATE '1970-01-01'", "DATE '2000-02-29'", "DATE '2002-12-31'"],
    BOOL: ["TRUE", "FALSE"],
}
_EXTREME_INTS = ["9223372036854775807", "-9223372036854775808", "2147483647"]


@dataclass(frozen=True)
class Ref:
    """A column (or group-key expression) in scope, with what the generator knows of its values.

    ``safe`` is False when the values may be int64 extremes, so no arithmetic may touch them.
    """

    sql: str
    type: str
    domain: str = "expr"
    ndv: float = 1.0
    safe: bool = True
    samples: tuple = ()


@dataclass
class Relation:
    """A FROM item or a whole FROM clause: its SQL, columns, estimated rows and unique key."""

    sql: str
    refs: list[Ref]
    rows: float
    key: list[Ref] | None
    where: list[str] = field(default_factory=list)  # join conditions of comma joins, for WHERE


@dataclass
class Query:
    """A generated query: its SQL and its output columns, named c0, c1, ..."""

    sql: str
    cols: list[Ref]
    rows: float
    key: list[int] | None  # output positions that make a row unique, if known


@dataclass
class Scope:
    """What an expression may refer to.

    ``groups`` is set inside an aggregate query: then only group keys, aggregates and literals
    may appear. ``key`` lists refs that make a row unique, which order-sensitive window functions
    append to their ORDER BY. ``outer`` are the enclosing query's columns, for correlation.
    """

    refs: list[Ref]
    key: list[Ref] | None
    outer: list[Ref]
    depth: int
    groups: list[Ref] | None = None
    grouping: bool = False
    windows: bool = False
    subqueries: bool = True

    def row(self) -> Scope:
        """The per-row scope under an aggregate: for aggregate arguments and FILTER clauses."""
        return Scope(self.refs, self.key, [], self.depth, subqueries=False)


def generate(tables: dict[str, Table], seed: int, case: int) -> str:
    """The SQL of case ``case`` of run ``seed``: each case has its own random stream, so any case can be replayed alone."""
    return Generator(tables, random.Random(f"{seed}:{case}")).statement()


class Generator:
    """Builds one statement from a random stream; see :func:`generate`."""

    def __init__(self, tables: dict[str, Table], rng: random.Random) -> None:
        self.tables = tables
        self.rng = rng
        self.aliases = 0
        self.ctes: list[tuple[str, Query]] = []

    # ---- statements and queries -------------------------------------------------------------

    def statement(self) -> str:
        """A top-level query, maybe with a CTE, with an ORDER BY (and LIMIT) or none."""
        prefix = ""
        if self.rng.random() < 0.12:
            cte = self.query(1, None, [])
            self.ctes.append(("w0", cte))
            prefix = f"WITH w0 AS ({cte.sql}) "
        q = self.query(0, None, [])
        return prefix + q.sql + self.top_order(len(q.cols))

    def top_order(self, n: int) -> str:
        """ORDER BY over output positions: all of them (a total order, so LIMIT is deterministic) or a prefix."""
        r = self.rng
        positions = list(range(1, n + 1))
        r.shuffle(positions)
        x = r.random()
        if x < 0.35:
            return ""
        if x >= 0.85:
            positions = positions[: r.randint(1, max(1, n - 1))]
        terms = ", ".join(f"{p}{r.choice(['', ' DESC'])}{r.choice(['', '', ' NULLS FIRST', ' NULLS LAST'])}" for p in positions)
        order = f" ORDER BY {terms}"
        if 0.65 <= x < 0.85 or x >= 0.95:
            order += f" LIMIT {r.choice([1, 3, 10, 50])}"
            if r.random() < 0.2:
                order += f" OFFSET {r.choice([1, 2, 5])}"
        elif r.random() < 0.05:
            order += f" OFFSET {r.choice([1, 5])}"
        return order

    def query(self, depth: int, types: list[str] | None, outer: list[Ref], scalar: bool = False) -> Query:
        """A SELECT or a set operation of two; ``types`` fixes the output column types, ``scalar`` asks for one value."""
        r = self.rng
        if scalar or not self.chance(0.15, depth):
            return self.select(depth, types, outer, scalar)
        left = self.select(depth, types, outer)
        right = self.select(depth, [c.type for c in left.cols], outer)
        op = r.choice(["UNION", "UNION ALL", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"])
        cols = [
            Ref(f"c{i}", a.type, a.domain if a.domain == b.domain else "expr", a.ndv + b.ndv, a.safe and b.safe)
            for i, (a, b) in enumerate(zip(left.cols, right.cols, strict=True))
        ]
        rows = left.rows + right.rows if op.startswith("UNION") else left.rows
        distinct = not op.endswith("ALL")
        return Query(f"{left.sql} {op} {right.sql}", cols, rows, list(range(len(cols))) if distinct else None)

    def select(self, depth: int, types: list[str] | None, outer: list[Ref], scalar: bool = False) -> Query:
        """One SELECT block: FROM with joins, WHERE, and either a plain or an aggregate select list."""
        r = self.rng
        src = self.source(depth)
        where = list(src.where)
        if outer and r.random() < 0.6:
            corr = self.correlation(src.refs, outer)
            if corr:
                where.append(corr)
        filters = Scope(src.refs, src.key, outer, depth)
        if r.random() < 0.45:
            where.append(self.predicate(filters))
        rows = src.rows * 0.5 ** len(where)
        wanted = [types[0] if types else self.random_type()] if scalar else types or [None] * r.randint(1, 4)
        body = Scope(src.refs, src.key, outer, depth, windows=not scalar)
        if scalar or r.random() < 0.4:
            items, tail, rows, key = self.aggregate_list(body, wanted, scalar, rows)
            distinct = False
        else:
            items = [self.plain_item(body, t) for t in wanted]
            tail, key = "", None
            qualify = self.window(body, INT, False) if not scalar and r.random() < 0.06 else None
            if qualify:
                tail = f" QUALIFY {qualify} {r.choice(['<=', '>', '='])} {r.choice([1, 2, 3])}"
            distinct = r.random() < 0.1
            if distinct:
                key = list(range(len(items)))
        sql = "SELECT " + ("DISTINCT " if distinct else "") + ", ".join(f"{e} AS c{i}" for i, (e, _) in enumerate(items))
        sql += f" FROM {src.sql}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        cols = [Ref(f"c{i}", m.type, m.domain, min(m.ndv, rows), m.safe, m.samples) for i, (_, m) in enumerate(items)]
        return Query(sql + tail, cols, max(rows, 1.0), key)

    def plain_item(self, s: Scope, t: str | None) -> tuple[str, Ref]:
        """A select item of a non-aggregate query: a bare column (keeping its domain for joins) or an expression."""
        r = self.rng
        if t is None and r.random() < 0.45:
            ref = r.choice(s.refs)
            return ref.sql, ref
        t = t or self.random_type()
        cols = [c for c in s.refs if c.type == t]
        if cols and r.random() < 0.4:
            ref = r.choice(cols)
            return ref.sql, ref
        return self.expr(s, t), Ref("", t, ndv=EXPR_NDV, safe=t in (FLOAT, DEC))

    def aggregate_list(self, s: Scope, wanted: list[str | None], scalar: bool, rows: float) -> tuple[list[tuple[str, Ref]], str, float, list[int] | None]:
        """Select items, GROUP BY (plain, ROLLUP, CUBE or GROUPING SETS) and HAVING of an aggregate query."""
        r = self.rng
        keys = [] if scalar else [self.group_key(s) for _ in range(r.choice([0, 1, 1, 2, 2, 3]))]
        keys = list({k.sql: k for k in keys}.values())
        form = "plain"
        if keys:
            form = r.choices(["plain", "rollup", "cube", "sets"], weights=[60, 16, 8, 16])[0]
        g = Scope(s.refs, s.key if form == "plain" else None, s.outer, s.depth, keys, form != "plain", s.windows)
        items: list[tuple[str, Ref]] = []
        key_positions: list[int] | None = None
        if all(t is None for t in wanted) and keys:
            shown = [k for k in keys if r.random() < 0.7]
            items = [(k.sql, k) for k in shown]
            if form == "plain" and len(shown) == len(keys):
                key_positions = list(range(len(items)))
            wanted = wanted[: max(1, len(wanted) - len(items))] if r.random() < 0.8 else []
        for t in wanted:
            t = t or self.random_type()
            # a scalar subquery's item is an aggregate call, so that it always yields exactly one row
            items.append((self.aggregate(g, t, False) if scalar else self.expr(g, t), Ref("", t, ndv=EXPR_NDV, safe=t in (FLOAT, DEC))))
        if not items:
            items.append(("count(*)", Ref("", INT, ndv=EXPR_NDV)))
        tail = ""
        if keys:
            names = [k.sql for k in keys]
            if form == "plain":
                x = r.random()
                if key_positions is not None and x < 0.1:
                    tail = " GROUP BY ALL"
                elif key_positions is not None and x < 0.2:
                    tail = " GROUP BY " + ", ".join(str(i + 1) for i in key_positions)
                else:
                    tail = " GROUP BY " + ", ".join(names)
            elif form == "rollup":
                tail = f" GROUP BY ROLLUP ({', '.join(names)})"
            elif form == "cube":
                tail = f" GROUP BY CUBE ({', '.join(names)})"
            else:
                sets = [[n for n in names if r.random() < 0.5] for _ in range(r.randint(1, 3))] + [names]
                r.shuffle(sets)
                tail = " GROUP BY GROUPING SETS (" + ", ".join(f"({', '.join(x)})" for x in sets) + ")"
            rows = min(rows, math.prod(k.ndv for k in keys)) * (1 if form == "plain" else len(keys) + 1)
        else:
            rows = 1.0
        if not scalar and r.random() < 0.3:
            tail += " HAVING " + self.predicate(Scope(s.refs, None, s.outer, s.depth, keys, form != "plain"))
        return items, tail, rows, key_positions

    def group_key(self, s: Scope) -> Ref:
        """A GROUP BY item: mostly a column, sometimes an expression of one."""
        r = self.rng
        ref = r.choice(s.refs)
        if r.random() < 0.8:
            return ref
        if ref.type == INT:
            return Ref(f"({ref.sql} % 3)", INT, ndv=3)
        if ref.type == STR:
            return Ref(f"upper({ref.sql})", STR, ndv=ref.ndv)
        if ref.type == DATE:
            return Ref(f"year({ref.sql})", INT, ndv=10)
        if ref.type == FLOAT:
            return Ref(f"floor({ref.sql} / 100)", FLOAT, ndv=10)
        return ref

    # ---- FROM ---------------------------------------------------------------------------------

    def alias(self) -> str:
        self.aliases += 1
        return f"t{self.aliases}"

    def source(self, depth: int) -> Relation:
        """A FROM clause of up to four relations, each join kept to an estimated :data:`MAX_ROWS` rows."""
        r = self.rng
        rel = self.relation(depth)
        sql, refs, rows, key, where = rel.sql, list(rel.refs), rel.rows, rel.key, []
        joins = r.choices([0, 1, 2, 3], weights=[40, 35, 18, 7] if depth == 0 else [60, 30, 10, 0])[0]
        for n in range(joins):
            kind = r.choices(JOIN_KINDS, weights=JOIN_WEIGHTS)[0]
            for _ in range(4):
                other = self.relation(depth)
                using = self.using(rel, other, kind == "NATURAL JOIN") if n == 0 and kind not in ("CROSS JOIN", ",") else None
                if kind == "CROSS JOIN" or kind == "NATURAL JOIN" and not using:
                    kind, cond, est = "CROSS JOIN", "", rows * other.rows
                elif kind == "NATURAL JOIN":
                    cond, est = "", rows * other.rows / using[1]
                else:
                    if using:
                        cond, est = f"USING ({using[0]})", rows * other.rows / using[1]
                    else:
                        cond, est = self.join_condition(refs, other.refs, rows, other.rows)
                        cond = f"ON {cond}"
                    est = {"LEFT JOIN": max(est, rows), "RIGHT JOIN": max(est, other.rows), "FULL JOIN": est + rows + other.rows,
                           "SEMI JOIN": rows, "ANTI JOIN": rows}.get(kind, est)
                if est <= MAX_ROWS:
                    break
            else:
                break
            if kind == ",":
                sql += f", {other.sql}"
                where.append(cond.removeprefix("ON "))
            else:
                sql += f" {kind} {other.sql} {cond}".rstrip()
            rows = max(est, 1.0)
            if kind in ("SEMI JOIN", "ANTI JOIN"):
                continue  # only the left side's columns remain
            refs += other.refs
            key = key + other.key if key is not None and other.key is not None else None
            if kind == ",":
                break  # a later JOIN's ON could not see the tables before the comma
        return Relation(sql, refs, rows, key, where)

    def using(self, left: Relation, right: Relation, natural: bool) -> tuple[str, float] | None:
        """A column name two base tables share, with its larger distinct count, for JOIN ... USING or NATURAL JOIN."""
        if not natural and self.rng.random() >= 0.12:
            return None
        names = {ref.sql.split(".")[1]: ref for ref in left.refs}
        shared = [(n, max(names[n].ndv, ref.ndv)) for ref in right.refs
                  if (n := ref.sql.split(".")[1]) in names and names[n].type == ref.type and names[n].domain != "expr"]
        return self.rng.choice(shared) if shared else None

    def relation(self, depth: int) -> Relation:
        """A base table, a derived table (maybe with a total ORDER BY and LIMIT), the CTE or a VALUES list."""
        r = self.rng
        alias = self.alias()
        x = r.random()
        derived = depth < MAX_DEPTH and self.chance(0.12, depth)
        if derived or self.ctes and x < 0.1:
            if derived:
                q = self.query(depth + 1, None, [])
                body = q.sql
                if r.random() < 0.15:
                    body += " ORDER BY " + ", ".join(str(i + 1) for i in range(len(q.cols))) + f" LIMIT {r.choice([2, 5, 20])}"
                sql = f"({body}) AS {alias}"
            else:
                name, q = self.ctes[0]
                sql = f"{name} AS {alias}"
            refs = [Ref(f"{alias}.{c.sql}", c.type, c.domain, c.ndv, c.safe, c.samples) for c in q.cols]
            return Relation(sql, refs, q.rows, [refs[i] for i in q.key] if q.key is not None else None)
        if x > 0.97:
            return self.values(alias)
        table = self.tables[r.choices(list(TABLE_WEIGHTS), weights=list(TABLE_WEIGHTS.values()))[0]]
        refs = [Ref(f"{alias}.{c.name}", c.type, c.domain, c.ndv, c.safe, c.samples) for c in table.columns]
        by_name = {c.name: ref for c, ref in zip(table.columns, refs, strict=True)}
        return Relation(f"{table.name} AS {alias}", refs, max(table.rows, 1), [by_name[k] for k in table.key])

    def values(self, alias: str) -> Relation:
        """A VALUES list of a few rows, with NULLs and duplicates, whose columns join with ``k`` and ``g``."""
        r = self.rng
        rows = [(r.choice(["NULL", "0", "1", "2", "3", "3"]), r.choice(["NULL", "'a'", "'b'", "''", "'Books'"])) for _ in range(r.randint(1, 4))]
        refs = [Ref(f"{alias}.c0", INT, "small", 4), Ref(f"{alias}.c1", STR, "label", 4)]
        body = ", ".join(f"({a}, {b})" for a, b in rows)
        return Relation(f"(VALUES {body}) AS {alias}(c0, c1)", refs, len(rows), None)

    def join_condition(self, left: list[Ref], right: list[Ref], lrows: float, rrows: float) -> tuple[str, float]:
        """An ON condition (mostly an equality of columns of one domain) and the estimated join size."""
        r = self.rng
        same_domain = [(a, b) for a in left for b in right if a.domain == b.domain != "expr" and a.type == b.type]
        same_type = [(a, b) for a in left for b in right if a.type == b.type and a.type != BOOL]
        x = r.random()
        if same_domain and x < 0.8 or same_type and x < 0.93:
            a, b = r.choice(same_domain if same_domain and x < 0.8 else same_type)
            op = r.choice(["=", "=", "=", "=", "IS NOT DISTINCT FROM"])
            cond, est = f"{a.sql} {op} {b.sql}", lrows * rrows / max(a.ndv, b.ndv, 1)
            if op != "=":
                est += lrows * rrows / 100  # NULLs match each other: a share of both sides, say a tenth
            if len(same_domain) > 1 and r.random() < 0.15:
                a, b = r.choice(same_domain)
                cond, est = f"{cond} AND {a.sql} = {b.sql}", est / 2
        elif same_type:
            a, b = r.choice(same_type)
            op = r.choice(["<", "<=", ">", "<>"])
            cond, est = f"{a.sql} {op} {b.sql}", lrows * rrows / (1 if op == "<>" else 3)
        else:
            cond, est = "TRUE", lrows * rrows
        if r.random() < 0.25:
            cond = f"{cond} AND {self.predicate(Scope(left + right, None, [], MAX_DEPTH, subqueries=False))}"
            est *= 0.6
        return cond, est

    def correlation(self, inner: list[Ref], outer: list[Ref]) -> str | None:
        """A WHERE conjunct tying a subquery to its enclosing query: mostly an equality, sometimes not."""
        r = self.rng
        pairs = [(a, b) for a in inner for b in outer if a.domain == b.domain != "expr" and a.type == b.type]
        pairs = pairs or [(a, b) for a in inner for b in outer if a.type == b.type and a.type != BOOL]
        if not pairs:
            return None
        a, b = r.choice(pairs)
        return f"{a.sql} {r.choice(['=', '=', '=', '=', '<', '<>', 'IS NOT DISTINCT FROM'])} {b.sql}"

    # ---- expressions --------------------------------------------------------------------------

    def chance(self, p: float, depth: int) -> bool:
        """True with probability ``p``, less the deeper the query: nesting multiplies a query's size."""
        return self.rng.random() < p / (1 + 2 * depth)

    def random_type(self) -> str:
        return self.rng.choices(list(TYPE_WEIGHTS), weights=list(TYPE_WEIGHTS.values()))[0]

    def some_type(self, s: Scope) -> str:
        """The type of something in scope, so that comparisons are mostly about real columns."""
        pool = s.groups if s.groups is not None else s.refs
        if pool and self.rng.random() < 0.8:
            return self.rng.choice(pool).type
        return self.random_type()

    def expr(self, s: Scope, t: str, depth: int = 0, arith: bool = False) -> str:
        """An expression of type ``t``; ``arith`` keeps columns holding int64 extremes out of it."""
        r = self.rng
        if t == BOOL:
            return self.predicate(s, depth)
        if depth >= 2 or r.random() < 0.45:
            return self.leaf(s, t, arith)
        x = r.random()
        if x < 0.08:
            return self.case(s, t, depth + 1, arith)
        if x < 0.14:
            args = [self.expr(s, t, depth + 1, arith) for _ in range(r.randint(2, 3))]
            return f"COALESCE({', '.join(args)})"
        if x < 0.17:
            return f"NULLIF({self.expr(s, t, depth + 1, arith)}, {self.expr(s, t, depth + 1, arith)})"
        if x < 0.2 and s.subqueries and s.depth < MAX_DEPTH and self.chance(0.3, s.depth):
            return self.scalar_subquery(s, t)
        return {INT: self.int_expr, FLOAT: self.float_expr, DEC: self.dec_expr, STR: self.str_expr, DATE: self.date_expr}[t](s, depth + 1, arith)

    def leaf(self, s: Scope, t: str, arith: bool) -> str:
        """A column, group key, aggregate, window function or literal of type ``t``."""
        r = self.rng
        x = r.random()
        if s.groups is not None:
            keys = [k for k in s.groups if k.type == t and (k.safe or not arith)]
            if keys and x < 0.35:
                return r.choice(keys).sql
            if s.grouping and x < 0.4 and t == INT:
                return f"GROUPING({', '.join(k.sql for k in r.sample(s.groups, r.randint(1, len(s.groups))))})"
            if x < 0.85:
                return self.aggregate(s, t, arith)
            if s.windows and x < 0.92:
                return self.group_window(s, t)
            return self.literal(t, arith)
        cols = [c for c in s.refs if c.type == t and (c.safe or not arith)]
        if s.windows and x < 0.1:
            window = self.window(s, t, arith)
            if window:
                return window
        if cols and x < 0.75:
            return r.choice(cols).sql
        outer = [c for c in s.outer if c.type == t and (c.safe or not arith)]
        if outer and x < 0.78:
            return r.choice(outer).sql
        return self.literal(t, arith, r.choice(cols) if cols else None)

    def literal(self, t: str, arith: bool = False, like: Ref | None = None) -> str:
        """A literal, often one of ``like``'s sample values, sometimes an edge value or a typed NULL."""
        r = self.rng
        if like is not None and like.samples and r.random() < 0.6:
            return render(r.choice(like.samples))
        if not arith and r.random() < 0.05:
            return f"CAST(NULL AS {SQL_TYPES[t]})"
        if t == INT and not arith and r.random() < 0.1:
            return r.choice(_EXTREME_INTS)
        return r.choice(_LITERALS[t])

    def case(self, s: Scope, t: str, depth: int, arith: bool) -> str:
        r = self.rng
        if r.random() < 0.7:
            whens = " ".join(f"WHEN {self.predicate(s, depth)} THEN {self.expr(s, t, depth, arith)}" for _ in range(r.randint(1, 3)))
            subject = ""
        else:
            u = self.some_type(s)
            subject = " " + self.expr(s, u, depth)
            whens = " ".join(f"WHEN {self.literal(u)} THEN {self.expr(s, t, depth, arith)}" for _ in range(r.randint(1, 3)))
        default = f" ELSE {self.expr(s, t, depth, arith)}" if r.random() < 0.7 else ""
        return f"CASE{subject} {whens}{default} END"

    def int_expr(self, s: Scope, d: int, arith: bool) -> str:
        r = self.rng
        e = self.expr
        x = r.randrange(14)
        if x < 3:
            return f"({e(s, INT, d, True)} {r.choice(['+', '-'])} {e(s, INT, d, True)})"
        if x == 3:
            return f"({e(s, INT, d, True)} * {r.choice([2, 3, -1, 10])})"
        if x == 4:
            return f"({e(s, INT, d, arith)} {r.choice(['%', '//'])} {r.choice([2, 3, 7])})"
        if x == 5:
            return f"{r.choice(['abs', 'sign'])}({e(s, INT, d, True)})"
        if x == 6:
            return f"{r.choice(['length', 'strlen'])}({e(s, STR, d)})" if r.random() < 0.7 else f"strpos({e(s, STR, d)}, 'a')"
        if x == 7:
            return f"{r.choice(['year', 'month', 'day', 'dayofweek'])}({e(s, DATE, d)})"
        if x == 8:
            return f"CAST({e(s, DEC, d)} AS BIGINT)"
        if x == 9:
            return f"TRY_CAST({e(s, r.choice([FLOAT, STR]), d)} AS BIGINT)"
        if x == 10:
            if r.random() < 0.5:
                return f"date_diff('{r.choice(['day', 'month', 'year'])}', {e(s, DATE, d)}, {e(s, DATE, d)})"
            return f"({e(s, DATE, d)} - {e(s, DATE, d)})"
        if x == 11:
            return f"CAST({e(s, BOOL, d)} AS INTEGER)"
        return f"{r.choice(['greatest', 'least'])}({e(s, INT, d, arith)}, {e(s, INT, d, arith)})"

    def float_expr(self, s: Scope, d: int, arith: bool) -> str:
        r = self.rng
        e = self.expr
        x = r.randrange(10)
        if x < 3:
            return f"({e(s, FLOAT, d, arith)} {r.choice(['+', '-', '*'])} {e(s, FLOAT, d, arith)})"
        if x == 3:
            return f"CAST({e(s, r.choice([INT, DEC]), d, arith)} AS DOUBLE)"
        if x == 4:
            # the divisor is never a float: a -0.0 divisor would make the sign of an infinity depend
            # on which of two equal floats a GROUP BY happened to keep
            return f"({e(s, r.choice([INT, DEC, FLOAT]), d, arith)} / {e(s, r.choice([INT, DEC]), d, True)})"
        if x == 5:
            return f"round({e(s, FLOAT, d, arith)}, {r.choice([0, 1, 2])})"
        if x == 6:
            return f"{r.choice(['abs', 'floor', 'ceil'])}({e(s, FLOAT, d, arith)})"
        if x == 7:
            return f"sqrt(abs({e(s, FLOAT, d, arith)}))"
        if x == 8:
            return f"TRY_CAST({e(s, STR, d)} AS DOUBLE)"
        return f"{r.choice(['greatest', 'least'])}({e(s, FLOAT, d, arith)}, {e(s, FLOAT, d, arith)})"

    def dec_expr(self, s: Scope, d: int, arith: bool) -> str:
        r = self.rng
        e = self.expr
        x = r.randrange(7)
        if x < 2:
            return f"({e(s, DEC, d, arith)} {r.choice(['+', '-'])} {e(s, DEC, d, arith)})"
        if x == 2:
            return f"({e(s, DEC, d, arith)} * {r.choice([2, -1, 3])})"
        if x == 3:
            return f"{r.choice(['abs', 'round'])}({e(s, DEC, d, arith)})"
        if x == 4:
            return f"CAST({e(s, INT, d, True)} AS DECIMAL(18,2))"
        if x == 5:
            return f"TRY_CAST({e(s, FLOAT, d, arith)} AS DECIMAL(18,3))"
        return f"{r.choice(['greatest', 'least'])}({e(s, DEC, d, arith)}, {e(s, DEC, d, arith)})"

    def str_expr(self, s: Scope, d: int, arith: bool) -> str:
        r = self.rng
        e = self.expr
        x = r.randrange(10)
        if x == 0:
            return f"{r.choice(['upper', 'lower', 'trim', 'reverse'])}({e(s, STR, d)})"
        if x == 1:
            return f"({e(s, STR, d)} || {e(s, STR, d)})"
        if x == 2:
            return f"concat({e(s, STR, d)}, {e(s, STR, d)})"
        if x == 3:
            return f"substr({e(s, STR, d)}, {r.randint(1, 3)}, {r.randint(1, 4)})"
        if x == 4:
            return f"left({e(s, STR, d)}, {r.randint(0, 3)})"
        if x == 5:
            return f"replace({e(s, STR, d)}, 'a', 'xy')"
        if x == 6:
            return f"CAST({e(s, r.choice([INT, DATE, DEC, BOOL]), d)} AS VARCHAR)"
        if x == 7:
            return f"lpad({e(s, STR, d)}, 4, '*')"
        if x == 8:
            return f"repeat({e(s, STR, d)}, 2)"
        return f"{r.choice(['greatest', 'least'])}({e(s, STR, d)}, {e(s, STR, d)})"

    def date_expr(self, s: Scope, d: int, arith: bool) -> str:
        r = self.rng
        e = self.expr
        x = r.randrange(5)
        if x < 2:
            return f"({e(s, DATE, d)} {r.choice(['+', '-'])} {r.choice([1, 7, 30, 365])})"
        if x == 2:
            return f"last_day({e(s, DATE, d)})"
        if x == 3:
            return f"TRY_CAST({e(s, STR, d)} AS DATE)"
        return f"{r.choice(['greatest', 'least'])}({e(s, DATE, d)}, {e(s, DATE, d)})"

    # ---- predicates and subqueries -----------------------------------------------------------

    def predicate(self, s: Scope, depth: int = 0) -> str:
        r = self.rng
        if depth < 2 and r.random() < 0.3:
            x = r.random()
            if x < 0.45:
                return f"({self.predicate(s, depth + 1)} AND {self.predicate(s, depth + 1)})"
            if x < 0.85:
                return f"({self.predicate(s, depth + 1)} OR {self.predicate(s, depth + 1)})"
            if x < 0.93:
                return f"(NOT {self.predicate(s, depth + 1)})"
            return f"({self.predicate(s, depth + 1)}) IS {r.choice(['', 'NOT '])}{r.choice(['TRUE', 'FALSE', 'NULL'])}"
        return self.atom(s, depth)

    def atom(self, s: Scope, depth: int) -> str:
        """A comparison, IS NULL, BETWEEN, IN list, LIKE, boolean column or subquery predicate."""
        r = self.rng
        if s.subqueries and s.depth < MAX_DEPTH and self.chance(0.2, s.depth):
            return self.subquery_predicate(s)
        pool = [c for c in (s.groups if s.groups is not None else s.refs) if c.type != BOOL]
        subject: Ref | None = r.choice(pool) if pool and r.random() < 0.6 else None
        t = subject.type if subject else self.some_type(s)
        if t == BOOL:
            bools = [c for c in s.refs if c.type == BOOL] if s.groups is None else []
            if bools and r.random() < 0.5:
                return f"{r.choice(bools).sql}{r.choice(['', ' IS NOT TRUE', ' IS FALSE'])}"
            t = INT
        a = subject.sql if subject else self.expr(s, t, depth + 1)

        def lit() -> str:
            return self.literal(t, like=subject)

        x = r.randrange(10)
        if x < 4:
            other = lit() if r.random() < 0.6 else self.expr(s, t, depth + 1)
            return f"{a} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {other}"
        if x == 4:
            return f"{a} IS {r.choice(['', 'NOT '])}NULL"
        if x == 5:
            lo, hi = sorted([lit(), lit()]) if t in (STR, DATE) else (lit(), lit())
            return f"{a} {r.choice(['', 'NOT '])}BETWEEN {lo} AND {hi}"
        if x == 6:
            items = [lit() for _ in range(r.randint(1, 4))] + (["NULL"] if r.random() < 0.15 else [])
            return f"{a} {r.choice(['', 'NOT '])}IN ({', '.join(items)})"
        if x == 7 and t == STR:
            pattern = r.choice(["'a%'", "'%b'", "'%'", "''", "'_'", "'%a_%'", "'B%'"])
            return f"{a} {r.choice(['', 'NOT '])}{r.choice(['LIKE', 'ILIKE'])} {pattern}"
        if x == 8:
            if t == FLOAT and r.random() < 0.4:
                return f"{r.choice(['isnan', 'isinf', 'isfinite'])}({a})"
            if t == STR and r.random() < 0.4:
                return f"{r.choice(['starts_with', 'contains'])}({a}, {r.choice(['', 'a', 'B'])!r})"
            return f"{a} IS {r.choice(['', 'NOT '])}DISTINCT FROM {lit()}"
        return f"{a} {r.choice(['=', '<>', '<', '>='])} {self.expr(s, t, depth + 1)}"

    def outer_refs(self, s: Scope) -> list[Ref]:
        """What a subquery of ``s`` may correlate with: the columns, or under GROUP BY the keys that are columns.

        A key that is an expression cannot be named inside a subquery: DuckDB binds its columns there
        one by one, and they are not grouped.
        """
        return [k for k in s.groups if "(" not in k.sql] if s.groups is not None else list(s.refs)

    def subquery_predicate(self, s: Scope) -> str:
        """EXISTS, [NOT] IN, ANY/ALL or a comparison with a scalar subquery; correlated or not."""
        r = self.rng
        x = r.random()
        outer = self.outer_refs(s)
        if x < 0.3:
            q = self.query(s.depth + 1, None, outer)
            return f"{r.choice(['', 'NOT '])}EXISTS ({q.sql})"
        t = self.some_type(s)
        if t == BOOL:
            t = INT
        a = self.expr(s, t, 2)
        if x < 0.65:
            q = self.query(s.depth + 1, [t], outer)
            return f"{a} {r.choice(['', 'NOT '])}IN ({q.sql})"
        if x < 0.8:
            q = self.query(s.depth + 1, [t], outer)
            return f"{a} {r.choice(['=', '<>', '<', '>='])} {r.choice(['ANY', 'ALL'])} ({q.sql})"
        return f"{a} {r.choice(['=', '<>', '<', '>', '<='])} {self.scalar_subquery(s, t)}"

    def scalar_subquery(self, s: Scope, t: str) -> str:
        """A subquery with one row and one column: an ungrouped aggregate, correlated or not."""
        return f"({self.query(s.depth + 1, [t], self.outer_refs(s), scalar=True).sql})"

    # ---- aggregates and windows ---------------------------------------------------------------

    def aggregate(self, s: Scope, t: str, arith: bool) -> str:
        """An aggregate call of result type ``t`` over the row scope, maybe DISTINCT, maybe with FILTER."""
        r = self.rng
        row = s.row()
        e = self.expr
        if t == INT:
            options = ["count(*)", f"count({e(row, self.random_type(), 1)})", f"count(DISTINCT {e(row, self.random_type(), 1)})",
                       f"sum({e(row, INT, 1)})", f"sum(DISTINCT {e(row, INT, 1)})", f"bit_or({e(row, INT, 1)})"]
            if not arith:
                options += [f"{r.choice(['min', 'max'])}({e(row, INT, 1)})"]
        elif t == FLOAT:
            # float sums only over safe values: their rounding must not depend on the summation order
            options = [f"avg({e(row, r.choice([INT, DEC]), 1)})", f"avg({e(row, FLOAT, 1, True)})", f"sum({e(row, FLOAT, 1, True)})",
                       # stddev over DECIMALs, which are finite: over an infinity it raises an error, and whether
                       # an engine evaluates it on rows a later filter drops is up to its plan
                       f"{r.choice(['min', 'max'])}({e(row, FLOAT, 1, arith)})", f"stddev_samp({e(row, DEC, 1)})",
                       f"median({e(row, FLOAT, 1)})", f"quantile_cont({e(row, FLOAT, 1)}, {r.choice([0.25, 0.9])})"]
        elif t == DEC:
            options = [f"sum({e(row, DEC, 1)})", f"sum(DISTINCT {e(row, DEC, 1)})", f"{r.choice(['min', 'max'])}({e(row, DEC, 1)})",
                       f"median({e(row, DEC, 1)})"]
        elif t == BOOL:
            options = [f"{r.choice(['bool_and', 'bool_or'])}({self.predicate(row, 1)})"]
        else:
            options = [f"{r.choice(['min', 'max'])}({e(row, t, 1)})", f"{r.choice(['min', 'max'])}(DISTINCT {e(row, t, 1)})"]
            strings = [c for c in s.refs if c.type == STR]
            if t == STR and strings:
                # ordered by the aggregated column itself, so that ties are equal strings and the result is determined
                arg = r.choice(strings).sql
                options.append(f"string_agg({r.choice(['', 'DISTINCT '])}{arg}, ',' ORDER BY {arg})")
        call = r.choice(options)
        if r.random() < 0.2:
            call += f" FILTER (WHERE {self.predicate(row, 1)})"
        return call

    def window(self, s: Scope, t: str, arith: bool) -> str | None:
        """A window function over the row scope; order-sensitive ones only when the scope has a unique key."""
        r = self.rng
        row = Scope(s.refs, s.key, [], s.depth, subqueries=False)
        total = s.key is not None

        def arg(u: str, safe: bool = False) -> str:
            return self.expr(row, u, 2, safe)

        if t == INT:
            plain = ["rank()", "dense_rank()", "count(*)", f"count({arg(self.random_type())})", f"sum({arg(INT)})"]
            ordered = ["row_number()", "ntile(3)", f"lag({arg(INT, arith)}, 1)", f"lead({arg(INT, arith)}, 2, 0)"]
        elif t == FLOAT:
            plain = ["percent_rank()", "cume_dist()", f"avg({arg(r.choice([INT, DEC]))})", f"sum({arg(FLOAT, True)})"]
            ordered = [f"lag({arg(FLOAT)}, 1)"]
        elif t == BOOL:
            return None
        else:
            plain = [f"{r.choice(['min', 'max'])}({arg(t)})"]
            ordered = [f"first_value({arg(t)})", f"lag({arg(t)}, 1)", f"last_value({arg(t)})"]
        func = r.choice(plain + (ordered if total else []))
        needs_total = func in ordered
        partition = [r.choice(s.refs).sql for _ in range(r.choice([0, 0, 1, 1, 2]))]
        order = [f"{ref.sql}{r.choice(['', ' DESC'])}{r.choice(['', ' NULLS FIRST'])}" for ref in r.sample(s.refs, min(len(s.refs), r.choice([0, 1, 1, 2])))]
        frame = ""
        if needs_total or (total and r.random() < 0.3):
            order += [k.sql for k in s.key or []]
            if func.split("(")[0] in ("count", "sum", "avg", "min", "max", "first_value", "last_value") and r.random() < 0.5:
                frame = r.choice([" ROWS BETWEEN 1 PRECEDING AND CURRENT ROW", " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"])
        elif func.split("(")[0] in ("count", "sum", "avg", "min", "max") and r.random() < 0.2:
            frame = " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
        spec = " ".join(x for x in (("PARTITION BY " + ", ".join(partition)) if partition else "",
                                    ("ORDER BY " + ", ".join(order)) if order else "") if x)
        return f"{func} OVER ({spec}{frame})"

    def group_window(self, s: Scope, t: str) -> str:
        """A window function over the groups of an aggregate query, ordered by an aggregate."""
        r = self.rng
        plain = Scope(s.refs, None, [], s.depth, s.groups, s.grouping, windows=False, subqueries=False)
        if t == INT:
            func = r.choice(["rank()", "dense_rank()", "count(*)", f"sum({self.aggregate(plain, INT, True)})"])
        elif t == FLOAT:
            func = r.choice(["percent_rank()", f"avg({self.aggregate(plain, r.choice([INT, DEC]), True)})"])
        else:
            func = f"{r.choice(['min', 'max'])}({self.expr(plain, t, 2)})"
        partition = [k.sql for k in s.groups or [] if r.random() < 0.3]
        order = [self.expr(plain, r.choice([INT, FLOAT, DEC, STR]), 2) for _ in range(r.choice([0, 1, 1, 2]))]
        spec = " ".join(x for x in (("PARTITION BY " + ", ".join(partition)) if partition else "",
                                    ("ORDER BY " + ", ".join(order)) if order else "") if x)
        return f"{func} OVER ({spec})"


def render(value: object) -> str:
    """A Python value as a DuckDB literal of its type."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = "NaN" if math.isnan(value) else "Infinity" if value == math.inf else "-Infinity" if value == -math.inf else repr(value)
        return f"CAST('{text}' AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"
