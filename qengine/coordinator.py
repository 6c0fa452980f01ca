"""The coordinator: runs a stage DAG on the cluster's workers.

Stages start as soon as every stage they read from has finished, so independent stages (the
two sides of a join) run at the same time. Each task is one ``run_task`` call to the worker it
is placed on; at most ``slots`` tasks run on a worker at once. The first failing task fails the
query at once; the rest of its tasks are cancelled and its blocks released.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from qengine.catalog import DEFAULT_SPLIT_BYTES
from qengine.errors import Error, OperationalError
from qengine.exchange.sampling import DEFAULT_SAMPLES_PER_PARTITION, weighted_bounds
from qengine.planner import logical as lp
from qengine.planner.render import SCAN_TABLE, render
from qengine.planner.stages import Stage, StagePlan
from qengine.rpc import ClientPool
from qengine.wire import schema_from_hex, table_from_hex, table_to_hex

_query_ids = itertools.count(1)


class Cluster(Protocol):
    pool: ClientPool

    @property
    def addresses(self) -> list[str]: ...

    def check_alive(self) -> None: ...


@dataclass
class StageStats:
    """What EXPLAIN ANALYZE and the harness reports show per stage."""

    stage: int
    kind: str
    tasks: int
    rows: int = 0
    bytes: int = 0
    rows_in: int = 0
    partition_bytes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    task_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "output": self.kind,
            "tasks": self.tasks,
            "rows": self.rows,
            "bytes": self.bytes,
            "shuffle_bytes": sum(self.partition_bytes) if self.kind not in ("result", "table") else 0,
            "seconds": round(self.seconds, 4),
        }


@dataclass
class QueryStats:
    stages: list[StageStats]
    seconds: float

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def shuffle_bytes(self) -> int:
        return sum(s.as_dict()["shuffle_bytes"] for s in self.stages)


@dataclass
class _StageRun:
    stage: Stage
    tasks: int
    splits: list[dict] | None
    stats: StageStats
    placement: list[int] = field(default_factory=list)
    groups: list[list[int]] | None = None
    holders: set[int] = field(default_factory=set)
    schema: str | None = None
    samples: list[tuple[pa.Array, int]] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)
    pending: int = 0
    started: float = 0.0
    submitted: bool = False
    done: bool = False


@dataclass
class ExecutionOptions:
    slots: int = 2
    coalesce_bytes: int = 32 << 20
    split_bytes: int = DEFAULT_SPLIT_BYTES
    samples_per_partition: int = DEFAULT_SAMPLES_PER_PARTITION


class Coordinator:
    """Schedules the stages and tasks of queries on a cluster."""

    def __init__(self, cluster: Cluster, options: ExecutionOptions | None = None) -> None:
        self.cluster = cluster
        self.options = options or ExecutionOptions()

    def run(
        self,
        plan: StagePlan,
        output: dict | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[list[tuple[int, dict]], QueryStats, str]:
        """Run every stage; returns (worker, stats) per result task, the stats and the query id.

        ``output`` overrides the result stage's output spec (CTAS writes a table instead).
        The caller collects the result blocks, then calls :meth:`release`.
        """
        return _QueryRun(self, plan, output, progress).execute()

    def fetch_result(self, query_id: str, placement: list[tuple[int, dict]]) -> pa.Table:
        """Collect the result partitions in order; the order of a range-sorted result is kept."""
        addresses = self.cluster.addresses

        def one(index: int) -> pa.Table:
            worker, _ = placement[index]
            return self.cluster.pool.get(addresses[worker]).get({"key": f"{query_id}/result", "partition": index})

        with ThreadPoolExecutor(max_workers=min(8, max(1, len(placement)))) as pool:
            tables = list(pool.map(one, range(len(placement))))
        nonempty = [t for t in tables if t.num_rows] or tables[:1]
        return nonempty[0] if len(nonempty) == 1 else pa.concat_tables(nonempty, promote_options="permissive")

    def release(self, prefix: str) -> None:
        for address in self.cluster.addresses:
            with contextlib.suppress(Error):  # a dead worker holds nothing any more
                self.cluster.pool.get(address).action("release", {"prefix": prefix}, timeout=10)


class _QueryRun:
    def __init__(
        self,
        coordinator: Coordinator,
        plan: StagePlan,
        output: dict | None,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.coord = coordinator
        self.cluster = coordinator.cluster
        self.plan = plan
        self.output_override = output
        self.progress = progress
        self.query_id = f"q{next(_query_ids)}-{time.monotonic_ns() % 10**9}"
        self.addresses = list(self.cluster.addresses)
        self.workers = len(self.addresses)
        self.slots = [threading.Semaphore(coordinator.options.slots) for _ in self.addresses]
        self.failed = threading.Event()
        self.runs: list[_StageRun] = []
        for stage in plan.stages:
            splits = stage.scan.source.splits(self.workers, coordinator.options.split_bytes) if stage.scan is not None else None
            tasks = plan.task_count(stage, len(splits) if splits is not None else None, lambda sid: self.runs[sid].tasks)
            kind = stage.output.kind if stage.output is not None else (output or {}).get("kind", "result")
            self.runs.append(_StageRun(stage, tasks, splits, StageStats(stage.id, kind, tasks)))
        self.total_tasks = sum(r.tasks for r in self.runs)
        self.done_tasks = 0

    # ---- placement and specs -----------------------------------------------------------

    def _place(self, run: _StageRun, index: int) -> int:
        if run.splits is not None and run.splits[index].get("kind") == "memory" and run.splits[index].get("worker") is not None:
            return int(run.splits[index]["worker"])
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # read the shared producer's partition where it lives
            return self.runs[shared[0].shuffle_id].placement[index]
        if run.tasks == 1:
            return run.stage.id % self.workers
        return index % self.workers

    def _coalesce(self, run: _StageRun) -> None:
        """Group consecutive small reduce partitions into one task (as Spark's AQE does).

        Skipped where partition i must stay task i: stages that read or write materialized
        (shared) data, whose readers rely on the producer's partitioning.
        """
        reads = run.stage.partitioned_reads
        target = self.coord.options.coalesce_bytes
        if not reads or target <= 0 or run.tasks <= 1:
            return
        if any(r.kind == "materialized" for r in reads) or (run.stage.output and run.stage.output.kind == "materialize"):
            return
        sizes = [0] * run.tasks
        for r in reads:
            for p, b in enumerate(self.runs[r.shuffle_id].stats.partition_bytes[: run.tasks]):
                sizes[p] += b
        groups: list[list[int]] = [[]]
        acc = 0
        for p, b in enumerate(sizes):
            if groups[-1] and acc + b > target:
                groups.append([])
                acc = 0
            groups[-1].append(p)
            acc += b
        if len(groups) < run.tasks:
            self.total_tasks -= run.tasks - len(groups)
            run.groups = groups
            run.tasks = run.stats.tasks = len(groups)

    def _output_spec(self, run: _StageRun, index: int) -> dict:
        ex = run.stage.output
        if ex is None:
            spec = dict(self.output_override or {"kind": "result", "key": f"{self.query_id}/result"})
            if spec["kind"] == "table":
                spec["key"] = f"{spec['key']}/{index}"
            return spec
        spec: dict[str, Any] = {"kind": ex.kind, "key": f"{self.query_id}/{run.stage.id}", "partitions": ex.partitions}
        if ex.kind == "hash":
            spec["keys"] = ex.keys
        elif ex.kind == "range":
            spec["sample_key"] = ex.order[0].this.name
            spec["samples"] = self.coord.options.samples_per_partition * ex.partitions
            spec["seed"] = zlib.crc32(f"{run.stage.id}/{index}".encode())
        return spec

    def _with_address(self, split: dict) -> dict:
        """Session-table splits name a worker index; the reading worker needs its address."""
        if split.get("kind") == "memory" and split.get("worker") is not None:
            return {**split, "address": self.addresses[int(split["worker"])]}
        return split

    def _task_spec(self, run: _StageRun, index: int, sql: str) -> dict:
        inputs: list[dict] = []
        stage = run.stage
        if stage.scan is not None:
            assert run.splits is not None
            inputs.append(
                {
                    "name": SCAN_TABLE,
                    "kind": "scan",
                    "split": self._with_address(run.splits[index]),
                    "columns": list(stage.scan.column_map.items()),
                }
            )
        for read in stage.reads:
            source = self.runs[read.shuffle_id]
            inputs.append(
                {
                    "name": read.table,
                    "kind": "shuffle",
                    "key": f"{self.query_id}/{read.shuffle_id}",
                    "partitions": [0] if read.kind in ("broadcast", "single")
                    else run.groups[index] if run.groups is not None and read.kind != "materialized"
                    else [index],
                    "sources": [self.addresses[source.placement[index]]]
                    if read.kind == "materialized"
                    else [self.addresses[w] for w in sorted(source.holders)],
                    "schema": source.schema,
                }
            )
        return {
            "query": self.query_id,
            "stage": stage.id,
            "task": index,
            "sql": sql,
            "inputs": inputs,
            "output": self._output_spec(run, index),
        }

    # ---- execution ---------------------------------------------------------------------

    def _call(self, worker: int, name: str, body: dict) -> Any:
        if self.failed.is_set():
            raise _CancelledError()
        with self.slots[worker]:
            if self.failed.is_set():
                raise _CancelledError()
            try:
                return self.cluster.pool.get(self.addresses[worker]).action(name, body)
            except OperationalError:
                self.cluster.check_alive()
                raise

    def execute(self) -> tuple[list[tuple[int, dict]], QueryStats, str]:
        started = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=max(2, self.workers * self.coord.options.slots))
        futures: dict[Future, tuple[_StageRun, int]] = {}
        try:
            while not self.runs[-1].done:
                for run in self.runs:
                    if not run.submitted and all(self.runs[p].done for p in run.stage.parents):
                        self._submit(run, pool, futures)
                if not futures:
                    raise OperationalError("query stalled: no runnable stage (planner bug)")
                finished, _ = wait(list(futures), return_when=FIRST_COMPLETED)
                for fut in finished:
                    run, index = futures.pop(fut)
                    self._record(run, index, fut.result())
                    if run.pending == 0:
                        self._finish_stage(run)
        except _CancelledError:
            raise OperationalError("query cancelled") from None
        except BaseException:
            self.failed.set()
            for fut in futures:
                fut.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            started = [f for f in futures if not f.cancelled()]  # cancelled ones never report done
            threading.Thread(target=self._release_after, args=(started,), daemon=True).start()
            raise
        pool.shutdown(wait=True)
        result = self.runs[-1]
        stats = QueryStats([r.stats for r in self.runs], time.perf_counter() - started)
        return [(w, o) for w, o in zip(result.placement, result.outputs, strict=True)], stats, self.query_id

    def _release_after(self, futures: list[Future]) -> None:
        wait(futures)
        self.coord.release(f"{self.query_id}/")

    def _submit(self, run: _StageRun, pool: ThreadPoolExecutor, futures: dict) -> None:
        run.submitted = True
        run.started = time.perf_counter()
        self._coalesce(run)
        run.pending = run.tasks
        run.placement = [self._place(run, i) for i in range(run.tasks)]
        run.outputs = [{} for _ in range(run.tasks)]
        sql = render(run.stage.root)
        for index in range(run.tasks):
            spec = self._task_spec(run, index, sql)
            fut = pool.submit(self._call, run.placement[index], "run_task", spec)
            futures[fut] = (run, index)

    def _record(self, run: _StageRun, index: int, result: dict) -> None:
        run.pending -= 1
        run.outputs[index] = result
        run.holders.add(run.placement[index])
        run.schema = run.schema or result["schema"]
        stats = run.stats
        stats.rows += result["rows"]
        stats.bytes += result["bytes"]
        stats.rows_in += result["rows_in"]
        stats.task_seconds += result["seconds"]
        if "sample" in result:
            run.samples.append((table_from_hex(result["sample"]).column(0).combine_chunks(), result["rows"]))
        sizes = result.get("partition_bytes") or []
        if sizes:
            if not stats.partition_bytes:
                stats.partition_bytes = [0] * len(sizes)
            for p, b in enumerate(sizes):
                stats.partition_bytes[p] += b
        self.done_tasks += 1
        if self.progress is not None:
            self.progress(self.done_tasks, self.total_tasks)

    def _finish_stage(self, run: _StageRun) -> None:
        ex = run.stage.output
        if ex is not None and ex.kind == "range":
            self._finalize_range(run, ex)
        run.done = True
        run.stats.seconds = time.perf_counter() - run.started

    def _finalize_range(self, run: _StageRun, ex: lp.Exchange) -> None:
        """Choose bounds from the weighted samples, then have every map-output holder partition."""
        typ = schema_from_hex(run.schema).field(ex.order[0].this.name).type
        samples = [(s.cast(typ), rows) for s, rows in run.samples]
        bounds = weighted_bounds(samples, ex.partitions) if samples else pa.array([], typ)
        if len(bounds) < ex.partitions - 1:  # too few distinct samples: pad, reducers stay valid
            bounds = pa.concat_arrays([bounds] + [bounds[-1:]] * (ex.partitions - 1 - len(bounds))) if len(bounds) else bounds
        first = ex.order[0]
        body = {
            "key": f"{self.query_id}/{run.stage.id}",
            "bounds": table_to_hex(pa.table({"b": bounds})),
            "sort_key": first.this.name,
            "desc": bool(first.args.get("desc")),
            "nulls_first": bool(first.args.get("nulls_first")),
        }
        run.stats.partition_bytes = [0] * (len(bounds) + 1)
        with ThreadPoolExecutor(max_workers=max(1, len(run.holders))) as pool:
            for result in pool.map(lambda w: self._call(w, "finalize_range", body), sorted(run.holders)):
                for p, b in enumerate(result["partition_bytes"]):
                    run.stats.partition_bytes[p] += b


class _CancelledError(Exception):
    """A task skipped because its query already failed."""
