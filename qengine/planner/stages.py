"""Cut a physical plan at its exchanges into a DAG of stages.

A stage is a fragment (an operator tree whose leaves are scans, inline values or exchange
reads) plus what it writes: an exchange, or the query result. Its tasks are the fragment
applied to each partition of its input: a scan split, or a reducer's share of its shuffles.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import sqlglot.expressions as exp

from qengine.errors import InternalError
from qengine.planner import logical as lp


def partitioned(reads: list[lp.ExchangeRead]) -> list[lp.ExchangeRead]:
    """The reads of one partition per task, not of a whole exchange output (a broadcast, or a
    shared producer's output read whole)."""
    return [r for r in reads if r.kind not in ("broadcast", "once", "whole")]


@dataclass
class RuntimeFilter:
    """A join on a scanned column whose build side's key range lets the scan skip row groups.

    The range is known once a broadcast build side has run (``shuffle_id``); a filtered table
    every task reads whole (``build``) has it computed before the scan is split, which also
    spreads the rows that remain over the tasks evenly: TPC-DS fact tables are laid out by
    date, and a year's rows would otherwise all fall to one task.
    """

    column: str  # the scan's source column
    key: str  # the build side's column
    shuffle_id: int | None = None
    build: lp.Node | None = None


@dataclass
class Stage:
    id: int
    root: lp.Node
    output: lp.Exchange | None
    reads: list[lp.ExchangeRead] = field(default_factory=list)
    # the tables it scans: one, or one per input of a concatenated UNION ALL
    scans: list[lp.Scan] = field(default_factory=list)
    # small tables every task reads whole, where a broadcast of them would have been, and
    # tables of one split each that a one-task stage joins
    replicated: list[lp.Scan] = field(default_factory=list)
    # inner/semi joins of the scan whose build side's key range can prune it
    runtime_filters: list[RuntimeFilter] = field(default_factory=list)

    @property
    def scan(self) -> lp.Scan | None:
        """The table a single-scan stage reads."""
        return self.scans[0] if len(self.scans) == 1 else None

    @property
    def parents(self) -> list[int]:
        """Stages this one reads from (its dependencies)."""
        return sorted({r.shuffle_id for r in self.reads})

    @property
    def partitioned_reads(self) -> list[lp.ExchangeRead]:
        return partitioned(self.reads)


COLUMN_BYTES = 16  # a column value's bytes in a block, for memory admission: 8 for a number, more for a string
MAX_PREDICTED_BYTES = float(1 << 60)


def _predicted_bytes(node: lp.Node) -> int:
    """An estimate's bytes, capped: a cross join's estimate can be astronomically large."""
    estimate = node.est_rows * COLUMN_BYTES * len(node.columns)
    return int(min(estimate, MAX_PREDICTED_BYTES)) if estimate > 0 else 0


@dataclass
class StagePlan:
    stages: list[Stage]
    names: list[str]
    # the Parquet files its fragments may read (catalog.parquet_files)
    readable: tuple[str, ...] = ()
    # the roots the workers check every file they open against (catalog.effective_policy)
    access: dict = field(default_factory=dict)
    # what the user calls its internal columns, and what some compute (``logical.Names``), for EXPLAIN
    labels: dict[str, str] = field(default_factory=dict)
    origins: dict[str, exp.Expression] = field(default_factory=dict)
    # whether it holds the instant its statement read the clock at (``planner.clock``): not a template
    reads_clock: bool = False

    @property
    def result(self) -> Stage:
        return self.stages[-1]

    def held_bytes(self, workers: int) -> int:
        """What the workers are predicted to hold for this plan at once, at most: its
        exchanges' bytes (:meth:`shuffle_bytes`) and its result's. Admission by memory weighs
        it against what the workers' budgets have left (``api.admission``); it is a guess,
        like the estimates it comes from."""
        return self.shuffle_bytes(workers) + _predicted_bytes(self.result.root)

    def shuffle_bytes(self, workers: int) -> int:
        """Every exchange's rows (a broadcast's once per worker), from the planner's row
        estimates at ``COLUMN_BYTES`` a column: whether a query is shuffle-heavy (SAMP)."""
        total = 0
        for stage in self.stages:
            if stage.output is not None:
                total += _predicted_bytes(stage.output) * (workers if stage.output.kind == "broadcast" else 1)
        return total

    def scan_tasks(self, workers: int, split_bytes: int) -> list[tuple[list[dict] | None, int]]:
        """(scan splits or None, task count) per stage, before any run-time change: one task per
        scan split (of the files partition pruning left, ``partition_pruning.prune_plan``), one
        per partition of its input shuffles, or one per task of the shared producer it reads."""
        out: list[tuple[list[dict] | None, int]] = []
        for stage in self.stages:
            if stage.scans:
                splits = [
                    dict(s, branch=b) for b, scan in enumerate(stage.scans) for s in scan.read_source.splits(workers, split_bytes)
                ]
                out.append((splits, max(1, len(splits))))
                continue
            counts = {
                out[r.shuffle_id][1] if r.kind == "materialized" else self.stages[r.shuffle_id].output.partitions
                for r in stage.partitioned_reads
            }
            if len(counts) > 1:
                raise InternalError(f"stage {stage.id} reads shuffles with different partition counts {counts}")
            out.append((None, counts.pop() if counts else 1))
        return out


def cut(root: lp.Node, names: list[str], replicate_bytes: int = 0) -> StagePlan:
    """Split the plan into stages; stage ids are in dependency order, the result stage last.

    A broadcast of a small Parquet table, filtered and projected at most, is not made a stage
    of its own: every task of the consumer reads the table whole instead (up to
    ``replicate_bytes`` of the columns it reads). A broadcast stage costs a task, a round of
    Flight fetches and a stage's latency on the query's critical path; re-reading a table of a
    few MB costs each consumer task a millisecond or two, and DuckDB then pushes the join's
    filters into the fact scan as it would for the broadcast. Nor is a broadcast of a shared
    producer's output, renamed at most: every consumer task reads all of that output, which a
    stage would only have copied (TPC-DS q23 broadcast its two CTEs so, twice each).
    """
    stages: list[Stage] = []
    produced: dict[int, int] = {}
    shared_reads = itertools.count()  # a table name per reader of a shared producer
    read_whole: set[int] = set()  # the shared reads every consumer task reads all of

    def shared_read(node: lp.SharedScan) -> lp.ExchangeRead:
        ex = node.producer
        assert isinstance(ex, lp.Exchange)
        if id(ex) not in produced:
            produced[id(ex)] = make_stage(ex.child, ex)
            ex.shuffle_id = produced[id(ex)]
        sid = produced[id(ex)]
        names = list(node.column_map)
        kind = "whole" if id(node) in read_whole else "materialized"
        read = lp.ExchangeRead(sid, kind, names, f"m{sid}_{next(shared_reads)}", list(node.column_map.values()))
        read.est_rows = node.est_rows
        return read

    def read_of(ex: lp.Exchange, table: str | None = None) -> lp.ExchangeRead:
        sid = make_stage(ex.child, ex)
        ex.shuffle_id = sid
        read = lp.ExchangeRead(sid, "once" if ex.once else ex.kind, list(ex.child.columns), table or f"x{sid}")
        read.est_rows = ex.est_rows
        return read

    def visit(node: lp.Node) -> lp.Node:
        for name, sub in list(node.subqueries.items()):
            if isinstance(sub, lp.Exchange):
                node.subqueries[name] = read_of(sub, name)
        if isinstance(node, lp.SharedScan):
            return shared_read(node)
        children = [below(c) for c in node.children]
        if children:
            node.replace_children(children)
        return node

    def below(child: lp.Node) -> lp.Node:
        """A child in the same stage: itself, a replicated broadcast's input, a broadcast shared
        output read whole, or a read."""
        if not isinstance(child, lp.Exchange):
            return visit(child)
        shared = _shared_broadcast(child)
        if shared is not None:
            read_whole.add(id(shared))
            return visit(child.child)
        return visit(child.child) if _replicate(child, replicate_bytes) else read_of(child)

    def make_stage(fragment: lp.Node, output: lp.Exchange | None) -> int:
        fragment = visit(fragment)
        reads = [n for n in lp.walk(fragment) if isinstance(n, lp.ExchangeRead)]
        every = [n for n in lp.walk(fragment) if isinstance(n, lp.Scan)]
        concat = any(isinstance(n, lp.SetOp) and n.concat for n in lp.walk(fragment))
        scans = [n for n in every if not n.replicated]
        if scans and not concat and all(n.single for n in scans) and (len(scans) > 1 or partitioned(reads)):
            for scan in scans:  # tables of one split each, joined in the stage's one task
                scan.replicated = True
            scans = []
        replicated = [n for n in every if n.replicated]
        if (len(scans) > 1 and not concat) or (scans and partitioned(reads)):
            raise InternalError("a stage would read two differently partitioned inputs")
        for i, scan in enumerate(scans):
            scan.table = lp.SCAN_TABLE if i == 0 else f"{lp.SCAN_TABLE}{i}"
        for i, scan in enumerate(replicated):
            scan.table = f"{lp.SCAN_TABLE}_whole{i}"
        stage = Stage(len(stages), fragment, output, reads, scans, replicated)
        if stage.scan is not None and (output is None or output.kind != "materialize"):
            stage.runtime_filters = _runtime_filters(fragment, stage.scan)
        stages.append(stage)
        return stage.id

    make_stage(root, None)
    return StagePlan(stages, names)


def _replicate(ex: lp.Exchange, limit: int) -> bool:
    """Whether every consumer task should read this broadcast's table whole instead (see
    :func:`cut`); marks the scan so when it should."""
    if ex.kind != "broadcast" or ex.once:  # a table read whole by every task is not read once
        return False
    node = lp.table_read(ex.child)
    if node is None:
        return False
    node.replicated = node.read_bytes <= limit and node.source.whole() is not None
    return node.replicated


def _shared_broadcast(ex: lp.Exchange) -> lp.SharedScan | None:
    """The shared read a broadcast copies as it is (renamed at most), or None."""
    if ex.kind != "broadcast" or ex.once:
        return None
    node = ex.child
    while isinstance(node, lp.Project) and not node.subqueries and all(isinstance(e, exp.Column) for _, e in node.exprs):
        node = node.child
    return node if isinstance(node, lp.SharedScan) and not node.subqueries else None


def _runtime_filters(fragment: lp.Node, scan: lp.Scan) -> list[RuntimeFilter]:
    """Join keys on which the scan can be pruned by the build side's key range: a broadcast's,
    or a filtered whole table's where the scanned column is laid out in ranges (computing the
    range would gain nothing where every row group spans the whole column)."""
    source_of = {internal: source for source, internal in scan.column_map.items()}
    found = []
    for node in lp.walk(fragment):
        if not isinstance(node, lp.Join) or node.kind not in ("inner", "semi"):
            continue
        sides = [(node.right, node.left_keys, node.right_keys)]
        if node.kind == "inner":
            sides.append((node.left, node.right_keys, node.left_keys))
        for build, probe_keys, build_keys in sides:
            broadcast = isinstance(build, lp.ExchangeRead) and build.kind == "broadcast"
            if not (broadcast or _filtered_whole(build)):
                continue
            for probe, key in zip(probe_keys, build_keys, strict=True):
                column = source_of.get(probe.name)
                if column is None or key.name not in build.columns:
                    continue
                if broadcast:
                    found.append(RuntimeFilter(column, key.name, shuffle_id=build.shuffle_id))
                elif scan.source.clustered(column):
                    found.append(RuntimeFilter(column, key.name, build=build))
    return found


def _filtered_whole(node: lp.Node) -> bool:
    """Whether ``node`` filters (and projects) a table every task of the stage reads whole."""
    scan = lp.table_read(node)
    return scan is not None and scan.replicated and any(isinstance(n, lp.Filter) for n in lp.walk(node))


def reads_no_data(plan: StagePlan) -> bool:
    """Whether a plan is one fragment over constants alone (``SELECT 1``, VALUES): it reads no
    table, file or exchange, so the coordinator may run it itself, with no worker (and without
    waiting for a local cluster's workers to start)."""
    if len(plan.stages) != 1:
        return False
    return not any(isinstance(n, lp.Scan | lp.SharedScan | lp.ExchangeRead) for n in lp.walk_query(plan.stages[0].root))
