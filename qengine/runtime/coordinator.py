"""The coordinator: runs a stage DAG on the cluster's workers.

Stages start as soon as every stage they read from has finished, so independent stages (the
two sides of a join) run at the same time. Each task is one ``run_task`` call to the worker it
is placed on, or, if its inputs are as near to every worker (a scan split), to the first worker
with a free slot; at most ``slots`` tasks run on a worker at once. The first failing task fails the
query at once; the rest of its tasks are cancelled and its blocks released.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import InitVar, asdict, dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from qengine.errors import Error, OperationalError
from qengine.exchange.metrics import ShuffleStats
from qengine.exchange.placement import Reducer, accumulate, round_robin
from qengine.exchange.prediction import coalesce, grouped, hash_prediction, range_prediction
from qengine.exchange.sampling import weighted_bounds
from qengine.exchange.store import concat
from qengine.planner import direct, estimates
from qengine.planner import logical as lp
from qengine.planner.render import join_sides, render
from qengine.planner.stages import RuntimeFilter, Stage, StagePlan
from qengine.runtime.key_ranges import KeyRanges
from qengine.runtime.slots import Slots
from qengine.transport.rpc import ClientPool
from qengine.transport.wire import schema_from_hex, schema_to_hex, table_from_hex, table_to_hex

_query_ids = itertools.count(1)


class Cluster(Protocol):
    pool: ClientPool

    @property
    def addresses(self) -> list[str]: ...

    def check_alive(self, addresses: list[str]) -> None: ...

    def check_readable(self, paths: list[str]) -> None: ...


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
            "shuffle_bytes": sum(self.partition_bytes) if self.kind not in FINAL_KINDS else 0,
            "seconds": round(self.seconds, 4),
            "task_seconds": round(self.task_seconds, 4),
        }


@dataclass
class QueryStats:
    stages: list[StageStats]
    seconds: float
    shuffles: list[ShuffleStats] = field(default_factory=list)
    spilled_bytes: int = 0

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def shuffle_bytes(self) -> int:
        return sum(s.as_dict()["shuffle_bytes"] for s in self.stages)

    def to_json(self) -> dict[str, Any]:
        """Plain data, for a standalone coordinator to send its client."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueryStats:
        return cls(
            [StageStats(**s) for s in data["stages"]],
            data["seconds"],
            [ShuffleStats(**s) for s in data["shuffles"]],
            data["spilled_bytes"],
        )


SHUFFLE_KINDS = ("hash", "range", "roundrobin", "single")
# Outputs that leave the query (rows to the client, a session table, files): nothing is shuffled.
FINAL_KINDS = ("result", "table", "files")
LIVENESS_POLL_SECONDS = 1.0


@dataclass
class _StageRun:
    stage: Stage
    tasks: int
    splits: list[dict] | None
    stats: StageStats
    # Each task's worker; a task free to run anywhere has None until it takes a slot.
    placement: list[Any] = field(default_factory=list)
    groups: list[list[int]] | None = None
    holders: set[int] = field(default_factory=set)
    schema: str | None = None
    samples: dict[int, tuple[pa.Array, int, int]] = field(default_factory=dict)
    outputs: list[dict] = field(default_factory=list)
    pending: int = 0
    aux_pending: int = 0
    started: float = 0.0
    submitted: bool = False
    done: bool = False
    # shuffle-producing stages
    task_bytes: dict[int, list[int]] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)
    finalized: set[int] = field(default_factory=set)
    pushed: set[int] = field(default_factory=set)
    bounds: pa.Array | None = None
    finalize_body: dict[str, Any] = field(default_factory=dict)  # what every finalize request shares
    # Once bounds and reducer hosts are known (prefetch): map tasks starting after that partition
    # and push their own output with this, instead of staging it for a finalize request.
    inline: dict[str, Any] | None = None
    ranges: dict[str, list[int] | None] = field(default_factory=dict)
    prediction: list[Reducer] | None = None
    maps_done_at: float | None = None
    shuffle: ShuffleStats | None = None
    # The fragment's SQL rendered while the stage waited for its inputs, with the join sides
    # it was rendered for (see _QueryRun._wait)
    rendered: tuple[tuple[bool, ...], str] | None = None


@dataclass
class _Placement:
    """Where a consumer stage's reduce tasks run, decided ahead of time in prefetch mode."""

    groups: list[list[int]]
    hosts: list[int]
    addresses: InitVar[list[str]]
    # False when every map task had finished by the time the reducers were placed: a push would
    # then overlap nothing and only hold the reducers back, so they read the blocks where they are.
    push: bool
    _by_partition: dict[int, int] = field(init=False, repr=False)
    # partition → its reducer's host address, as finalize and push requests carry it
    destinations: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self, addresses: list[str]) -> None:
        self._by_partition = {p: self.hosts[g] for g, members in enumerate(self.groups) for p in members}
        self.destinations = {str(p): addresses[h] for p, h in self._by_partition.items()}

    def host_of(self, partition: int) -> int:
        return self._by_partition[partition]


@dataclass
class ExecutionOptions:
    """The scheduler's share of a session's settings (see ``qengine.api.options.SessionSettings``)."""

    slots: int
    coalesce_bytes: int
    split_bytes: int
    samples_per_partition: int
    shuffle: str
    prefetch_fraction: float


class Coordinator:
    """Schedules the stages and tasks of queries on a cluster."""

    # Threads for the calls of every query run here: one set, so that a query does not start and
    # join a dozen threads of its own (about 3 ms a query in a micro-benchmark). Each query's
    # slots bound its own calls, so the pools are sized for several queries at once, and a
    # thread is only made when none is idle.
    TASK_THREADS = 64
    AUX_THREADS = 32

    def __init__(self, cluster: Cluster, options: ExecutionOptions) -> None:
        self.cluster = cluster
        self.options = options
        self.tasks = ThreadPoolExecutor(max_workers=self.TASK_THREADS, thread_name_prefix="qengine-task")
        # Side work has its own threads: queued behind the tasks waiting for a slot, a map task's
        # finalize or push would start only once the last map task had, and the shuffle would
        # not overlap the map stage at all.
        self.aux = ThreadPoolExecutor(max_workers=self.AUX_THREADS, thread_name_prefix="qengine-shuffle")
        self.key_ranges = KeyRanges()

    def close(self) -> None:
        """Stop the call threads (the calls of a query that is still running fail)."""
        for pool in (self.tasks, self.aux):
            pool.shutdown(wait=False, cancel_futures=True)

    def run(
        self,
        plan: StagePlan,
        output: dict | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[list[tuple[str, dict]], QueryStats, str]:
        """Run every stage; returns (worker address, stats) per result task, the stats and the query id.

        ``output`` overrides the result stage's output spec (CTAS writes a table instead).
        The caller collects the result blocks, then calls :meth:`release`.
        """
        return _QueryRun(self, plan, output, progress).execute()

    def fetch_result(self, query_id: str, placement: list[tuple[str, dict]]) -> pa.Table:
        """Collect the result partitions in order; the order of a range-sorted result is kept."""
        def one(index: int) -> pa.Table:
            address, _ = placement[index]
            return self.cluster.pool.get(address).get({"key": f"{query_id}/result", "partition": index})

        with ThreadPoolExecutor(max_workers=min(8, max(1, len(placement)))) as pool:
            tables = list(pool.map(one, range(len(placement))))
        return concat(tables, tables[0].schema)

    def release(self, prefix: str) -> int:
        """Free everything under ``prefix`` on every worker; returns the bytes they had spilled."""
        spilled = 0
        for address in self.cluster.addresses:
            with contextlib.suppress(Error):  # a dead worker holds nothing any more
                reply = self.cluster.pool.get(address).action("release", {"prefix": prefix}, timeout=10)
                spilled += int((reply or {}).get("spilled", 0))
        return spilled


class _QueryRun:
    def __init__(
        self,
        coordinator: Coordinator,
        plan: StagePlan,
        output: dict | None,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.coord = coordinator
        self.options = coordinator.options
        self.mode = coordinator.options.shuffle
        self.cluster = coordinator.cluster
        self.plan = plan
        self.output_override = output
        self.progress = progress
        self.query_id = f"q{next(_query_ids)}-{time.monotonic_ns() % 10**9}"
        self.addresses = list(self.cluster.addresses)
        if not self.addresses:
            raise OperationalError("no live workers: none has joined the coordinator, or all were marked dead")
        # A query may need only some workers; one that is known dead still fails it at once,
        # rather than only when a task happens to be placed there.
        self.cluster.check_alive(self.addresses)
        self.workers = len(self.addresses)
        self.slots = Slots(self.workers, coordinator.options.slots)
        self.failed = threading.Event()
        self.runs: list[_StageRun] = []
        self.consumer_of: dict[int, int] = {}
        self.placements: dict[int, _Placement] = {}
        for stage, (splits, tasks) in zip(plan.stages, plan.scan_tasks(self.workers, self.options.split_bytes), strict=True):
            kind = stage.output.kind if stage.output is not None else (output or {}).get("kind", "result")
            run = _StageRun(stage, tasks, splits, StageStats(stage.id, kind, tasks))
            if stage.output is not None and stage.output.kind in SHUFFLE_KINDS:
                run.shuffle = ShuffleStats(stage.id, stage.output.kind, self.mode, tasks, stage.output.partitions)
            self.runs.append(run)
            for read in stage.partitioned_reads:
                if read.kind in SHUFFLE_KINDS:
                    self.consumer_of[read.shuffle_id] = stage.id
        self.total_tasks = sum(r.tasks for r in self.runs)
        self.done_tasks = 0
        self._seq = itertools.count()

    # ---- placement and specs -----------------------------------------------------------

    def _place(self, run: _StageRun, index: int) -> int | None:
        """The worker a task must run on, or None for a task any worker's free slot may take."""
        split = run.splits[index] if run.splits is not None else None
        if split is not None and split.get("kind") == "memory" and split.get("address") is not None:
            if split["address"] not in self.addresses:
                raise OperationalError(f"a session table's rows were held by worker {split['address']}, which has left the cluster")
            return self.addresses.index(split["address"])
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # read the shared producer's partition where it lives
            return self.runs[shared[0].shuffle_id].placement[index]
        ahead = self.placements.get(run.stage.id)
        if ahead is not None:
            return ahead.hosts[index]
        if not run.stage.partitioned_reads:  # scans and broadcasts read as well from anywhere
            return None
        # A shuffle's reducers are placed now: the shuffle's metrics (_measure) need their hosts.
        return self.slots.least_busy() if run.tasks == 1 else index % self.workers

    def _coalescable(self, run: _StageRun) -> bool:
        """Partition i must stay task i where data is read as materialized; a materialized
        output may have fewer partitions only if its readers read nothing else partitioned
        (their task count then follows it, see :meth:`_submit`)."""
        reads = run.stage.partitioned_reads
        if not reads or self.options.coalesce_bytes <= 0 or run.tasks <= 1:
            return False
        if any(r.kind not in SHUFFLE_KINDS for r in reads):
            return False
        if run.stage.output and run.stage.output.kind == "materialize":
            readers = [r.stage for r in self.runs if run.stage.id in r.stage.parents]
            return all(all(x.shuffle_id == run.stage.id for x in reader.partitioned_reads) for reader in readers)
        return True

    def _groups(self, run: _StageRun, sizes: list[float]) -> list[list[int]]:
        if not self._coalescable(run):
            return [[p] for p in range(run.tasks)]
        return coalesce(sizes, self.options.coalesce_bytes, self.workers)

    def _apply_groups(self, run: _StageRun, groups: list[list[int]]) -> None:
        run.groups = groups
        self._set_tasks(run, len(groups))

    def _set_tasks(self, run: _StageRun, tasks: int) -> None:
        """Change a stage's task count (coalesced reducers, a pruned scan) everywhere it is kept."""
        self.total_tasks += tasks - run.tasks
        run.tasks = run.stats.tasks = tasks
        if run.shuffle is not None:
            run.shuffle.map_tasks = tasks

    def _output_spec(self, run: _StageRun, index: int) -> dict:
        ex = run.stage.output
        if ex is None:
            spec = dict(self.output_override or {"kind": "result", "key": f"{self.query_id}/result"})
            if spec["kind"] == "table":
                spec["key"] = f"{spec['key']}/{index}"
            return spec
        spec: dict[str, Any] = {
            "kind": ex.kind,
            "key": self._key(run.stage.id),
            "partitions": ex.partitions,
            "mode": self.mode,
        }
        if ex.kind == "hash":
            spec["keys"] = ex.keys
        elif ex.kind == "range":
            spec["sample_key"] = ex.order[0].this.name
            spec["samples"] = self.options.samples_per_partition * ex.partitions
            spec["seed"] = zlib.crc32(f"{run.stage.id}/{index}".encode())
        return spec

    def _key(self, stage_id: int) -> str:
        return f"{self.query_id}/{stage_id}"

    def _locations(self, source: _StageRun, partitions: list[int]) -> dict[int, dict[int, int]]:
        """Bytes of these partitions per holding worker: where each map task produced its block,
        or, once pushed (prefetch), the reducer's host."""
        ahead = self.placements.get(self.consumer_of.get(source.stage.id, -1))
        out: dict[int, dict[int, int]] = {}
        for task, task_sizes in source.task_bytes.items():
            pushed = ahead is not None and task in source.pushed  # placed ahead only in prefetch
            for p in partitions:
                b = task_sizes[p] if p < len(task_sizes) else 0
                if b:
                    host = ahead.host_of(p) if pushed else source.placement[task]
                    per_host = out.setdefault(p, {})
                    per_host[host] = per_host.get(host, 0) + b
        return out

    def _task_spec(self, run: _StageRun, index: int, sql: str, form: dict | None) -> dict:
        inputs: list[dict] = []
        stage = run.stage
        if stage.scans:
            assert run.splits is not None
            split = run.splits[index]
            for branch, scan in enumerate(stage.scans):  # a concatenated union's other inputs are empty
                mine = branch == split.get("branch", 0)
                inputs.append(_scan_input(scan, split if mine else {"kind": "empty", "schema": schema_to_hex(scan.source.schema)}))
        inputs += [_scan_input(scan, scan.source.whole()) for scan in stage.replicated]
        for read in stage.reads:
            source = self.runs[read.shuffle_id]
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
                located = self._locations(source, partitions)
                # Pull reads every map-output holder; prefetch only where the blocks now are.
                if self.mode == "prefetch" and source.task_bytes:
                    hosts = sorted({h for per_host in located.values() for h in per_host})
                else:
                    hosts = sorted(source.holders)
                sizes = {str(p): {self.addresses[h]: b for h, b in per_host.items()} for p, per_host in located.items()}
            inputs.append(
                {
                    "name": read.table,
                    "kind": "shuffle",
                    "key": self._key(read.shuffle_id),
                    "partitions": partitions,
                    "sources": [self.addresses[w] for w in hosts],
                    "schema": source.schema,
                    "consume": self.mode == "prefetch" and read.kind in SHUFFLE_KINDS,
                    "sizes": sizes,
                }
            )
        return {
            "query": self.query_id,
            "stage": stage.id,
            "task": index,
            "sql": sql,
            "direct": form,
            "inputs": inputs,
            "readable": self.plan.readable if stage.scans or stage.replicated else (),
            "build_sides": _duckdb_builds(stage),
            "output": self._output_spec(run, index),
        }

    # ---- execution ---------------------------------------------------------------------

    def _call(self, worker: int, name: str, body: dict) -> Any:
        """One call to a worker."""
        if self.failed.is_set():
            raise _CancelledError()
        try:
            return self.cluster.pool.get(self.addresses[worker]).action(name, body)
        except OperationalError:
            self.cluster.check_alive(self.addresses)
            raise

    def _run_task(self, run: _StageRun, index: int, body: dict | Callable[[], dict]) -> dict:
        """Run a task in a slot of its worker, or of whichever worker frees one first if it has
        none yet; a callable ``body`` is built once the task has its slot."""
        if self.failed.is_set():
            raise _CancelledError()
        with self.slots.hold(run.placement[index]) as worker:
            run.placement[index] = worker
            spec = body() if callable(body) else body
            # The only task of its stage, with no other task of the query running: it may use
            # every core of its host (a final aggregate or sort would otherwise leave all but one
            # idle; TPC-DS SF 1 spends about a tenth of its time in such stages). Tasks of stages
            # that start later share those cores for a while. A range map task is left on one
            # thread: it numbers its rows in scan order to partition them.
            alone = run.tasks == 1 and self.slots.running() == 1 and spec["output"]["kind"] != "range"
            return self._call(worker, "run_task", dict(spec, alone=True) if alone else spec)

    def execute(self) -> tuple[list[tuple[str, dict]], QueryStats, str]:
        started = time.perf_counter()
        self.futures: dict[Future, tuple[str, _StageRun, Any]] = {}
        try:
            while not self.runs[-1].done:
                for run in self.runs:
                    if not run.submitted and all(self.runs[p].done for p in run.stage.parents):
                        self._submit(run)
                if not self.futures:
                    raise OperationalError("query stalled: no runnable stage (planner bug)")
                finished = self._wait()
                if not finished:  # a worker that hangs never answers: fail once it is declared dead
                    self.cluster.check_alive(self.addresses)
                for fut in finished:
                    kind, run, extra = self.futures.pop(fut)
                    if kind == "task":
                        self._record(run, extra, fut.result())
                    else:
                        self._aux_done(run, kind, fut.result())
                    self._maybe_finish(run)
        except _CancelledError:
            raise OperationalError("query cancelled") from None
        except BaseException:
            self.failed.set()
            for fut in self.futures:
                fut.cancel()
            started_futures = [f for f in self.futures if not f.cancelled()]  # cancelled ones never report done
            threading.Thread(target=self._release_after, args=(started_futures,), daemon=True).start()
            raise
        wait(list(self.futures))
        result = self.runs[-1]
        shuffles = [r.shuffle for r in self.runs if r.shuffle is not None]
        stats = QueryStats([r.stats for r in self.runs], time.perf_counter() - started, shuffles)
        return [(self.addresses[w], o) for w, o in zip(result.placement, result.outputs, strict=True)], stats, self.query_id

    def _wait(self) -> set[Future]:
        """The calls that have finished, waiting up to the liveness poll for one.

        While none has, the SQL of a stage still waiting for its inputs is rendered: at about a
        millisecond a stage, rendering at submission put half a second on the critical path of
        the 99 TPC-DS queries. Rendering then uses the planner's estimates; ``_submit`` keeps it
        if the actual input sizes swap no join's sides.
        """
        while True:
            finished, _ = wait(list(self.futures), timeout=0, return_when=FIRST_COMPLETED)
            waiting = next((r for r in self.runs if not r.submitted and r.rendered is None), None)
            if finished or waiting is None:
                break
            waiting.rendered = (join_sides(waiting.stage.root), render(waiting.stage.root))
        if not finished:
            finished, _ = wait(list(self.futures), timeout=LIVENESS_POLL_SECONDS, return_when=FIRST_COMPLETED)
        return finished

    def _release_after(self, futures: list[Future]) -> None:
        wait(futures)
        self.coord.release(f"{self.query_id}/")

    def _aux(self, run: _StageRun, kind: str, worker: int, body: dict) -> None:
        """Side work of a shuffle (finalize, push, expect), tracked like tasks.

        A stage with side work outstanding is not done, even if all its tasks are: its readers
        must not start while its blocks are still on their way.
        """
        assert not any(self.runs[c].submitted for c in [self.consumer_of.get(run.stage.id, -1)] if c >= 0)
        run.aux_pending += 1
        run.done = False
        fut = self.coord.aux.submit(self._call, worker, kind, body)
        self.futures[fut] = (kind, run, None)

    def _submit(self, run: _StageRun) -> None:
        run.submitted = True
        run.started = time.perf_counter()
        inputs = [self.runs[r.shuffle_id] for r in run.stage.partitioned_reads if r.kind in SHUFFLE_KINDS]
        now = time.perf_counter()
        for source in inputs:
            if source.shuffle is not None and source.maps_done_at is not None:
                source.shuffle.push_tail_seconds = now - source.maps_done_at
        self._prune_scan(run)
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # one task per partition of the shared output, however many it was cut to
            self._set_tasks(run, self.runs[shared[0].shuffle_id].tasks)
        ahead = self.placements.get(run.stage.id)
        if ahead is not None:
            self._apply_groups(run, ahead.groups)
        elif inputs and self._coalescable(run):
            sizes = [0.0] * run.tasks
            for source in inputs:
                for p, b in enumerate(self._actual(source)[: run.tasks]):
                    sizes[p] += b
            self._apply_groups(run, self._groups(run, sizes))
        run.pending = run.tasks
        run.placement = [self._place(run, i) for i in range(run.tasks)]
        run.outputs = [{} for _ in range(run.tasks)]
        for source in inputs:
            self._measure(source, run)
        self._size_inputs(run)
        # A hash output's partition ids come from its DuckDB fragment (partitioner.hash_sql).
        hashed = run.stage.output is not None and run.stage.output.kind == "hash"
        early = run.rendered
        sql = early[1] if early is not None and early[0] == join_sides(run.stage.root) else render(run.stage.root)
        form = None if hashed else direct.plan(run.stage.root)
        for index in range(run.tasks):
            spec = self._task_spec(run, index, sql, form)
            body = functools.partial(self._map_spec, run, spec) if spec["output"]["kind"] == "range" else spec
            fut = self.coord.tasks.submit(self._run_task, run, index, body)
            self.futures[fut] = ("task", run, index)

    @staticmethod
    def _map_spec(run: _StageRun, spec: dict) -> dict:
        """A range map task's spec as it starts: with the bounds and hosts once they are known."""
        inline = run.inline
        return spec if inline is None else dict(spec, output=dict(spec["output"], finalize=inline))

    def _size_inputs(self, run: _StageRun) -> None:
        """Give the fragment's inputs their actual rows per task, and re-estimate the operators
        above them, so the renderer puts the smaller side of each join on DuckDB's build side."""
        tasks = max(1, run.tasks)
        for node in lp.walk(run.stage.root):
            if isinstance(node, lp.ExchangeRead):
                rows = self.runs[node.shuffle_id].stats.rows
                node.est_rows = float(rows if node.kind in ("broadcast", "whole") else rows / tasks)
            elif isinstance(node, lp.Scan) and run.splits and not node.replicated:
                node.est_rows = node.source.rows / len(run.splits)
        estimates.refresh(run.stage.root)

    def _prune_scan(self, run: _StageRun) -> None:
        """Re-split the scan without data outside its build sides' key ranges."""
        if not run.stage.runtime_filters or run.stage.scan is None:
            return
        ranges: dict[str, tuple[int, int]] = {}
        for f in run.stage.runtime_filters:
            span = self._build_range(f)
            if span is None:
                continue
            lo, hi = span
            old = ranges.get(f.column)
            ranges[f.column] = (lo, hi) if old is None else (max(old[0], lo), min(old[1], hi))
        if not ranges:
            return
        run.splits = run.stage.scan.source.splits(self.workers, self.options.split_bytes, ranges)
        self._set_tasks(run, len(run.splits))

    def _build_range(self, f: RuntimeFilter) -> tuple[int, int] | None:
        """A runtime filter's key range, (1, 0) for an empty build side; None if unknown."""
        if f.build is not None:
            return self.coord.key_ranges.key_range(f.build, f.key)
        span = self.runs[f.shuffle_id].ranges.get(f.key, "unknown")
        if span == "unknown":
            return None
        return (span[0], span[1]) if span is not None else (1, 0)

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
        for column, span in (result.get("ranges") or {}).items():
            known = run.ranges.get(column, "unset")
            if known == "unset" or known is None:
                run.ranges[column] = span
            elif span is not None:
                run.ranges[column] = [min(known[0], span[0]), max(known[1], span[1])]
        for read in run.stage.partitioned_reads:
            source = self.runs[read.shuffle_id]
            if source.shuffle is not None:
                source.shuffle.read_wait_seconds += result["read_seconds"]
        self.done_tasks += 1
        if self.progress is not None:
            self.progress(self.done_tasks, self.total_tasks)
        if run.shuffle is None:
            self._add_sizes(stats, result.get("partition_bytes") or [])
            return
        run.finished.append(index)
        if result.get("finalized"):  # partitioned and pushed by the task itself
            run.finalized.add(index)
            run.pushed.add(index)
            run.shuffle.self_pushed_tasks += 1
        if "sample" in result:
            keys = table_from_hex(result["sample"]).column(0).combine_chunks()
            run.samples[index] = (keys, result["rows"], result["bytes"])
        else:
            run.task_bytes[index] = result["partition_bytes"]
            self._add_sizes(stats, result["partition_bytes"])
        if run.pending == 0:
            run.maps_done_at = time.perf_counter()
        self._progress_shuffle(run, index)

    @staticmethod
    def _add_sizes(stats: StageStats, sizes: list[int]) -> None:
        if not sizes:
            return
        if len(stats.partition_bytes) < len(sizes):
            stats.partition_bytes += [0] * (len(sizes) - len(stats.partition_bytes))
        for p, b in enumerate(sizes):
            stats.partition_bytes[p] += b

    @staticmethod
    def _actual(run: _StageRun) -> list[int]:
        """Bytes per partition of a shuffle so far (kept up to date by ``_add_sizes``)."""
        parts = run.stage.output.partitions if run.stage.output is not None else 1
        return (run.stats.partition_bytes + [0] * parts)[:parts]

    # ---- the shuffle: prediction, placement, pre-fetch -----------------------------------

    def _threshold(self, run: _StageRun) -> int:
        return max(1, math.ceil(self.options.prefetch_fraction * run.tasks))

    def _progress_shuffle(self, run: _StageRun, index: int) -> None:
        """React to a finished map task: predict once enough have finished, then (prefetch)
        place the reducers and push every finished task's blocks to its reducers' hosts."""
        ex = run.stage.output
        assert ex is not None and run.shuffle is not None
        # Range bounds need the samples: prefetch picks them once enough map tasks have finished,
        # pull (like Spark) after all of them. Hash sizes are predicted at the threshold in both
        # modes, so both record prediction accuracy; only prefetch acts on it.
        need = self._threshold(run) if self.mode == "prefetch" or ex.kind != "range" else run.tasks
        if run.prediction is None and len(run.finished) >= need:
            if ex.kind == "range":
                self._choose_bounds(run, ex)
                run.prediction = self._range_prediction(run, ex)
            else:
                finished = [(run.placement[t], run.task_bytes[t]) for t in run.finished]
                run.prediction = hash_prediction(finished, run.tasks, ex.partitions)
            run.shuffle.predicted = [r.size for r in run.prediction]
            if self.mode == "prefetch":
                self._try_place(self.consumer_of.get(run.stage.id))
            if ex.kind == "range":
                destinations = self._destinations(run)
                if destinations is not None:
                    run.inline = dict(run.finalize_body, destinations=destinations)
                self._finalize(run, run.finished)
            else:
                self._push(run, run.finished)
        elif run.prediction is not None:
            if ex.kind == "range":
                self._finalize(run, [index])
            else:
                self._push(run, [index])

    def _choose_bounds(self, run: _StageRun, ex: lp.Exchange) -> None:
        typ = schema_from_hex(run.schema).field(ex.order[0].this.name).type
        samples = [(keys.cast(typ), rows) for keys, rows, _ in run.samples.values()]
        bounds = weighted_bounds(samples, ex.partitions) if samples else pa.array([], typ)
        if 0 < len(bounds) < ex.partitions - 1:  # too few distinct samples: pad, reducers stay valid
            bounds = pa.concat_arrays([bounds] + [bounds[-1:]] * (ex.partitions - 1 - len(bounds)))
        run.bounds = bounds
        first = ex.order[0]
        run.finalize_body = {
            "key": self._key(run.stage.id),
            "bounds": table_to_hex(pa.table({"b": bounds})),
            "sort_key": first.this.name,
            "desc": bool(first.args.get("desc")),
            "nulls_first": bool(first.args.get("nulls_first")),
            "mode": self.mode,
        }

    def _range_prediction(self, run: _StageRun, ex: lp.Exchange) -> list[Reducer]:
        first = ex.order[0]
        typ = run.bounds.type
        samples = [(run.placement[t], keys.cast(typ), size) for t, (keys, _, size) in run.samples.items()]
        prediction = range_prediction(samples, run.bounds, bool(first.args.get("desc")), bool(first.args.get("nulls_first")), run.tasks)
        return prediction + [Reducer(p, 0.0) for p in range(len(prediction), ex.partitions)]

    def _destinations(self, run: _StageRun) -> dict[str, str] | None:
        """Where this shuffle's partitions are pushed, once its reducers are placed (prefetch
        only, and only while there is a map stage to overlap)."""
        ahead = self.placements.get(self.consumer_of.get(run.stage.id, -1))
        return ahead.destinations if ahead is not None and ahead.push else None

    def _finalize(self, run: _StageRun, tasks: list[int]) -> None:
        """Partition staged range output with the bounds (and push it, once placed)."""
        destinations = self._destinations(run)
        by_worker: dict[int, list[int]] = {}
        for t in [t for t in tasks if t not in run.finalized]:
            run.finalized.add(t)
            by_worker.setdefault(run.placement[t], []).append(t)
            if destinations is not None:
                run.pushed.add(t)
        for worker, mine in by_worker.items():
            self._aux(run, "finalize_range", worker, dict(run.finalize_body, tasks=mine, destinations=destinations))

    def _push(self, run: _StageRun, tasks: list[int]) -> None:
        """Push these map tasks' blocks to their reducers' hosts, each once, when both the
        placement and the task's block sizes are known."""
        destinations = self._destinations(run)
        if destinations is None:
            return
        for t in tasks:
            if t in run.pushed or t not in run.task_bytes:
                continue
            run.pushed.add(t)
            body = {"key": self._key(run.stage.id), "task": t, "destinations": destinations}
            self._aux(run, "push", run.placement[t], body)

    def _try_place(self, consumer_id: int | None) -> None:
        """Place a consumer's reducers once every shuffle it reads has a prediction (MinHeap for
        one input, accumulate scheduling across several), then tell hosts what to expect."""
        if consumer_id is None or consumer_id in self.placements:
            return
        consumer = self.runs[consumer_id]
        inputs = [self.runs[r.shuffle_id] for r in consumer.stage.partitioned_reads]
        if any(r.shuffle is None or r.prediction is None for r in inputs):
            return
        partitions = consumer.tasks
        sizes = [sum(r.prediction[p].size for r in inputs if p < len(r.prediction)) for p in range(partitions)]
        groups = self._groups(consumer, sizes)
        hosts = list(range(self.workers))
        previous: dict[int, Reducer] | None = None
        placed = None
        for source in inputs:
            reducers = grouped(source.prediction, groups)
            placed = accumulate(reducers, hosts, max(1, source.tasks), previous)
            previous = {
                g: Reducer(g, (previous[g].size if previous else 0.0) + reducers[g].size, 1.0, placed.hosts[g])
                for g in range(len(groups))
            }
        assert placed is not None
        push = any(source.pending for source in inputs)
        self.placements[consumer_id] = _Placement(groups, [placed.hosts[g] for g in range(len(groups))], self.addresses, push)
        for source in inputs:
            source.shuffle.placement = "minheap"
        if not push:
            return
        mine = {host: [p for g, members in enumerate(groups) if placed.hosts[g] == host for p in members] for host in hosts}
        for source in inputs:
            key = self._key(source.stage.id)
            seq = next(self._seq)
            for host in hosts:
                body = {"key": key, "seq": seq, "expected": source.tasks, "partitions": mine[host], "slots": self.options.slots}
                self._aux(source, "expect", host, body)
        for source in inputs:  # tasks that finished (and, for range, were finalized) before placement
            self._push(source, source.finished)

    def _aux_done(self, run: _StageRun, kind: str, result: dict) -> None:
        run.aux_pending -= 1
        if kind == "finalize_range":
            for task, sizes in result["tasks"].items():
                run.task_bytes[int(task)] = sizes
                self._add_sizes(run.stats, sizes)
            # Finalized before the reducers were placed: push now that both are known.
            self._push(run, [int(t) for t in result["tasks"]])

    def _maybe_finish(self, run: _StageRun) -> None:
        if run.done or run.pending or run.aux_pending or not run.submitted:
            return
        ex = run.stage.output
        if ex is not None and ex.kind == "range" and len(run.finalized) < len(run.finished):
            return  # the bounds are chosen, finalization is under way
        run.done = True
        run.stats.seconds = time.perf_counter() - run.started

    def _measure(self, source: _StageRun, consumer: _StageRun) -> None:
        """Shuffle metrics, once the consumer's reducers are placed and before they run."""
        shuffle = source.shuffle
        if shuffle is None:
            return
        shuffle.actual = self._actual(source)
        shuffle.pushed_tasks = len(source.pushed)
        groups = consumer.groups or [[p] for p in range(consumer.tasks)]
        host_of = {p: consumer.placement[g] for g, members in enumerate(groups) for p in members}
        ahead = self.placements.get(consumer.stage.id)
        loads = [0.0] * self.workers
        reducers = []
        for g, members in enumerate(groups):
            size = sum(shuffle.actual[p] for p in members if p < len(shuffle.actual))
            loads[consumer.placement[g]] += size
            reducers.append(Reducer(g, size))
        naive = round_robin(reducers, list(range(self.workers))).loads
        shuffle.host_loads, shuffle.naive_host_loads = loads, [naive[h] for h in range(self.workers)]
        for task, sizes in source.task_bytes.items():
            for p, b in enumerate(sizes):
                if not b or p not in host_of:
                    continue
                produced = source.placement[task]
                shuffle.blocks_total += 1
                if produced == host_of[p]:
                    shuffle.local_bytes += b
                else:
                    shuffle.remote_bytes += b
                pushed = ahead is not None and task in source.pushed
                if produced == host_of[p] or pushed:
                    shuffle.blocks_local += 1


def _duckdb_builds(stage: Stage) -> bool:
    """Whether DuckDB picks the fragment's hash join build sides (``sandbox.safe_connection``).

    It reads a Parquet scan's size, with its filters' and join filters' effect, where the
    planner has only guesses: q16 joins a 61-day date range to the catalog sales of one state
    and call center county, which the planner guessed the smaller, and only building on the
    dates lets their key range prune the sales scan's row groups (5 times faster). It takes an
    Arrow input for one row, which is about right only for a broadcast (at most the broadcast
    threshold), so it decides where every exchange read is one and some input is a scan; the
    renderer, from actual sizes, decides elsewhere.
    """
    return bool(stage.scans or stage.replicated) and all(read.kind == "broadcast" for read in stage.reads)


def _scan_input(scan: lp.Scan, split: dict | None) -> dict:
    """A task's input that reads ``split`` of a scanned table."""
    return {"name": scan.table, "kind": "scan", "split": split, "columns": list(scan.column_map.items())}


class _CancelledError(Exception):
    """A task skipped because its query already failed."""
