"""Chaos benchmark: each job clean, then with one worker killed, hung or slowed, in both shuffle modes.

Every job runs on a 3-worker local cluster (and, with ``--netcluster``, also on the namespace
cluster of bench/netcluster.py), in ``pull`` and ``prefetch`` mode:

- TPC-DS SF 1 queries 4, 11, 14, 23, 64, 74, 78, 95, each answer checked against DuckDB's on
  the same Parquet files (tpcds.compare, as ``qengine tpcds run`` checks);
- TeraSort of 10M records, the output checked as ``qengine terasort validate`` checks it.

The faults are real signals from this process to one worker's process. Kills and stops go at a
fraction of the job's clean time (the median of its clean runs in that mode) after the query
starts:

- kill25, kill50, kill75: SIGKILL at 25%, 50% and 75% of the clean time;
- stop50: SIGSTOP at 50% (a hung worker; it gets SIGCONT once the query has ended, if it is
  still there);
- slow: for the whole run the worker runs 25 ms of every 100 ms (a SIGSTOP/SIGCONT duty cycle;
  each stop is short, so the worker is never taken for hung), once with speculation on
  (``slow``) and once with it off (``slow-nospec``).

Protocol, per job: every connection (mode × speculation) is warmed with one untimed run. Then
``--repeat`` clean runs per mode give the clean time (median). Then come ``--repeat`` rounds of
every fault. The order of the modes and of the faults is reversed on every other round, and
the victim worker rotates with the round. When a run ends with a worker replaced, one untimed
run follows, so that the next timed run does not start on a cold worker. A run that fails gets
its connection (and local cluster) replaced and warmed again; a run still going after
max(``--timeout``, 20 × clean time) is interrupted as Ctrl-C would (which cancels the query)
and counts as failed. On the namespace cluster, which starts no workers itself, a killed
worker is restarted in its host after the run; its logs are copied to
``<cache>/chaos-netcluster-logs``. A local cluster that lost a worker keeps its workers' logs
in a directory of its own, which the run's error names.

It prints, per job, mode and fault: the runs that were correct, the median time ÷ clean time
with its range, the seconds, the median tasks retried, recomputed and speculated
(``cursor.stats.recovery``), and how many runs the fault actually hit (a fault due after the
query has ended never goes, and that run is left out of the times). Then it checks the targets:

- every answer correct, every time;
- median time ÷ clean ≤ 1.5 for the kills;
- with one slowed worker, speculation on ≥ 1.3× faster than off;
- no file in a live worker's spill directory after any run, and no worker process and no spill
  directory left once a cluster is closed.

The exit status is 1 when an answer was wrong or a run failed, or something was left behind;
missed time targets are reported but do not change it. The JSON report goes to ``--json`` (by
default ``<cache>/bench-chaos.json``).

    python bench/chaos.py                    # the full set: SF 1 (generated under the cache unless --data), 10M records
    python bench/chaos.py --sf 0.01 --records 100000 --repeat 1                      # smoke run
    python bench/chaos.py --jobs tpcds --queries 4,11 --faults kill50,slow --modes prefetch
    python bench/chaos.py --faults none      # clean runs and answer checks only
    python bench/chaos.py --netcluster       # also on the namespace cluster (needs root)
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import itertools
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
from netcluster import NetCluster, _signals_raise, missing_requirement
from shuffle import median_of

import qengine
from qengine.api.options import default_partitions
from qengine.cli.common import cache_dir, register_directory
from qengine.exchange.store import SPILL_LOCK
from sortbench.sortjob import MAP_SPLIT_BYTES, REDUCER_BYTES, copy_sql
from tpcds.report import write_json

MODES = ("pull", "prefetch")
QUERIES = "4,11,14,23,64,74,78,95"
KILL_TARGET = 1.5  # median time ÷ clean time with one worker killed
SPECULATION_TARGET = 1.3  # time with speculation off ÷ time with it on, one worker slowed
SLOW_PERIOD = 0.1  # seconds per stop/continue cycle of the slowed worker; each stop is shorter
SLOW_SHARE = 0.25  # the share of each cycle the slowed worker runs
LEFTOVER_WAIT = 3.0  # seconds a finished query's blocks get to go before they count as left over
REPLACE_WAIT = 30.0  # seconds a local cluster gets to replace a lost worker after a run
NO_CLEAN_TIMEOUT = 1800.0  # seconds a warm-up or clean run may take before it is interrupted


@dataclass(frozen=True)
class Fault:
    name: str
    kind: str  # "none", "kill", "stop" or "slow"
    at: float = 0.0  # the fraction of the clean time at which the signal goes (kill, stop)
    speculation: bool = True


CLEAN = Fault("clean", "none")
WARMUP = Fault("warmup", "none")  # untimed runs: checked, not tabulated
REWARM = Fault("rewarm", "none")
FAULTS = {f.name: f for f in (
    Fault("kill25", "kill", 0.25), Fault("kill50", "kill", 0.5), Fault("kill75", "kill", 0.75),
    Fault("stop50", "stop", 0.5), Fault("slow", "slow"), Fault("slow-nospec", "slow", speculation=False),
)}


@dataclass
class Job:
    """One statement and how to check what it returned (a table, or None for COPY)."""

    name: str
    sql: str
    check: Callable[[Any], tuple[bool, str]]
    prepare: Callable[[], None] = lambda: None  # before every run (e.g. clear the sort's output)


@dataclass
class Group:
    """Jobs that share connection options and tables (all TPC-DS queries; TeraSort)."""

    name: str
    jobs: list[Job]
    options: dict[str, Any]
    register: Callable[[Any], None]


# ---- faults ---------------------------------------------------------------------------------------


class Injector:
    """Sends one fault's signals to the worker in slot ``slot`` while a query runs.

    The victim's pid is read from the cluster's current workers when the signal goes (a lost
    worker's slot holds its replacement). Once ``stop()`` returns no signal goes any more, and no
    worker is left stopped.
    """

    def __init__(self, pids: Callable[[], list[int]], slot: int, fault: Fault, clean: float | None) -> None:
        self._pids = pids
        self._slot = slot
        self.fault = fault
        self._delay = fault.at * (clean or 0.0)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stopped: int | None = None  # a pid this injector has stopped and not yet continued
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self.victim: int | None = None
        self.fired_at: float | None = None  # seconds after the start when the first signal went
        self.cycles = 0

    def start(self) -> None:
        if self.fault.kind == "none":
            return
        self._t0 = time.perf_counter()
        run = self._duty_cycle if self.fault.kind == "slow" else self._once
        self._thread = threading.Thread(target=run, name=f"chaos-{self.fault.name}", daemon=True)
        self._thread.start()

    def _victim(self) -> int | None:
        pids = self._pids()
        return pids[self._slot % len(pids)] if pids else None

    def _send(self, sig: signal.Signals) -> None:
        """Signal the victim's current process; the caller holds the lock and has seen the run is not over."""
        pid = self._victim()
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        self.victim = pid
        if self.fired_at is None:
            self.fired_at = time.perf_counter() - self._t0
        if sig == signal.SIGSTOP:
            self._stopped = pid

    def _once(self) -> None:
        if self._done.wait(self._delay):
            return
        with self._lock:
            if not self._done.is_set():
                self._send(signal.SIGKILL if self.fault.kind == "kill" else signal.SIGSTOP)

    def _duty_cycle(self) -> None:
        running, stopped = SLOW_PERIOD * SLOW_SHARE, SLOW_PERIOD * (1 - SLOW_SHARE)
        try:
            while not self._done.is_set():
                with self._lock:
                    if self._done.is_set():
                        break
                    self._send(signal.SIGSTOP)
                    self.cycles += 1
                self._done.wait(stopped)
                self._resume()
                self._done.wait(running)
        finally:
            self._resume()

    def _resume(self) -> None:
        with self._lock:
            pid, self._stopped = self._stopped, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        with self._lock:
            self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._resume()

    @property
    def fired(self) -> bool:
        return self.fired_at is not None


class Watchdog:
    """Interrupts this process's main thread (as Ctrl-C does, which cancels the query) if the
    run has not ended after ``limit`` seconds: a run that never ends must not stop the benchmark."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.fired = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="chaos-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        if self._done.wait(self.limit):
            return
        with self._lock:
            if not self._done.is_set():
                self.fired = True
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def disarm(self) -> None:
        with self._lock:
            self._done.set()


# ---- clusters ---------------------------------------------------------------------------------------


def files_under(directory: str) -> list[str]:
    """The files below ``directory``, but for a standalone worker's spill-directory lock."""
    return [os.path.join(d, f) for d, _, names in os.walk(directory) for f in names if f != SPILL_LOCK]


def processes(match: Callable[[list[str]], bool]) -> list[str]:
    """Every process on this machine whose command line ``match`` accepts, described."""
    found = []
    for p in psutil.process_iter(["pid", "ppid", "cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if cmd and match(cmd):
            found.append(f"pid {p.info['pid']} (parent {p.info['ppid']}, {p.info['status']}): {' '.join(cmd)[:160]}")
    return found


class LocalTarget:
    """Local clusters, one per connection (``qengine.connect(workers=...)``)."""

    name = "local"

    def __init__(self, workers: int, scratch: str) -> None:
        self.workers = workers
        self.scratch = scratch  # COPY writes below it

    def connect(self, options: dict[str, Any]) -> Any:
        return qengine.connect(workers=self.workers, output_roots=[self.scratch], **options)

    def pids(self, con: Any) -> list[int]:
        return [w.process.pid for w in con._cluster.workers if w.process is not None]

    def repair(self, con: Any, killed: int | None) -> None:
        """A local cluster replaces its lost workers itself, once its query has ended: wait for
        that, so that every run starts on a full cluster. A worker ``killed`` while its query
        was ending may not be noticed yet (the cluster looks each second): wait for its
        replacement too, or the next run would lose it instead."""
        deadline = time.monotonic() + REPLACE_WAIT
        while time.monotonic() < deadline and (len(con._cluster.workers) < self.workers or killed in self.pids(con)):
            time.sleep(0.05)

    def spill_files(self, con: Any) -> list[str]:
        """Files in the spill directories of the cluster's live workers."""
        found = []
        for w in con._cluster.workers:
            if w.process is None or not w.alive():
                continue
            args = list(w.process.args)
            if "--spill-dir" in args:
                found += files_under(args[args.index("--spill-dir") + 1])
        return found

    def where(self, con: Any) -> str:
        return f"worker logs in {con._cluster.log_dir}"

    def close(self, con: Any) -> list[str]:
        """Close ``con`` and its cluster; what was left behind (worker processes, spill directories)."""
        cluster = con._cluster
        log_dir, spill_dirs = cluster.log_dir, list(cluster.spill_dirs)
        con.close()
        problems = [f"worker process left by a closed cluster: {p}" for p in processes(
            lambda cmd: "qengine.runtime.worker" in cmd
            and (any(a.startswith(log_dir) for a in cmd) or any(d in cmd for d in spill_dirs)))]
        for d in spill_dirs:
            if os.path.exists(d):
                problems.append(f"spill directory left by a closed cluster: {d} ({len(files_under(d))} files)")
        return problems


@contextlib.contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@dataclass
class Slot:
    namespace: str
    args: list[str]
    process: subprocess.Popen
    tmp: str  # the worker's TMPDIR, which holds its spill directory


class ChaosNetCluster(NetCluster):
    """The namespace cluster, with each worker process in a TMPDIR of its own (so the spill
    directory of a live worker is known) and a way to restart the workers that died."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots: dict[int, Slot] = {}
        self.tmpdirs: list[str] = []
        self._births = itertools.count()

    def _start(self, ns: str, args: list[str], name: str) -> subprocess.Popen:
        """Start a process in a TMPDIR of its own; a worker restarted in a host gets its dead
        predecessor's, as on a real machine (it removes the spill files the dead one left)."""
        slot = self.slots.get(int(name.removeprefix("worker-"))) if name.startswith("worker-") else None
        if slot is not None:
            tmp = slot.tmp
        else:
            tmp = os.path.join(self.workdir, f"tmp-{name}-{next(self._births)}")
            os.makedirs(tmp)
            self.tmpdirs.append(tmp)
        with environment("TMPDIR", tmp):
            proc = super()._start(ns, args, name)
        if name.startswith("worker-"):
            self.slots[int(name.removeprefix("worker-"))] = Slot(ns, args, proc, tmp)
        return proc

    def restart_dead(self) -> list[str]:
        """Start a new worker in each host whose worker has exited; what could not be restarted.

        The new worker listens on another port of the host: at the old address the coordinator's
        cached client to the dead worker may still be in gRPC's reconnect backoff, and its
        registration ping then fails ("failed to connect to all addresses").
        """
        failed = []
        for h, slot in sorted(self.slots.items()):
            if slot.process.poll() is None:
                continue
            args = list(slot.args)
            at = args.index("--listen") + 1
            host, port = args[at].rsplit(":", 1)
            args[at] = f"{host}:{int(port) + 1}"
            try:
                self._start(slot.namespace, args, f"worker-{h}")
            except qengine.Error as e:
                failed.append(f"worker-{h}: {e}")
        return failed

    def leftovers(self) -> tuple[list[str], list[str]]:
        """After close: (worker processes still running and spill files left, empty spill
        directories of killed workers, which nothing can remove but the next worker or a person)."""
        problems = [f"process left by the namespace cluster: {p}" for p in processes(lambda cmd: self.token_file in cmd)]
        notes = []
        for tmp in self.tmpdirs:
            for entry in os.listdir(tmp) if os.path.isdir(tmp) else []:
                if entry.startswith("qengine-shuffle-"):
                    path = os.path.join(tmp, entry)
                    files = files_under(path)
                    if files:
                        problems.append(f"spill files left on the namespace cluster: {len(files)} in {path}")
                    else:
                        notes.append(f"a killed worker's empty spill directory (this benchmark removes it): {path}")
        return problems, notes


class NetTarget:
    """Sessions on the namespace cluster's standalone coordinator (3 hosts, shaped links)."""

    name = "netcluster"

    def __init__(self, cluster: ChaosNetCluster) -> None:
        self.cluster = cluster
        self.scratch = cluster.workdir  # the coordinator's output root

    def connect(self, options: dict[str, Any]) -> Any:
        return self.cluster.connect(**options)

    def pids(self, con: Any) -> list[int]:
        return [s.process.pid for _, s in sorted(self.cluster.slots.items())]

    def repair(self, con: Any, killed: int | None) -> None:
        """Restart the workers that were killed (a standalone cluster does not start workers;
        ``killed`` is already dead, and restarted with the others)."""
        before = self.pids(con)
        failed = self.cluster.restart_dead()
        restarted = sum(a != b for a, b in zip(before, self.pids(con), strict=True))
        if restarted:
            print(f"    restarted {restarted} worker(s) of the namespace cluster", flush=True)
        for line in failed:
            print(f"    could not restart {line}; going on with fewer workers", flush=True)

    def spill_files(self, con: Any) -> list[str]:
        return [f for s in self.cluster.slots.values() if s.process.poll() is None for f in files_under(s.tmp)]

    def where(self, con: Any) -> str:
        return f"logs in {self.logs} after the run"

    @property
    def logs(self) -> str:
        return os.path.join(cache_dir(), "chaos-netcluster-logs")

    def close(self, con: Any) -> list[str]:
        con.close()  # the cluster's processes are checked when it is torn down
        return []

    def teardown(self) -> tuple[list[str], list[str]]:
        """Stop the cluster and keep its logs; then (what was left behind, notes), as
        ``ChaosNetCluster.leftovers``."""
        self.cluster.close()
        shutil.rmtree(self.logs, ignore_errors=True)
        shutil.copytree(self.cluster.workdir, self.logs, ignore=lambda d, names: [
            n for n in names if os.path.isdir(os.path.join(d, n)) or not n.endswith((".log", ".err"))])
        return self.cluster.leftovers()


Target = LocalTarget | NetTarget


# ---- jobs ---------------------------------------------------------------------------------------------


def tpcds_data(args: argparse.Namespace) -> str:
    from tpcds.gen import generate

    if args.data:
        if not os.path.isdir(args.data):
            raise qengine.ProgrammingError(f"no TPC-DS data at {args.data}: run `qengine tpcds gen --sf {args.sf:g} --out {args.data}`")
        return os.path.abspath(args.data)
    path = os.path.join(cache_dir(), f"tpcds-sf{args.sf:g}")
    if not os.path.isdir(path):
        print(f"generating TPC-DS SF {args.sf:g} into {path}", flush=True)
        partial = path + ".partial"
        generate(args.sf, partial, force=True)
        os.rename(partial, path)
    return path


def terasort_data(records: int) -> str:
    """The same input bench/terasort.py sorts (seed 1), generated once under the cache."""
    from sortbench.gensort import generate

    path = os.path.join(cache_dir(), f"terasort-{records}", "in")
    if not os.path.isdir(path):
        print(f"generating {records:,} TeraSort records into {path}", flush=True)
        partial = path + ".partial"
        generate(records, partial, seed=1, force=True)
        os.rename(partial, path)
    return path


def tpcds_group(data: str, selection: list[int]) -> Group:
    """The queries, with DuckDB's answers computed once up front."""
    from tpcds.compare import compare
    from tpcds.extension import queries
    from tpcds.run import reference

    texts = queries()
    ref = reference(data)
    try:
        expected = {n: ref.execute(texts[n]).to_arrow_table() for n in selection}
    finally:
        ref.close()

    def checker(n: int) -> Callable[[Any], tuple[bool, str]]:
        def check(table: Any) -> tuple[bool, str]:
            verdict = compare(table, expected[n], texts[n])
            return verdict.ok, verdict.message

        return check

    jobs = [Job(f"tpcds q{n}", texts[n], checker(n)) for n in selection]
    return Group("tpcds", jobs, {}, lambda con: register_directory(con, data))


def terasort_group(data: str, records: int, workers: int, scratch: str, inputs: Any) -> Group:
    """``qengine terasort run``'s statement and layout, checked as ``qengine terasort validate`` does."""
    from sortbench.valsort import validate

    out = os.path.join(scratch, "terasort-out")

    def check(_: Any) -> tuple[bool, str]:
        try:
            verdict = validate(data, out, inputs)
        except qengine.Error as e:
            return False, str(e)
        return verdict.ok, "; ".join(verdict.problems)

    # As sortbench.sortjob.sort: one reducer per 32 MB, 16 MB map splits, one task per partition.
    partitions = max(default_partitions(workers), math.ceil(records * 100 / REDUCER_BYTES))
    options = {"coalesce_size": 0, "split_size": MAP_SPLIT_BYTES, "partitions": partitions}
    job = Job(f"terasort {records:,}", copy_sql(out, force=True), check, lambda: shutil.rmtree(out, ignore_errors=True))
    return Group("terasort", [job], options, lambda con: con.register_parquet("records", data))


# ---- the runs ---------------------------------------------------------------------------------------


def alternate(items: Sequence[Any], round_: int) -> list[Any]:
    """``items`` in order on even rounds, reversed on odd ones."""
    return list(items) if round_ % 2 == 0 else list(reversed(items))


@dataclass
class Bench:
    workers: int
    repeat: int
    modes: list[str]
    faults: list[Fault]
    timeout: float  # a timed run is interrupted after max(timeout, 20 × its clean time)
    runs: list[dict] = field(default_factory=list)
    clean: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (cluster, job, mode) → median s
    after_close: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # left behind, but not counted against the targets
    checkpoint: Callable[[], None] = lambda: None  # called after each job (saves the runs so far)

    def open(self, target: Target, group: Group, key: tuple[str, bool], tries: int = 1) -> Any:
        """A connection in ``key``'s mode and speculation setting with the group's tables; after a
        failure the cluster may need a while (a standalone coordinator drops a dead worker after
        its heartbeat timeout), so up to ``tries`` attempts, 5 seconds apart."""
        mode, speculation = key
        options = {**group.options, "shuffle": mode}
        options["speculation"] = speculation
        attempt = 1
        while True:
            con = None
            try:
                con = target.connect(options)
                group.register(con)
                return con
            except qengine.Error as e:
                if con is not None:
                    self.after_close += target.close(con)
                if attempt >= tries:
                    raise
                attempt += 1
                print(f"    could not connect ({e}); trying again in 5s", flush=True)
                time.sleep(5)

    def run_group(self, target: Target, group: Group) -> None:
        keys = [(mode, True) for mode in self.modes]
        if any(not f.speculation for f in self.faults):
            keys += [(mode, False) for mode in self.modes]
        connections: dict[tuple[str, bool], Any] = {}
        try:
            for key in keys:
                connections[key] = self.open(target, group, key)
            for job in group.jobs:
                self.run_job(target, group, job, connections)
        finally:
            for con in connections.values():
                self.after_close += target.close(con)

    def run_job(self, target: Target, group: Group, job: Job, connections: dict[tuple[str, bool], Any]) -> None:
        print(f"{target.name} {job.name}", flush=True)
        for key in list(connections):
            self.once(target, group, job, connections, key, WARMUP, 0)
        for r in range(self.repeat):
            for mode in alternate(self.modes, r):
                self.once(target, group, job, connections, (mode, True), CLEAN, r)
        for mode in self.modes:
            runs = self.select(target.name, job.name, mode, CLEAN.name)
            clean = median_of([r for r in runs if r["error"] is None], "seconds")
            if clean is None:
                print(f"  {mode}: no clean run succeeded; its faults are skipped", flush=True)
                continue
            self.clean[(target.name, job.name, mode)] = clean
        for r in range(self.repeat):
            for mode in alternate(self.modes, r):
                if (target.name, job.name, mode) not in self.clean:
                    continue
                for fault in alternate(self.faults, r):
                    self.once(target, group, job, connections, (mode, fault.speculation), fault, r)
        self.checkpoint()

    def select(self, cluster: str, job: str, mode: str, fault: str) -> list[dict]:
        return [r for r in self.runs if (r["cluster"], r["job"], r["mode"], r["fault"]) == (cluster, job, mode, fault)]

    def once(
        self, target: Target, group: Group, job: Job, connections: dict[tuple[str, bool], Any],
        key: tuple[str, bool], fault: Fault, round_: int, recover: bool = True,
    ) -> dict:
        """One run of ``job`` on ``connections[key]`` with ``fault``; recorded and printed."""
        mode, speculation = key
        con = connections[key]
        clean = self.clean.get((target.name, job.name, mode))
        before = target.pids(con)
        injector = Injector(lambda: target.pids(con), round_ % self.workers, fault, clean)
        job.prepare()
        error, result, stats = None, None, None
        watchdog = Watchdog(max(self.timeout, 20 * clean) if clean else NO_CLEAN_TIMEOUT)
        t0 = time.perf_counter()
        injector.start()
        try:
            try:
                cur = con.execute(job.sql)
                result = cur.fetch_arrow_table() if cur.description is not None else None
                seconds = time.perf_counter() - t0
                stats = cur.stats
            finally:
                watchdog.disarm()
                injector.stop()
        except qengine.Error as e:
            seconds = time.perf_counter() - t0
            error = f"{type(e).__name__}: {e}"
        except KeyboardInterrupt:
            if not watchdog.fired:
                raise
            seconds = time.perf_counter() - t0
            error = f"no answer after {watchdog.limit:.0f}s: the query was interrupted"
        correct, why = (False, error) if error else job.check(result)
        target.repair(con, injector.victim if fault.kind == "kill" else None)
        leftovers = self.wait_for_empty_spill(target, con)
        replaced = set(target.pids(con)) != set(before)
        recovery = getattr(stats, "recovery", None)
        run = {
            "cluster": target.name, "job": job.name, "mode": mode, "speculation": speculation,
            "fault": fault.name, "round": round_, "seconds": seconds, "correct": correct,
            "error": error, "why": None if correct else (why or "wrong answer"),
            "fired": injector.fired, "fired_at": injector.fired_at, "victim": injector.victim,
            "slow_cycles": injector.cycles, "replaced": replaced, "leftover_files": leftovers,
            "retried": recovery.retried if recovery else None,
            "recomputed": recovery.recomputed if recovery else None,
            "speculated": recovery.speculated if recovery else None,
            "speculation_wins": recovery.speculation_wins if recovery else None,
            "lost_workers": list(recovery.lost_workers) if recovery else None,
        }
        self.runs.append(run)
        self.print_run(run, clean, target.where(con))
        if error is not None and recover:
            print(f"    replacing the {mode} connection (speculation {'on' if speculation else 'off'}) after the failure", flush=True)
            self.after_close += target.close(con)
            connections[key] = self.open(target, group, key, tries=4)
            self.once(target, group, job, connections, key, WARMUP, round_, recover=False)
        elif replaced and fault.kind != "none":
            self.once(target, group, job, connections, key, REWARM, round_, recover=recover)
        return run

    @staticmethod
    def wait_for_empty_spill(target: Target, con: Any) -> list[str]:
        """Files still in a live worker's spill directory ``LEFTOVER_WAIT`` seconds after a run."""
        deadline = time.monotonic() + LEFTOVER_WAIT
        while (files := target.spill_files(con)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return files

    @staticmethod
    def print_run(run: dict, clean: float | None, where: str) -> None:
        parts = [f"  {run['mode']:8s} {run['fault']:11s} {run['seconds']:8.2f}s"]
        if clean and run["fault"] not in (WARMUP.name, REWARM.name):
            parts.append(f"{run['seconds'] / clean:5.2f}× clean")
        parts.append("correct" if run["correct"] else "FAILED" if run["error"] else "WRONG")
        if run["retried"] is not None:
            parts.append(f"retried {run['retried']} recomputed {run['recomputed']} speculated {run['speculated']}")
        if run["fault"] in FAULTS:
            parts.append(f"fault at {run['fired_at']:.2f}s on pid {run['victim']}" if run["fired"] else "fault never went")
        if run["replaced"]:
            parts.append("worker replaced")
        if run["leftover_files"]:
            parts.append(f"{len(run['leftover_files'])} files left in spill directories")
        print(" ".join(parts), flush=True)
        if not run["correct"]:
            print(f"    {run['why']} ({where})", flush=True)


# ---- the report --------------------------------------------------------------------------------------


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """Median, with the range when the values differ: '1.21 (1.10–1.40)'."""
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    lo, hi = min(values), max(values)
    return med if lo == hi else f"{med} ({fmt.format(lo)}–{fmt.format(hi)})"


def summarize(bench: Bench, fault_names: list[str]) -> tuple[list[dict], dict]:
    """One row per cluster, job, mode and fault; and the verdicts on the targets."""
    rows = []
    groups: dict[tuple[str, str, str], None] = dict.fromkeys((r["cluster"], r["job"], r["mode"]) for r in bench.runs)
    for cluster, job, mode in groups:
        clean = bench.clean.get((cluster, job, mode))
        for fault in [CLEAN.name, *fault_names]:
            runs = bench.select(cluster, job, mode, fault)
            if not runs:
                continue
            # A fault that was due after the query had ended never went: that run is no faulted run.
            ok = [r for r in runs if r["error"] is None and (r["fired"] or fault == CLEAN.name)]
            ratios = [r["seconds"] / clean for r in ok] if clean else []
            rows.append({
                "cluster": cluster, "job": job, "mode": mode, "fault": fault,
                "correct": sum(r["correct"] for r in runs), "runs": len(runs),
                "ratio_median": statistics.median(ratios) if ratios else None, "ratios": ratios,
                "seconds": [r["seconds"] for r in ok],
                "retried": [r["retried"] for r in ok if r["retried"] is not None],
                "recomputed": [r["recomputed"] for r in ok if r["recomputed"] is not None],
                "speculated": [r["speculated"] for r in ok if r["speculated"] is not None],
                "fired": sum(r["fired"] for r in runs),
            })
    wrong = [r for r in bench.runs if not r["correct"]]
    kills = [{k: row[k] for k in ("cluster", "job", "mode", "fault", "ratio_median", "fired")} for row in rows if row["fault"].startswith("kill")]
    for k in kills:
        k["ok"] = k["ratio_median"] is not None and k["ratio_median"] <= KILL_TARGET
    speculation = []
    for cluster, job, mode in groups:
        on = median_of([r for r in bench.select(cluster, job, mode, "slow") if r["error"] is None and r["fired"]], "seconds")
        off = median_of([r for r in bench.select(cluster, job, mode, "slow-nospec") if r["error"] is None and r["fired"]], "seconds")
        if bench.select(cluster, job, mode, "slow") and bench.select(cluster, job, mode, "slow-nospec"):
            gain = off / on if on and off else None
            over_clean = {row["fault"]: row["ratio_median"] for row in rows if (row["cluster"], row["job"], row["mode"]) == (cluster, job, mode)}
            speculation.append({"cluster": cluster, "job": job, "mode": mode, "off_over_on": gain,
                                "on_over_clean": over_clean.get("slow"), "off_over_clean": over_clean.get("slow-nospec"),
                                "ok": gain is not None and gain >= SPECULATION_TARGET})
    left = [f"{r['cluster']} {r['job']} {r['mode']} {r['fault']} round {r['round']}: {len(r['leftover_files'])} files, e.g. {r['leftover_files'][0]}"
            for r in bench.runs if r["leftover_files"]]
    targets = {
        "answers": {"runs": len(bench.runs), "wrong": [
            f"{r['cluster']} {r['job']} {r['mode']} {r['fault']} round {r['round']}: {r['why']}" for r in wrong]},
        "kills": kills,
        "speculation": speculation,
        "spill_files_after_runs": left,
        "left_after_close": bench.after_close,
        "notes": bench.notes,
    }
    return rows, targets


def report(rows: list[dict], targets: dict, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title=title)
    for col in ("cluster", "job", "mode", "fault", "correct", "time ÷ clean", "seconds", "retried", "recomputed", "speculated", "fault hit"):
        table.add_column(col, justify="left" if col in ("cluster", "job", "mode", "fault") else "right")
    previous = None
    for row in rows:
        group = (row["cluster"], row["job"])
        if previous is not None and group != previous:
            table.add_section()
        previous = group
        table.add_row(
            row["cluster"], row["job"], row["mode"], row["fault"], f"{row['correct']}/{row['runs']}",
            spread(row["ratios"]), spread(row["seconds"]), spread(row["retried"], "{:g}"),
            spread(row["recomputed"], "{:g}"), spread(row["speculated"], "{:g}"),
            "-" if row["fault"] == CLEAN.name else f"{row['fired']}/{row['runs']}",
        )
    console.print(table)

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    answers = targets["answers"]
    console.print("targets:", highlight=False)
    console.print(f"  every answer correct, every time: {verdict(not answers['wrong'])} "
                  f"({answers['runs'] - len(answers['wrong'])}/{answers['runs']} runs, warm-ups included)", highlight=False)
    for line in answers["wrong"][:10]:
        console.print(f"    {line}", highlight=False)
    # A kill due after the query had ended in every run measured nothing: it is neither met nor missed.
    unhit = [k for k in targets["kills"] if not k["fired"]]
    kills = [k for k in targets["kills"] if k["fired"]]
    if kills:
        worst = max(kills, key=lambda k: math.inf if k["ratio_median"] is None else k["ratio_median"])
        worst_text = "no run finished" if worst["ratio_median"] is None else f"{worst['ratio_median']:.2f}"
        console.print(f"  kills, median time ÷ clean ≤ {KILL_TARGET}: {verdict(all(k['ok'] for k in kills))} "
                      f"(worst {worst_text}: {worst['cluster']} {worst['job']} {worst['mode']} {worst['fault']})", highlight=False)
        for k in unhit:
            console.print(f"    not measured: {k['cluster']} {k['job']} {k['mode']} {k['fault']} "
                          "(the query had ended before the kill in every run)", highlight=False)
    elif unhit:
        console.print("  kills: not measured (every query had ended before its kill)", highlight=False)
    else:
        console.print("  kills: not run", highlight=False)
    spec = targets["speculation"]
    if spec:
        console.print(f"  one slowed worker, speculation on ≥ {SPECULATION_TARGET}× faster than off: "
                      f"{verdict(all(s['ok'] for s in spec))}", highlight=False)
        for s in spec:
            gain = "-" if s["off_over_on"] is None else f"{s['off_over_on']:.2f}×"
            on, off = s["on_over_clean"], s["off_over_clean"]
            # Off within the target of clean: a slowed worker that costs the job that little
            # leaves speculation nothing to win back, however well it works.
            room = "" if off is None or off >= SPECULATION_TARGET else "; the slowed worker costs it little even with speculation off"
            versus = "" if on is None or off is None else f" (on {on:.2f}× clean, off {off:.2f}× clean{room})"
            console.print(f"    {s['cluster']} {s['job']} {s['mode']}: off ÷ on {gain}{versus}", highlight=False)
    else:
        console.print("  speculation: not run (needs --faults slow)", highlight=False)
    left = targets["spill_files_after_runs"]
    console.print(f"  no file left in a live worker's spill directory after a run: {verdict(not left)}", highlight=False)
    for line in left[:10]:
        console.print(f"    {line}", highlight=False)
    closed = targets["left_after_close"]
    console.print(f"  no worker process or spill directory left after close: {verdict(not closed)}", highlight=False)
    for line in closed[:10]:
        console.print(f"    {line}", highlight=False)
    for line in targets["notes"]:
        console.print(f"  note: {line}", highlight=False)


# ---- main ---------------------------------------------------------------------------------------------


def parse_list(text: str, allowed: Sequence[str], what: str) -> list[str]:
    chosen = [x.strip() for x in text.split(",") if x.strip() and x.strip() != "none"]
    bad = [x for x in chosen if x not in allowed]
    if bad:
        raise qengine.ProgrammingError(f"unknown {what} {bad[0]!r}: choose from {', '.join(allowed)}")
    return chosen


def final_check() -> list[str]:
    """Once every cluster is closed: worker processes still below this one, or unreaped."""
    me = psutil.Process()
    problems = []
    for child in me.children(recursive=True):
        try:
            cmd, status = child.cmdline(), child.status()
        except psutil.ZombieProcess:
            cmd, status = [], psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            continue
        if status == psutil.STATUS_ZOMBIE:
            problems.append(f"unreaped child process {child.pid}")
        elif any("qengine" in a for a in cmd):
            problems.append(f"qengine process still running below this one: pid {child.pid}: {' '.join(cmd)[:160]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="tpcds,terasort", help="tpcds, terasort or both (default both)")
    parser.add_argument("--queries", default=QUERIES, help=f"TPC-DS queries (default {QUERIES})")
    parser.add_argument("--data", default=None, help="TPC-DS Parquet from `qengine tpcds gen` (default: generated under the cache)")
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-DS scale factor to generate when --data is not given (default 1)")
    parser.add_argument("--records", type=int, default=10_000_000, help="TeraSort records (default 10,000,000)")
    parser.add_argument("--workers", type=int, default=3, help="workers of the local cluster and hosts of the namespace cluster (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="clean runs and rounds of faults per job and mode (default 3)")
    parser.add_argument("--modes", default=",".join(MODES), help="shuffle modes (default pull,prefetch)")
    parser.add_argument("--faults", default="kill25,kill50,kill75,stop50,slow",
                        help="kill25,kill50,kill75,stop50,slow (slow runs with speculation on and off), or none")
    parser.add_argument("--netcluster", action="store_true", help="also run on the namespace cluster of bench/netcluster.py (root)")
    parser.add_argument("--rate", default="300mbit", help="the namespace cluster's link rate (default 300mbit)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="a faulted run is interrupted after max(this, 20 × clean time) seconds (default 60)")
    parser.add_argument("--json", default=None, help="JSON report (default <cache>/bench-chaos.json)")
    args = parser.parse_args(argv)

    try:
        jobs = parse_list(args.jobs, ("tpcds", "terasort"), "job")
        modes = parse_list(args.modes, MODES, "mode")
        names = parse_list(args.faults, ("kill25", "kill50", "kill75", "stop50", "slow"), "fault")
        if args.repeat < 1 or args.workers < 1 or args.records < 1:
            raise qengine.ProgrammingError("--repeat, --workers and --records must be positive")
        if not modes:
            raise qengine.ProgrammingError("--modes names no mode")
    except qengine.Error as e:
        parser.error(str(e))
    names += ["slow-nospec"] if "slow" in names else []
    faults = [FAULTS[n] for n in names]
    bench = Bench(args.workers, args.repeat, modes, faults, args.timeout)
    out = args.json or os.path.join(cache_dir(), "bench-chaos.json")
    bench.checkpoint = lambda: write_json({"args": vars(args), "complete": False, "runs": bench.runs}, out)
    faulthandler.enable()  # a crash of this process (the coordinator of the local clusters) shows its threads

    from sortbench.valsort import summarize as summarize_records
    from tpcds.run import parse_selection

    status = 0
    with _signals_raise():
        try:
            data = tpcds_data(args) if "tpcds" in jobs else None
            records = terasort_data(args.records) if "terasort" in jobs else None
            selection = parse_selection(args.queries) if "tpcds" in jobs else []
            inputs = summarize_records(records) if records else None

            def groups(scratch: str) -> list[Group]:
                out = [tpcds_group(data, selection)] if data else []
                return out + ([terasort_group(records, args.records, args.workers, scratch, inputs)] if records else [])

            scratch = tempfile.mkdtemp(prefix="qengine-chaos-")
            try:
                local = LocalTarget(args.workers, scratch)
                for group in groups(scratch):
                    bench.run_group(local, group)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if args.netcluster:
                reason = missing_requirement()
                if reason:
                    print(f"--netcluster skipped: {reason}", flush=True)
                else:
                    workdir = tempfile.mkdtemp(prefix="qengine-netcluster-")
                    try:
                        roots = [p for p in (data, records) if p]
                        with ChaosNetCluster(args.workers, args.rate, workdir, None, roots) as cluster:
                            net = NetTarget(cluster)
                            try:
                                for group in groups(workdir):
                                    bench.run_group(net, group)
                            finally:
                                left, notes = net.teardown()
                                bench.after_close += left
                                bench.notes += notes
                    finally:
                        shutil.rmtree(workdir, ignore_errors=True)
        except KeyboardInterrupt:
            print("interrupted: the report covers the runs so far", file=sys.stderr)
            status = 130
        except qengine.Error as e:
            print(f"Error: {e}", file=sys.stderr)
            status = 1
    bench.after_close += final_check()
    if not bench.runs:
        return status or 1
    sizes = []
    if "tpcds" in jobs:
        sizes.append(f"TPC-DS {os.path.basename(data) if args.data else f'SF {args.sf:g}'}")
    if "terasort" in jobs:
        sizes.append(f"TeraSort {args.records:,} records")
    rows, targets = summarize(bench, names)
    report(rows, targets, f"chaos: {', '.join(sizes)}, {args.workers} workers, median of {args.repeat}")
    write_json({"args": vars(args), "complete": status == 0, "targets": targets, "rows": rows, "runs": bench.runs,
                "clean_seconds": [{"cluster": c, "job": j, "mode": m, "seconds": s} for (c, j, m), s in bench.clean.items()]}, out)
    print(f"report: {out}")
    failed = targets["answers"]["wrong"] or targets["spill_files_after_runs"] or targets["left_after_close"]
    return status or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
