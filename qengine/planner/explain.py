"""EXPLAIN output: the stage DAG, each stage's operators, exchanges and task counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qengine.planner import logical as lp
from qengine.planner.partition_pruning import prune_plan
from qengine.planner.stages import Stage, StagePlan

if TYPE_CHECKING:
    from qengine.runtime.stats import QueryStats


def _sql(e) -> str:
    return e.sql(dialect="duckdb")


def describe(node: lp.Node) -> str:
    """One line for an operator."""
    if isinstance(node, lp.Scan):
        cols = ", ".join(f"{s} AS {i}" for s, i in node.column_map.items())
        pruned = node.pruned
        files = (
            f" files: {pruned.files - pruned.skipped} of {pruned.files} ({pruned.skipped} skipped by partition filter)"
            if pruned is not None and pruned.filtered else ""
        )
        return f"Scan {node.source.name} [{cols}]" + (" whole, in every task" if node.replicated else "") + files
    if isinstance(node, lp.Values):
        return f"Values {len(node.rows.expressions)} row(s)"
    if isinstance(node, lp.ExchangeRead):
        kind = {"once": "broadcast, first task only", "whole": "materialized, whole, in every task"}.get(node.kind, node.kind)
        return f"ExchangeRead stage {node.shuffle_id} ({kind}) as {node.table}"
    if isinstance(node, lp.Filter):
        return f"Filter {_sql(node.condition)}"
    if isinstance(node, lp.Project):
        return "Project " + ("*, " if node.passthrough else "") + ", ".join(f"{_sql(e)} AS {n}" for n, e in node.exprs)
    if isinstance(node, lp.Join):
        keys = " AND ".join(f"{_sql(a)} = {_sql(b)}" for a, b in zip(node.left_keys, node.right_keys, strict=True))
        residual = f" residual {_sql(node.residual)}" if node.residual is not None else ""
        return f"Join {node.kind.upper()} {keys}{residual}".rstrip()
    if isinstance(node, lp.Aggregate):
        keys = ", ".join(f"{_sql(e)} AS {n}" for n, e in node.keys)
        aggs = ", ".join(f"{_sql(e)} AS {n}" for n, e in node.aggs)
        sets = f" grouping sets {node.grouping_sets}" if node.grouping_sets is not None else ""
        return f"Aggregate keys [{keys}] aggs [{aggs}]{sets}"
    if isinstance(node, lp.Window):
        return "Window " + ", ".join(f"{_sql(e)} AS {n}" for n, e in node.exprs)
    if isinstance(node, lp.Sort):
        return "Sort " + ", ".join(_sql(o) for o in node.order)
    if isinstance(node, lp.Limit):
        return f"Limit {node.limit} offset {node.offset}"
    if isinstance(node, lp.Distinct):
        return "Distinct"
    if isinstance(node, lp.SetOp):
        return f"{node.kind.upper()}{'' if node.distinct else ' ALL'}"
    return type(node).__name__


def operator_lines(root: lp.Node) -> list[str]:
    """A stage's operators, one line each, indented two spaces a level below ``root``."""
    out: list[str] = []
    _tree(root, 0, out)
    return out


def exchange_target(stage: Stage) -> str:
    """Where a stage's output goes: the result, or its exchange with its keys and partitions."""
    ex = stage.output
    if ex is None:
        return "result"
    if ex.kind == "hash":
        return f"hash exchange on ({', '.join(ex.keys)}) into {ex.partitions} partitions"
    if ex.kind == "range":
        return f"range exchange on ({', '.join(_sql(o) for o in ex.order)}) into {ex.partitions} partitions"
    if ex.kind == "materialize":
        return "materialized for its readers (computed once)"
    if ex.kind == "broadcast":
        return "broadcast exchange to " + ("the first reading task" if ex.once else "every reading task")
    return f"{ex.kind} exchange into {ex.partitions} partition(s)"


def _tree(node: lp.Node, depth: int, out: list[str]) -> None:
    out.append("  " * depth + describe(node))
    for name, sub in node.subqueries.items():
        out.append("  " * (depth + 1) + f"subquery {name} ← {describe(sub)}")
    for child in node.children:
        _tree(child, depth + 1, out)


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


def explain_lines(plan: StagePlan, workers: int, split_bytes: int, stats: QueryStats | None = None) -> list[str]:
    """The stage DAG, result stage first; with ``stats`` (EXPLAIN ANALYZE) rows, bytes and times."""
    lines: list[str] = []
    prune_plan(plan)
    counts = [tasks for _, tasks in plan.scan_tasks(workers, split_bytes)]
    for stage in reversed(plan.stages):
        tasks = counts[stage.id]
        target = exchange_target(stage)
        deps = f" reads stages {stage.parents}" if stage.parents else ""
        lines.append(f"Stage {stage.id}: {tasks} task(s) → {target}{deps}")
        if stats is not None:
            s = stats.stages[stage.id].as_dict()
            lines.append(
                f"  [actual] tasks={s['tasks']} rows={s['rows']} bytes={s['bytes']} "
                f"shuffled={s['shuffle_bytes']} time={s['seconds']:.3f}s" + (f" stolen={s['stolen']}" if s.get("stolen") else "")
            )
            shuffle = next((x.as_dict() for x in stats.shuffles if x.stage == stage.id), None)
            if shuffle is not None:
                lines.append("  [shuffle] " + shuffle_summary(shuffle))
        _tree(stage.root, 1, lines)
    if stats is not None:
        lines.append(
            f"Total: {stats.seconds:.3f}s, {stats.tasks} tasks, {stats.shuffle_bytes} bytes shuffled, "
            f"{stats.spilled_bytes} bytes spilled"
        )
        lines.append(stats.recovery.summary())
        if stats.sharing.any():
            lines.append(stats.sharing.summary())
    return lines
