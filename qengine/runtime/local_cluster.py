"""A local cluster: N worker processes on this host, owned by the connecting process.

Workers get the cluster token through their environment (never argv, which ``ps`` shows),
bind to 127.0.0.1 and report their port on stdout. Their stdin is a pipe from this process: it
closes when this process ends however it ends, and the workers exit on that. ``close()`` asks
them to stop, then terminates and finally kills whatever is left.

A watchdog pings every worker each second. A worker that has exited, or has not answered for
``hang_timeout`` seconds (stopped, or stuck), is lost: the cluster kills it (it owns the
process), removes its spill directory and starts a replacement at a new address, so a
connection keeps its size. A worker that does not answer but works (its process uses CPU, and
is not stopped) is given up to ``BUSY_LIMIT`` times as long: on a loaded host, a worker deep in
a large result answered late and was killed as hung, and its work made again. Queries learn of the loss through :meth:`LocalCluster.lost` and
recover from it (``runtime.query_run``).

The first workers start in the background: the connection opens at once, statements that read
no data run without them (``Coordinator.run_here``), and anything that needs them waits for
them (``wait_started``), or raises why they did not start. A ``lazy`` cluster spawns them only
then.

The replacement is started once no query is running (or ``REPLACE_WITHIN`` seconds after the
loss, whichever comes first). Every worker of a local cluster shares this host's cores, so a
replacement adds slots to a running query but no CPU, while starting it takes half a second
of a core and its first tasks run cold: started at once, it doubled the time of sub-second
TPC-DS queries that lost a worker. A query that finds no live worker waits for one being
started.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import psutil

from qengine.errors import OperationalError
from qengine.runtime.cluster_load import ClusterLoad
from qengine.runtime.membership_changes import MembershipChanges
from qengine.runtime.network_load import NetworkLoad
from qengine.runtime.query_history import QueryHistory
from qengine.runtime.shares import Shares
from qengine.transport.rpc import ClientPool
from qengine.transport.wire import load_converters

log = logging.getLogger("qengine.runtime.local_cluster")

STARTUP_TIMEOUT = 30.0
DEFAULT_HANG_TIMEOUT = 5.0  # seconds without an answer to a ping before a worker counts as hung
BUSY_LIMIT = 12  # times hang_timeout a worker that uses CPU may go without answering
BUSY_CPU = 0.1  # cores a worker that does not answer must use to count as busy
PING_EVERY = 1.0
REPLACE_WITHIN = 10.0  # seconds a replacement waits for the running queries to end
SUSPECT_WAIT = 1.0  # seconds a worker whose call broke is given to exit (a hung one is the watchdog's)
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
    spill_dir: str | None = None
    last_answer: float = field(default_factory=time.monotonic)
    cpu_seen: tuple[float, float] = (0.0, 0.0)  # (when, the process's CPU seconds then) at the last look

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def look(self) -> bool:
        """Whether the process used a tenth of a core or more since the last look, and is not
        stopped: a worker that is busy, not hung (a hung one's idle threads use next to none)."""
        if self.process is None:
            return False
        try:
            process = psutil.Process(self.process.pid)
            with process.oneshot():
                stopped = process.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE)
                times = process.cpu_times()
        except psutil.Error:
            return False
        (then, before), now = self.cpu_seen, time.monotonic()
        self.cpu_seen = (now, times.user + times.system)
        return not stopped and self.cpu_seen[1] - before >= BUSY_CPU * (now - then)


class LocalCluster:
    def __init__(
        self,
        workers: int = 2,
        host: str = "127.0.0.1",
        log_dir: str | None = None,
        shuffle_memory: int | None = None,
        hang_timeout: float = DEFAULT_HANG_TIMEOUT,
        lazy: bool = False,
    ) -> None:
        """``lazy`` starts the workers only when something first needs them (``wait_started``):
        a one-statement client whose statement needs no worker never starts any, and one whose
        statement does gives the whole machine to its own start-up meanwhile."""
        if workers < 1:
            raise OperationalError("a cluster needs at least one worker")
        if hang_timeout <= 0:
            raise OperationalError("the hang timeout must be positive")
        self.host = host
        self.hang_timeout = hang_timeout
        self.token = secrets.token_hex(16)
        self.shuffle_memory = shuffle_memory
        self.pool = ClientPool(self.token)
        self.load = ClusterLoad()  # every query's tasks per worker (runtime.cluster_load)
        self.shares = Shares()  # every running query's claim on the workers' slots (runtime.shares)
        self.network = NetworkLoad()  # the bytes under way between hosts (runtime.network_load)
        self.history = QueryHistory()  # the statements run and running (runtime.query_history)
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="qengine-logs-")
        # Each worker's spill directory is made here and removed on close as well as by the
        # worker itself: a worker that was killed cannot remove its own.
        self.spill_dirs: list[str] = []
        self._handles: list[WorkerHandle] = []
        self._procs: list[subprocess.Popen] = []
        # address → why it was lost; addresses are never reused (a replacement that happened
        # to get a lost one's port is started again)
        self._lost: dict[str, str] = {}
        self.changes = MembershipChanges()  # told when a worker is lost or a replacement joins
        self._ids = itertools.count(workers)  # replacements are numbered past the first workers
        self.failed = False
        self._closed = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a query ended, a worker joined, or closing
        self._queries = 0  # queries running on the cluster
        self._stop = threading.Event()
        self._starting: list[threading.Thread] = []  # replacements being started
        self._up = threading.Event()  # the first workers have started, or failed to
        self._startup_error: OperationalError | None = None
        self._size = workers
        self._launched = False
        self._launching = threading.Lock()
        self._watchdog = threading.Thread(target=self._watch, name="worker-watchdog", daemon=True)
        _live_clusters.add(self)
        if not lazy:
            self._launch()

    def _launch(self) -> None:
        """Spawn the first workers (once), and wait for their ports in the background."""
        with self._launching:
            if self._launched or self._closed:
                return
            self._launched = True
            try:
                procs = [self._spawn(i, self.host) for i in range(self._size)]
            except BaseException:
                self.close()
                raise
            threading.Thread(target=self._start, args=(procs,), name="worker-startup", daemon=True).start()

    def _start(self, procs: list[tuple[subprocess.Popen, str]]) -> None:
        """Wait for the first workers to report their ports, in the background: the
        connection is usable at once, and a statement that needs no worker (``SELECT 1``)
        does not wait the half second they take to start (``wait_started``)."""
        try:
            for i, (proc, spill_dir) in enumerate(procs):
                port = self._await_port(proc, i)
                with self._lock:
                    self._handles.append(WorkerHandle(i, f"{self.host}:{port}", proc, spill_dir))
            # This process coordinates. Done once the workers are up, so that it does not slow
            # a statement run while they start, and before any query can need them.
            load_converters()
        except OperationalError as e:  # kept for the statements that need the workers: they raise it
            self._startup_error = e
        except (OSError, ValueError) as e:  # a pipe that broke, a port line that was not one
            self._startup_error = OperationalError(f"the local workers did not start: {e}")
        finally:
            with self._changed:
                if self._startup_error is None and not self._closed:
                    self._watchdog.start()
                self._up.set()
                self._changed.notify_all()

    def wait_started(self) -> None:
        """Wait for the first workers to be up; raise if they failed to start. A closed
        cluster has nothing to wait for (the workers still starting were stopped)."""
        if self._closed:
            return
        if not self._up.is_set():
            self._launch()
        if not self._up.wait(STARTUP_TIMEOUT + PING_EVERY):
            raise OperationalError(f"the local workers did not start within {STARTUP_TIMEOUT:.0f}s (see {self.log_dir})")
        if self._startup_error is not None:
            raise OperationalError(str(self._startup_error)) from self._startup_error

    def _spawn(self, worker_id: int, host: str) -> tuple[subprocess.Popen, str]:
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
        return proc, spill_dir

    def _await_port(self, proc: subprocess.Popen, worker_id: int) -> int:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(proc.stdout.readline().decode()), daemon=True)
        reader.start()
        reader.join(STARTUP_TIMEOUT)
        line = result[0] if result else ""
        if not line.startswith("READY "):
            if self._closed:  # killed by close() while it started
                raise OperationalError("the cluster was closed while its workers started")
            self.failed = True
            log = os.path.join(self.log_dir, f"worker-{worker_id}.log")
            raise OperationalError(f"worker {worker_id} did not start (see {log})")
        proc.stdout.close()
        return int(line.split()[1])

    @property
    def workers(self) -> list[WorkerHandle]:
        """The live workers, once the first workers are up (it waits for them)."""
        self.wait_started()
        return self._handles

    @property
    def addresses(self) -> list[str]:
        """The live workers' addresses, once the first workers are up (it waits for them)."""
        self.wait_started()
        with self._lock:
            return [w.address for w in self._handles]

    @contextlib.contextmanager
    def running_query(self) -> Iterator[None]:
        """Held while a query runs: replacements wait for the cluster to be idle. A query that
        would start with no live worker waits (up to ``STARTUP_TIMEOUT``) for a replacement."""
        with self._changed:
            if not self._handles and self._starting:
                self._changed.wait_for(lambda: self._handles or not self._starting or self._closed, STARTUP_TIMEOUT)
            self._queries += 1
        try:
            yield
        finally:
            with self._changed:
                self._queries -= 1
                self._changed.notify_all()

    def lost(self, addresses: list[str]) -> dict[str, str]:
        """Those of ``addresses`` (a query's workers) that were lost, with why."""
        with self._lock:
            return {a: self._lost[a] for a in addresses if a in self._lost}

    def suspect(self, address: str) -> None:
        """A call to ``address`` failed: if its process has exited, handle the loss now rather
        than at the watchdog's next round."""
        with self._lock:
            handle = next((w for w in self._handles if w.address == address), None)
        if handle is None or handle.process is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):  # a killed process takes a moment to go
            handle.process.wait(timeout=SUSPECT_WAIT)
        if not handle.alive():
            self._replace(handle, f"exited with code {handle.process.returncode}")

    # ---- the watchdog ------------------------------------------------------------------

    def _watch(self) -> None:
        """Ping every worker each second, each in a thread of its own (a hung worker must not
        delay the others' checks); replace those that exited or stopped answering."""
        pinging: dict[str, threading.Thread] = {}
        while not self._stop.wait(PING_EVERY / 4):
            with self._lock:
                handles = list(self._handles)
            now = time.monotonic()
            for handle in handles:
                if not handle.alive():
                    self._replace(handle, f"exited with code {handle.process.returncode}")
                elif now - handle.last_answer > self.hang_timeout and not (
                    handle.look() and now - handle.last_answer <= BUSY_LIMIT * self.hang_timeout
                ):
                    self._replace(handle, f"did not answer for {now - handle.last_answer:.0f}s (hung)")
                elif now - handle.last_answer >= PING_EVERY and not _running(pinging.get(handle.address)):
                    thread = threading.Thread(target=self._ping, args=(handle,), daemon=True)
                    pinging[handle.address] = thread
                    thread.start()

    def _ping(self, handle: WorkerHandle) -> None:
        with contextlib.suppress(Exception):  # no answer: the watchdog sees the time pass
            self.pool.get(handle.address).action("ping", timeout=self.hang_timeout)
            handle.last_answer = time.monotonic()
            handle.look()  # what it has used so far, for the next look to compare with

    def _replace(self, handle: WorkerHandle, why: str) -> None:
        """Kill a lost worker (SIGKILL also ends a stopped one), free its spill files, and
        start a replacement in its place."""
        with self._lock:
            if self._closed or handle not in self._handles:
                return
            self._lost[handle.address] = f"worker {handle.id} at {handle.address} {why}"
            self.failed = True  # its log says why: the logs are kept when the cluster closes
            place = self._handles.index(handle)
            self._handles.pop(place)
            # The replacement starts in the background: it takes about a second to come up, and
            # the caller (a query's scheduling loop, or the watchdog) must not wait for it. It is
            # known to be starting as the loss is (under the lock, so close() never sees it
            # unstarted): a query that finds no worker left then waits for it rather than fail.
            starter = threading.Thread(target=self._start_replacement, args=(handle, place), name="worker-replacement", daemon=True)
            self._starting.append(starter)
            starter.start()
        log.warning("worker %d at %s %s: replacing it", handle.id, handle.address, why)
        self.changes.changed()
        if handle.process is not None:
            with contextlib.suppress(OSError):
                handle.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.process.wait(timeout=5)
        self.pool.forget(handle.address)
        if handle.spill_dir is not None:
            shutil.rmtree(handle.spill_dir, ignore_errors=True)

    def _start_replacement(self, handle: WorkerHandle, place: int) -> None:
        """Start a worker in a lost one's place (in ``workers``, at the same position), once
        the cluster is idle or ``REPLACE_WITHIN`` has passed (see the module's docstring)."""
        try:
            with self._changed:
                # With no worker left, no query can run until a replacement does: start it at once.
                self._changed.wait_for(lambda: not self._queries or not self._handles or self._closed, REPLACE_WITHIN)
                if self._closed:
                    return
            log.info("starting a worker in place of worker %d", handle.id)
            started = self._spawn_replacement()
            if started is None:
                return
            worker_id, address, proc, spill_dir = started
            with self._lock:
                if self._closed:  # closed while it started: it goes too
                    self._stop_process(proc)
                    shutil.rmtree(spill_dir, ignore_errors=True)
                    return
                self._handles.insert(min(place, len(self._handles)), WorkerHandle(worker_id, address, proc, spill_dir))
            log.info("worker %d serving on %s in place of worker %d", worker_id, address, handle.id)
            self.changes.changed()
        finally:
            with self._changed:
                self._starting.remove(threading.current_thread())
                self._changed.notify_all()

    def _spawn_replacement(self) -> tuple[int, str, subprocess.Popen, str] | None:
        """A new worker process at an address no lost worker had; None if none would start."""
        for _ in range(3):
            worker_id = next(self._ids)
            try:
                proc, spill_dir = self._spawn(worker_id, self.host)
                address = f"{self.host}:{self._await_port(proc, worker_id)}"
            except OperationalError as e:
                if not self._closed:  # closed while it started: nothing failed the user needs to hear of
                    log.error("could not start a replacement worker: %s", e)
                return None
            if address not in self._lost:
                return worker_id, address, proc, spill_dir
            self._stop_process(proc)  # the OS gave it a lost worker's port: queries would confuse the two
        return None

    @staticmethod
    def _stop_process(proc: subprocess.Popen) -> None:
        if proc.stdin:
            proc.stdin.close()
        proc.kill()
        proc.wait()

    def worker_states(self) -> list[dict]:
        """The workers as the watchdog sees them, without waiting for them to start: id,
        address, whether alive, seconds since each last answered a ping, and memory budget."""
        now = time.monotonic()
        with self._lock:
            return [
                {"id": w.id, "address": w.address, "alive": w.alive(), "heartbeat_age": now - w.last_answer,
                 "memory_budget": self.shuffle_memory}
                for w in self._handles
            ]

    def check_readable(self, paths: list[str]) -> None:
        """Local workers share this process's host and user, which has just resolved the paths."""

    def close(self) -> None:
        with self._changed:
            if self._closed:
                return
            self._closed = True
            starting = list(self._starting)
            ready = {w.process for w in self._handles}
            self._changed.notify_all()
        with self._launching:  # a launch under way has spawned its workers: they are stopped below
            pass
        self._stop.set()
        for proc in self._procs:  # still starting: it holds nothing yet, and need not finish
            if proc not in ready:
                with contextlib.suppress(OSError):
                    proc.kill()
        for starter in starting:  # a replacement that was starting stops itself once it is up
            starter.join(STARTUP_TIMEOUT)
        for w in self._handles:
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


def _running(thread: threading.Thread | None) -> bool:
    return thread is not None and thread.is_alive()


_live_clusters: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for cluster in list(_live_clusters):
        cluster.close()
