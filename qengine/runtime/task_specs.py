"""What a worker is told to do for one task: its fragment's SQL, where each input is read from
(a scan split, or shuffle partitions and the hosts holding them), and what to do with the output."""

from __future__ import annotations

import zlib
from typing import Any

from qengine.planner import logical as lp
from qengine.planner.stages import Stage
from qengine.runtime.query_state import SHUFFLE_KINDS, QueryState, StageRun
from qengine.transport.wire import schema_to_hex


def pinned_blocks(state: QueryState, source: StageRun, partitions: list[int], avoid: frozenset[int] = frozenset()) -> tuple[dict, dict]:
    """The exact blocks a reader of ``partitions`` of ``source`` reads: per partition, per
    holder, the (map task, attempt) pairs (see ``BlockStore.get``), and their bytes per holder
    (for the fetch limiter). One attempt per map task, the committed one; read from its copy
    (``StageRun.backups``) where its holder is in ``avoid`` and the copy's is not."""
    blocks: dict[str, dict[str, list[list[int]]]] = {}
    sizes: dict[str, dict[str, int]] = {}
    unusable = avoid | state.lost  # where a copy may not be read from
    for p in partitions:
        for task, (host, attempt, nbytes, _) in sorted(source.blocks.get(p, {}).items()):
            holder = source.copy_holder(p, task, attempt, unusable) if host in avoid else None
            host = host if holder is None else holder
            address = state.addresses[host]
            blocks.setdefault(str(p), {}).setdefault(address, []).append([task, attempt])
            per_host = sizes.setdefault(str(p), {})
            per_host[address] = per_host.get(address, 0) + nbytes
    return blocks, sizes


def consumes(state: QueryState, read: lp.ExchangeRead, speculative: bool) -> bool:
    """Whether a task attempt retires the shuffle blocks it read once its output is made
    (``TaskRunner._retire_read``): in prefetch mode, where they are held in memory, unless it is
    a speculative copy, which leaves them to the attempt it races."""
    return state.mode == "prefetch" and read.kind in SHUFFLE_KINDS and not speculative


def task_spec(
    state: QueryState, run: StageRun, index: int, attempt: int, sql: str, form: dict | None, speculative: bool = False
) -> dict:
    """The spec of one attempt of task ``index`` of ``run``, with the SQL rendered for its stage."""
    inputs: list[dict] = []
    stage = run.stage
    # A speculative copy races a straggler: it reads what the straggler holds from copies kept
    # elsewhere, as the straggler is slow to serve them and drops those it has loaded (``consume``).
    avoid = frozenset(w for w, _, _ in run.running.get(index, {}).values()) if speculative else frozenset()
    if stage.scans:
        assert run.splits is not None
        split = run.splits[index]
        for branch, scan in enumerate(stage.scans):  # a concatenated union's other inputs are empty
            mine = branch == split.get("branch", 0)
            inputs.append(scan_input(scan, split if mine else {"kind": "empty", "schema": schema_to_hex(scan.source.schema)}))
    inputs += [scan_input(scan, scan.read_source.whole()) for scan in stage.replicated]
    for read in stage.reads:
        source = state.runs[read.shuffle_id]
        if read.kind == "broadcast" or (read.kind == "once" and index == 0):
            partitions = [0]
        elif read.kind == "once":  # the first task reads it
            partitions = []
        elif read.kind == "materialized":
            partitions = [index]
        elif read.kind == "whole":  # every partition of a shared output
            partitions = list(range(source.tasks))
        else:
            partitions = run.partitions_of(index)
        blocks, sizes = pinned_blocks(state, source, partitions, avoid)
        inputs.append(
            {
                "name": read.table,
                "kind": "shuffle",
                "key": state.key(read.shuffle_id),
                "partitions": partitions,
                "blocks": blocks,
                "schema": source.schema,
                "consume": consumes(state, read, speculative),
                "sizes": sizes,
            }
        )
    spec = {
        "query": state.query_id,
        "stage": stage.id,
        "task": index,
        "attempt": attempt,
        "sql": sql,
        "direct": form,
        "inputs": inputs,
        "readable": state.plan.readable if stage.scans or stage.replicated else (),
        "access": state.plan.access,
        "build_sides": run.build_sides,
        "output": output_spec(state, run, index),
    }
    if run.null_columns:
        spec["null_columns"] = sorted(run.null_columns)
    return spec


def output_spec(state: QueryState, run: StageRun, index: int) -> dict:
    """Where task ``index``'s output goes: a shuffle's partitions, or out of the query. A task
    recomputed for blocks a lost worker held keeps only those partitions (``keep``)."""
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
    if run.keep.get(index) is not None:
        spec["keep"] = run.keep[index]
    if ex.kind == "hash":
        spec["keys"] = ex.keys
    elif ex.kind == "range":
        spec["sample_key"] = ex.order[0].this.name
        spec["samples"] = state.options.samples_per_partition * ex.partitions
        spec["seed"] = zlib.crc32(f"{run.stage.id}/{index}".encode())
    return spec


def with_inline_finalize(run: StageRun, spec: dict) -> dict:
    """A range map task's spec as it starts: once the bounds are known it partitions its own
    output, and keeps it. Its blocks are pushed by side work, as a hash task's are: a push
    inside the task would hold its slot for as long as the network takes."""
    if run.bounds is None or run.stage.output is None or run.stage.output.kind != "range":
        return spec
    return dict(spec, output=dict(spec["output"], finalize=run.finalize_body))


def duckdb_builds(stage: Stage) -> bool:
    """Whether DuckDB picks the fragment's hash join build sides (``sandbox.connection.safe_connection``).

    It reads a Parquet scan's size, with its filters' and join filters' effect, where the
    planner has only guesses: q16 joins a 61-day date range to the catalog sales of one state
    and call center county, which the planner guessed the smaller, and only building on the
    dates lets their key range prune the sales scan's row groups (5 times faster). It takes an
    Arrow input for one row, which is about right only for a broadcast (at most the broadcast
    threshold), so it decides where every exchange read is one and some input is a scan; the
    renderer, from actual sizes, decides elsewhere. A fragment without a join has no side to
    pick: its small splits may then be given to it as Arrow (``scan.reads_best_as_arrow``).
    """
    return (
        bool(stage.scans or stage.replicated)
        and all(read.kind == "broadcast" for read in stage.reads)
        and any(isinstance(node, lp.Join) for node in lp.walk(stage.root))
    )


def scan_input(scan: lp.Scan, split: dict | None) -> dict:
    """A task's input that reads ``split`` of a scanned table."""
    return {"name": scan.table, "kind": "scan", "split": split, "columns": list(scan.column_map.items())}


def split_template(specs: list[dict]) -> tuple[dict, list[dict]]:
    """The fields every spec of a batch shares, sent once (its stage's template: the fragment,
    the output, the roots), and what each task adds (its inputs, its number and attempt);
    ``dict(template, **task)`` is the task's spec again."""
    first, rest = specs[0], specs[1:]
    template = {key: value for key, value in first.items() if all(key in spec and spec[key] == value for spec in rest)}
    return template, [{key: value for key, value in spec.items() if key not in template} for spec in specs]
