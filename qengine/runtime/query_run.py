"""One query's run: stages start as soon as every stage they read from has finished, so
independent stages (the two sides of a join) run at the same time.

Tasks go to their workers' own queues (Canary, ``runtime.task_queue``): each pass of the loop
sends every task it launched to its worker, a worker's in one call whose messages report each
task's start and end. A task pinned to a worker (its input lives there) is sent at once to wait
in that worker's queue; a task whose inputs are as near to every worker (a scan split) is sent
to the first worker with a free slot. At most ``slots`` tasks of a query run on a worker at once.

Workers may be lost while a query runs (they die, hang or become unreachable), as in Spark and
the RDD paper: every task has numbered attempts, and every block names its map task and
attempt. A task whose worker is lost is run again elsewhere (at most ``MAX_TASK_FAILURES``
times); the blocks a lost worker held that are still to be read are recomputed from their
lineage by re-running only the map tasks that made them (recursively, when their own inputs
were lost too); a reader names the exact (task, attempt) blocks it reads, so nothing is read
twice or missed. Stragglers get a speculative copy on a fast worker (LATE). A task failing with
an SQL or data error fails the query at once; the rest of its tasks are cancelled and its blocks
released.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from qengine.catalog import scan
from qengine.errors import (
    Error,
    InputLostError,
    InternalError,
    NotSupportedError,
    OperationalError,
    WorkerUnreachableError,
    lost_input,
)
from qengine.exchange import partitioner
from qengine.exchange.metrics import ShuffleStats
from qengine.planner import direct, estimates
from qengine.planner import logical as lp
from qengine.planner.null_columns import null_columns
from qengine.planner.partition_pruning import prune_plan
from qengine.planner.render import join_sides, render
from qengine.planner.stages import StagePlan
from qengine.runtime.block_copies import copy_calls, record_copies
from qengine.runtime.dispatch import CancelledTaskError, DeferredTaskError, Dispatcher, Queued, StaleAttemptError
from qengine.runtime.key_ranges import KeyRanges, prune_scan
from qengine.runtime.query_state import SHUFFLE_KINDS, Cluster, ExecutionOptions, QueryState, StageRun, TaskTime, release_blocks
from qengine.runtime.shuffle_driver import ShuffleDriver
from qengine.runtime.slots import Slots, WorkerGoneError
from qengine.runtime.slow_workers import PaceMemory, measured, paces, settled_paces, slow
from qengine.runtime.speculation import ProgressReports, straggler
from qengine.runtime.stats import QueryStats, StageStats, TaskSpan
from qengine.runtime.task_specs import duckdb_builds
from qengine.transport.wire import schema_from_hex

SHUFFLE_HEAVY_BYTES = 64 << 20  # predicted shuffle bytes from which SAMP keeps a query to fewer hosts
LIVENESS_POLL_SECONDS = 0.05  # how often lost workers and stragglers are looked for
STRAGGLER_EVERY = 0.01  # seconds between two looks for slow workers and stragglers while calls end
_WAKE: Future = Future()  # put on the loop's queue of ended calls to end its wait (QueryRun._wake)
CANCEL_TIMEOUT = 10.0  # seconds a worker has to take a failed query's cancel
MAX_TASK_FAILURES = 4  # attempts of one task lost with their worker (Spark's spark.task.maxFailures)
MAX_INPUT_LOSSES = 16  # attempts of one task whose inputs were lost, before the query gives up

_query_ids = itertools.count(1)


class QueryRun:
    """Runs one stage plan to its end, or fails it at its first task that fails for itself."""

    def __init__(
        self,
        cluster: Cluster,
        options: ExecutionOptions,
        calls: tuple[ThreadPoolExecutor, ThreadPoolExecutor],
        key_ranges: KeyRanges,
        memory: PaceMemory,
        plan: StagePlan,
        output: dict | None,
        progress: Callable[[int, int], None] | None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.cluster = cluster
        self.tasks, self.aux_calls = calls
        self.key_ranges = key_ranges
        self.memory = memory  # the workers' paces earlier queries saw
        self.progress = progress
        addresses = list(cluster.addresses)
        if not addresses:
            raise OperationalError("no live workers: none has joined the coordinator, or all were marked dead")
        query_id = f"q{next(_query_ids)}-{time.monotonic_ns() % 10**9}"
        self.state = state = QueryState(query_id, options, plan, addresses, output)
        self.slots = Slots(state.workers, options.slots, ahead=options.slots, load=cluster.load, addresses=state.addresses)
        self.failed = threading.Event()
        self.cancelled = cancelled if cancelled is not None else threading.Event()  # set: stop
        self.shuffles = ShuffleDriver(state, self._aux, cluster.network, cluster.shares.nass)
        self.dispatcher = Dispatcher(state, self.slots, cluster, self.tasks, self.failed, self._inputs_ready, self._wake)
        self.reports = ProgressReports(state, self._call, self.aux_calls)  # LATE's progress scores
        self.moving: dict[int, int | None] = {}  # a push's body → its count in the network's load
        self.moved_off: set[int] = set()  # slow workers whose waiting reducers were placed elsewhere since found slow
        prune_plan(plan)
        for stage, (splits, tasks) in zip(plan.stages, plan.scan_tasks(state.workers, options.split_bytes), strict=True):
            self._stop_if_cancelled()  # a stage of 100,000s of scan tasks takes seconds to set up
            kind = stage.output.kind if stage.output is not None else (output or {}).get("kind", "result")
            pruned = [n.pruned for n in lp.walk(stage.root) if isinstance(n, lp.Scan) and n.pruned is not None]
            stats = StageStats(
                stage.id, kind, tasks, files=sum(p.files for p in pruned), files_skipped=sum(p.skipped for p in pruned), parents=stage.parents,
                planned_tasks=tasks, split_by=scan.cut_by(splits or []), row_groups=scan.row_groups(splits or []),
            )
            run = StageRun(stage, tasks, splits, stats)
            if stage.output is not None and stage.output.kind in SHUFFLE_KINDS:
                run.shuffle = ShuffleStats(stage.id, stage.output.kind, state.mode, tasks, stage.output.partitions)
            run.null_columns = null_columns(stage.root, {r.stage.id: r.null_columns for r in state.runs})
            run.build_sides = duckdb_builds(stage)
            state.runs.append(run)
            for read in stage.partitioned_reads:
                if read.kind in SHUFFLE_KINDS:
                    state.consumer_of[read.shuffle_id] = stage.id
        state.total_tasks = sum(r.tasks for r in state.runs)
        self.done_tasks = 0
        self.began = time.monotonic()  # what the task spans count from
        self.spans: list[TaskSpan] = []
        # Pushes of map output to reducers' hosts (prefetch), as spans of their senders: those
        # under way by their body's id, and those ended. The web UI's timeline draws them.
        self.pushing: dict[int, TaskSpan] = {}
        self.pushes: list[TaskSpan] = []
        self.futures: dict[Future, tuple[str, StageRun, Any]] = {}
        # Calls put themselves here as they end: the loop takes them in O(1) each, where
        # waiting on every outstanding future cost O(futures) a pass, and a stage of thousands
        # of tasks O(tasks²).
        self.ended: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self.looked_at = 0.0  # when slow workers and stragglers were last looked for
        # how long to wait between two looks: STRAGGLER_EVERY, or ten times what the last look
        # took, so that it never takes more than a tenth of the loop (its cost grows with the tasks)
        self.look_every = STRAGGLER_EVERY

    def cancel(self) -> None:
        """Ask the run to stop: it fails at its next look at its calls, as a failing task would."""
        self.cancelled.set()

    # ---- placement ---------------------------------------------------------------------

    def _place(self, run: StageRun, index: int) -> int | None:
        """The worker a task must run on, or None for a task any worker's free slot may take."""
        state = self.state
        split = run.splits[index] if run.splits is not None else None
        if split is not None and split.get("kind") == "memory" and split.get("address") is not None:
            holders = split.get("replicas") or [split["address"]]
            live = [state.addresses.index(a) for a in holders if a in state.addresses]
            live = [w for w in live if w not in state.lost]
            if not live:
                who = "both workers holding it were" if len(holders) > 1 else "the worker holding it was"
                raise OperationalError(f"session table {split.get('table')} lost partition {split.get('index')}: {who} lost")
            return live[0]
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # read the shared producer's partition where it lives
            source = state.runs[shared[0].shuffle_id]
            held = source.blocks.get(index, {}).get(index)
            if held is not None:
                # On a lost worker it is being made again: the task waits for it, placed anywhere.
                return held[0] if held[0] not in state.lost else None
            if source.placement[index] not in state.lost:  # an empty partition: where it was made
                return source.placement[index]
        ahead = state.placements.get(run.stage.id)
        if ahead is not None:
            return ahead.hosts[index]
        if not run.partitioned_reads:  # scans and broadcasts read as well from anywhere
            return None
        # A shuffle's reducers are placed now: the shuffle's metrics (ShuffleDriver.measure) need their hosts.
        hosts = state.placeable_hosts()
        return self.slots.least_busy() if run.tasks == 1 else hosts[index % len(hosts)]

    # ---- calls -------------------------------------------------------------------------

    def _call(self, worker: int, name: str, body: dict) -> Any:
        """One call to a worker; one that gets no answer has the cluster look at the worker."""
        if self.failed.is_set():
            raise CancelledTaskError()
        address = self.state.addresses[worker]
        try:
            return self.cluster.pool.get(address).action(name, body)
        except WorkerUnreachableError:
            self.cluster.suspect(address)
            raise

    def _inputs_ready(self, run: StageRun, index: int | None = None) -> bool:
        """Whether a stage may start (``index`` None) or its task ``index`` may run: every stage
        it reads is done, or, for a shuffle it reads by partition, settled with none of the
        task's partitions on their way to its reducer's host. A reducer starts as soon as its
        own blocks have landed, not after the stage's last push."""
        runs = self.state.runs
        for p in run.parents:
            source = runs[p]
            if source.done:
                continue
            if p not in run.shuffle_inputs or not source.settled():
                return False
            if index is not None and any(source.carrying[q] for q in run.partitions_of(index)):
                return False
        return True

    # ---- the scheduling loop -----------------------------------------------------------

    def execute(self) -> tuple[list[tuple[str, dict]], QueryStats, str]:
        """Run every stage; returns (worker address, output) per result task, the stats and the query id."""
        state = self.state
        runs = state.runs
        started = time.perf_counter()
        try:
            self._stop_if_cancelled()  # before it started
            self._find_slow()  # the first stages are placed by what earlier queries saw
            with self.cluster.shares.claim(state.query_id, state.options.user):
                self._keep_to_hosts()
                self._run_stages()
        except CancelledTaskError:
            raise OperationalError("query cancelled") from None
        except BaseException:
            self.failed.set()
            for fut in self.futures:
                fut.cancel()
            started_futures = [f for f in self.futures if not f.cancelled()]  # cancelled ones never report done
            threading.Thread(target=self._release_after, args=(started_futures,), daemon=True).start()
            raise
        finally:
            self.memory.learn({state.addresses[w]: pace for w, pace in measured(state).items()})
            self.slots.close()
            self.cluster.network.release(state.query_id)  # what a failed query's calls never reported
        # Losing copies and abandoned attempts: cancelled on their workers, they end soon (one on
        # a worker that hangs never does, and is not waited for).
        wait(list(self.futures), timeout=CANCEL_TIMEOUT)
        result = runs[-1]
        stats = self.statistics(time.perf_counter() - started)
        return [(state.addresses[w], o) for w, o in zip(result.placement, result.outputs, strict=True)], stats, state.query_id

    def statistics(self, seconds: float) -> QueryStats:
        """What the run measured: at its end, or as far as it got (a failed run's, which the
        query history keeps so that the web UI shows where it failed)."""
        runs = self.state.runs
        shuffles = [r.shuffle for r in runs if r.shuffle is not None]
        return QueryStats(
            [r.stats for r in runs], seconds, shuffles, recovery=self.state.recovery, sharing=self.state.sharing, spans=list(self.spans),
            pushes=list(self.pushes),
        )

    def _keep_to_hosts(self) -> None:
        """SAMP: a shuffle-heavy query that shares the cluster keeps its map tasks, and so its
        reducers, to the hosts ``runtime.shares`` chooses for its share."""
        state = self.state
        heavy = state.plan.shuffle_bytes(state.workers) >= SHUFFLE_HEAVY_BYTES
        chosen = self.cluster.shares.samp_hosts(state.query_id, heavy, [state.addresses[w] for w in state.live_hosts()])
        if chosen:
            state.preferred = {state.addresses.index(a) for a in chosen}
            state.sharing.samp_hosts = list(chosen)
            self.slots.prefer(state.preferred)

    def _run_stages(self) -> None:
        """The scheduling loop: launch what is ready, send it, take in what ended, until the
        result stage is done."""
        runs = self.state.runs
        while not runs[-1].done:
            self._look_at_workers()
            for run in runs:
                if not run.submitted and self._inputs_ready(run):
                    self._submit(run)
                elif run.waiting and self._inputs_ready(run):
                    for index in sorted(i for i in run.waiting if self._inputs_ready(run, i)):
                        run.waiting.discard(index)
                        self._launch(run, index)
            self.dispatcher.dispatch()
            if not self.futures:
                raise InternalError(f"query stalled, nothing runs (a qengine bug): {self._describe()}")
            finished = self._wait()
            self._stop_if_cancelled()
            self._note_started()  # before the ends: an attempt's start comes first
            for fut in finished:
                entry = self.futures.pop(fut, None)
                if entry is None:  # side work given up with its lost worker
                    continue
                kind, run, extra = entry
                if kind == "task":
                    self._task_done(run, *extra, fut)
                else:
                    self._aux_done(run, kind, *extra, fut)
            self.dispatcher.dispatch()  # the slots these ends freed take their next tasks at once
            for run in runs:  # side work given up with a lost worker finishes stages too
                self._maybe_finish(run)
            if time.monotonic() - self.looked_at >= self.look_every or not finished:
                self.looked_at = time.monotonic()
                self._speculate(self._find_slow())
                self.look_every = max(STRAGGLER_EVERY, 10 * (time.monotonic() - self.looked_at))

    def _describe(self) -> str:
        """Each unfinished stage's tasks by state, for a report of a run that cannot go on."""
        parts = []
        for run in self.state.runs:
            if run.done or not run.submitted:
                continue
            left = sorted(set(range(run.tasks)) - run.completed)
            parts.append(
                f"stage {run.stage.id}: tasks {left} not done, waiting {sorted(run.waiting)}, "
                f"wanted {[sorted(run.wanted[i]) for i in left]}, {run.aux_pending} side calls"
            )
        return "; ".join(parts)

    def _wait(self) -> set[Future]:
        """The calls that have finished, waiting up to the liveness poll for one.

        While none has, the SQL of a stage still waiting for its inputs is rendered: at about a
        millisecond a stage, rendering at submission put half a second on the critical path of
        the 99 TPC-DS queries. Rendering then uses the planner's estimates; ``_submit`` keeps it
        if the actual input sizes swap no join's sides.
        """
        while True:
            finished = self._ended()
            waiting = next((r for r in self.state.runs if not r.submitted and r.rendered is None), None)
            if finished or waiting is None:
                break
            waiting.rendered = (join_sides(waiting.stage.root), render(waiting.stage.root))
        if not finished:
            with contextlib.suppress(queue.Empty):
                finished = {self.ended.get(timeout=LIVENESS_POLL_SECONDS)} | self._ended()
        return finished

    def _note_started(self) -> None:
        """Count the tasks reported started as running, from when they started (LATE's
        progress rates and the paces measure from there)."""
        for item, worker, when in self.dispatcher.started_tasks():
            if not item.fut.done() or item.fut in self.futures:  # not ended and taken in already
                item.run.running.setdefault(item.index, {})[item.attempt] = (worker, when, item.speculative)

    def _wake(self) -> None:
        """End the loop's wait with nothing ended (a future no call holds, skipped as such)."""
        self.ended.put(_WAKE)

    def _ended(self) -> set[Future]:
        """The calls that have ended since the last look, without waiting."""
        finished = set()
        with contextlib.suppress(queue.Empty):
            while True:
                finished.add(self.ended.get_nowait())
        return finished

    def _release_after(self, futures: list[Future]) -> None:
        """Stop the failed query's tasks still running on the workers (DuckDB would otherwise
        run each to its end), then free its blocks once their calls have returned."""
        for address in self.cluster.addresses:
            with contextlib.suppress(Error):  # a worker that is gone runs nothing any more
                self.cluster.pool.get(address).action("cancel", {"query": self.state.query_id}, timeout=CANCEL_TIMEOUT)
        wait(futures, timeout=CANCEL_TIMEOUT)
        release_blocks(self.cluster, f"{self.state.query_id}/")

    def _aux(self, run: StageRun, kind: str, worker: int, body: dict) -> None:
        """Side work of a shuffle (finalize, push, expect), tracked like tasks.

        A stage with side work outstanding is not done, even if all its tasks are: readers of
        the partitions it moves must not start while their blocks are on their way (``carrying``).
        """
        run.aux_pending += 1
        run.done = False
        run.carrying.update(self._carried(kind, body))
        if kind == "push":  # under way between hosts until it lands (``runtime.network_load``)
            sizes, sender = run.task_bytes.get(body["task"], []), self.state.addresses[worker]
            moving = [(sender, to, sizes[int(p)]) for p, to in body["destinations"].items() if int(p) < len(sizes)]
            self.moving[id(body)] = self.cluster.network.begin(moving, owner=self.state.query_id)
            began = time.monotonic() - self.began
            self.pushing[id(body)] = TaskSpan(run.stage.id, body["task"], body["attempt"], sender, began, began, "pushing")
        fut = self.aux_calls.submit(self._call, worker, kind, body)
        self.futures[fut] = (kind, run, (worker, body))
        fut.add_done_callback(self.ended.put)

    @staticmethod
    def _carried(kind: str, body: dict) -> list[int]:
        """The partitions whose blocks a side call moves to their reducers' hosts: a push's, and
        a range finalization's when it sends what it partitions."""
        if kind not in ("push", "finalize_range"):
            return []
        return [int(p) for p in body.get("destinations") or {}]

    def _landed(self, run: StageRun, kind: str, body: dict) -> None:
        """A side call has ended (or was given up): its partitions are no longer on their way."""
        run.aux_pending -= 1
        run.carrying.subtract(self._carried(kind, body))
        self.cluster.network.end(self.moving.pop(id(body), None))
        push = self.pushing.pop(id(body), None)
        if push is not None:
            push.end, push.outcome = time.monotonic() - self.began, "pushed"
            self.pushes.append(push)

    def _submit(self, run: StageRun) -> None:
        state = self.state
        run.submitted = True
        run.started = time.perf_counter()
        inputs = [state.runs[r.shuffle_id] for r in run.partitioned_reads if r.kind in SHUFFLE_KINDS]
        prune_scan(state, run, self.key_ranges)
        shared = [r for r in run.stage.reads if r.kind == "materialized"]
        if shared:  # one task per partition of the shared output, however many it was cut to
            state.set_tasks(run, state.runs[shared[0].shuffle_id].tasks)
            run.stats.follows = shared[0].shuffle_id
        ahead = state.placements.get(run.stage.id)
        if ahead is not None:
            state.apply_groups(run, ahead.groups)
        elif inputs and state.coalescable(run):
            sizes = [0.0] * run.tasks
            for source in inputs:
                for p, b in enumerate(source.partition_sizes()[: run.tasks]):
                    sizes[p] += b
            state.apply_groups(run, state.groups(run, sizes))
        if run.tasks > 1:  # one task reads every partition: all its keys meet there
            _check_hash_keys_meet(state, run)
        run.start_attempts()
        run.placement = [self._place(run, i) for i in range(run.tasks)]
        run.outputs = [{} for _ in range(run.tasks)]
        for source in inputs:
            self.shuffles.measure(source, run)
        self._size_inputs(run)
        # A hash output's partition ids come from its DuckDB fragment (partitioner.hash_sql).
        hashed = run.stage.output is not None and run.stage.output.kind == "hash"
        early = run.rendered
        run.sql = early[1] if early is not None and early[0] == join_sides(run.stage.root) else render(run.stage.root)
        run.form = None if hashed else direct.plan(run.stage.root)
        for index in range(run.tasks):
            if index % 4096 == 4095:
                self._stop_if_cancelled()
            self._launch(run, index, where=run.placement[index])

    def _stop_if_cancelled(self) -> None:
        """End the run if its statement was cancelled, in the loops that can take seconds."""
        if self.cancelled.is_set():
            raise OperationalError("query cancelled")

    def _launch(
        self, run: StageRun, index: int, where: int | None = None, speculative: bool = False, avoid: int | None = None
    ) -> None:
        """Start a new attempt of a task: placed now unless ``where`` says (a first attempt was
        placed at submission, a speculative copy goes to a fast worker); a retry ``avoid``s the
        worker its last attempt was lost with, which the cluster may not have declared lost yet."""
        attempt = run.new_attempt(index)
        if where is None and not speculative:
            where = self._place(run, index)
            others = [w for w in self.state.live_hosts() if w != avoid]
            if avoid is not None and where in (None, avoid) and others:
                where = others[index % len(others)]
        fut: Future = Future()
        self.futures[fut] = ("task", run, (index, attempt, speculative))
        fut.add_done_callback(self.ended.put)
        self.dispatcher.add(Queued(run, index, attempt, where, speculative, fut))

    def _size_inputs(self, run: StageRun) -> None:
        """Give the fragment's inputs their actual rows per task, and re-estimate the operators
        above them, so the renderer puts the smaller side of each join on DuckDB's build side."""
        tasks = max(1, run.tasks)
        for node in lp.walk(run.stage.root):
            if isinstance(node, lp.ExchangeRead):
                rows = self.state.runs[node.shuffle_id].stats.rows
                node.est_rows = float(rows if node.kind in ("broadcast", "whole") else rows / tasks)
            elif isinstance(node, lp.Scan) and run.splits and not node.replicated:
                node.est_rows = node.read_source.rows / len(run.splits)
        estimates.refresh(run.stage.root)

    # ---- task outcomes -----------------------------------------------------------------

    def _task_done(self, run: StageRun, index: int, attempt: int, speculative: bool, fut: Future) -> None:
        """Take a finished task attempt: commit it, run it again, or fail the query."""
        running = run.running.get(index, {})
        started = running.pop(attempt, None)
        if not running:  # looked at on every pass (LATE): only tasks with attempts running stay
            run.running.pop(index, None)
        sent_to = self.dispatcher.sent_to(fut)
        worker = sent_to if started is None else started[0]  # one still queued on its worker has not started
        outcome, read_seconds = "cancelled", 0.0
        try:
            try:
                worker, result, seconds = fut.result()
            except (StaleAttemptError, CancelledTaskError):
                return
            except WorkerGoneError:  # its pinned worker was lost while it waited for a slot
                if attempt in run.wanted[index] and index not in run.completed:
                    run.wanted[index].discard(attempt)
                    if not run.wanted[index]:
                        run.waiting.add(index)  # placed again by the loop, once its inputs are there
                return
            except DeferredTaskError:
                run.wanted[index].discard(attempt)
                if not run.wanted[index] and index not in run.completed:
                    run.waiting.add(index)
                return
            except Error as e:
                outcome = "lost" if isinstance(e, WorkerUnreachableError | InputLostError) else "failed"
                self._task_failed(run, index, attempt, speculative, worker, e)
                return
            read_seconds, outcome = result.get("read_seconds") or 0.0, "outrun"
            if attempt in run.wanted[index] and index not in run.completed:
                self._commit(run, index, attempt, worker, result, speculative, seconds)
                outcome = "done"
            self.memory.warmed(self.state.addresses[worker])
        finally:
            if started is not None:  # a task that never started has no span
                self.spans.append(TaskSpan(
                    run.stage.id, index, attempt, self.state.addresses[started[0]], started[1] - self.began,
                    time.monotonic() - self.began, outcome, speculative, read_seconds,
                ))

    def _task_failed(self, run: StageRun, index: int, attempt: int, speculative: bool, worker: int | None, error: Error) -> None:
        """A task attempt failed: run it again if its worker or its inputs were lost; any other
        error is the query's (an SQL or data error is not retried)."""
        if attempt not in run.wanted[index] or index in run.completed:
            return  # an attempt already given up, or the losing copy: its failure changes nothing
        run.wanted[index].discard(attempt)
        if speculative and run.wanted[index]:
            return  # the original attempt runs on
        where = f"task {index} of stage {run.stage.id}"
        info = lost_input(str(error)) if isinstance(error, InputLostError) else None
        if info is not None:
            run.input_losses[index] += 1
            if run.input_losses[index] > MAX_INPUT_LOSSES:
                raise OperationalError(f"{where} lost its inputs {MAX_INPUT_LOSSES} times; last: {error}") from error
            self._inputs_lost(info)
            if not run.wanted[index]:
                run.waiting.add(index)  # relaunched once its inputs are back
            return
        lost = worker is not None and (worker in self.state.lost or isinstance(error, WorkerUnreachableError))
        if not lost:
            raise error
        run.failures[index] += 1
        self.state.recovery.retried += 1
        if run.failures[index] >= MAX_TASK_FAILURES:
            raise OperationalError(f"{where} failed {MAX_TASK_FAILURES} times, each time losing its worker; last: {error}") from error
        self._look_at_workers()
        if not run.wanted[index]:
            self._launch(run, index, avoid=worker)

    def _commit(
        self, run: StageRun, index: int, attempt: int, worker: int, result: dict, speculative: bool, seconds: float
    ) -> None:
        """Make an attempt's output the task's: its blocks are what readers read from now on."""
        first = index not in run.ever_completed
        run.completed.add(index)
        run.ever_completed.add(index)
        run.committed[index] = attempt
        run.placement[index] = worker
        run.outputs[index] = dict(result, attempt=attempt)
        run.waiting.discard(index)
        for other in run.wanted[index] - {attempt}:  # the copy that lost the race
            loser = run.running.get(index, {}).pop(other, None)
            if loser is not None:
                run.outrun.append(TaskTime(loser[0], time.monotonic() - loser[1]))  # its worker's pace, at least
                self._cancel_attempt(run, index, other, loser[0])
        run.wanted[index] = {attempt}
        if speculative:
            self.state.recovery.speculation_wins += 1
        started = time.monotonic() - seconds
        run.durations.append(TaskTime(worker, seconds, result.get("rows_in") or 0, self.memory.cold(self.state.addresses[worker], started)))
        run.schema = run.schema or result["schema"]
        if "sample" not in result:  # staged range output has no blocks until it is partitioned
            run.record_blocks(index, worker, attempt, result)  # a task keeps its blocks: side work pushes them
        run.keep.pop(index, None)
        if not first:
            if run.shuffle is not None:
                self.shuffles.map_finished(run, index, result, first=False)
            return
        self._count(run, result)
        if run.shuffle is None:
            run.stats.add_partition_bytes(result.get("partition_bytes") or [])
            return
        if run.pending == 0:
            run.maps_done_at = time.perf_counter()
        self.shuffles.map_finished(run, index, result, first=True)

    def _count(self, run: StageRun, result: dict) -> None:
        """A task's first result, in its stage's statistics (a recomputation adds nothing)."""
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
        for read in run.partitioned_reads:
            source = self.state.runs[read.shuffle_id]
            if source.shuffle is not None:
                source.shuffle.read_wait_seconds += result["read_seconds"]
        self.done_tasks += 1
        if self.progress is not None:
            self.progress(self.done_tasks, self.state.total_tasks)

    def _cancel_attempt(self, run: StageRun, index: int, attempt: int, worker: int) -> None:
        """Stop one attempt on its worker (best effort: it is ignored whatever it does)."""
        key = f"{self.state.query_id}/{run.stage.id}/{index}/{attempt}"
        self.aux_calls.submit(self._quietly, worker, "cancel", {"query": key})

    def _quietly(self, worker: int, name: str, body: dict) -> None:
        with contextlib.suppress(Error, CancelledTaskError):
            self._call(worker, name, body)

    def _aux_done(self, run: StageRun, kind: str, worker: int, body: dict, fut: Future) -> None:
        """Take the outcome of side work; a finalize or push whose blocks a lost worker took
        with it has its map tasks recomputed. A copy that failed is done without: its blocks
        are recomputed if their holder is lost, as they would have been."""
        if kind == "copy":
            with contextlib.suppress(Error, CancelledTaskError):
                self.state.recovery.copied += record_copies(self.state, run, body, fut.result())
            return
        self._landed(run, kind, body)
        try:
            result = fut.result()
        except CancelledTaskError:
            return
        except Error as e:
            if kind == "expect":  # only eviction priorities ride on it
                return
            info = lost_input(str(e)) if isinstance(e, InputLostError) else None
            if info is None and not isinstance(e, WorkerUnreachableError):
                raise
            if info is not None and info.get("missing") is None:
                self.cluster.suspect(info["address"])
            self._look_at_workers()
            self._aux_lost(run, kind, body)
            return
        self.shuffles.aux_done(run, kind, worker, body, result)
        replies = result["tasks"].values() if kind == "finalize_range" else [result] if kind == "push" else []
        unreachable = {a for reply in replies for a in reply.get("unreachable") or ()}
        if unreachable:  # what they did not get is held by the sender again, and read there
            for address in unreachable:
                self.cluster.suspect(address)
            self._look_at_workers()

    def _aux_lost(self, run: StageRun, kind: str, body: dict) -> None:
        """A finalize or push that failed with a lost worker took its map tasks' blocks with
        it: those tasks are recomputed."""
        if kind not in ("push", "finalize_range"):
            return
        tasks = {body["task"]: body["attempt"]} if kind == "push" else {int(t): a for t, a in body["tasks"].items()}
        for task, attempt in tasks.items():
            if run.committed.get(task) != attempt:
                continue  # a later attempt committed: its blocks are its own
            if task in run.completed:
                self._recompute(run, task, None)
            else:  # already running again: its new attempt is finalized or pushed when it commits
                run.finalized.discard(task)
                run.pushed.discard(task)

    def _maybe_finish(self, run: StageRun) -> None:
        if run.done or run.pending or run.aux_pending or not run.submitted or run.waiting:
            return
        ex = run.stage.output
        if ex is not None and ex.kind == "range" and any(t not in run.finalized for t in run.completed):
            return  # the bounds are chosen, finalization is under way
        if run.stats.kind not in ("table", "files") and (missing := run.unaccounted_rows()):
            # Never let readers start on a stage some of whose rows no block accounts for:
            # that would be a silently wrong answer.
            raise InternalError(f"stage {run.stage.id} lost track of {missing} of its rows (a qengine bug): {self._describe()}")
        run.done = True
        now = time.perf_counter()
        if not run.stats.seconds:
            run.stats.seconds = now - run.started
        if run.shuffle is not None and run.maps_done_at is not None:
            run.shuffle.push_tail_seconds = now - run.maps_done_at
        for worker, body in copy_calls(self.state, run):  # small output held on two workers
            fut = self.aux_calls.submit(self._call, worker, "copy_blocks", body)
            self.futures[fut] = ("copy", run, (worker, body))
            fut.add_done_callback(self.ended.put)

    # ---- lost workers and lineage ------------------------------------------------------

    def _look_at_workers(self) -> None:
        """Take in workers the cluster has declared lost, and replacements that have joined."""
        state = self.state
        for address, why in self.cluster.lost(state.addresses).items():
            worker = state.addresses.index(address)
            if worker not in state.lost:
                self._worker_lost(worker, why)
        if state.lost:
            for address in self.cluster.addresses:
                if address not in state.addresses:
                    state.addresses.append(address)
                    self.slots.add()
        if not state.live_hosts():
            raise OperationalError(f"no live worker left to run the query on: {'; '.join(state.recovery.lost_workers)}")

    def _worker_lost(self, worker: int, why: str) -> None:
        """A worker is gone: nothing more runs there, its running attempts start again
        elsewhere, reducers placed on it are placed again, and the blocks it held that are
        still to be read are recomputed from their lineage."""
        state = self.state
        state.lost.add(worker)
        state.recovery.lost_workers.append(why)
        self.slots.remove(worker)
        # A hung worker is not killed on a standalone cluster: the others' fetches from it would
        # wait for ever, so they drop their connections to it and fail those fetches now.
        for live in state.live_hosts():
            self.aux_calls.submit(self._quietly, live, "forget", {"address": state.addresses[worker], "query": state.query_id})
        self.shuffles.replace_reducers(worker)
        # Tasks sent to it may never be reported (a hung worker): they are given up now, as
        # lost with it; those it had started are run again below, the others when they fail.
        self.dispatcher.give_up(worker, why)
        # Side work sent to it may never answer (a hung worker): it is given up now, as failed;
        # so are copies on their way to it, which would otherwise hold the query's end.
        for fut, (kind, run, extra) in list(self.futures.items()):
            if kind == "copy" and worker in (extra[0], extra[1]["peer"]):
                del self.futures[fut]
            elif kind not in ("task", "copy") and extra[0] == worker:
                del self.futures[fut]
                self._landed(run, kind, extra[1])
                self._aux_lost(run, kind, extra[1])
        # Pushed blocks whose sender kept a copy are read there: nothing to recompute for them.
        for run in state.runs:
            state.recovery.from_backups += run.fall_back_to_backups(state.lost)
        # Last stage first: a reader recomputed here makes the blocks it reads "still read" when
        # the stages it reads from are looked at next (lineage, recursively).
        for run in reversed(state.runs):
            if not run.submitted:
                continue
            for index, attempts in list(run.running.items()):
                for attempt, (where, _, _) in list(attempts.items()):
                    if where != worker or attempt not in run.wanted[index]:
                        continue
                    del attempts[attempt]
                    run.wanted[index].discard(attempt)
                    if not run.wanted[index] and index not in run.completed:
                        run.failures[index] += 1
                        state.recovery.retried += 1
                        if run.failures[index] >= MAX_TASK_FAILURES:
                            raise OperationalError(f"task {index} of stage {run.stage.id} lost its worker {MAX_TASK_FAILURES} times; last: {why}")
                        self._launch(run, index)
            for index, keep in self._lost_output(run, worker).items():
                self._recompute(run, index, keep)

    def _lost_output(self, run: StageRun, worker: int, everything: bool = False) -> dict[int, list[int] | None]:
        """The committed tasks of ``run`` whose output on ``worker`` is still to be read (or
        all of it, ``everything``), each with the partitions to make again (None: all)."""
        kind = run.stats.kind
        if kind == "files":
            return {}  # written to the data directory, not held by the worker
        if kind == "table":  # a session table's partitions, written by the query still running
            return {t: None for t in run.completed if run.placement[t] == worker}
        lost: dict[int, set[int] | None] = {}
        if kind == "range":  # map output staged until the bounds are known
            lost.update({t: None for t in run.completed if t not in run.finalized and run.placement[t] == worker})
        for partition, per_task in run.blocks.items():
            for task, (host, *_) in per_task.items():
                # A task being made again counts too: its new attempt may make other partitions.
                if host != worker or not (everything or self._still_read(run, partition)):
                    continue
                if kind in SHUFFLE_KINDS and kind != "roundrobin" and lost.get(task, set()) is not None:
                    lost.setdefault(task, set()).add(partition)
                else:
                    lost[task] = None
        if lost and kind == "roundrobin":
            # Which partition a row goes to depends on the order the task produced its rows in,
            # which a recomputation need not repeat: every map task is run again, and every
            # reader too, so that no reader mixes the two.
            for reader in self._readers(run):
                self._reset(reader)
            return {t: None for t in run.completed}
        return {t: (sorted(parts) if parts is not None else None) for t, parts in lost.items()}

    def _readers(self, run: StageRun) -> list[StageRun]:
        return [r for r in self.state.runs if run.stage.id in r.parents]

    def _still_read(self, run: StageRun, partition: int) -> bool:
        """Whether some reader of ``run`` is still to read ``partition`` (a query's result
        blocks are read once it ends)."""
        readers = self._readers(run)
        if not readers:
            return True
        for reader in readers:
            if not reader.submitted:
                return True
            kinds = {r.kind for r in reader.stage.reads if r.shuffle_id == run.stage.id}
            if kinds & {"broadcast", "whole", "once"}:
                if reader.pending:
                    return True
                continue
            groups = reader.groups or [[p] for p in range(reader.tasks)]
            task = next((g for g, members in enumerate(groups) if partition in members), None)
            if task is not None and task not in reader.completed:
                return True
        return False

    def _reset(self, run: StageRun) -> None:
        """Run every task of a stage again (its input changed partitioning)."""
        for index in range(run.tasks):
            for attempt in run.wanted[index]:
                running = run.running.get(index, {}).pop(attempt, None)
                if running is not None:
                    self._cancel_attempt(run, index, attempt, running[0])
            run.wanted[index] = set()
            run.waiting.discard(index)
            if index in run.completed:
                self._recompute(run, index, None)
            elif run.submitted:
                run.waiting.add(index)

    def _recompute(self, run: StageRun, index: int, keep: list[int] | None) -> None:
        """Run a committed task again to make the blocks of ``keep`` (None: all) that were lost.

        A task already being recomputed for other partitions is started again for all of them.
        """
        if index not in run.completed:
            making = run.keep.get(index, "all")
            if making in ("all", None) or (keep is not None and set(keep) <= set(making)):
                return  # its attempt running now makes them
            keep = None if keep is None else sorted(set(making) | set(keep))
            for attempt in run.wanted[index]:
                running = run.running.get(index, {}).pop(attempt, None)
                if running is not None:
                    self._cancel_attempt(run, index, attempt, running[0])
            run.waiting.discard(index)
        run.wanted[index] = set()  # the committed attempt runs no more; the new one is wanted
        run.completed.discard(index)
        run.keep[index] = keep
        run.finalized.discard(index)
        run.pushed.discard(index)
        if run.stage.output is not None and run.stage.output.kind in SHUFFLE_KINDS:
            run.local_only.add(index)
        run.done = False
        self.state.recovery.recomputed += 1
        self._launch(run, index)

    def _inputs_lost(self, info: dict) -> None:
        """A task could not read blocks at a holder: have the cluster look at the holder, and
        recompute the blocks it no longer has."""
        state = self.state
        address = info["address"]
        if info.get("missing") is None and address in state.addresses and state.addresses.index(address) not in state.lost:
            self.cluster.suspect(address)  # it did not answer (a holder that answered lacks some blocks)
            self._look_at_workers()
        prefix = f"{state.query_id}/"
        if not info["key"].startswith(prefix):
            return  # a session table's rows: read from another holder when placed again
        source = state.runs[int(info["key"][len(prefix):])]
        if not info.get("missing"):
            # The holder is lost: make again what the stage held there (a reader recomputed
            # after the loss needs blocks nothing was reading when it happened).
            if address in state.addresses and state.addresses.index(address) in state.lost:
                lost = state.addresses.index(address)
                for task, keep in self._lost_output(source, lost, everything=True).items():
                    self._recompute(source, task, keep)
            return
        # Only blocks still recorded as that attempt's at that holder: a reader that named
        # blocks since made again elsewhere is just run again.
        wanted: dict[int, set[int] | None] = {}
        for task, partition, attempt in info["missing"]:
            if partition < 0:  # staged range output
                if source.committed.get(task) == attempt and state.addresses[source.placement[task]] == address:
                    wanted[task] = None
                continue
            held = source.blocks.get(partition, {}).get(task)
            if held is not None and held[1] == attempt and state.addresses[held[0]] == address and wanted.get(task, set()) is not None:
                wanted.setdefault(task, set()).add(partition)
        for task, parts in wanted.items():
            self._recompute(source, task, sorted(parts) if parts is not None else None)

    # ---- stragglers (LATE) -------------------------------------------------------------

    def _find_slow(self) -> dict[int, float]:
        """Each worker's pace now; while speculation is on, the slow ones are kept off new work
        and the lagging ones' tasks are copied sooner (``runtime.slow_workers``)."""
        if not self.state.options.speculation:
            return {}
        state = self.state
        now = time.monotonic()
        settled, remembered = settled_paces(state, self.memory, now)
        pace, _ = paces(state, self.memory, now, (settled, remembered))
        state.slow = slow(settled, state.live_hosts(), state.slow)
        state.lagging = slow(pace, state.live_hosts(), state.lagging)
        self.slots.set_slow(state.slow, remembered & state.slow.keys(), pace)
        # A worker's reducers placed ahead are placed again once each time it is found slow: a
        # worker that recovers may be given reducers again, and lose them if it slows down again.
        self.moved_off &= state.slow.keys()
        for worker in state.slow.keys() - remembered - self.moved_off:
            self.moved_off.add(worker)
            self.shuffles.replace_reducers(worker, waiting_only=True)
            for run in state.runs:  # its blocks that have a copy (``runtime.block_copies``) are read there
                state.read_copies_off(run, list(run.blocks), {worker})
        seen = state.recovery.slow_workers
        for worker, times in state.slow.items():
            address = state.addresses[worker]
            seen[address] = round(max(times, seen.get(address, 0.0)), 1)
        return pace

    def _speculate(self, pace: dict[int, float]) -> None:
        """Launch a copy of the straggler LATE picks, if any (``runtime.speculation``)."""
        idle = self.slots.idle()
        self.reports.poll(bool(idle))
        choice = straggler(self.state, idle, self.slots.total(), pace, self.reports.scores())
        if choice is not None:
            run, index, target = choice
            run.speculated.add(index)
            self.state.recovery.speculated += 1
            self._launch(run, index, where=target, speculative=True)


def _check_hash_keys_meet(state: QueryState, run: StageRun) -> None:
    """Refuse a stage that reads two hash-partitioned inputs partition by partition (a join, a
    set operation) whose keys' kinds do not meet (``partitioner.keys_meet``): equal values, hashed
    as they are, would sit in different partitions and never meet (a VARCHAR key against a BIGINT
    one matched a quarter of the rows DuckDB matches). A shared CTE's partitions, hashed as its
    own stage left them, count as one (joined with a shuffle on an INTEGER key, a CTE grouped on
    a VARCHAR one lost 55 of 65 matches)."""
    reads = [r for r in run.partitioned_reads if r.kind == "hash" or (r.kind == "materialized" and state.runs[r.shuffle_id].stage.output.keys)]
    if len(reads) < 2:
        return
    kinds = []
    for read in reads:
        producer = state.runs[read.shuffle_id]
        if producer.schema is None or producer.stage.output is None:
            return
        schema = schema_from_hex(producer.schema)
        fields = {f.name: f for f in schema}
        if not all(k in fields for k in producer.stage.output.keys):
            return
        kinds.append([partitioner.key_class(fields[k]) for k in producer.stage.output.keys])
    for other in kinds[1:]:
        for a, b in zip(kinds[0], other, strict=False):
            if not partitioner.keys_meet(a, b):
                raise NotSupportedError(
                    f"a join or set operation that compares a {a} with a {b} is not supported across partitions: "
                    "cast one side to the other's type"
                )
