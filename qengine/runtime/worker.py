"""A worker process: an Arrow Flight server that runs tasks and serves its blocks.

Started by a coordinator (``python -m qengine.runtime.worker``) with the cluster token in its
environment. It reports its port on stdout, then logs only to its log file. It exits when the
pipe on its stdin closes, which happens when the coordinator process ends for any reason,
``kill -9`` included, so no worker outlives its coordinator.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from qengine.catalog.access import AccessPolicy, inside
from qengine.errors import Error, OperationalError, input_lost
from qengine.exchange.store import BlockStore, MissingBlocksError
from qengine.runtime.collector_pace import RARE
from qengine.runtime.fair_queue import ShareTerms
from qengine.runtime.faults import FaultPlan
from qengine.runtime.task import NO_BLOCKS, TaskRunner
from qengine.runtime.task_queue import TaskQueue
from qengine.transport.rpc import ActionServer, Client, ClientPool, Streamed, server_error
from qengine.transport.wire import load_converters

log = logging.getLogger("qengine.runtime.worker")


class WorkerServer(ActionServer):
    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        worker_id: int,
        shuffle_memory: int | None = None,
        tls: tuple[bytes, bytes] | None = None,
        tls_root: bytes | None = None,
        spill_dir: str | None = None,
        ceiling: AccessPolicy | None = None,
    ) -> None:
        super().__init__(host, port, token, tls)
        load_converters()
        self.worker_id = worker_id
        self.store = BlockStore(budget=shuffle_memory, spill_dir=spill_dir)
        self.pool = ClientPool(token, tls_root)
        self.runner = TaskRunner(self.store, self.address, self.pool, ceiling=ceiling, faults=FaultPlan.from_env())
        self.runner.worker_id = worker_id
        self.tasks_run = 0
        self.queue = TaskQueue(self._run_task)  # the tasks the coordinator sent ahead (Canary)

    def _run_task(self, spec: dict) -> dict[str, Any]:
        self.tasks_run += 1
        return self.runner.run(spec)

    def _handle(self, name: str, body: dict) -> Any:
        if name == "run_tasks":
            template = body.get("template") or {}  # what the batch's tasks share, sent once
            specs = [dict(template, **task) for task in body["tasks"]]
            return Streamed(self.queue.run(body["query"], int(body["slots"]), specs, ShareTerms.of_json(body.get("share"))))
        if name == "withdraw_tasks":  # work stealing: tasks queued here and not started go elsewhere
            keys = {(int(s), int(t), int(a)) for s, t, a in body["tasks"]}
            return {"withdrawn": [list(k) for k in self.queue.withdraw(body["query"], keys)]}
        if name == "finalize_range":
            return self.runner.finalize_range(body)
        if name == "push":
            return self.runner.push(body)
        if name == "copy_blocks":
            return self.runner.copy_blocks(body)
        if name == "expect":
            self.store.expect(body["key"], body["seq"], body["expected"], body["partitions"], body["slots"])
            return {"ok": True}
        if name == "cancel":
            self.runner.cancellations.cancel(body["query"])
            if "/" not in body["query"]:  # a whole query, not one task attempt: its queue goes too
                self.queue.cancel(body["query"], OperationalError(f"query {body['query']} was cancelled"))
            return {"ok": True}
        if name == "forget":  # a peer declared lost: the query's calls to it fail, now and later
            self.runner.peers.lost(body["query"], body["address"])
            return {"ok": True}
        if name == "release":
            return {"released": body["prefix"], "spilled": self.store.release(body["prefix"])}
        if name == "progress":
            return self.runner.progress.scores(body["query"])
        if name == "retire_blocks":
            for partition, want in body["blocks"].items():
                self.store.retire_blocks(body["key"], int(partition), want)
            return {"ok": True}
        if name == "ping":
            return {
                "worker": self.worker_id,
                "pid": os.getpid(),
                "tasks_run": self.tasks_run,
                "bytes": self.store.nbytes(),
                "spilled": self.store.spilled_bytes(),
                "rss": resident_bytes(),
                "budget": self.store.budget,
                "spill_dir": self.store.spill_dir,
            }
        if name == "check_paths":
            # only inside the worker's roots: it answered whether any file at all could be read
            ceiling = self.runner.ceiling
            return {"unreadable": [p for p in body["paths"]
                                   if (ceiling is not None and not inside(os.path.realpath(p), ceiling.read_roots)) or not os.access(p, os.R_OK)]}
        if name == "shutdown":
            threading.Thread(target=self.shutdown, daemon=True).start()
            return {"ok": True}
        raise ValueError(f"unknown action {name!r}")

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
        spec = json.loads(ticket.ticket)
        try:
            table = self.store.get(spec["key"], spec["partition"], want=spec.get("want"))
        except MissingBlocksError as e:
            raise server_error(input_lost(self.address, spec["key"], e.lost(), str(e))) from e
        if table is None:
            raise server_error(KeyError(f"worker {self.worker_id} {NO_BLOCKS} {spec['key']}"))
        return flight.RecordBatchStream(table)

    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, reader, writer) -> None:
        spec = json.loads(descriptor.command)
        if not spec.get("blocks"):
            table: pa.Table = reader.read_all()
            self.store.put(spec["key"], spec.get("partition", 0), table)
            return
        pieces: dict[tuple[int, tuple[int, int]], list[pa.RecordBatch]] = {}
        for chunk in reader:
            meta = json.loads(chunk.app_metadata.to_pybytes())
            pieces.setdefault((meta["p"], (meta["s"], meta.get("a", 0))), []).append(chunk.data)
        tables = {piece: pa.Table.from_batches(batches) for piece, batches in pieces.items()}
        if not spec.get("copies"):
            for (partition, (source, attempt)), table in tables.items():
                self.store.put(spec["key"], partition, table, source, attempt)
            return
        by_attempt: dict[tuple[int, int], dict[int, pa.Table]] = {}
        for (partition, pair), table in tables.items():
            by_attempt.setdefault(pair, {})[partition] = table
        kept = [p for (source, attempt), parts in by_attempt.items() for p in self.store.put_backups(spec["key"], source, attempt, parts)]
        writer.write(pa.py_buffer(json.dumps(kept).encode()))


def resident_bytes() -> int | None:
    """This process's resident memory (Linux's /proc), for the web UI's workers page; None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _exit_when_parent_goes(store: BlockStore) -> None:
    """Block on stdin; EOF means the coordinator is gone, so leave at once (spill files too)."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        store.close()
        os._exit(0)


def serve_joined(
    join: str,
    host: str,
    port: int,
    token: str,
    log_file: str,
    memory_budget: int | None = None,
    tls: tuple[bytes, bytes] | None = None,
    tls_root: bytes | None = None,
    on_start: Callable[[Callable[[], None]], None] | None = None,
) -> None:
    """Serve as a worker of the standalone coordinator at ``join`` (``qengine worker``).

    Registers, then heartbeats; leaves when the coordinator says shutdown, or when it has not
    answered for a whole heartbeat timeout (a worker never outlives its coordinator).
    """
    # No file may be opened until the coordinator has said where data lives.
    server = WorkerServer(host, port, token, -1, memory_budget, tls, tls_root, ceiling=AccessPolicy((), ()))
    coordinator = Client(join, token, tls_root, role="coordinator")
    hello = {"address": server.address, "memory_budget": memory_budget}
    try:
        reply = coordinator.action("register", hello, timeout=10)
    except Exception:
        server.shutdown()
        raise
    server.worker_id = server.runner.worker_id = reply["id"]
    # The coordinator's data and output roots bound every file this worker opens.
    server.runner.ceiling = AccessPolicy.from_json(reply["access"])
    timeout = float(reply["heartbeat_timeout"])
    print(f"qengine worker {server.worker_id} serving on {server.address}, joined {join}; log: {log_file}", flush=True)
    _log_to(log_file)
    log.info("worker %d serving on %s for coordinator %s", server.worker_id, server.address, join)

    def beat() -> None:
        last_ok = time.monotonic()
        while True:
            time.sleep(max(0.2, timeout / 4))
            try:
                alive = coordinator.action("heartbeat", {"id": server.worker_id}, timeout=timeout)["alive"]
                if not alive:  # declared dead (e.g. after a pause): join again under a new id
                    # Its queries went on without it: what it holds is stale, and would be
                    # read twice if a query's block names met it again.
                    server.store.release("")
                    server.worker_id = server.runner.worker_id = coordinator.action("register", hello, timeout=timeout)["id"]
                    log.warning("re-registered as worker %d", server.worker_id)
                last_ok = time.monotonic()
            except Error as e:  # keep trying until the timeout has passed
                if time.monotonic() - last_ok > timeout:
                    log.error("coordinator %s unreachable for %.1fs (%s): exiting", join, timeout, e)
                    server.store.close()
                    os._exit(0)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()
    _collect_rarely()
    threading.Thread(target=server.runner.warm_up, name="warm-up", daemon=True).start()
    if on_start is not None:
        on_start(server.shutdown)  # e.g. stop cleanly on SIGTERM
    server.serve()
    server.store.close()


def _collect_rarely() -> None:
    """Make the cyclic garbage collector run less often in a worker process.

    What a task allocates is mostly Arrow and DuckDB data, freed by reference counting; the
    collector's default of a pass every 700 allocations took 3.6% of a worker's task samples
    (py-spy, TPC-DS q66 run 30 times) walking the long-lived objects of its modules, servers and
    pools. Those are frozen out of its view once the worker is up, and young objects are
    collected in larger batches.
    """
    gc.freeze()
    gc.set_threshold(*RARE)


def _log_to(path: str) -> None:
    """From here on, everything (including stray prints) goes to the log file, not the terminal."""
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    faulthandler.enable()  # a crash in native code (DuckDB, Arrow) leaves the Python stacks in the log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker-%(process)d %(levelname)s %(message)s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="qengine-worker")
    parser.add_argument("--id", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--shuffle-memory", type=int, default=None, help="shuffle memory budget in bytes")
    parser.add_argument("--spill-dir", default=None, help="where shuffle blocks spill (default: a new temporary directory)")
    args = parser.parse_args(argv)
    # A local cluster's worker belongs to its client, not to the terminal: an interrupt meant
    # for the client must not kill it (its parent stops it, or it exits when the parent goes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    token = os.environ.pop("QENGINE_TOKEN", "")
    if not token:
        sys.exit("qengine worker: QENGINE_TOKEN is not set")
    if args.spill_dir:
        os.makedirs(args.spill_dir, exist_ok=True)
    server = WorkerServer(args.host, args.port, token, args.id, args.shuffle_memory, spill_dir=args.spill_dir)
    _collect_rarely()
    print(f"READY {server.port}", flush=True)
    _log_to(args.log)
    threading.Thread(target=server.runner.warm_up, name="warm-up", daemon=True).start()
    threading.Thread(target=_exit_when_parent_goes, args=(server.store,), daemon=True).start()
    log.info("worker %d serving on %s", args.id, server.address)
    server.serve()
    server.store.close()
    os._exit(0)


if __name__ == "__main__":
    main()
