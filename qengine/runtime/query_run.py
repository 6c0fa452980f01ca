"""One query's run: stages start as soon as every stage they read from has finished, so
independent stages (the two sides of a join) run at the same time.

Each task is one ``run_task`` call to the worker it is placed on, or, if its inputs are as near
to every worker (a scan split), to the first worker with a free slot; at most ``slots`` tasks run
on a worker at once. The first failing task fails the query at once; the rest of its tasks are
cancelled (those running are interrupted on their workers) and its blocks released.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from qengine.errors import Error, OperationalError
from qengine.exchange.metrics import ShuffleStats
from qengine.planner import direct, estimates
from qengine.planner import logical as lp
from qengine.planner.null_columns import null_columns
from qengine.planner.render import join_sides, render
from qengine.planner.stages import StagePlan
from qengine.runtime.key_ranges import KeyRanges, prune_scan
from qengine.runtime.query_state import SHUFFLE_KINDS, Cluster, ExecutionOptions, QueryState, StageRun, release_blocks
from qengine.runtime.shuffle_driver import ShuffleDriver
from qengine.runtime.slots import Slots
from qengine.runtime.stats import QueryStats, StageStats
from qengine.runtime.task_specs import map_spec, task_spec

LIVENESS_POLL_SECONDS = 1.0
CANCEL_TIMEOUT = 10.0  # seconds a worker has to take a failed query's cancel

_query_ids = itertools.count(1)


class QueryRun:
    """Runs one stage plan to its end, or fails it at its first failing task."""

    def __init__(
        self,
        cluster: Cluster,
        options: ExecutionOptions,
        calls: tuple[ThreadPoolExecutor, ThreadPoolExecutor],
        key_ranges: KeyRanges,
        plan: StagePlan,
        output: dict | None,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.cluster = cluster
        self.tasks, self.aux_calls = calls
        self.key_ranges = key_ranges
        self.progress = progress
        addresses = list(cluster.addresses)
        if not addresses:
            raise OperationalError("no live workers: none has joined the coordinator, or all were marked dead")
        # A query may need only some workers; one that is known dead still fails it at once,
        # rather than only when a task happens to be placed there.
        cluster.check_alive(addresses)
        query_id = f"q{next(_query_ids)}-{time.monotonic_ns() % 10**9}"
        self.state = state = QueryState(query_id, options, plan, addresses, output)
        self.slots = Slots(state.workers, options.slots)
        self.failed = threading.Event()
        self.cancelled = threading.Event()
        self.shuffles = ShuffleDriver(state, self._aux)
        for stage, (splits, tasks) in zip(plan.stages, plan.scan_tasks(state.workers, options.split_bytes), strict=True):
            kind = stage.output.kind if stage.output is not None else (output or {}).get("kind", "result")
            run = StageRun(stage, tasks, splits, StageStats(stage.id, kind, tasks))
            if stage.output is not None and stage.output.kind in SHUFFLE_KINDS:
                run.shuffle = ShuffleStats(stage.id, stage.output.kind, state.mode, tasks, stage.output.partitions)
            run.null_columns = null_columns(stage.root, {r.stage.id: r.null_columns for r in state.runs})
            state.runs.append(run)
            for read in stage.partitioned_reads:
                if read.kind in SHUFFLE_KINDS:
                    state.consumer_of[read.shuffle_id] = stage.id
        state.total_tasks = sum(r.tasks for r in state.runs)
        self.done_tasks = 0

    def cancel(self) -> None:
        """Ask the run to stop: it fails at its next look at its calls, as a failing task would."""
        self.cancelled.set()

    # ---- placement ---------------------------------------------------------------------

    def _place(self, run: StageRun, index: int) -> int | None:
        """The worker a task must run on, or None for a task any worker's free slot may take."""
        state = self.state
        split = run.splits[index] if run.splits is not None else None
        if split is not None and split.get("kind") == "memory" and split.get("address") is not None:
            if split["address"] not in state.addresses:
                raise OperationalError(f"a session table's rows were held by worker {split['address']}, which has left the cluster")
            return state.addresses.index(split["address"])
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # read the shared producer's partition where it lives
            return state.runs[shared[0].shuffle_id].placement[index]
        ahead = state.placements.get(run.stage.id)
        if ahead is not None:
            return ahead.hosts[index]
        if not run.stage.partitioned_reads:  # scans and broadcasts read as well from anywhere
            return None
        # A shuffle's reducers are placed now: the shuffle's metrics (ShuffleDriver.measure) need their hosts.
        return self.slots.least_busy() if run.tasks == 1 else index % state.workers

    # ---- execution ---------------------------------------------------------------------

    def _call(self, worker: int, name: str, body: dict) -> Any:
        """One call to a worker."""
        if self.failed.is_set():
            raise _CancelledError()
        addresses = self.state.addresses
        try:
            return self.cluster.pool.get(addresses[worker]).action(name, body)
        except OperationalError:
            self.cluster.check_alive(addresses)
            raise

    def _run_task(self, run: StageRun, index: int, body: dict | Callable[[], dict]) -> dict:
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
        """Run every stage; returns (worker address, output) per result task, the stats and the query id."""
        state = self.state
        runs = state.runs
        started = time.perf_counter()
        self.futures: dict[Future, tuple[str, StageRun, Any]] = {}
        try:
            while not runs[-1].done:
                for run in runs:
                    if not run.submitted and all(runs[p].done for p in run.stage.parents):
                        self._submit(run)
                if not self.futures:
                    raise OperationalError("query stalled: no runnable stage (planner bug)")
                finished = self._wait()
                if self.cancelled.is_set():
                    raise OperationalError("query cancelled")
                if not finished:  # a worker that hangs never answers: fail once it is declared dead
                    self.cluster.check_alive(state.addresses)
                for fut in finished:
                    kind, run, extra = self.futures.pop(fut)
                    if kind == "task":
                        self._record(run, extra, fut.result())
                    else:
                        self.shuffles.aux_done(run, kind, fut.result())
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
        result = runs[-1]
        shuffles = [r.shuffle for r in runs if r.shuffle is not None]
        stats = QueryStats([r.stats for r in runs], time.perf_counter() - started, shuffles)
        return [(state.addresses[w], o) for w, o in zip(result.placement, result.outputs, strict=True)], stats, state.query_id

    def _wait(self) -> set[Future]:
        """The calls that have finished, waiting up to the liveness poll for one.

        While none has, the SQL of a stage still waiting for its inputs is rendered: at about a
        millisecond a stage, rendering at submission put half a second on the critical path of
        the 99 TPC-DS queries. Rendering then uses the planner's estimates; ``_submit`` keeps it
        if the actual input sizes swap no join's sides.
        """
        while True:
            finished, _ = wait(list(self.futures), timeout=0, return_when=FIRST_COMPLETED)
            waiting = next((r for r in self.state.runs if not r.submitted and r.rendered is None), None)
            if finished or waiting is None:
                break
            waiting.rendered = (join_sides(waiting.stage.root), render(waiting.stage.root))
        if not finished:
            finished, _ = wait(list(self.futures), timeout=LIVENESS_POLL_SECONDS, return_when=FIRST_COMPLETED)
        return finished

    def _release_after(self, futures: list[Future]) -> None:
        """Stop the failed query's tasks still running on the workers (DuckDB would otherwise
        run each to its end), then free its blocks once their calls have returned."""
        for address in self.state.addresses:
            with contextlib.suppress(Error):  # a worker that is gone runs nothing any more
                self.cluster.pool.get(address).action("cancel", {"query": self.state.query_id}, timeout=CANCEL_TIMEOUT)
        wait(futures)
        release_blocks(self.cluster, f"{self.state.query_id}/")

    def _aux(self, run: StageRun, kind: str, worker: int, body: dict) -> None:
        """Side work of a shuffle (finalize, push, expect), tracked like tasks.

        A stage with side work outstanding is not done, even if all its tasks are: its readers
        must not start while its blocks are still on their way.
        """
        state = self.state
        assert not any(state.runs[c].submitted for c in [state.consumer_of.get(run.stage.id, -1)] if c >= 0)
        run.aux_pending += 1
        run.done = False
        fut = self.aux_calls.submit(self._call, worker, kind, body)
        self.futures[fut] = (kind, run, None)

    def _submit(self, run: StageRun) -> None:
        state = self.state
        run.submitted = True
        run.started = time.perf_counter()
        inputs = [state.runs[r.shuffle_id] for r in run.stage.partitioned_reads if r.kind in SHUFFLE_KINDS]
        now = time.perf_counter()
        for source in inputs:
            if source.shuffle is not None and source.maps_done_at is not None:
                source.shuffle.push_tail_seconds = now - source.maps_done_at
        prune_scan(state, run, self.key_ranges)
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # one task per partition of the shared output, however many it was cut to
            state.set_tasks(run, state.runs[shared[0].shuffle_id].tasks)
        ahead = state.placements.get(run.stage.id)
        if ahead is not None:
            state.apply_groups(run, ahead.groups)
        elif inputs and state.coalescable(run):
            sizes = [0.0] * run.tasks
            for source in inputs:
                for p, b in enumerate(source.partition_sizes()[: run.tasks]):
                    sizes[p] += b
            state.apply_groups(run, state.groups(run, sizes))
        run.pending = run.tasks
        run.placement = [self._place(run, i) for i in range(run.tasks)]
        run.outputs = [{} for _ in range(run.tasks)]
        for source in inputs:
            self.shuffles.measure(source, run)
        self._size_inputs(run)
        # A hash output's partition ids come from its DuckDB fragment (partitioner.hash_sql).
        hashed = run.stage.output is not None and run.stage.output.kind == "hash"
        early = run.rendered
        sql = early[1] if early is not None and early[0] == join_sides(run.stage.root) else render(run.stage.root)
        form = None if hashed else direct.plan(run.stage.root)
        for index in range(run.tasks):
            spec = task_spec(state, run, index, sql, form)
            body = functools.partial(map_spec, run, spec) if spec["output"]["kind"] == "range" else spec
            fut = self.tasks.submit(self._run_task, run, index, body)
            self.futures[fut] = ("task", run, index)

    def _size_inputs(self, run: StageRun) -> None:
        """Give the fragment's inputs their actual rows per task, and re-estimate the operators
        above them, so the renderer puts the smaller side of each join on DuckDB's build side."""
        tasks = max(1, run.tasks)
        for node in lp.walk(run.stage.root):
            if isinstance(node, lp.ExchangeRead):
                rows = self.state.runs[node.shuffle_id].stats.rows
                node.est_rows = float(rows if node.kind in ("broadcast", "whole") else rows / tasks)
            elif isinstance(node, lp.Scan) and run.splits and not node.replicated:
                node.est_rows = node.source.rows / len(run.splits)
        estimates.refresh(run.stage.root)

    def _record(self, run: StageRun, index: int, result: dict) -> None:
        """Take a finished task's result: its output, its stage's statistics, and (for a map
        task) its shuffle's sizes or samples."""
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
            source = self.state.runs[read.shuffle_id]
            if source.shuffle is not None:
                source.shuffle.read_wait_seconds += result["read_seconds"]
        self.done_tasks += 1
        if self.progress is not None:
            self.progress(self.done_tasks, self.state.total_tasks)
        if run.shuffle is None:
            stats.add_partition_bytes(result.get("partition_bytes") or [])
            return
        if run.pending == 0:
            run.maps_done_at = time.perf_counter()
        self.shuffles.map_finished(run, index, result)

    @staticmethod
    def _maybe_finish(run: StageRun) -> None:
        if run.done or run.pending or run.aux_pending or not run.submitted:
            return
        ex = run.stage.output
        if ex is not None and ex.kind == "range" and len(run.finalized) < len(run.finished):
            return  # the bounds are chosen, finalization is under way
        run.done = True
        run.stats.seconds = time.perf_counter() - run.started


class _CancelledError(Exception):
    """A task skipped because its query already failed."""
