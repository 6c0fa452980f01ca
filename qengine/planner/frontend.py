"""SQL text → optimized sqlglot AST: parse, bind parameters, expand views, optimize.

sqlglot's optimizer qualifies every column, decorrelates subqueries into joins and pushes
projections down; the logical planner then only sees fully qualified, mostly flat SELECTs.
Every sqlglot failure is turned into a qengine ProgrammingError that names the spot (line and
column for syntax errors, the name for unknown tables and columns).
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import itertools
from collections.abc import Sequence
from typing import Any

import sqlglot
import sqlglot.errors
import sqlglot.expressions as exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer import RULES, optimize
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.canonicalize import canonicalize
from sqlglot.optimizer.pushdown_predicates import pushdown_predicates
from sqlglot.optimizer.simplify import simplify

from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import CsvSource, ParquetSource
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner.unsupported import refuse_unmodelled


class _Rule:
    """An optimizer rule with its signature worked out once. ``optimize`` asks each rule for its
    parameters on every call, and for sqlglot's compiled rules ``inspect`` gets them by parsing
    a text signature: 5 ms a query. A ``__signature__`` answers at once."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule
        self.__signature__ = inspect.signature(rule)

    def __call__(self, expression: exp.Expression, **kwargs: Any) -> exp.Expression:
        return self.rule(expression, **kwargs)


# sqlglot's simplify folds constants with its own typing (DATE + INTERVAL becomes a DATE where
# DuckDB returns a TIMESTAMP), so it is left out: DuckDB folds constants itself, with its types.
# Its predicate pushdown is left to qengine's own (planner/pushdown.py), which does all it did
# (comma joins' WHERE conditions become join keys there too) and more; it took a sixth of
# planning time. Type annotation and canonicalize, which needs the types, rewrite SQL for
# engines that lack DuckDB's implicit casts (string literals compared with dates, integers as
# booleans); the fragments run on DuckDB itself, which reads the query the way the user meant
# it, so they are left out too, and no node carries a type for every copy to deep-copy.
_RULES = tuple(_Rule(rule) for rule in RULES if rule not in (simplify, pushdown_predicates, annotate_types, canonicalize))

_TABLE_FUNCTIONS = {"read_parquet": "parquet", "parquet_scan": "parquet", "read_csv": "csv", "read_csv_auto": "csv"}
_counter = itertools.count()


def parse(sql: str, dialect: str) -> list[exp.Expression]:
    """Parse one or more statements, naming line and column on a syntax error, and refuse
    those with a construct the planner does not model (see :mod:`qengine.planner.unsupported`)."""
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
        desc = first.get("description", str(e)) if first else str(e)
        near = f" near {first.get('highlight')!r}" if first.get("highlight") else ""
        raise ProgrammingError(f"syntax error{where}{near}: {desc}") from e
    except sqlglot.errors.TokenError as e:
        raise ProgrammingError(f"syntax error: {e}") from e
    except ValueError as e:
        raise ProgrammingError(f"unknown SQL dialect {dialect!r}") from e
    if not statements:
        raise ProgrammingError("empty statement")
    for statement in statements:
        refuse_unmodelled(statement)
    return statements


def literal(value: Any) -> exp.Expression:
    """A Python value as a typed SQL literal."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, float):
        return exp.cast(exp.Literal.string(repr(value)), "DOUBLE")
    if isinstance(value, decimal.Decimal):
        return exp.cast(exp.Literal.string(str(value)), f"DECIMAL(38,{max(0, -value.as_tuple().exponent)})")
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    if isinstance(value, dt.time):
        return exp.cast(exp.Literal.string(value.isoformat()), "TIME")
    if isinstance(value, bytes | bytearray | memoryview):
        return exp.cast(exp.Literal.string("".join(f"\\x{b:02x}" for b in bytes(value))), "BLOB")
    raise ProgrammingError(f"cannot bind a parameter of type {type(value).__name__}")


def bind(statement: exp.Expression, params: Sequence[Any] | None) -> exp.Expression:
    """Replace ``?`` / ``$n`` placeholders with literals, checking the count."""
    holders = list(statement.find_all(exp.Placeholder, exp.Parameter, bfs=False))  # textual order
    params = list(params or [])
    if not holders:
        if params:
            raise ProgrammingError(f"statement takes no parameters but {len(params)} were given")
        return statement
    positional = [h for h in holders if isinstance(h, exp.Placeholder) and not h.args.get("this")]
    if len(positional) == len(holders):
        if len(params) != len(holders):
            raise ProgrammingError(f"statement takes {len(holders)} parameters but {len(params)} were given")
        for holder, value in zip(positional, params, strict=True):
            holder.replace(literal(value))
        return statement
    for holder in holders:
        try:
            index = int(holder.name) - 1
            value = params[index]
        except (ValueError, IndexError):
            raise ProgrammingError(f"no value for parameter {holder.sql()}") from None
        holder.replace(literal(value))
    return statement


def name_outputs(statement: exp.Expression, dialect: str) -> None:
    """Name unaliased result expressions the way DuckDB does ("count(x)", "(a + 1)"), rather
    than the optimizer's "_col_0"."""
    query = statement
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return
    for e in list(query.expressions):
        if isinstance(e, exp.Alias | exp.Column | exp.Star) or e.find(exp.Star) and not isinstance(e, exp.Count):
            continue
        if isinstance(e, exp.Count) and isinstance(e.this, exp.Star):
            name = "count_star()"
        else:
            name = e.sql(dialect="duckdb", normalize_functions="lower")
            if isinstance(e, exp.Binary):
                name = f"({name})"
        e.replace(exp.alias_(e.copy(), name, quoted=True))


def normalize_null_ordering(statement: exp.Expression, dialect: str) -> None:
    """Make NULLS FIRST/LAST explicit everywhere, so range partitioning and DuckDB agree."""
    ordering = Dialect.get_or_raise(dialect).NULL_ORDERING
    for ordered in statement.find_all(exp.Ordered):
        if ordered.args.get("nulls_first") is None:
            desc = bool(ordered.args.get("desc"))
            if ordering == "nulls_are_small":
                first = not desc
            elif ordering == "nulls_are_large":
                first = desc
            else:
                first = ordering == "nulls_are_first"
            ordered.set("nulls_first", first)


def expand_sources(statement: exp.Expression, catalog: Catalog, dialect: str, depth: int = 0) -> exp.Expression:
    """Inline views and turn read_parquet()/read_csv() in FROM into catalog tables."""
    if depth > 32:
        raise ProgrammingError("views nest more than 32 deep (a view that refers to itself?)")
    for table in list(statement.find_all(exp.Table)):
        func = table.this
        if isinstance(func, exp.Func):
            fname = (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()
            kind = _TABLE_FUNCTIONS.get(fname)
            if kind is None:
                raise NotSupportedError(f"table function {fname}() is not supported")
            args = func.expressions if func.expressions else [func.this]
            if not args or not isinstance(args[0], exp.Literal | exp.Array):
                raise ProgrammingError(f"{fname}() takes a path or a list of paths as a string literal")
            specs = [a.name for a in (args[0].expressions if isinstance(args[0], exp.Array) else [args[0]])]
            suffixes = (".parquet", ".parq") if kind == "parquet" else (".csv", ".tsv", ".txt")
            paths = [p for spec in specs for p in catalog.resolve_paths(spec, suffixes, from_sql=True)]
            name = f"__{kind}_{next(_counter)}"
            source = ParquetSource(name, paths) if kind == "parquet" else CsvSource(name, paths)
            catalog.add_table(source)
            alias = table.alias or fname
            table.replace(exp.Table(this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(alias))))
            continue
        if table.args.get("db") or not isinstance(table.this, exp.Identifier):
            continue
        view = catalog.views.get(table.name.lower())
        if view is None or _is_cte_reference(table):
            continue
        body = expand_sources(view.query.copy(), catalog, dialect, depth + 1)
        alias = table.alias or table.name
        table.replace(exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return statement


def _is_cte_reference(table: exp.Table) -> bool:
    name = table.name.lower()
    scope = table.parent
    while scope is not None:
        with_ = scope.args.get("with_") if isinstance(scope, exp.Query) else None
        if with_ is not None and any(cte.alias_or_name.lower() == name for cte in with_.expressions):
            return True
        scope = scope.parent
    return False


def factor_disjunctions(statement: exp.Expression) -> exp.Expression:
    """Rewrite (A AND B) OR (A AND C) as A AND (B OR C) in every predicate.

    Pulling a shared correlated equality out of an OR lets the optimizer turn the subquery
    into a join (TPC-DS q41 needs this).
    """

    def visit(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Or):
            return node
        branches = [list(b.flatten()) if isinstance(b, exp.And) else [b] for b in unparen(node).flatten()]
        if len(branches) < 2:
            return node
        keys = [{c.sql(): c for c in (unparen(x) for x in b)} for b in branches]
        common = set(keys[0]).intersection(*keys[1:])
        if not common:
            return node
        shared = [keys[0][k] for k in keys[0] if k in common]
        rests = [[c for k, c in kb.items() if k not in common] for kb in keys]
        if any(not r for r in rests):
            return exp.paren(exp.and_(*[c.copy() for c in shared]))
        either = exp.or_(*[exp.paren(exp.and_(*[c.copy() for c in r])) for r in rests])
        return exp.paren(exp.and_(*[c.copy() for c in shared], exp.paren(either)))

    return statement.transform(visit, copy=False)


def exists_select_one(statement: exp.Expression) -> exp.Expression:
    """Rewrite EXISTS (SELECT * ...) as EXISTS (SELECT 1 ...): the subquery's columns are never
    read, but once it is decorrelated into a join its star would carry every column of its
    tables along (TPC-DS q10, q35 and q69 read all 28 of date_dim's, three times each)."""
    for node in statement.find_all(exp.Exists):
        select = node.this
        if isinstance(select, exp.Select) and len(select.expressions) == 1 and isinstance(select.expressions[0], exp.Star):
            select.set("expressions", [exp.Literal.number(1)])
    return statement


def unparen(e: exp.Expression) -> exp.Expression:
    """``e`` without enclosing parentheses (sqlglot's ``unnest`` would also open a subquery)."""
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def referenced_tables(statement: exp.Expression) -> set[str]:
    return {t.name.lower() for t in statement.find_all(exp.Table) if isinstance(t.this, exp.Identifier)}


def optimize_query(query: exp.Expression, catalog: Catalog, dialect: str) -> exp.Expression:
    """Qualify, decorrelate and push down; unknown tables and columns become ProgrammingErrors."""
    query = exists_select_one(factor_disjunctions(query))
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    schema = {}
    for name in referenced_tables(query) - ctes:
        schema[name] = catalog.table(name).sql_schema()
    # optimize() would have qualify wrap every joined table in a subquery of its own, for the
    # rules after it to prune and merge back: with qengine's own pushdown that only tripled the
    # rules' time (without it, TPC-DS's 99 plans have the same stages, scans, joins and
    # aggregates; column numbers and renaming projections differ). The query is
    # the planner's own copy (views are copied as they are expanded), so it is not copied again.
    try:
        optimized = optimize(
            query, schema=schema, dialect=dialect, infer_schema=False, rules=_RULES, isolate_tables=False, copy=False
        )
    except sqlglot.errors.OptimizeError as e:
        message = str(e)
        if "could not be resolved" in message or "Unknown" in message or "Ambiguous" in message:
            raise ProgrammingError(message) from e
        raise NotSupportedError(f"cannot plan this query: {message}") from e
    except sqlglot.errors.SqlglotError as e:
        raise ProgrammingError(str(e)) from e
    # The parser's positions on every identifier are not used past this point, and every copy
    # of a node deep-copies them in Python: dropping them makes the planner's copies cheaper.
    for node in optimized.walk():
        node._meta = None
    return optimized
