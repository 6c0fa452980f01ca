"""A worker process: an Arrow Flight server that runs tasks and serves its blocks.

Started by a coordinator (``python -m qengine.worker``) with the cluster token in its
environment. It reports its port on stdout, then logs only to its log file. It exits when the
pipe on its stdin closes, which happens when the coordinator process ends for any reason,
``kill -9`` included, so no worker outlives its coordinator.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from qengine.exchange.store import BlockStore
from qengine.rpc import ClientPool, TokenAuthMiddlewareFactory, server_error
from qengine.task import TaskRunner

log = logging.getLogger("qengine.worker")


class WorkerServer(flight.FlightServerBase):
    def __init__(self, host: str, port: int, token: str, worker_id: int, shuffle_memory: int | None = None) -> None:
        super().__init__(f"grpc+tcp://{host}:{port}", middleware={"auth": TokenAuthMiddlewareFactory(token)})
        self.worker_id = worker_id
        self.address = f"{host}:{self.port}"
        self.store = BlockStore(budget=shuffle_memory)
        self.pool = ClientPool(token)
        self.runner = TaskRunner(self.store, self.address, self.pool)

    def _handle(self, name: str, body: dict) -> Any:
        if name == "run_task":
            return self.runner.run(body)
        if name == "finalize_range":
            return self.runner.finalize_range(body)
        if name == "push":
            return self.runner.push(body)
        if name == "expect":
            self.store.expect(body["key"], body["seq"], body["expected"], body["partitions"], body["slots"])
            return {"ok": True}
        if name == "release":
            return {"released": body["prefix"], "spilled": self.store.release(body["prefix"])}
        if name == "ping":
            return {
                "worker": self.worker_id,
                "pid": os.getpid(),
                "bytes": self.store.nbytes(),
                "budget": self.store.budget,
                "spill_dir": self.store.spill_dir,
            }
        if name == "shutdown":
            threading.Thread(target=self.shutdown, daemon=True).start()
            return {"ok": True}
        raise ValueError(f"unknown action {name!r}")

    def do_action(self, context: flight.ServerCallContext, action: flight.Action):
        try:
            body = json.loads(action.body.to_pybytes() or b"{}")
            result = self._handle(action.type, body)
        except Exception as e:  # every failure goes back to the caller, the worker lives on
            log.exception("action %s failed", action.type)
            raise server_error(e) from e
        return [flight.Result(json.dumps(result).encode())]

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.RecordBatchStream:
        spec = json.loads(ticket.ticket)
        table = self.store.get(spec["key"], spec["partition"], consume=bool(spec.get("consume")))
        if table is None:
            raise server_error(KeyError(f"worker {self.worker_id} holds no blocks of {spec['key']}"))
        return flight.RecordBatchStream(table)

    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor, reader, writer) -> None:
        spec = json.loads(descriptor.command)
        if not spec.get("blocks"):
            table: pa.Table = reader.read_all()
            self.store.put(spec["key"], spec.get("partition", 0), table)
            return
        pieces: dict[tuple[int, int], list[pa.RecordBatch]] = {}
        for chunk in reader:
            meta = json.loads(chunk.app_metadata.to_pybytes())
            pieces.setdefault((meta["p"], meta["s"]), []).append(chunk.data)
        for (partition, source), batches in pieces.items():
            self.store.put(spec["key"], partition, pa.Table.from_batches(batches), source)


def _exit_when_parent_goes(store: BlockStore) -> None:
    """Block on stdin; EOF means the coordinator is gone, so leave at once (spill files too)."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        store.close()
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="qengine-worker")
    parser.add_argument("--id", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--shuffle-memory", type=int, default=None, help="shuffle memory budget in bytes")
    args = parser.parse_args(argv)
    token = os.environ.pop("QENGINE_TOKEN", "")
    if not token:
        sys.exit("qengine worker: QENGINE_TOKEN is not set")
    server = WorkerServer(args.host, args.port, token, args.id, args.shuffle_memory)
    print(f"READY {server.port}", flush=True)
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker-%(process)d %(levelname)s %(message)s")
    threading.Thread(target=_exit_when_parent_goes, args=(server.store,), daemon=True).start()
    log.info("worker %d serving on %s", args.id, server.address)
    server.serve()
    server.store.close()
    os._exit(0)


if __name__ == "__main__":
    main()
