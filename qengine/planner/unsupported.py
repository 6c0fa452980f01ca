"""Constructs the planner does not model, refused before planning.

The planner builds its operators from a fixed set of sqlglot nodes; sqlglot parses much more.
A node it has no rule for must not fall through to a near relative that gives another answer
(an ASOF join planned as an inner join with a residual ``>=`` returned 900 times DuckDB's rows),
so every such construct is refused here, by name, before the optimizer can rewrite it away.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.errors import NotSupportedError
from qengine.planner.expressions import calls_volatile

# Join methods the planner models: none (an ordinary join), and NATURAL, which the optimizer's
# qualification turns into an equi-join on the shared columns. Any other (ASOF, POSITIONAL, …)
# is refused.
_MODELLED_JOIN_METHODS = frozenset({"", "NATURAL"})


# DuckDB's unnest() of a STRUCT makes a column of each field, where the planner gives every
# SELECT item one column: its result could not be laid out ("zip() argument 2 is shorter").
_STRUCT_UNNEST = "unnest() of a STRUCT (select its fields one by one: s.a, s.b)"


def _struct(e: exp.Expression) -> bool:
    """Whether ``e`` is written as a STRUCT: a {'a': …} literal, struct_pack() or row()."""
    return isinstance(e, exp.Struct) or (isinstance(e, exp.Anonymous) and e.name.lower() == "row")


def struct_unnest_refused(columns: int, names: list[str]) -> None:
    """Raise NotSupportedError if a result of ``columns`` columns was planned as ``names``: a
    STRUCT unnest()ed from a column the plan does not know for one made a column per field."""
    if columns != len(names):
        raise NotSupportedError(f"{_STRUCT_UNNEST} is not supported")


def _construct(node: exp.Expression) -> str | None:
    """The user's name for ``node`` if the planner does not model it, else None."""
    if isinstance(node, exp.Join):
        method = (node.args.get("method") or "").upper()
        return None if method in _MODELLED_JOIN_METHODS else f"{method} JOIN"
    if isinstance(node, exp.TableSample):
        return "TABLESAMPLE / USING SAMPLE"
    if isinstance(node, exp.Pivot):
        return "UNPIVOT" if node.args.get("unpivot") else "PIVOT"
    if isinstance(node, exp.Lateral):
        return "LATERAL"
    if isinstance(node, exp.MatchRecognize):
        return "MATCH_RECOGNIZE"
    if isinstance(node, exp.Connect):
        return "CONNECT BY"
    if isinstance(node, exp.Explode | exp.Unnest) and any(_struct(a) for a in [node.this, *node.expressions] if a is not None):
        return _STRUCT_UNNEST
    if isinstance(node, exp.Anonymous) and node.name.lower() in ("alias", "current_query"):
        # each reads what DuckDB was given: the planner's own names and rewritten fragment
        return f"{node.name.lower()}()"
    if isinstance(node, exp.Anonymous) and node.name.lower() == "setseed":
        # each task draws from its own worker's generator: a seed set by one statement does
        # not reach the next statement's tasks, and random() did not repeat after it
        return "setseed()"
    if isinstance(node, exp.CTE) and node.args.get("materialized") is False and calls_volatile(node.this):
        # DuckDB computes such a CTE anew at each reference (a random() differs between them);
        # qengine computes a CTE once
        return "NOT MATERIALIZED on a CTE calling random(), uuid() or the like"
    if isinstance(node, exp.DateBin) and isinstance(node.args.get("unit"), exp.Var):
        # sqlglot reads the zone as a bare word, upper-cased: DuckDB looked up a column AMERICA
        return "time_bucket() with a time zone (bucket timezone(zone, ts) and convert back)"
    if isinstance(node, exp.Collate):
        # a collation is the expression's own: the rows it makes cross exchanges as plain strings,
        # where partitions hash, sort and compare them byte by byte ('A' and 'a' hashed apart
        # under NOCASE, a merged min() took 'B' over 'a')
        return "COLLATE (compare lower(x) or strip_accents(x) instead)"
    return _clause(node)


def _clause(node: exp.Expression) -> str | None:
    """Clauses sqlglot keeps as arguments of nodes the planner does model, but which it ignores:
    dropping them would change the answer (``LIMIT 10 PERCENT`` returned 10 rows)."""
    if isinstance(node, exp.Limit | exp.Fetch):
        options = node.args.get("limit_options")
        if options is not None and options.args.get("percent"):
            return "LIMIT … PERCENT"
        if options is not None and options.args.get("with_ties"):
            return "FETCH … WITH TIES"
        if node.expressions:
            return "LIMIT … BY"
    if isinstance(node, exp.Ordered) and is_order_by_all(node) and not isinstance(node.parent.parent, exp.Select | exp.SetOperation):
        return "ORDER BY ALL outside a query's own ORDER BY"  # a window's or an aggregate's
    if isinstance(node, exp.Select) and node.args.get("having") and isinstance(node.args.get("group"), exp.Group) and node.args["group"].args.get("all"):
        # DuckDB also groups by the columns HAVING reads outside aggregates (``HAVING a % 2 <> 1``
        # makes a group of each a), which the planner does not model
        return "GROUP BY ALL with HAVING (list the grouping keys)"
    if isinstance(node, exp.Columns):
        return "COLUMNS(...)"
    if isinstance(node, exp.SetOperation) and node.args.get("by_name"):
        # sqlglot also parses INTERSECT / EXCEPT BY NAME, which DuckDB does not: refused alike
        return f"{type(node).__name__.upper()} BY NAME"
    return None


def refuse_unmodelled(statement: exp.Expression) -> None:
    """Raise NotSupportedError naming the first construct of ``statement`` the planner does not model."""
    for node in statement.walk():
        name = _construct(node)
        if name is not None:
            raise NotSupportedError(f"{name} is not supported")


def is_order_by_all(term: exp.Ordered) -> bool:
    """Whether ``term`` is DuckDB's ``ORDER BY ALL`` (every select item, left to right)."""
    return isinstance(term.this, exp.Var) and term.this.name.upper() == "ALL"
