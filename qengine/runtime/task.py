"""Run one task inside a worker: load inputs, run the fragment in DuckDB, write the output.

Each task gets its own DuckDB connection with external access, extension loading and
configuration changes disabled, so a fragment can only see the Arrow inputs registered here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qengine.catalog import scan
from qengine.catalog.access import MARKER, PART_FORMATS, AccessPolicy, attempt_file, check_opened
from qengine.catalog.types import column_type, type_code
from qengine.errors import (
    DataError,
    Error,
    InputLostError,
    OperationalError,
    ProgrammingError,
    first_line,
    input_lost,
    lost_input,
)
from qengine.exchange import partitioner
from qengine.exchange.push_schedule import Piece, PushLimiter, destination_order, pieces, push_all
from qengine.exchange.sampling import sample_keys
from qengine.exchange.store import BlockStore, MissingBlocksError, concat
from qengine.planner import direct
from qengine.runtime.empty_results import EmptyResults
from qengine.runtime.faults import FaultPlan
from qengine.runtime.peers import Peers
from qengine.runtime.progress import ProgressBoard
from qengine.sandbox.carried_types import stored_nulls_as_integers, tagged_result
from qengine.sandbox.connection import one_select
from qengine.sandbox.file_writers import CsvWriter, ParquetWriter
from qengine.sandbox.pool import ConnectionPool, Lease, filters_mishandle
from qengine.sandbox.quoting import identifier
from qengine.transport.rpc import ClientPool
from qengine.transport.wire import empty_table, schema_from_hex, schema_to_hex, table_from_hex, table_to_hex

# A result partition of at most this many bytes travels in its task's answer, not as a block.
# What a worker answers for a key it holds no blocks of (``worker.WorkerServer.do_get``)
NO_BLOCKS = "holds no blocks of"
INLINE_RESULT_BYTES = 16 << 10
# A task's shuffle inputs up to this many bytes in all stay in its worker's store until its
# fragment has run; larger ones go once loaded (``TaskRunner._drop_loaded``).
KEEP_LOADED_BYTES = 64 << 20


class PartitionIds:
    """The partition id column of each hash output, as SQL, kept per stage.

    The expression depends on the fragment's column types (:func:`partitioner.hash_sql`), and
    learning them binds the whole fragment, which for a wide one costs a few milliseconds: a
    stage's tasks on one worker learn them once. Only the latest ``KEPT`` stages are kept.
    """

    KEPT = 256

    def __init__(self) -> None:
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()  # tasks run on several threads

    def select(self, con: duckdb.DuckDBPyConnection, sql: str, output: dict) -> str:
        """``sql`` with the partition id of each row added as its last column."""
        expr = self._known.get(output["key"])
        if expr is None:
            rel = con.sql(sql)
            types = {name: str(t) for name, t in zip(rel.columns, rel.types, strict=True)}
            expr = partitioner.hash_sql(types, output["keys"], output["partitions"])
            with self._lock:
                self._known[output["key"]] = expr
                while len(self._known) > self.KEPT:
                    del self._known[next(iter(self._known))]
        return f"SELECT *, {expr} AS {partitioner.PARTITION_COLUMN} FROM ({sql})"


def _consumed(inputs: list[dict]) -> Iterator[tuple[str, int, dict[str, list[list[int]]]]]:
    """(key, partition, holder → block pairs) of each partition a task's consumed shuffle
    inputs (marked ``consume``) read: what its host drops and other holders retire."""
    for inp in inputs:
        if inp["kind"] == "shuffle" and inp.get("consume"):
            for p in inp["partitions"]:
                yield inp["key"], p, inp["blocks"].get(str(p), {})


class TaskRunner:
    """Executes task specs against a worker's block store, fetching remote blocks over Flight."""

    def __init__(
        self,
        store: BlockStore,
        address: str,
        pool: ClientPool,
        threads: int | None = None,
        ceiling: AccessPolicy | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        self.store = store
        # The recovery tests' failure at a named phase (``runtime.faults``), with this worker's id.
        self.faults = faults
        self.worker_id = -1
        # The roots a standalone coordinator gave this worker when it joined: files outside
        # them are refused whatever a task spec says.
        self.ceiling = ceiling
        self.address = address
        self.pool = pool
        self.connections = ConnectionPool(threads or int(os.environ.get("QENGINE_TASK_THREADS", "1")))
        # A task running alone in its query (``alone`` in its spec) gets the host's cores.
        self.host_threads = max(self.connections.threads, _usable_cores())
        self.limiter = FetchLimiter()
        self.pushes = PushLimiter()  # pushes have a schedule of their own (``exchange.push_schedule``)
        self.partition_ids = PartitionIds()
        self.empty_results = EmptyResults()  # fragments over empty inputs, run once a worker
        self.cancellations = Cancellations()
        self.peers = Peers(pool)  # fetches and pushes give up on a peer declared lost
        self.progress = ProgressBoard()  # how far each running attempt has got (LATE)
        self._readable_checked: set[tuple] = set()  # (query, files, policies) found inside the roots
        self._checked_lock = threading.Lock()  # tasks run on several threads
        # Two pools: loading a task's inputs waits on per-source fetches, so they must not share one.
        self._inputs = ThreadPoolExecutor(max_workers=8, thread_name_prefix="input")
        self._fetches = ThreadPoolExecutor(max_workers=16, thread_name_prefix="fetch")
        self._senders = ThreadPoolExecutor(max_workers=self.pushes.streams, thread_name_prefix="push")

    # ---- inputs ------------------------------------------------------------------------

    def fetch(
        self,
        key: str,
        partition: int,
        sources: list[str],
        schema: pa.Schema,
        sizes: dict[str, int] | None = None,
        want: dict[str, list[list[int]]] | None = None,
    ) -> pa.Table:
        """One partition of a shuffle, gathered from every worker that holds a piece of it.

        ``want`` names, per holder, the (map task, attempt) blocks to read there (see
        ``BlockStore.get``). A holder that does not answer, or lacks a named block, raises
        :class:`InputLostError` naming it, so the coordinator can recompute what is gone.
        Remote fetches go through the limiter, so a wide shuffle never has more than a bounded
        number of requests and bytes in flight per host.
        """

        def one(source: str) -> pa.Table:
            pairs = None if want is None else want.get(source, [])
            try:
                if source == self.address:
                    local = self.store.get(key, partition, want=pairs)
                    return local if local is not None else empty_table(schema)
                ticket = {"key": key, "partition": partition, "want": pairs}
                with self.limiter.slot(source, (sizes or {}).get(source, 0)):
                    return self.peers.call(key, source, lambda: self.pool.get(source).get(ticket))
            except MissingBlocksError as e:
                raise input_lost(source, key, e.lost(), str(e)) from e
            except InputLostError:
                raise
            except Error as e:
                raise input_lost(source, key, None, str(e)) from e

        tables = list(self._fetches.map(one, sources)) if len(sources) > 1 else [one(s) for s in sources]
        return concat(tables, schema)

    def _memory_split(self, split: dict) -> pa.Table:
        """A session table's partition: this worker's own copy when it holds one, else the rows
        of the first of its holders (``replicas``, first holder first) that answers, as one may
        have been lost since the task was placed. When none does, the last one's error."""
        schema = schema_from_hex(split["schema"])
        local = self.store.get(split["key"], 0)
        if local is not None:
            return local
        error: Error = OperationalError(f"session table block {split['key']} is not on worker {self.address}, its only holder")
        answered = 0  # holders that answered they hold none of it
        holders = [h for h in split["replicas"] if h != self.address]  # not here after all: the store said so
        for holder in holders:
            try:
                return self.fetch(split["key"], 0, [holder], schema)
            except Error as e:
                error = e
                answered += NO_BLOCKS in str(e)
        if holders and answered == len(holders):
            # released everywhere, not lost: retried as a lost input, the statement waited on
            # it for a minute or more
            raise OperationalError(f"session table block {split['key']} is held by none of its holders: "
                                   "the table was dropped or replaced while the statement read it") from error
        raise error

    def _load(self, spec: dict) -> pa.Table:
        if spec["kind"] == "scan":
            return scan.read_split(spec["split"], [tuple(c) for c in spec["columns"]], self._memory_split)
        schema = schema_from_hex(spec["schema"])
        sizes = spec.get("sizes") or {}
        parts = []
        # Blocks a holder lacks are gathered over every partition before the task fails, so the
        # coordinator makes them all again at once, not one partition per failed attempt.
        missing: dict[str, list[list[int]]] = {}
        for p in spec["partitions"]:
            want = spec["blocks"].get(str(p), {})  # holder → its (map task, attempt) blocks
            try:
                parts.append(self.fetch(spec["key"], p, list(want), schema, sizes.get(str(p)), want))
            except InputLostError as e:
                info = lost_input(str(e))
                if info is None or info.get("missing") is None:
                    raise  # the holder did not answer: it is the coordinator's to look at
                missing.setdefault(info["address"], []).extend(info["missing"])
        if missing:
            address, lost = next(iter(missing.items()))
            raise input_lost(address, spec["key"], lost, f"{len(lost)} blocks of {spec['key']} are not at {address}")
        return concat(parts, schema)

    def _drop_loaded(self, inputs: list[dict]) -> None:
        """The shuffle blocks held here that the task read (inputs marked ``consume``) go.

        Large inputs go as soon as every input is loaded, so that the fragment holds its input
        alone (a sort frees it as it goes); inputs up to ``KEEP_LOADED_BYTES`` go once the
        fragment has run (see ``run``). Dropped before every input had loaded, they would be
        missing for the retry of a task that failed to load another, and have to be made again."""
        for key, p, holders in _consumed(inputs):
            pairs = holders.get(self.address)
            if pairs is not None:
                self.store.drop_blocks(key, p, pairs)

    def _retire_read(self, inputs: list[dict]) -> None:
        """Have the other holders of the shuffle blocks a task read retire them, now that its
        output is made (inputs marked ``consume``: see ``BlockStore.retire_blocks``), in the
        background: the task's reply does not wait for them, and one that is gone holds nothing.

        Blocks read here are dropped (``_drop_loaded``): kept, they would double the memory
        of a reducer whose fragment frees its input as it goes (a sort). Kept at another holder,
        they cost this worker nothing, and spare a reader made again after losing its worker
        (and its output) from having its inputs made again too."""
        by_holder: dict[str, dict[str, dict[str, list[list[int]]]]] = {}
        for key, p, holders in _consumed(inputs):
            for holder, pairs in holders.items():
                by_holder.setdefault(holder, {}).setdefault(key, {})[str(p)] = pairs
        by_holder.pop(self.address, None)
        for holder, keys in by_holder.items():
            for key, blocks in keys.items():
                self._fetches.submit(self._quietly, holder, "retire_blocks", {"key": key, "blocks": blocks})

    def _quietly(self, address: str, action: str, body: dict) -> None:
        with contextlib.suppress(Error):
            self.pool.get(address).action(action, body)

    # ---- running -----------------------------------------------------------------------

    def _policies(self, spec: dict) -> list[AccessPolicy]:
        """What every file this task opens must lie inside: its query's policy (none given, no
        roots at all) and the worker's own ceiling."""
        own = AccessPolicy.from_json(spec.get("access") or {})
        return [own] if self.ceiling is None else [own, self.ceiling]

    def _readable(self, spec: dict, policies: list[AccessPolicy]) -> tuple[str, ...]:
        """The files DuckDB may open for this task (its query's Parquet files), each checked as a
        split's file is: the list comes with the task, and a task sent to the worker directly
        named any file there for DuckDB to read. Checked once a query: a query's tasks share it."""
        readable = tuple(spec.get("readable") or ())
        key = (spec.get("query"), readable, tuple(policies))
        with self._checked_lock:
            known = key in self._readable_checked
        if not known:
            for path in readable:
                check_opened(path, policies)
            with self._checked_lock:
                if len(self._readable_checked) > 256:
                    self._readable_checked.clear()
                self._readable_checked.add(key)
        return readable

    def _reached(self, phase: str) -> None:
        if self.faults is not None:
            self.faults.reached(phase, self.worker_id)

    def warm_up(self) -> None:
        """Pay, before any task comes, what a fresh worker's first tasks would: DuckDB's first
        connection (kept in the pool), an Arrow table registered on it (which loads
        ``pyarrow.dataset``) and a query over it. On a busy host a worker's first tasks ran
        0.1 to 0.25 s longer than warm ones, which made a query's first stage wait for them."""
        with self.connections.connection() as lease:
            lease.add_inputs({"warm_up": pa.table({"x": [1]})})
            lease.con.execute("SELECT sum(x) FROM warm_up").arrow()

    def run(self, spec: dict) -> dict[str, Any]:
        started = time.perf_counter()
        self._reached("task")
        policies = self._policies(spec)
        for inp in spec["inputs"]:
            if inp["kind"] == "scan":
                for path in scan.split_files(inp["split"] or {}):
                    check_opened(path, policies)
        if spec["output"]["kind"] == "files":
            check_opened(spec["output"]["dir"], policies, write=True)
        # A DuckDB fragment reads its Parquet splits itself, but for small ones (unless it picks
        # its join sides from their sizes); a direct one needs them as Arrow.
        scans = {} if spec.get("direct") else {
            inp["name"]: sql
            for inp in spec["inputs"]
            if inp["kind"] == "scan"
            and (sql := scan.parquet_sql(inp["split"], inp["columns"])) is not None
            and (spec.get("build_sides") or not scan.reads_best_as_arrow(inp["split"], inp["columns"]))
        }
        splits = [inp["split"] for inp in spec["inputs"] if inp["name"] in scans]
        inputs = [inp for inp in spec["inputs"] if inp["name"] not in scans]
        readable = self._readable(spec, policies) if scans else ()
        threads = self.host_threads if spec.get("alone") else None  # None: the pool's own
        with (
            self.connections.connection(readable, bool(spec.get("build_sides")), threads) as lease,
            self.cancellations.running(spec["query"], lease, task_key(spec)),
            self.progress.track(task_key(spec), len(inputs)) as progress,
        ):

            def load(inp: dict) -> pa.Table:
                table = self._load(inp)
                progress.input_loaded()
                return table

            loaded = list(self._inputs.map(load, inputs)) if len(inputs) > 1 else [load(i) for i in inputs]
            # Small inputs stay until the fragment has run: a speculative copy of a straggling
            # reducer (LATE) reads them here, where often no other copy of them is left. A task
            # that fails or is cancelled leaves them for its retry, or for the query's release.
            consumed = any(inp.get("consume") for inp in inputs)
            keep_loaded = consumed and sum(t.nbytes for t in loaded) <= KEEP_LOADED_BYTES
            if consumed and not keep_loaded:
                self._drop_loaded(inputs)
            if any(inp["kind"] == "shuffle" for inp in inputs):
                self._reached("reduce")
            self.cancellations.check(spec["query"], task_key(spec))  # before the fragment: loading may have taken a while
            read_at = time.perf_counter()
            rows_in = sum(t.num_rows for t in loaded) + sum(split["rows"] for split in splits)
            # Only this dict holds the inputs, so a direct fragment can free one as it copies it.
            named = {inp["name"]: table for inp, table in zip(inputs, loaded, strict=True)}
            del loaded
            progress.running(lease.con)
            result = direct.execute(spec["direct"], named) if spec.get("direct") else None
            nulls = tuple(spec.get("null_columns", ()))
            empty = None if result is not None or scans else EmptyResults.key(spec["sql"], named, spec["output"], nulls)
            if empty is not None:
                result = self.empty_results.get(empty)
            if result is None:
                ids = functools.partial(self.partition_ids.select, output=spec["output"]) if spec["output"]["kind"] == "hash" else None
                result = _run_fragment(lease, spec["sql"], named, scans, splits, ids, nulls)
                if empty is not None:
                    self.empty_results.put(empty, result)
            progress.finish()
            stats = self._write(lease.con, spec, result)
        if keep_loaded:
            self._drop_loaded(inputs)
        self._retire_read(inputs)
        kind = spec["output"]["kind"]
        if kind in ("hash", "range", "roundrobin", "single"):
            self._reached("map")
        elif kind == "materialize":
            self._reached("materialize")
        stats.update(rows_in=rows_in, read_seconds=read_at - started, seconds=time.perf_counter() - started)
        return stats

    def _store_parts(
        self, key: str, parts: list[pa.Table], source: int, attempt: int, mode: str, keep: list[int] | None = None
    ) -> dict[str, Any]:
        """Keep a map task's partitioned output: on disk with an index (pull), or in memory.

        ``keep`` (a task recomputed for blocks a lost worker held) keeps only those partitions:
        the others' blocks from the first attempt are still where they were.
        """
        if keep is not None:
            kept = set(keep)
            parts = [t if p in kept else t.slice(0, 0) for p, t in enumerate(parts)]
        if mode == "pull":
            self.store.write_parts(key, parts, source, attempt)
        else:
            self.store.put_parts(key, parts, source, attempt)  # both record the schema, even with no rows
        return {"partition_bytes": [p.nbytes for p in parts], "partition_rows": [p.num_rows for p in parts]}

    def _write(self, con: duckdb.DuckDBPyConnection, spec: dict, result: pa.Table | pa.RecordBatchReader) -> dict[str, Any]:
        """Deliver the fragment's rows to its output; the reply adds their count, size and schema.

        Files are written batch by batch as a streamed result produces them; every other output
        keeps the whole table.
        """
        out = spec["output"]
        if out["kind"] == "files":
            return _write_file(result, out["names"], out["dir"], spec["task"], int(spec.get("attempt", 0)), out["format"])
        table = result if isinstance(result, pa.Table) else result.read_all()
        ids = None
        if out["kind"] == "table":
            table = stored_nulls_as_integers(table)
        if out["kind"] == "hash":  # the fragment added each row's partition id
            ids = table.column(partitioner.PARTITION_COLUMN).to_numpy()
            table = table.drop_columns([partitioner.PARTITION_COLUMN])
        stats = self._store(con, spec, table, ids)
        stats.update(rows=table.num_rows, bytes=table.nbytes, schema=schema_to_hex(table.schema))
        return stats

    def _store(self, con: duckdb.DuckDBPyConnection, spec: dict, result: pa.Table, ids: np.ndarray | None) -> dict[str, Any]:
        out = spec["output"]
        kind, key, task = out["kind"], out["key"], spec["task"]
        attempt = int(spec.get("attempt", 0))
        mode = out.get("mode", "prefetch")
        keep = out.get("keep")
        if kind == "hash":
            assert ids is not None
        elif kind == "roundrobin":
            ids = partitioner.roundrobin_ids(result.num_rows, out["partitions"], task)
        elif kind == "range" and out.get("finalize"):  # bounds known: partition and push now
            body = out["finalize"]
            sizes = self._partition_range(con, body, _bounds(body), task, attempt, result, keep)
            return dict(sizes, finalized=True)
        elif kind == "range":
            self.store.stage(key, result, task, attempt)
            sample = sample_keys(result.column(out["sample_key"]), out["samples"], out["seed"])
            return {"sample": table_to_hex(pa.table({"k": sample}))}
        elif kind == "table":
            if out.get("names"):
                result = result.rename_columns(out["names"])
            if out.get("schema"):
                result = _conform(con, result, schema_from_hex(out["schema"]), out["insert_columns"])
            self.store.put(key, 0, result)
            return {"partition_bytes": [result.nbytes]}
        elif kind == "single":
            return self._store_parts(key, [result], task, attempt, mode, keep)
        elif kind == "result" and result.nbytes <= INLINE_RESULT_BYTES:
            # Sent back with the task's answer: the client's fetch of it would be one more
            # round trip, the largest part of what a small repeated query costs outside its run.
            return {"partition_bytes": [result.nbytes], "partition_rows": [result.num_rows], "inline": table_to_hex(result)}
        elif kind in ("broadcast", "result", "materialize"):
            self.store.put(key, task if kind != "broadcast" else 0, result, task, attempt)
            reply: dict[str, Any] = {"partition_bytes": [result.nbytes], "partition_rows": [result.num_rows]}
            if kind == "broadcast":
                reply["ranges"] = _integer_ranges(result)
            return reply
        else:
            raise OperationalError(f"unknown output kind {kind!r}")
        return self._store_parts(key, partitioner.split(result, ids, out["partitions"]), task, attempt, mode, keep)

    def finalize_range(self, spec: dict) -> dict[str, Any]:
        """Partition staged map output once the coordinator has chosen the bounds.

        ``tasks`` limits it to those map tasks (prefetch finalizes each as it finishes); the
        reply gives bytes per partition for every task, for the size bookkeeping.
        """
        wanted = {int(t): a for t, a in spec["tasks"].items()}
        staged = self.store.take_staged(spec["key"], wanted)
        if len(staged) < len(wanted):
            found = {source for source, _, _ in staged}
            missing = [[t, -1, a] for t, a in wanted.items() if t not in found]
            raise input_lost(self.address, spec["key"], missing, "staged map output is not here")
        bounds = _bounds(spec)
        per_task: dict[int, dict[str, list[int]]] = {}
        with self.connections.connection() as lease:
            while staged:  # pop each map output, so it is freed once its parts are kept or sent
                source, attempt, table = staged.pop()
                per_task[source] = self._partition_range(lease.con, spec, bounds, source, attempt, table)
        return {"tasks": {str(t): sizes for t, sizes in per_task.items()}}

    def _partition_range(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: dict,
        bounds: pa.Array,
        source: int,
        attempt: int,
        table: pa.Table,
        keep: list[int] | None = None,
    ) -> dict[str, list[int]]:
        """Split one map task's output by ``bounds``: keep it (pull, or reducers not yet placed)
        or keep the local parts and send the rest to their reducers' hosts (``spec`` says which).
        Returns the bytes and rows per partition."""
        key = spec["key"]
        ids = partitioner.range_ids(con, table, spec["sort_key"], bounds, spec["desc"], spec["nulls_first"])
        parts = partitioner.split(table, ids, len(bounds) + 1)
        destinations = {int(p): a for p, a in (spec.get("destinations") or {}).items()}
        if not destinations:
            return self._store_parts(key, parts, source, attempt, spec.get("mode", "prefetch"), keep)
        remote = {p: t for p, t in enumerate(parts) if t.num_rows and destinations.get(p, self.address) != self.address}
        self.store.put_parts(key, [t.slice(0, 0) if p in remote else t for p, t in enumerate(parts)], source, attempt)
        pushed = self._send(key, source, attempt, remote, destinations)
        return {
            "partition_bytes": [t.nbytes for t in parts], "partition_rows": [t.num_rows for t in parts],
            **pushed.reply(), "push_rate": self.pushes.rate,
        }

    def push(self, spec: dict) -> dict[str, Any]:
        """Send one map task's blocks of the partitions ``destinations`` names to their
        reducers' hosts (SCache's pre-fetch; the coordinator sends one call per host).

        Blocks travel in pieces (``exchange.push_schedule``), each a do_put stream of record
        batches tagged with their partition and source task attempt; blocks for reducers on
        this host stay put. Returns the bytes sent away, where each partition went, and the
        hosts that failed (their partitions' blocks are held here again).
        """
        key, task, attempt = spec["key"], int(spec["task"]), int(spec["attempt"])
        destinations = {int(p): a for p, a in spec["destinations"].items()}
        remote = [p for p, address in destinations.items() if address != self.address]
        blocks = self.store.take_blocks(key, task, attempt, remote)
        pushed = self._send(key, task, attempt, blocks, destinations)
        return {"sent_bytes": pushed.sent_bytes, **pushed.reply(), "push_rate": self.pushes.rate}

    def copy_blocks(self, spec: dict) -> dict[str, Any]:
        """Send a copy of finished map tasks' blocks to another worker, which keeps it as
        backups: a stage's small output held on two workers is not recomputed, stage after
        stage, when one of them is lost, and readers can turn from a slow holder to the copy.
        Returns the partitions the other worker kept, per task."""
        key, address = spec["key"], spec["to"]
        kept: dict[str, list[int]] = {}
        for task, attempt in spec["tasks"].items():
            blocks = self.store.copy_blocks(key, int(task), attempt)
            if not blocks:
                continue
            parts = sorted(blocks.items())
            kept[task] = self.peers.call(key, address, functools.partial(self._put_copies, address, key, int(task), attempt, parts))
        return {"kept": kept}

    def _put_copies(self, address: str, key: str, task: int, attempt: int, parts: list[tuple[int, pa.Table]]) -> list[int]:
        """One task's copies to ``address``; its client is taken inside the peer call, so that
        none is made again for a peer the query declared lost."""
        return self.pool.get(address).put_blocks(key, task, attempt, parts, copies=True)

    def _send(self, key: str, task: int, attempt: int, blocks: dict[int, pa.Table], destinations: dict[int, str]) -> Pushed:
        """Push blocks to their reducers' hosts as the push schedule orders them
        (``exchange.push_schedule``). A host that fails a piece is not sent more, and the
        blocks meant for it that it did not get all of go back into this worker's store, to be
        fetched from here: a push to a worker lost meanwhile costs no map task its output. The
        blocks that went keep a copy here as backups (``BlockStore.put_backups``)."""
        by_host: dict[str, list[tuple[int, pa.Table]]] = {}
        for p, table in blocks.items():
            by_host.setdefault(destinations[p], []).append((p, table))
        planned = {h: pieces(parts) for h, parts in by_host.items()}
        landed: dict[str, int] = dict.fromkeys(planned, 0)
        failed: dict[str, str] = {}
        lock = threading.Lock()

        def send(address: str, piece: Piece) -> None:
            try:
                self.peers.call(key, address, lambda: self.pool.get(address).put_blocks(key, task, attempt, piece))
            except Error as e:
                with lock:
                    failed.setdefault(address, str(e))
                raise
            with lock:
                landed[address] += 1

        if blocks:
            self._reached("push")
        with contextlib.suppress(Error):  # each host's failure is in ``failed``
            push_all(planned, destination_order(self.address, list(by_host)), self.pushes, send, self._senders)
        missed = {h for h in planned if landed[h] < len(planned[h])}
        for p, table in blocks.items():
            if destinations[p] in missed:
                self.store.put(key, p, table, task, attempt)
        sent = {p: table for p, table in blocks.items() if destinations[p] not in missed}
        return Pushed(
            sum(t.nbytes for t in sent.values()), {p: destinations[p] for p in sent},
            self.store.put_backups(key, task, attempt, sent), failed,
        )


@dataclass
class Pushed:
    """What a push did: the bytes and partitions that reached their reducers' hosts, those
    kept here as backups too, and the hosts that failed (address → why; what was meant for
    them is held here again)."""

    sent_bytes: int
    sent: dict[int, str]
    backups: list[int]
    failed: dict[str, str]

    def reply(self) -> dict[str, Any]:
        """The parts of a push's answer to the coordinator that say where blocks are."""
        return {"sent": {str(p): a for p, a in self.sent.items()}, "backups": self.backups, "unreachable": self.failed}


def task_key(spec: dict) -> str:
    """The name one attempt of a task is cancelled by: a speculative copy that lost its race is
    stopped alone, its query's other tasks run on."""
    return f"{spec['query']}/{spec['stage']}/{spec['task']}/{spec.get('attempt', 0)}"


class Cancellations:
    """The DuckDB connections each query's tasks run on here, so that cancelling a query (its
    client interrupted it, or another of its tasks failed) stops the tasks it has running, and
    cancelling one task attempt (see :func:`task_key`) stops that one.

    DuckDB drops an interrupt that comes before its query starts, so a cancelled query's
    connections are interrupted again until none is left running (for at most
    ``INTERRUPT_SECONDS``), and a task checks that its query is not cancelled when it starts
    and before it runs its fragment. The last ``KEPT`` cancelled queries are remembered: a task
    that arrives after its query was cancelled is refused.
    """

    KEPT = 1024
    INTERRUPT_SECONDS = 5.0
    INTERRUPT_EVERY = 0.05

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, set[Lease]] = {}
        self._cancelled: dict[str, None] = {}  # an ordered set: the oldest go first

    @contextlib.contextmanager
    def running(self, query: str, lease: Lease, task: str = "") -> Iterator[None]:
        """Hold ``lease`` as one of ``query``'s (and of the task attempt ``task``'s) while it runs."""
        names = [n for n in (query, task) if n]
        with self._lock:
            for name in names:
                self._refuse_cancelled(name)
                self._running.setdefault(name, set()).add(lease)
        try:
            yield
        finally:
            with self._lock:
                for name in names:
                    leases = self._running[name]
                    leases.discard(lease)
                    if not leases:
                        del self._running[name]

    def check(self, query: str, task: str = "") -> None:
        """Raise if ``query`` (or the task attempt ``task``) has been cancelled."""
        with self._lock:
            for name in (query, task):
                if name:
                    self._refuse_cancelled(name)

    def _refuse_cancelled(self, name: str) -> None:
        if name in self._cancelled:
            raise OperationalError(f"{'task' if name.count('/') > 1 else 'query'} {name} was cancelled")

    def cancel(self, query: str) -> None:
        """Stop ``query``'s tasks (or one task attempt, by its :func:`task_key`) here, now and
        when they arrive; returns at once."""
        with self._lock:
            self._cancelled[query] = None
            while len(self._cancelled) > self.KEPT:
                del self._cancelled[next(iter(self._cancelled))]
        threading.Thread(target=self._interrupt, args=(query,), name=f"cancel-{query}", daemon=True).start()

    def _interrupt(self, query: str) -> None:
        deadline = time.monotonic() + self.INTERRUPT_SECONDS
        while time.monotonic() < deadline:
            with self._lock:  # held, so no connection is interrupted once its task has let it go
                leases = self._running.get(query, ())
                for lease in leases:
                    lease.interrupt()
            if not leases:
                return
            time.sleep(self.INTERRUPT_EVERY)


class FetchLimiter:
    """Bounds remote transfers in flight, like Spark's maxReqsInFlight,
    maxBlocksInFlightPerAddress and maxBytesInFlight: at most ``per_host`` requests to one host,
    ``total`` overall, and ``max_bytes`` expected bytes (one larger request may go alone)."""

    def __init__(self, per_host: int = 4, total: int = 16, max_bytes: int = 48 << 20) -> None:
        self.per_host = per_host
        self.max_bytes = max_bytes
        self._total = threading.BoundedSemaphore(total)
        self._hosts: dict[str, threading.BoundedSemaphore] = {}
        self._bytes = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self, host: str, nbytes: int = 0) -> Iterator[None]:
        with self._cond:
            sem = self._hosts.setdefault(host, threading.BoundedSemaphore(self.per_host))
        with self._total, sem:
            with self._cond:
                self._cond.wait_for(lambda: self._bytes == 0 or self._bytes + nbytes <= self.max_bytes)
                self._bytes += nbytes
            try:
                yield
            finally:
                with self._cond:
                    self._bytes -= nbytes
                    self._cond.notify_all()


def _run_fragment(
    lease: Lease,
    sql: str,
    inputs: dict[str, pa.Table],
    scans: dict[str, str],
    splits: list[dict],
    partition_ids: Callable[[duckdb.DuckDBPyConnection, str], str] | None,
    nulls: Sequence[str] = (),
) -> pa.Table:
    """Run a fragment over its Arrow inputs and Parquet scans.

    The scans are common table expressions; each is read once, so DuckDB inlines it and pushes
    the fragment's filters into the Parquet reader. A file that is gone or fails while being
    read is the scan's failure, and says so (DuckDB's message for a non-Parquet file names it).
    DuckDB takes a missing file's path for a directory to search, which the sandbox refuses, so
    a missing file is named here rather than by DuckDB.

    The Arrow inputs are registered as they are. Joined to a Parquet side, whose size DuckDB
    knows, one may get a Bloom filter pushed into its scan, which DuckDB cannot do for Arrow
    ("BLOOM_FILTER is not currently supported in PyArrow Scans", duckdb/duckdb-python#463; an
    IS DISTINCT FROM join filter likewise "can't be an Arrow Scan Pushdown Filter");
    the fragment then runs again with the inputs copied into DuckDB tables. Copying always would
    cost more: those copies take longer than most fragments do. An empty input beside a scan
    (a concatenated union's other branch, a broadcast only the first task reads) is the usual
    one to get that filter, found only once the join's build side is done, so it is copied at
    once: an empty copy costs about 2 ms, the failed run tens. An input holding NaN is copied
    too: DuckDB filters pushed into an Arrow scan treat NaN as IEEE does, not as DuckDB does
    (``sandbox.pool.filters_mishandle``).

    ``splits`` are the Parquet splits the scans read (a missing file is looked for among theirs);
    ``partition_ids`` (a hash output's :meth:`PartitionIds.select`) adds each row's partition id.
    The result's columns of types Arrow does not carry, and the untyped NULL columns ``nulls``,
    are tagged for the fragments that read them (``sandbox.carried_types``).
    """
    if scans:
        sql = "WITH " + ", ".join(f'"{name}" AS ({query})' for name, query in scans.items()) + " " + sql
    # before anything runs it (the partition ids' types are read by running it); what wraps it
    # for a hash output adds only quoted names and integers (``partitioner.hash_sql``)
    one_select(sql)

    def execute() -> pa.Table:
        relation = lease.con.sql(sql if partition_ids is None else partition_ids(lease.con, sql))
        return tagged_result(relation, nulls)

    copied = {
        name for name, table in inputs.items() if (scans and table.num_rows == 0) or filters_mishandle(table, sql)
    }
    lease.add_inputs({name: table for name, table in inputs.items() if name not in copied})
    lease.add_inputs({name: inputs[name] for name in copied}, copy=True)
    try:
        try:
            return execute()
        except duckdb.NotImplementedException as e:
            if "Arrow Scan" not in str(e):  # a filter DuckDB cannot push into an Arrow scan
                raise
        lease.clear()
        lease.add_inputs(inputs, copy=True)
        return execute()
    except (duckdb.IOException, duckdb.PermissionException) as e:
        if not splits:
            raise
        files = sorted({path for split in splits for path in scan.split_files(split)})  # only on failure
        missing = [path for path in files if not os.path.isfile(path)]
        reason = f"{missing[0]} no longer exists" if missing else str(e).splitlines()[0]
        raise OperationalError(f"scan failed: {reason}") from e


def _usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _bounds(spec: dict) -> pa.Array:
    """The range bounds a finalize request (or a map task's ``finalize`` output) carries."""
    return table_from_hex(spec["bounds"]).column(0).combine_chunks()


def _write_file(
    result: pa.Table | pa.RecordBatchReader, names: list[str], directory: str, task: int, attempt: int, fmt: str
) -> dict[str, Any]:
    """One result task's share of COPY ... TO: part-NNNNN, numbered in result order.

    A table is written whole (Parquet cuts it into row groups); a stream one batch at a time,
    so only one batch of it is ever in memory. The attempt writes a file of its own, created
    exclusively, and renames it into place once complete: a part file is never half written,
    and a task run again (its worker was lost) replaces its earlier attempt's file.
    """
    if fmt not in PART_FORMATS or type(task) is not int:
        # The name is made of both: a "format" of ``x/../../f`` wrote outside the directory.
        raise ProgrammingError(f"a COPY part is numbered and is one of {PART_FORMATS}, not {task!r} and {fmt!r}")
    if not os.path.isfile(os.path.join(directory, MARKER)):
        raise OperationalError(f"cannot write into {directory}: COPY has not claimed it (its {MARKER} is missing)")
    path = os.path.join(directory, f"part-{task:05d}.{fmt}")
    partial = os.path.join(directory, attempt_file(f"part-{task:05d}.{fmt}", attempt))
    schema = pa.schema([f.with_name(n) for f, n in zip(result.schema, names, strict=True)])
    rows = nbytes = 0
    try:
        # "x": a file that appeared since COPY claimed the directory is never overwritten.
        with open(partial, "xb") as sink, CsvWriter(sink, schema) if fmt == "csv" else ParquetWriter(sink, schema) as writer:
            for part in [result] if isinstance(result, pa.Table) else result:
                part = part.rename_columns(names)
                writer.write(part)
                rows, nbytes = rows + part.num_rows, nbytes + part.nbytes
        os.replace(partial, path)
    except OSError as e:
        raise OperationalError(f"cannot write {path}: {e}") from e
    return {"partition_bytes": [nbytes], "rows": rows, "bytes": nbytes, "schema": schema_to_hex(schema)}


def _integer_ranges(table: pa.Table) -> dict[str, list[int] | None]:
    """min/max of every integer column (None when all NULL): joins prune probe scans with them."""
    out: dict[str, list[int] | None] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_integer(column.type):
            mm = pc.min_max(column)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            out[name] = None if lo is None else [lo, hi]
    return out


def _conform(con: duckdb.DuckDBPyConnection, result: pa.Table, target: pa.Schema, columns: list[str]) -> pa.Table:
    """Lay INSERT rows out as the table's columns: listed ones cast as DuckDB's INSERT casts
    them, the others NULL. Arrow's casts differ: a DOUBLE 0.0 stored into VARCHAR was '0' where
    DuckDB stores '0.0', a timestamp gained six zeros of microseconds, and '2.5' or ' 12' would
    not go into an INTEGER at all."""
    position = {name: i for i, name in enumerate(columns)}
    rows = con.from_arrow(result.rename_columns([f"v{i}" for i in range(result.num_columns)]))

    def cast(f: pa.Field) -> str:
        i = position.get(f.name)
        return f"CAST({'NULL' if i is None else f'v{i}'} AS {column_type(f)}) AS {identifier(f.name)}"

    try:
        return rows.project(", ".join(cast(f) for f in target)).to_arrow_table().cast(target)
    except (duckdb.Error, pa.ArrowException):
        for f in target:  # which column: the one that fails alone
            try:
                rows.project(cast(f)).to_arrow_table()
            except duckdb.Error as e:
                raise DataError(f"cannot store the rows in column {f.name!r} ({type_code(f.type)}): {first_line(str(e))}") from e
        raise
