"""Logical and physical plan operators.

Every operator's output columns carry names that are unique across the whole query ("c17"),
so expressions can refer to columns without qualifiers and fragments can be rendered as nested
DuckDB subqueries without ambiguity. Display names (what the user sees) are kept separately by
the builder. Expressions are sqlglot trees whose column references use these internal names.

A node's ``subqueries`` maps a placeholder table name used inside its expressions (for an
uncorrelated scalar / IN / EXISTS subquery) to the plan that produces it; the physical planner
turns each into a broadcast input of the stage that evaluates the expression.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlglot.expressions as exp

if TYPE_CHECKING:
    from qengine.catalog.sources import Source


class Names:
    """Generates the query-unique internal column names, and keeps what the user calls them.

    EXPLAIN shows a column as the user knows it (``planner.user_names``): ``labels`` holds the
    names the user gave or wrote (``s.cust_id``, an output alias) for the columns that have
    one, and ``origins`` what a column computes where the plan shows a rewritten form of it (a
    final aggregate combining partial ones computes the user's ``sum(amount)``, not a sum of
    sums). Both are recorded where the column is made, since only there is it known.
    """

    def __init__(self) -> None:
        self._counter = itertools.count()
        self.labels: dict[str, str] = {}
        self.origins: dict[str, exp.Expression] = {}

    def new(self, label: str | None = None) -> str:
        """A new column; ``label`` is what the user calls it, unless the planner made it up."""
        name = f"c{next(self._counter)}"
        if label and not made_up(label):
            self.labels[name] = label
        return name


# A name the user did not write: sqlglot's for an unaliased output, a decorrelated subquery or
# a derived table ("_col_0", "_u_1", "_q_0"), or qengine's own ("__sq0", "__parquet_2")
_MADE_UP = re.compile(r"_(col|u|q)_\d+(_lo|_hi)?|__.*")


def made_up(name: str) -> bool:
    """Whether a column or table alias was made up by the planner, not written by the user."""
    return _MADE_UP.fullmatch(name) is not None


# What EXPLAIN calls an aggregate's grouping-set id column (DuckDB's GROUPING_ID over every key)
GROUPING_ID = "grouping_id"

# What a fragment calls the split its (first) scan reads; a concatenated union's others are s1, s2…
SCAN_TABLE = "s"


def col(name: str) -> exp.Column:
    """A reference to an internal column."""
    return exp.column(name)


def plain_column(e: exp.Expression | None) -> str | None:
    """The internal column ``e`` is, when it is one as it stands; None when computed."""
    return e.name if isinstance(e, exp.Column) and not e.table else None


def not_null_operand(e: exp.Expression) -> exp.Expression | None:
    """``x`` when ``e`` is ``NOT x IS NULL`` (how x IS NOT NULL parses); None otherwise."""
    if isinstance(e, exp.Not) and isinstance(e.this, exp.Is) and isinstance(e.this.expression, exp.Null):
        return e.this.this
    return None


@dataclass(eq=False)
class Node:
    """Base operator. ``est_rows`` is the planner's cardinality estimate."""

    est_rows: float = field(default=0.0, init=False)
    subqueries: dict[str, Node] = field(default_factory=dict, init=False)

    @property
    def children(self) -> list[Node]:
        return []

    @property
    def columns(self) -> list[str]:
        raise NotImplementedError

    def replace_children(self, children: list[Node]) -> None:
        """Swap in new children (used by the physical planner when it inserts exchanges)."""
        if children:
            raise NotImplementedError(type(self).__name__)


@dataclass
class PrunedScan:
    """What a hive-partitioned scan reads once its partition filters are applied
    (``planner.partition_pruning``): ``source`` is the table's files they keep."""

    source: Source
    files: int  # the table's
    skipped: int
    filtered: bool  # whether a filter on partition columns was evaluated


@dataclass(eq=False)
class Scan(Node):
    """Reads a catalog source; ``column_map`` maps source column names to internal names."""

    source: Source
    column_map: dict[str, str]
    table: str = SCAN_TABLE  # what the fragment calls the split it reads (see stages.cut)
    # Read whole by every task of its stage, in place of a broadcast of it (see stages.cut).
    replicated: bool = False
    # Read in one task, the table making one split (see PhysicalPlanner._scan).
    single: bool = False
    # Set before a run's splits are made, from the run's own filter values (partition_pruning.prune_plan).
    pruned: PrunedScan | None = None

    @property
    def columns(self) -> list[str]:
        return list(self.column_map.values())

    @property
    def read_source(self) -> Source:
        """The files the scan's tasks read: the table's, less those its partition filters skip."""
        return self.pruned.source if self.pruned is not None else self.source

    @property
    def read_bytes(self) -> float:
        """Bytes of the columns it reads, for the whole table (a size from the catalog, not a guess)."""
        return self.source.rows * sum(self.source.column_width(c) for c in self.column_map)


@dataclass(eq=False)
class SharedScan(Node):
    """Reads the output of a plan computed once for several readers (a CTE used twice or more).

    ``column_map`` maps the producer's columns to this reader's own internal names.
    """

    producer: Node
    column_map: dict[str, str]

    @property
    def columns(self) -> list[str]:
        return list(self.column_map.values())


@dataclass(eq=False)
class Values(Node):
    """Inline rows (VALUES, or the single empty row of a FROM-less SELECT)."""

    rows: exp.Values
    names: list[str]

    @property
    def columns(self) -> list[str]:
        return self.names


@dataclass(eq=False)
class Unary(Node):
    child: Node

    @property
    def children(self) -> list[Node]:
        return [self.child]

    def replace_children(self, children: list[Node]) -> None:
        (self.child,) = children

    @property
    def columns(self) -> list[str]:
        return self.child.columns


@dataclass(eq=False)
class Filter(Unary):
    condition: exp.Expression


@dataclass(eq=False)
class Project(Unary):
    """Computes ``exprs``; with ``passthrough`` it also keeps every child column.

    Pass-through projections stay live: scans allocate columns as the builder resolves them, so
    the child's column list may still grow after the projection is made.
    """

    exprs: list[tuple[str, exp.Expression]]
    passthrough: bool = False

    @property
    def columns(self) -> list[str]:
        own = [name for name, _ in self.exprs]
        return self.child.columns + own if self.passthrough else own

    @property
    def sources(self) -> dict[str, str]:
        """Output column → the input column it passes on unchanged (renamed at most): the plain
        column expressions, and every input column with ``passthrough``."""
        out = {name: source for name, e in self.exprs if (source := plain_column(e)) is not None}
        if self.passthrough:
            out.update({c: c for c in self.child.columns})
        return out

    @property
    def renames(self) -> dict[str, str]:
        """Input column → the output name it is passed on under (see :attr:`sources`)."""
        return {source: name for name, source in self.sources.items()}


@dataclass(eq=False)
class Join(Node):
    """``kind`` is inner, left, right, full, semi, anti or cross. Keys are equi-join pairs."""

    left: Node
    right: Node
    kind: str
    left_keys: list[exp.Expression]
    right_keys: list[exp.Expression]
    residual: exp.Expression | None = None
    # ("left" | "right", that side's filter selectivity) when the join is on that side's key:
    # each row of the other side then matches at most once (see ``estimates.keyed_rows``).
    key: tuple[str, float] | None = None

    @property
    def children(self) -> list[Node]:
        return [self.left, self.right]

    def replace_children(self, children: list[Node]) -> None:
        self.left, self.right = children

    @property
    def columns(self) -> list[str]:
        if self.kind in ("semi", "anti"):
            return self.left.columns
        return self.left.columns + self.right.columns


@dataclass(eq=False)
class Aggregate(Unary):
    """GROUP BY ``keys`` (always bare columns of the child) computing ``aggs``.

    ``grouping_sets`` lists, per grouping set, the indexes of the keys it groups by; with it,
    ``grouping_id`` names an extra output column holding DuckDB's GROUPING_ID over all keys.
    """

    keys: list[tuple[str, exp.Expression]]
    aggs: list[tuple[str, exp.Expression]]
    grouping_sets: list[list[int]] | None = None
    grouping_id: str | None = None
    # "partial" or "final" where the physical planner split it in two phases, for EXPLAIN
    phase: str = ""

    @property
    def columns(self) -> list[str]:
        out = [n for n, _ in self.keys] + [n for n, _ in self.aggs]
        return out + [self.grouping_id] if self.grouping_id else out

    @property
    def sources(self) -> dict[str, str]:
        """Output key column → the input column it groups by (as :attr:`Project.sources`)."""
        return {name: source for name, e in self.keys if (source := plain_column(e)) is not None}


@dataclass(eq=False)
class Window(Unary):
    """Adds window-function columns; every expression shares ``partition_by``.

    ``keep`` is set (by the physical planner) when a filter above keeps only the rows ranked at
    most ``keep`` in their partition by the window's one RANK or DENSE_RANK.
    """

    exprs: list[tuple[str, exp.Expression]]
    partition_by: list[str]
    keep: int | None = None

    @property
    def columns(self) -> list[str]:
        return self.child.columns + [n for n, _ in self.exprs]


@dataclass(eq=False)
class Sort(Unary):
    order: list[exp.Ordered]


@dataclass(eq=False)
class Limit(Unary):
    limit: int | None
    offset: int = 0


@dataclass(eq=False)
class Distinct(Unary):
    pass


@dataclass(eq=False)
class SetOp(Node):
    """UNION / INTERSECT / EXCEPT; ``inputs`` line up positionally with ``names``.

    A ``concat`` UNION ALL runs in the stage of its inputs' scans: each task reads one split of
    one input's table, the other inputs' tables being empty for it (see ``physical._setop``).
    """

    kind: str
    distinct: bool
    inputs: list[Node]
    names: list[str]
    concat: bool = False

    @property
    def children(self) -> list[Node]:
        return self.inputs

    def replace_children(self, children: list[Node]) -> None:
        self.inputs = list(children)

    @property
    def columns(self) -> list[str]:
        return self.names


# ---- physical-only operators -------------------------------------------------------------


@dataclass(eq=False)
class Exchange(Unary):
    """Repartitions its child. ``kind``: hash, range, single, broadcast, roundrobin, or
    materialize (keep each task's output as its own partition, for shared readers).

    ``keys`` are child columns for hash, and for materialize those its partitions are hashed on,
    if any; ``order`` the sort keys for range (the first one drives
    partitioning, the bounds come from a sample). ``partitions`` is the reducer count. A
    broadcast ``once`` is read by one task of its consumer only: a UNION ALL input that joins
    scan splits in their stage (see ``PhysicalPlanner._setop``).
    """

    kind: str
    partitions: int
    keys: list[str] = field(default_factory=list)
    order: list[exp.Ordered] = field(default_factory=list)
    shuffle_id: int = -1
    once: bool = False


@dataclass(eq=False)
class ExchangeRead(Node):
    """The reading side of an exchange inside a consumer stage's fragment; ``kind`` is the
    exchange's, or "once" for a broadcast that only the stage's first task reads."""

    shuffle_id: int
    kind: str
    names: list[str]
    table: str
    aliases: list[str] | None = None

    @property
    def columns(self) -> list[str]:
        return self.aliases or self.names


def evaluated(node: Node) -> list[exp.Expression]:
    """The expressions ``node`` itself evaluates (its subqueries' placeholders are read there)."""
    if isinstance(node, Filter):
        return [node.condition]
    if isinstance(node, Project | Window | Aggregate):
        pairs = node.keys + node.aggs if isinstance(node, Aggregate) else node.exprs
        return [e for _, e in pairs]
    if isinstance(node, Join):
        return [*node.left_keys, *node.right_keys, *([node.residual] if node.residual is not None else [])]
    if isinstance(node, Sort):
        return list(node.order)
    if isinstance(node, Values):
        return [node.rows]
    return []


def walk(node: Node):
    """Pre-order traversal, including subquery plans."""
    yield node
    for child in node.children:
        yield from walk(child)
    for sub in node.subqueries.values():
        yield from walk(sub)


def walk_query(node: Node):
    """Pre-order traversal of the whole query: :func:`walk`, going on into shared producers."""
    for n in walk(node):
        yield n
        if isinstance(n, SharedScan):
            yield from walk_query(n.producer)


def table_read(node: Node) -> Scan | None:
    """The table ``node`` reads when it only filters and projects one table, else None."""
    while isinstance(node, Filter | Project) and not node.subqueries:
        node = node.child
    return node if isinstance(node, Scan) else None
