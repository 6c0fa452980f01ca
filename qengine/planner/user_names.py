"""The plan's internal columns ("c17") in the user's words, for EXPLAIN and for error messages.

Every operator's columns have query-unique internal names (``planner.logical``), which mean
nothing to the user. A column is shown as what the user called it where the builder recorded
that (``s.cust_id``, an output alias: ``Names.labels``), else as the expression that computes
it, its own columns shown the same way (``sum(s.amount)``): an intermediate column the user
never named is still said in terms of the columns they did.
"""

from __future__ import annotations

import re

import sqlglot.expressions as exp

from qengine.planner import logical as lp
from qengine.planner.stages import StagePlan

# An internal column name, as ``logical.Names`` makes them
INTERNAL = re.compile(r"c\d+")
UNNAMED = "(an unnamed column)"
# An internal column in a DuckDB message: "... when casting from source column c3", or quoted.
_MESSAGE_COLUMN = re.compile(r'(?<=column )(c\d+)\b|"(c\d+)"')
# A column's table qualifier ("s." of "s.amount")
_QUALIFIER = re.compile(r"(?<![\w.'\"])[A-Za-z_]\w*\.(?=[A-Za-z_\"])")


class UserNames:
    """What the user calls each internal column of ``plan``.

    ``qualified`` shows a table's column with the alias it was read through (``s.amount``), as
    EXPLAIN does, where several tables may have a column of that name, and an output column by
    its alias; without it, a table's column is its bare name (``amount``) and any other column
    its expression, as DuckDB's own error messages name a source column.
    """

    def __init__(self, plan: StagePlan, qualified: bool = True) -> None:
        self._labels = dict(plan.labels) if qualified else {}
        # the result's columns as the user spelled their aliases ("Customer Id"; the optimizer lower-cases them)
        for internal, shown in zip(plan.result.root.columns, plan.names, strict=False):
            if qualified and self._labels.get(internal, "").lower() == shown.lower():
                self._labels[internal] = shown
        self._columns: dict[str, str] = {}  # internal name → a table's column
        self._computed: dict[str, exp.Expression] = dict(plan.origins)  # internal name → its expression
        for node in (n for stage in plan.stages for n in lp.walk(stage.root)):
            if isinstance(node, lp.Scan):
                self._columns.update({internal: source for source, internal in node.column_map.items()})
            elif isinstance(node, lp.SharedScan):
                self._add({own: lp.col(producer) for producer, own in node.column_map.items()})
            elif isinstance(node, lp.Project | lp.Window):
                self._add(dict(node.exprs))
            elif isinstance(node, lp.Aggregate):
                self._add(dict(node.keys + node.aggs))
            elif isinstance(node, lp.ExchangeRead) and node.aliases:
                self._add({alias: lp.col(name) for alias, name in zip(node.aliases, node.names, strict=True)})
            elif isinstance(node, lp.SetOp) and node.inputs:
                self._add({name: lp.col(first) for name, first in zip(node.names, node.inputs[0].columns, strict=False)})
        # an uncorrelated subquery's placeholder table ("__sq0") → the stage that computes it
        self._subqueries = {
            name: f"stage {read.shuffle_id}"
            for stage in plan.stages for node in lp.walk(stage.root) for name, read in node.subqueries.items()
            if isinstance(read, lp.ExchangeRead)
        }
        self._shown: dict[str, str] = {}

    def _add(self, exprs: dict[str, exp.Expression]) -> None:
        # what a column computes as the user wrote it (``Names.origins``) wins over the plan's form
        for name, e in exprs.items():
            self._computed.setdefault(name, e)

    def name(self, internal: str) -> str:
        """The user's name for an internal column, or the expression that computes it."""
        if internal not in self._shown:
            self._shown[internal] = UNNAMED  # a cycle of renames (there should be none) ends here
            self._shown[internal] = self._name(internal)
        return self._shown[internal]

    def _name(self, internal: str) -> str:
        if internal in self._labels:
            return self._labels[internal]
        if internal in self._columns:
            return self._columns[internal]
        e = self._computed.get(internal)
        if e is None:  # a column of inline VALUES, say, has no name to give
            return UNNAMED
        return self.sql(e)

    def sql(self, e: exp.Expression) -> str:
        """An expression over internal columns, over the user's instead."""
        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and INTERNAL.fullmatch(n.name):
                return exp.column(self.name(n.name), quoted=False)
            if isinstance(n, exp.Table) and n.name in self._subqueries:
                return exp.table_(self._subqueries[n.name], quoted=False)
            return n

        return e.transform(visit).sql(dialect="duckdb", normalize_functions="lower")

    def output(self, internal: str, e: exp.Expression) -> str:
        """An operator's output column and what computes it: ``sum(s.amount) AS total``, or
        only the expression where the name would repeat it (``s.cust_id`` as ``cust_id``)."""
        computed = self.sql(e)
        if internal not in self._labels:
            return computed
        label = self._labels[internal]
        # the name DuckDB gives an unaliased expression (``frontend.name_outputs``) is the expression
        bare = _QUALIFIER.sub("", computed).lower().replace("count(*)", "count_star()")
        written = {label.lower(), _QUALIFIER.sub("", label).lower()}
        return computed if bare in written or f"({bare})" in written else f"{computed} AS {label}"


def with_user_columns(message: str, plan: StagePlan) -> str:
    """A worker's error message with the plan's internal column names ("c17") replaced by what
    the user wrote: a table's column, or the expression that computes it (as DuckDB names
    them: ``when casting from source column price``)."""
    if not _MESSAGE_COLUMN.search(message):
        return message
    names = UserNames(plan, qualified=False)
    return _MESSAGE_COLUMN.sub(lambda m: names.name(m.group(1)) if m.group(1) else f'"{names.name(m.group(2))}"', message)

