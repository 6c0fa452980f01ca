"""What a worker is told to do for one task: its fragment's SQL, where each input is read from
(a scan split, or shuffle partitions and the hosts holding them), and what to do with the output."""

from __future__ import annotations

import zlib
from typing import Any

from qengine.planner import logical as lp
from qengine.planner.stages import Stage
from qengine.runtime.query_state import SHUFFLE_KINDS, QueryState, StageRun
from qengine.transport.wire import schema_to_hex


def task_spec(state: QueryState, run: StageRun, index: int, sql: str, form: dict | None) -> dict:
    """The spec of task ``index`` of ``run``, with the SQL rendered for its stage."""
    inputs: list[dict] = []
    stage = run.stage
    if stage.scans:
        assert run.splits is not None
        split = run.splits[index]
        for branch, scan in enumerate(stage.scans):  # a concatenated union's other inputs are empty
            mine = branch == split.get("branch", 0)
            inputs.append(scan_input(scan, split if mine else {"kind": "empty", "schema": schema_to_hex(scan.source.schema)}))
    inputs += [scan_input(scan, scan.source.whole()) for scan in stage.replicated]
    for read in stage.reads:
        source = state.runs[read.shuffle_id]
        sizes = None
        if read.kind == "broadcast" or (read.kind == "once" and index == 0):
            partitions, hosts = [0], sorted(source.holders)
        elif read.kind == "once":  # the first task reads it
            partitions, hosts = [], []
        elif read.kind == "materialized":
            partitions, hosts = [index], [source.placement[index]]
        elif read.kind == "whole":  # every partition of a shared output
            partitions, hosts = list(range(source.tasks)), sorted(source.holders)
        else:
            partitions = run.groups[index] if run.groups is not None else [index]
            located = state.locations(source, partitions)
            # Pull reads every map-output holder; prefetch only where the blocks now are.
            if state.mode == "prefetch" and source.task_bytes:
                hosts = sorted({h for per_host in located.values() for h in per_host})
            else:
                hosts = sorted(source.holders)
            sizes = {str(p): {state.addresses[h]: b for h, b in per_host.items()} for p, per_host in located.items()}
        inputs.append(
            {
                "name": read.table,
                "kind": "shuffle",
                "key": state.key(read.shuffle_id),
                "partitions": partitions,
                "sources": [state.addresses[w] for w in hosts],
                "schema": source.schema,
                "consume": state.mode == "prefetch" and read.kind in SHUFFLE_KINDS,
                "sizes": sizes,
            }
        )
    spec = {
        "query": state.query_id,
        "stage": stage.id,
        "task": index,
        "sql": sql,
        "direct": form,
        "inputs": inputs,
        "readable": state.plan.readable if stage.scans or stage.replicated else (),
        "access": state.plan.access,
        "build_sides": duckdb_builds(stage),
        "output": output_spec(state, run, index),
    }
    if run.null_columns:
        spec["null_columns"] = sorted(run.null_columns)
    return spec


def output_spec(state: QueryState, run: StageRun, index: int) -> dict:
    """Where task ``index``'s output goes: a shuffle's partitions, or out of the query."""
    ex = run.stage.output
    if ex is None:
        spec = dict(state.output_override or {"kind": "result", "key": f"{state.query_id}/result"})
        if spec["kind"] == "table":
            spec["key"] = f"{spec['key']}/{index}"
        return spec
    spec: dict[str, Any] = {
        "kind": ex.kind,
        "key": state.key(run.stage.id),
        "partitions": ex.partitions,
        "mode": state.mode,
    }
    if ex.kind == "hash":
        spec["keys"] = ex.keys
    elif ex.kind == "range":
        spec["sample_key"] = ex.order[0].this.name
        spec["samples"] = state.options.samples_per_partition * ex.partitions
        spec["seed"] = zlib.crc32(f"{run.stage.id}/{index}".encode())
    return spec


def map_spec(run: StageRun, spec: dict) -> dict:
    """A range map task's spec as it starts: with the bounds and hosts once they are known."""
    inline = run.inline
    return spec if inline is None else dict(spec, output=dict(spec["output"], finalize=inline))


def duckdb_builds(stage: Stage) -> bool:
    """Whether DuckDB picks the fragment's hash join build sides (``sandbox.connection.safe_connection``).

    It reads a Parquet scan's size, with its filters' and join filters' effect, where the
    planner has only guesses: q16 joins a 61-day date range to the catalog sales of one state
    and call center county, which the planner guessed the smaller, and only building on the
    dates lets their key range prune the sales scan's row groups (5 times faster). It takes an
    Arrow input for one row, which is about right only for a broadcast (at most the broadcast
    threshold), so it decides where every exchange read is one and some input is a scan; the
    renderer, from actual sizes, decides elsewhere.
    """
    return bool(stage.scans or stage.replicated) and all(read.kind == "broadcast" for read in stage.reads)


def scan_input(scan: lp.Scan, split: dict | None) -> dict:
    """A task's input that reads ``split`` of a scanned table."""
    return {"name": scan.table, "kind": "scan", "split": split, "columns": list(scan.column_map.items())}
