"""The statement's clock, read once.

DuckDB's ``now()``, ``current_timestamp``, ``current_date`` and their kin are the time the
statement's transaction started: the same in every row. A fragment runs in a transaction of
its own on its worker, so each task read a clock of its own: a statement of ten tasks saw ten
``now()``\\ s, and a self-join on ``now()`` matched nothing. The planner reads the clock once per
statement and writes that instant in place of each call, as the TIMESTAMP WITH TIME ZONE
literal ``now()`` is; the others are DuckDB's casts of it, which each worker makes in its own
time zone as DuckDB would. A plan holding the instant is not kept as a template: the next run
of its statement reads the clock again.
"""

from __future__ import annotations

import datetime as dt

import sqlglot.expressions as exp

# Calls that are the transaction's start instant, by sqlglot's node or by the name of the
# function sqlglot does not know (an Anonymous call)
_INSTANT_NAMES = frozenset({"now", "get_current_timestamp", "transaction_timestamp"})
# Calls that are a cast of that instant: DuckDB's own definitions of them (TIME needs a TIMESTAMP first)
_CASTS: dict[type[exp.Expression], tuple[str, ...]] = {
    exp.CurrentTimestamp: (),
    exp.CurrentDate: ("DATE",),
    exp.Localtimestamp: ("TIMESTAMP",),
    exp.Localtime: ("TIMESTAMP", "TIME"),
    exp.CurrentTime: ("TIMETZ",),
}


def read_clock_once(statement: exp.Expression) -> bool:
    """Replace each call reading the statement's clock in ``statement`` with the one instant
    read now (see the module docstring); returns whether there was any."""
    calls = [n for n in statement.walk() if _casts(n) is not None or _age_of_one(n)]
    if not calls:
        return False
    now = dt.datetime.now(dt.UTC)
    instant = now.strftime("%Y-%m-%d %H:%M:%S.%f+00")

    def at(*types: str) -> exp.Expression:
        value: exp.Expression = exp.cast(exp.Literal.string(instant), exp.DataType.build("TIMESTAMPTZ"))
        for kind in types:
            value = exp.cast(value, exp.DataType.build(kind, dialect="duckdb"))
        return value

    for node in calls:
        if _age_of_one(node):
            node.replace(exp.Anonymous(this="age", expressions=[_midnight(node.expressions[0], at("DATE", "TIMESTAMP"), now), node.expressions[0]]))
        else:
            node.replace(at(*_casts(node)))
    return True


def _casts(node: exp.Expression) -> tuple[str, ...] | None:
    """The casts of the instant that ``node`` is, or None when it does not read the clock."""
    if isinstance(node, exp.Anonymous) and node.name.lower() in _INSTANT_NAMES and not node.expressions:
        return ()
    return _CASTS.get(type(node))


def _midnight(x: exp.Expression, local: exp.Expression, now: dt.datetime) -> exp.Expression:
    """What DuckDB's ``age(x)`` counts from: midnight of the current date in the session's zone
    for a TIMESTAMP WITH TIME ZONE, and of the current date in UTC for a TIMESTAMP or a DATE
    (the local date was a day off wherever it differed from UTC's)."""
    utc = exp.cast(exp.Literal.string(now.strftime("%Y-%m-%d")), exp.DataType.build("TIMESTAMP"))
    zoned = exp.EQ(this=exp.Anonymous(this="typeof", expressions=[x.copy()]), expression=exp.Literal.string("TIMESTAMP WITH TIME ZONE"))
    return exp.Case(ifs=[exp.If(this=zoned, true=local)], default=utc)


def _age_of_one(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() == "age" and len(node.expressions) == 1
