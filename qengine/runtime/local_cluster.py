"""A local cluster: N worker processes on this host, owned by the connecting process.

Workers get the cluster token through their environment (never argv, which ``ps`` shows),
bind to 127.0.0.1 and report their port on stdout. Their stdin is a pipe from this process: it
closes when this process ends however it ends, and the workers exit on that. ``close()`` asks
them to stop, then terminates and finally kills whatever is left.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass

from qengine.errors import OperationalError
from qengine.transport.rpc import ClientPool
from qengine.transport.wire import load_converters

STARTUP_TIMEOUT = 30.0
# Allocator settings for worker processes, so memory a worker frees goes back to the OS and its
# resident size follows what it holds. Without them a sort's worker stayed near its high-water
# mark: mimalloc (Arrow's pool) keeps freed pages until later activity in the same thread, and
# glibc malloc (which holds blocks received over gRPC) serves ~1 MB blocks from its heaps once
# its adaptive mmap threshold has grown, and keeps them. The user's own environment wins.
ALLOCATOR_ENV = {"MIMALLOC_PURGE_DELAY": "0", "MALLOC_MMAP_THRESHOLD_": "131072"}


@dataclass
class WorkerHandle:
    id: int
    address: str
    process: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None


class LocalCluster:
    def __init__(
        self, workers: int = 2, host: str = "127.0.0.1", log_dir: str | None = None, shuffle_memory: int | None = None
    ) -> None:
        if workers < 1:
            raise OperationalError("a cluster needs at least one worker")
        self.token = secrets.token_hex(16)
        self.shuffle_memory = shuffle_memory
        self.pool = ClientPool(self.token)
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="qengine-logs-")
        # Each worker's spill directory is made here and removed on close as well as by the
        # worker itself: a worker that was killed cannot remove its own.
        self.spill_dirs: list[str] = []
        self.workers: list[WorkerHandle] = []
        self._procs: list[subprocess.Popen] = []
        self.failed = False
        self._closed = False
        self._lock = threading.Lock()
        _live_clusters.add(self)
        try:
            procs = [self._spawn(i, host) for i in range(workers)]
            load_converters()  # this process coordinates; do it while the workers start
            for i, proc in enumerate(procs):
                port = self._await_port(proc, i)
                self.workers.append(WorkerHandle(i, f"{host}:{port}", proc))
        except BaseException:
            self.close()
            raise

    def _spawn(self, worker_id: int, host: str) -> subprocess.Popen:
        env = {**ALLOCATOR_ENV, **os.environ, "QENGINE_TOKEN": self.token}
        log = os.path.join(self.log_dir, f"worker-{worker_id}.log")
        spill_dir = tempfile.mkdtemp(prefix="qengine-shuffle-")
        self.spill_dirs.append(spill_dir)
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "qengine.runtime.worker", "--id", str(worker_id), "--host", host, "--log", log,
                 "--spill-dir", spill_dir]
                + (["--shuffle-memory", str(self.shuffle_memory)] if self.shuffle_memory is not None else []),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                close_fds=True,
                # Ctrl-C in a terminal signals its whole foreground process group; in a session
                # of their own the workers are out of its reach, and the client alone decides
                # (it cancels its query). They still exit when this process goes: stdin closes.
                start_new_session=True,
            )
        self._procs.append(proc)
        return proc

    def _await_port(self, proc: subprocess.Popen, worker_id: int) -> int:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(proc.stdout.readline().decode()), daemon=True)
        reader.start()
        reader.join(STARTUP_TIMEOUT)
        line = result[0] if result else ""
        if not line.startswith("READY "):
            self.failed = True
            log = os.path.join(self.log_dir, f"worker-{worker_id}.log")
            raise OperationalError(f"worker {worker_id} did not start (see {log})")
        proc.stdout.close()
        return int(line.split()[1])

    @property
    def addresses(self) -> list[str]:
        return [w.address for w in self.workers]

    def check_alive(self, addresses: list[str]) -> None:
        """Raise if one of the workers at ``addresses`` (a query's workers) has exited."""
        dead = [w for w in self.workers if not w.alive() and w.address in addresses]
        if dead:
            self.failed = True
            names = ", ".join(f"worker {w.id} (exit code {w.process.returncode})" for w in dead)
            raise OperationalError(f"{names} died; logs are in {self.log_dir}")

    def check_readable(self, paths: list[str]) -> None:
        """Local workers share this process's host and user, which has just resolved the paths."""

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for w in self.workers:
            if w.alive():
                with contextlib.suppress(Exception):  # best effort; terminate follows
                    self.pool.get(w.address).action("shutdown", timeout=2)
        self.pool.close()
        procs = self._procs
        for p in procs:
            if p.stdin:
                p.stdin.close()
        for p in procs:
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for spill_dir in self.spill_dirs:
            shutil.rmtree(spill_dir, ignore_errors=True)
        if self._own_log_dir and not self.failed:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        _live_clusters.discard(self)


_live_clusters: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for cluster in list(_live_clusters):
        cluster.close()
