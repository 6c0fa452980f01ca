"""EXPLAIN output: the stage DAG, each stage's operators, exchanges and task counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qengine.planner import logical as lp
from qengine.planner.partition_pruning import prune_plan
from qengine.planner.stages import Stage, StagePlan
from qengine.planner.user_names import UserNames

if TYPE_CHECKING:
    from qengine.runtime.stats import QueryStats, StageStats


def describe(node: lp.Node, names: UserNames) -> str:
    """One line for an operator, its columns in the user's words."""
    sql = names.sql
    if isinstance(node, lp.Scan):
        cols = ", ".join(names.name(i) for i in node.column_map.values())
        pruned = node.pruned
        files = (
            f" files: {pruned.files - pruned.skipped} of {pruned.files} ({pruned.skipped} skipped by partition filter)"
            if pruned is not None and pruned.filtered else ""
        )
        return f"Scan {node.source.written or node.source.name} [{cols}]" + (" whole, in every task" if node.replicated else "") + files
    if isinstance(node, lp.Values):
        return f"Values {len(node.rows.expressions)} row(s)"
    if isinstance(node, lp.ExchangeRead):
        kind = {"once": "broadcast, first task only", "whole": "materialized, whole, in every task"}.get(node.kind, node.kind)
        return f"ExchangeRead stage {node.shuffle_id} ({kind})"  # not the table name its fragment's SQL gives it
    if isinstance(node, lp.Filter):
        return f"Filter {sql(node.condition)}"
    if isinstance(node, lp.Project):
        return "Project " + ("*, " if node.passthrough else "") + ", ".join(names.output(n, e) for n, e in node.exprs)
    if isinstance(node, lp.Join):
        keys = " AND ".join(f"{sql(a)} = {sql(b)}" for a, b in zip(node.left_keys, node.right_keys, strict=True))
        residual = f"residual {sql(node.residual)}" if node.residual is not None else ""
        return " ".join(part for part in (f"Join {node.kind.upper()}", keys, residual) if part)
    if isinstance(node, lp.Aggregate):
        keys = ", ".join(names.output(n, e) for n, e in node.keys)
        # a final phase combines the partial results: shown as the aggregate the user wrote
        aggs = ", ".join(names.name(n) if node.phase == "final" else names.output(n, e) for n, e in node.aggs)
        sets = f" grouping sets {node.grouping_sets}" if node.grouping_sets is not None else ""
        phase = f" ({node.phase})" if node.phase else ""
        return f"Aggregate{phase} keys [{keys}] aggs [{aggs}]{sets}"
    if isinstance(node, lp.Window):
        return "Window " + ", ".join(names.output(n, e) for n, e in node.exprs)
    if isinstance(node, lp.Sort):
        return "Sort " + ", ".join(sql(o) for o in node.order)
    if isinstance(node, lp.Limit):
        return f"Limit {node.limit} offset {node.offset}"
    if isinstance(node, lp.Distinct):
        return "Distinct"
    if isinstance(node, lp.SetOp):
        return f"{node.kind.upper()}{'' if node.distinct else ' ALL'}"
    return type(node).__name__


def operator_lines(root: lp.Node, names: UserNames) -> list[str]:
    """A stage's operators, one line each, indented two spaces a level below ``root``."""
    out: list[str] = []
    _tree(root, 0, out, names)
    return out


def exchange_target(stage: Stage, names: UserNames) -> str:
    """Where a stage's output goes: the result, or its exchange with its keys and partitions."""
    ex = stage.output
    if ex is None:
        return "result"
    if ex.kind == "hash":
        return f"hash exchange on ({', '.join(names.name(k) for k in ex.keys)}) into {ex.partitions} partitions"
    if ex.kind == "range":
        return f"range exchange on ({', '.join(names.sql(o) for o in ex.order)}) into {ex.partitions} partitions"
    if ex.kind == "materialize":
        return "materialized for its readers (computed once)"
    if ex.kind == "broadcast":
        return "broadcast exchange to " + ("the first reading task" if ex.once else "every reading task")
    return f"{ex.kind} exchange into {ex.partitions} partition(s)"


def _tree(node: lp.Node, depth: int, out: list[str], names: UserNames) -> None:
    out.append("  " * depth + describe(node, names))
    for sub in node.subqueries.values():
        out.append("  " * (depth + 1) + f"subquery ← {describe(sub, names)}")
    for child in node.children:
        _tree(child, depth + 1, out, names)


def shuffle_summary(s: dict) -> str:
    """One line of a shuffle's metrics (as ``ShuffleStats.as_dict`` gives them)."""
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    return (
        f"mode={s['mode']} placement={s['placement']} prediction error max={pct(s['prediction_max_error'])} "
        f"mean={pct(s['prediction_mean_error'])} remote={s['remote_bytes']} local={s['local_bytes']} "
        f"load max/mean={s['host_load_max_over_mean']} (round-robin {s['round_robin_load_max_over_mean']}) "
        f"reducer wait={s['reducer_read_wait_seconds']:.3f}s push tail={s['push_tail_seconds']:.3f}s "
        f"prefetch hits={s['prefetch_hits']}/{s['blocks']}" + (f" ({s['push_decision']})" if s.get("push_decision") else "")
    )


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def task_counts(s: StageStats) -> str:
    """A stage's planned and actual task counts, and why they are what they are: how its scan
    was split, the files a partition filter skipped, the row groups a join's key ranges did,
    the reduce partitions coalesced into fewer tasks, or the shared output it follows."""
    why = []
    if s.split_by:
        why.append(f"split into {s.planned_tasks} by {s.split_by}")
    if s.files_skipped:
        why.append(f"{s.files_skipped} of {s.files} files skipped by partition filter")
    if s.row_groups_pruned:
        why.append(f"{s.row_groups_pruned} of {s.row_groups} row groups pruned by key ranges, the rest re-split into {s.tasks}")
    if s.partitions_read > s.tasks:
        why.append(f"{s.partitions_read} reduce partitions coalesced into {s.tasks}, each task reading up to {_size(s.coalesce_bytes)}")
    if s.follows is not None and s.tasks != s.planned_tasks:
        why.append(f"one per partition of stage {s.follows}'s shared output, cut to {s.tasks}")
    return f"{s.planned_tasks} planned, {s.tasks} run" + (f" ({'; '.join(why)})" if why else "")


def explain_lines(plan: StagePlan, workers: int, split_bytes: int, stats: QueryStats | None = None) -> list[str]:
    """The stage DAG, result stage first; with ``stats`` (EXPLAIN ANALYZE) rows, bytes and times."""
    lines: list[str] = []
    names = UserNames(plan)
    if stats is None:  # the tasks it would be planned with
        prune_plan(plan)
        counts = [tasks for _, tasks in plan.scan_tasks(workers, split_bytes)]
    else:  # the run pruned and split it already
        counts = [s.planned_tasks for s in stats.stages]
    for stage in reversed(plan.stages):
        tasks = counts[stage.id]
        target = exchange_target(stage, names)
        deps = f" reads stages {stage.parents}" if stage.parents else ""
        lines.append(f"Stage {stage.id}: {tasks} task(s) → {target}{deps}")
        if stats is not None:
            s = stats.stages[stage.id].as_dict()
            lines.append(
                f"  [actual] tasks={s['tasks']} rows={s['rows']} bytes={s['bytes']} "
                f"shuffled={s['shuffle_bytes']} time={s['seconds']:.3f}s" + (f" stolen={s['stolen']}" if s.get("stolen") else "")
            )
            lines.append("  [tasks] " + task_counts(stats.stages[stage.id]))
            shuffle = next((x.as_dict() for x in stats.shuffles if x.stage == stage.id), None)
            if shuffle is not None:
                lines.append("  [shuffle] " + shuffle_summary(shuffle))
        _tree(stage.root, 1, lines, names)
    if stats is not None:
        lines.append(
            f"Total: {stats.seconds:.3f}s, {stats.tasks} tasks, {stats.shuffle_bytes} bytes shuffled, "
            f"{stats.spilled_bytes} bytes spilled"
        )
        lines.append(stats.recovery.summary())
        if stats.sharing.any():
            lines.append(stats.sharing.summary())
    return lines
