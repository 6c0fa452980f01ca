"""The coordinator: runs stage DAGs on the cluster's workers, one :class:`QueryRun` per query.

It owns what the queries it runs share: the threads that make their calls to workers, and the
evaluation of key ranges that prunes scans. Everything about one query's run lives in
:mod:`qengine.runtime.query_run` and the modules it uses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from qengine.errors import Error, error_class, user_message
from qengine.planner.null_columns import null_columns
from qengine.planner.render import render
from qengine.planner.stages import StagePlan
from qengine.planner.user_names import with_user_columns
from qengine.runtime.collector_pace import rare_collections
from qengine.runtime.key_ranges import KeyRanges
from qengine.runtime.query_run import QueryRun
from qengine.runtime.query_state import Cluster, ExecutionOptions, release_blocks
from qengine.runtime.slow_workers import PaceMemory
from qengine.runtime.stats import QueryStats, StageStats
from qengine.sandbox.carried_types import tagged_result
from qengine.sandbox.connection import scratch_connection
from qengine.transport.wire import schema_from_hex, table_from_hex


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
        self.paces = PaceMemory()
        self._running: set[QueryRun] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the call threads (the calls of a query that is still running fail)."""
        for pool in (self.tasks, self.aux):
            pool.shutdown(wait=False, cancel_futures=True)

    def run(
        self,
        plan: StagePlan,
        output: dict | None = None,
        progress: Callable[[int, int], None] | None = None,
        cancelled: threading.Event | None = None,
    ) -> tuple[list[tuple[str, dict]], QueryStats, str]:
        """Run every stage; returns (worker address, stats) per result task, the stats and the query id.

        ``output`` overrides the result stage's output spec (CTAS writes a table instead).
        ``cancelled``, once set, stops the run as a failing task would (its statement was
        cancelled). The caller collects the result blocks, then calls :meth:`release`.
        """
        run = None
        record = self.cluster.history.current()  # the statement this query runs for, if recorded
        finished = False
        try:
            with self.cluster.running_query(), rare_collections():
                run = QueryRun(
                    self.cluster, self.options, (self.tasks, self.aux), self.key_ranges, self.paces, plan, output, progress, cancelled
                )
                with self._lock:
                    self._running.add(run)
                if record is not None:
                    record.plan, record.run = plan, run
                placement, stats, query_id = run.execute()
                finished = True
                if record is not None:
                    record.stats = stats
                return placement, stats, query_id
        except Error as e:  # a worker's DuckDB names the fragment's columns, which the user never wrote
            e.args = (with_user_columns(str(e), plan),)
            raise
        finally:
            with self._lock:
                self._running.discard(run)
            if record is not None:
                if run is not None and not finished:  # failed or cancelled: what it did until then
                    record.stats = run.statistics(time.monotonic() - run.began)
                record.run = None

    def run_here(self, plan: StagePlan) -> tuple[pa.Table, QueryStats]:
        """Run a plan that reads no data (``stages.reads_no_data``) in this process, in the
        same sandbox a worker's fragment runs in: a round trip to a worker would cost more
        than the query, and a local cluster's workers may not have started yet.

        The result is what a worker's task would have returned (types Arrow does not carry
        tagged, ``sandbox.carried_types``), and errors are raised as a worker's would be.
        """
        stage = plan.result
        started = time.perf_counter()
        con = scratch_connection()
        try:
            relation = con.sql(render(stage.root))
            table = tagged_result(relation, null_columns(stage.root, {}))
        except (duckdb.Error, pa.ArrowException) as e:
            raise error_class(type(e).__name__)(with_user_columns(user_message(type(e).__name__, str(e)), plan)) from e
        finally:
            con.close()
        seconds = time.perf_counter() - started
        stage_stats = StageStats(stage.id, "result", 1, table.num_rows, table.nbytes, seconds=seconds, task_seconds=seconds, planned_tasks=1)
        return table, QueryStats([stage_stats], seconds)

    def cancel(self) -> None:
        """Cancel the queries running here: each fails with "query cancelled" within a liveness
        poll, its tasks are interrupted on the workers and its blocks freed. This is how a
        remote client's Ctrl-C reaches the cluster; a local one interrupts the run directly."""
        with self._lock:
            running = list(self._running)
        for run in running:
            run.cancel()

    @staticmethod
    def result_schema(placement: list[tuple[str, dict]]) -> pa.Schema:
        """The schema of a result: its partitions' holding rows, unified (one may type a column
        that is NULL in all its rows as NULL, another as its type)."""
        schemas = [schema_from_hex(output["schema"]) for _, output in placement if output["rows"]]
        if not schemas:
            return schema_from_hex(placement[0][1]["schema"])
        return schemas[0] if len(schemas) == 1 else pa.unify_schemas(schemas, promote_options="permissive")

    def result_batches(self, query_id: str, placement: list[tuple[str, dict]], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The result's record batches, partition after partition (the order of a range-sorted
        result is kept), each read as it is asked for, from the attempt that committed it.

        A small partition came back with its task's answer; the others stream from their
        workers. A worker lost since the run raises :class:`WorkerUnreachableError` or
        :class:`InputLostError`.
        """
        for index, (address, output) in enumerate(placement):
            if not output["rows"]:
                continue
            if "inline" in output:  # small enough to have come with the task's answer
                batches: Iterable[pa.RecordBatch] = table_from_hex(output["inline"]).to_batches()
            else:
                ticket = {"key": f"{query_id}/result", "partition": index, "want": [[index, output["attempt"]]]}
                _, batches = self.cluster.pool.get(address).batches(ticket)
            for batch in batches:
                yield batch if batch.schema == schema else batch.cast(schema)

    def release(self, prefix: str) -> int:
        """Free everything under ``prefix`` on every worker; returns the bytes they had spilled."""
        return release_blocks(self.cluster, prefix, self.aux)

