"""The TPC-DS throughput test's shape, for sharing one cluster between users (issue: many users).

S concurrent streams, each a user of its own running the TPC-DS queries in its own seeded
permutation, against one standalone cluster: a coordinator and ``--workers`` workers on this
machine (loopback), or with ``--netcluster`` the namespace cluster of ``bench/netcluster.py``
(``--hosts`` hosts at ``--rate``). Then a mixed run: one stream runs TeraSort jobs over and over
while the others run the short queries (those at most the median time alone).

It compares, in the same run, how the coordinator shares its workers:

- ``fifo``: first come first served (``--scheduling fifo --no-nass --no-samp``);
- ``fair``: users by weight, their queries equally (``--scheduling fair --no-nass --no-samp``);
- ``fair+sw``: fair with ShuffleWatcher's NASS and SAMP (``--scheduling fair``, the default).

Each policy gets a fresh cluster, warmed by running every query once; then each runs once more
alone, for its time alone. The policies' order alternates from one ``--repeat`` to the next.
Every answer is checked against DuckDB's (TeraSort's output as ``qengine terasort validate``
checks it). It prints, per policy: queries per hour, median and p95 latency of the short and the
long queries, bytes moved between workers, each worker's tasks and peak memory; and for the
mixed run, the short queries' p95 against their p95 alone. Then the issue's targets.

    python bench/throughput.py --data /tmp/ds1 --streams 4
    python bench/throughput.py --data /tmp/ds1 --streams 8 --queries 3,7,19,42,52,55,96
    sudo python bench/throughput.py --netcluster --hosts 4 --rate 300mbit --data /tmp/ds1 --streams 4
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos import Group, Job, terasort_data, terasort_group, tpcds_data, tpcds_group
from netcluster import NetCluster, _signals_raise, missing_requirement

import qengine
from qengine.cli.common import cache_dir
from qengine.cli.processes import stop_processes
from qengine.transport.rpc import Client
from sortbench.valsort import summarize as summarize_records
from tpcds.report import write_json

POLICIES = {
    "fifo": ["--scheduling", "fifo", "--no-nass", "--no-samp"],
    "fair": ["--scheduling", "fair", "--no-nass", "--no-samp"],
    "fair+sw": ["--scheduling", "fair"],
}
THROUGHPUT_TARGET = 1.25  # fair+sw ÷ fifo queries per hour, on the namespace cluster
MIXED_TARGET = 3.0  # short queries' p95 with a TeraSort running ÷ their p95 alone
TASK_SPREAD = 0.25  # each worker's tasks within this share of the mean
MEMORY_OVERHEAD = 1 << 30  # a worker's peak memory may exceed its budget by this much
QUERY_TIMEOUT = 1800.0  # seconds a stream's statement may take before the run is given up


@dataclass
class Record:
    """One statement of one stream."""

    policy: str
    run: str  # "throughput" or "mixed"
    stream: int
    job: str
    seconds: float
    ok: bool
    message: str = ""
    remote_bytes: int = 0
    samp: bool = False  # SAMP kept it to fewer hosts
    nass_delays: int = 0  # reducers NASS held back


@dataclass
class Outcome:
    """What one policy's cluster did in one repeat."""

    policy: str
    alone: dict[str, float] = field(default_factory=dict)  # job → seconds alone
    short: list[str] = field(default_factory=list)  # the jobs its mixed run ran beside the TeraSort
    records: list[Record] = field(default_factory=list)
    wall: dict[str, float] = field(default_factory=dict)  # run → seconds
    tasks: list[int] = field(default_factory=list)  # per worker, over the throughput run
    peak_rss: list[int] = field(default_factory=list)  # per worker, bytes
    budget: int | None = None


class LoopbackCluster:
    """A standalone coordinator and its workers as processes of this machine, on 127.0.0.1."""

    def __init__(self, workers: int, workdir: str, data_roots: list[str], coordinator_args: list[str], memory_budget: str) -> None:
        self.workdir = workdir
        self.token = secrets.token_hex(16)
        self.token_file = os.path.join(workdir, "token")
        with open(self.token_file, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(self.token)
        self.procs: list[subprocess.Popen] = []
        roots = [a for root in [workdir, *data_roots] for a in ("--data-root", root)] + ["--output-root", workdir]
        try:
            line = self._start(["coordinator", "--listen", "127.0.0.1:0", *roots, *coordinator_args], "coordinator")
            self.address = line.rsplit(" ", 1)[-1].strip()
            for w in range(workers):
                self._start(["worker", "--join", self.address, "--memory-budget", memory_budget,
                             "--log", os.path.join(workdir, f"worker-{w}.log")], f"worker-{w}")
        except BaseException:
            self.close()
            raise

    def _start(self, args: list[str], name: str) -> str:
        err = open(os.path.join(self.workdir, f"{name}.err"), "w")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "qengine.cli", *args, "--token-file", self.token_file],
            stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
        )
        self.procs.append(proc)
        line = proc.stdout.readline()
        if not line:
            raise qengine.OperationalError(f"{name} did not start; see {err.name}")
        return line

    def connect(self, **options: object) -> Any:
        return qengine.connect(f"qengine://{self.address}", token=self.token, **options)

    def close(self) -> None:
        stop_processes(self.procs)
        self.procs = []


def worker_facts(address: str, token: str) -> list[dict]:
    """Each live worker's ping: its pid, tasks run so far and memory budget."""
    coordinator = Client(address, token, role="bench")
    facts = []
    for member in coordinator.action("workers", timeout=10):
        if member["alive"]:
            facts.append(Client(member["address"], token, role="bench").action("ping", timeout=10))
    return facts


def peak_rss(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in bytes; 0 if it is gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run_job(con: Any, job: Job) -> tuple[float, bool, str, dict[str, Any]]:
    """Run one job on ``con``: (seconds, correct, why not, what its stats say: the bytes its
    shuffles moved between workers and what ShuffleWatcher did)."""
    job.prepare()
    cur = con.cursor()
    started = time.perf_counter()
    try:
        cur.execute(job.sql)
        table = cur.fetch_arrow_table() if cur.description else None
    except qengine.Error as e:
        return time.perf_counter() - started, False, f"{type(e).__name__}: {e}", {}
    seconds = time.perf_counter() - started
    ok, message = job.check(table)
    stats = cur.stats
    if stats is None:
        return seconds, ok, message, {}
    facts = {"remote_bytes": sum(s.remote_bytes for s in stats.shuffles), "samp": bool(stats.sharing.samp_hosts), "nass_delays": stats.sharing.nass_delays}
    return seconds, ok, message, facts


def streams(connect: Callable[[int], Any], plans: list[list[Job]], policy: str, run: str) -> tuple[list[Record], float]:
    """Run each stream's jobs once, in a thread of its own, on a connection of its own.
    Returns the records and the wall time."""
    records: list[Record] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def stream(i: int) -> None:
        try:
            with connect(i) as con:
                for job in plans[i]:
                    seconds, ok, message, facts = run_job(con, job)
                    with lock:
                        records.append(Record(policy, run, i, job.name, seconds, ok, message, **facts))
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            failures.append(e)

    started = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(QUERY_TIMEOUT * max(len(p) for p in plans))
    if failures:
        raise failures[0]
    return records, time.perf_counter() - started


def permutation(jobs: list[Job], seed: int) -> list[Job]:
    order = list(jobs)
    random.Random(seed).shuffle(order)
    return order


def measure(policy: str, cluster: Any, tpcds: Group, sort: Group | None, args: argparse.Namespace, repeat: int) -> Outcome:
    """Warm-up (each query once), each query alone, the throughput run, then the mixed run,
    on one cluster."""
    outcome = Outcome(policy)

    def connect(group: Group, user: str) -> Any:
        con = cluster.connect(user=user, **group.options)
        group.register(con)
        return con

    with connect(tpcds, "warmup") as con:
        for run in ("warmup", "alone"):
            for job in tpcds.jobs:
                seconds, ok, message, _ = run_job(con, job)
                if run == "alone":
                    outcome.alone[job.name] = seconds
                outcome.records.append(Record(policy, run, 0, job.name, seconds, ok, message))
    before = {f["pid"]: f["tasks_run"] for f in worker_facts(cluster.address, cluster.token)}
    plans = [permutation(tpcds.jobs, 1000 * repeat + i) for i in range(args.streams)]
    records, wall = streams(lambda i: connect(tpcds, f"stream{i}"), plans, policy, "throughput")
    outcome.records += records
    outcome.wall["throughput"] = wall
    facts = worker_facts(cluster.address, cluster.token)
    outcome.tasks = [f["tasks_run"] - before.get(f["pid"], 0) for f in facts]
    if sort is not None:
        cutoff = statistics.median(outcome.alone.values())
        short = [job for job in tpcds.jobs if outcome.alone[job.name] <= cutoff]
        outcome.short = [job.name for job in short]
        plans = [sort.jobs] + [permutation(short, 2000 * repeat + i) for i in range(1, args.streams)]

        def connect_mixed(i: int) -> Any:
            return connect(sort, "terasort") if i == 0 else connect(tpcds, f"stream{i}")

        records, wall = mixed(connect_mixed, plans, policy)
        outcome.records += records
        outcome.wall["mixed"] = wall
    facts = worker_facts(cluster.address, cluster.token)
    outcome.peak_rss = [peak_rss(f["pid"]) for f in facts]
    outcome.budget = facts[0].get("budget") if facts else None
    return outcome


def mixed(connect: Callable[[int], Any], plans: list[list[Job]], policy: str) -> tuple[list[Record], float]:
    """The mixed run: stream 0 (TeraSort) runs its jobs over and over until the short-query
    streams have ended. Returns the records and the wall time."""
    records: list[Record] = []
    lock = threading.Lock()
    failures: list[BaseException] = []
    others_ended = threading.Semaphore(0)
    done = threading.Event()

    def stream(i: int) -> None:
        try:
            with connect(i) as con:
                while True:
                    for job in plans[i]:
                        seconds, ok, message, facts = run_job(con, job)
                        with lock:
                            records.append(Record(policy, "mixed", i, job.name, seconds, ok, message, **facts))
                    if i or done.is_set():
                        return
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            failures.append(e)
        finally:
            if i:
                others_ended.release()

    started = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(len(plans))]
    for t in threads:
        t.start()
    for _ in range(len(plans) - 1):
        others_ended.acquire()
    done.set()
    for t in threads:
        t.join(QUERY_TIMEOUT)
    if failures:
        raise failures[0]
    return records, time.perf_counter() - started


# ---- report ------------------------------------------------------------------------------------


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 2 else (values[0] if values else float("nan"))


def summarize(outcomes: list[Outcome], with_mixed: bool) -> list[dict]:
    rows = []
    # The query classes, the same for every policy: short at most the median time alone
    alone: dict[str, list[float]] = {}
    for o in outcomes:
        for job, seconds in o.alone.items():
            alone.setdefault(job, []).append(seconds)
    cutoff = statistics.median(statistics.median(v) for v in alone.values())
    short = {job for job, v in alone.items() if statistics.median(v) <= cutoff}
    for policy in POLICIES:
        mine = [o for o in outcomes if o.policy == policy]
        if not mine:
            continue
        thr = [r for o in mine for r in o.records if r.run == "throughput"]
        qph = [3600 * len([r for r in o.records if r.run == "throughput"]) / o.wall["throughput"] for o in mine]
        row = {
            "policy": policy,
            "queries_per_hour": statistics.median(qph),
            "queries_per_hour_runs": qph,
            "short_median": statistics.median([r.seconds for r in thr if r.job in short]),
            "short_p95": p95([r.seconds for r in thr if r.job in short]),
            "long_median": statistics.median([r.seconds for r in thr if r.job not in short] or [float("nan")]),
            "long_p95": p95([r.seconds for r in thr if r.job not in short]),
            "remote_bytes": statistics.median([sum(r.remote_bytes for r in o.records if r.run == "throughput") for o in mine]),
            "correct": sum(r.ok for o in mine for r in o.records),
            "runs": sum(len(o.records) for o in mine),
            "wrong": [f"{r.run} {r.job} (stream {r.stream}): {r.message}" for o in mine for r in o.records if not r.ok],
            "task_spread": max(_spread(o.tasks) for o in mine),
            "tasks": [o.tasks for o in mine],
            "peak_rss": max(max(o.peak_rss, default=0) for o in mine),
            "budget": mine[0].budget,
            "samp_queries": sum(r.samp for o in mine for r in o.records),
            "nass_delays": sum(r.nass_delays for o in mine for r in o.records),
        }
        if with_mixed:
            mixed = [r for o in mine for r in o.records if r.run == "mixed" and r.stream]
            alone_short = [o.alone[job] for o in mine for job in o.short]  # the jobs the mixed run ran
            row["mixed_short_p95"] = p95([r.seconds for r in mixed])
            row["alone_short_p95"] = p95(alone_short)
            row["mixed_ratio"] = row["mixed_short_p95"] / row["alone_short_p95"]
            row["terasorts"] = len([r for o in mine for r in o.records if r.run == "mixed" and not r.stream])
        rows.append(row)
    return rows


def _spread(tasks: list[int]) -> float:
    """The largest distance of a worker's tasks from the mean, as a share of the mean."""
    mean = statistics.mean(tasks) if tasks else 0
    return max(abs(t - mean) / mean for t in tasks) if mean else 0.0


def report(rows: list[dict], args: argparse.Namespace) -> None:
    print()
    print(f"{'policy':<8} {'queries/h':>10} {'short med/p95 s':>16} {'long med/p95 s':>16} {'bytes across':>13} "
          f"{'task spread':>11} {'peak RSS':>9} {'correct':>9}")
    for r in rows:
        print(f"{r['policy']:<8} {r['queries_per_hour']:>10.0f} {r['short_median']:>7.2f}/{r['short_p95']:<8.2f} "
              f"{r['long_median']:>7.2f}/{r['long_p95']:<8.2f} {r['remote_bytes'] / 1e6:>11.1f}MB {r['task_spread']:>10.0%} "
              f"{r['peak_rss'] / 2**20:>7.0f}MB {r['correct']:>4}/{r['runs']}")
    if rows and "mixed_ratio" in rows[0]:
        print()
        print(f"{'policy':<8} {'short p95 with TeraSort':>24} {'alone':>7} {'ratio':>6} {'TeraSorts':>9}")
        for r in rows:
            print(f"{r['policy']:<8} {r['mixed_short_p95']:>23.2f}s {r['alone_short_p95']:>6.2f}s {r['mixed_ratio']:>6.2f} {r['terasorts']:>9}")
    by = {r["policy"]: r for r in rows}
    for r in rows:
        if r["samp_queries"] or r["nass_delays"]:
            print(f"{r['policy']}: SAMP kept {r['samp_queries']} statements to fewer hosts; NASS held back {r['nass_delays']} reducers")
    print()
    wrong = [w for r in rows for w in r["wrong"]]
    print(f"every answer correct: {'met' if not wrong else 'NOT met'} ({sum(r['correct'] for r in rows)}/{sum(r['runs'] for r in rows)})")
    for w in wrong[:20]:
        print(f"  wrong: {w}")
    if "fifo" in by and "fair+sw" in by:
        ratio = by["fair+sw"]["queries_per_hour"] / by["fifo"]["queries_per_hour"]
        where = "namespace cluster" if args.netcluster else "loopback cluster (the target is for the namespace cluster)"
        print(f"fair+sw ÷ fifo throughput: {ratio:.2f} (target ≥ {THROUGHPUT_TARGET}, {where}); "
              f"bytes across: {by['fair+sw']['remote_bytes'] / 1e6:.1f} MB against {by['fifo']['remote_bytes'] / 1e6:.1f} MB")
    for r in rows:
        if "mixed_ratio" in r:
            verdict = "met" if r["mixed_ratio"] <= MIXED_TARGET else "not met"
            print(f"{r['policy']}: short queries' p95 with a TeraSort running ÷ alone {r['mixed_ratio']:.2f} (target ≤ {MIXED_TARGET:g}: {verdict})")
    for r in rows:
        budget = r["budget"]
        memory = "no budget" if budget is None else ("met" if r["peak_rss"] <= budget + MEMORY_OVERHEAD else "not met")
        spread = "met" if r["task_spread"] <= TASK_SPREAD else "not met"
        print(f"{r['policy']}: peak worker memory {r['peak_rss'] / 2**20:.0f} MB against budget + 1 GiB ({memory}); "
              f"tasks per worker within ±{TASK_SPREAD:.0%}: {spread} (worst {r['task_spread']:.0%})")


# ---- main --------------------------------------------------------------------------------------


@contextlib.contextmanager
def cluster_for(policy: str, args: argparse.Namespace, data_roots: list[str], workdir: str) -> Iterator[Any]:
    """A fresh cluster sharing its workers by ``policy``; sessions may read ``data_roots`` and
    write below ``workdir``."""
    coordinator_args = POLICIES[policy]
    if args.netcluster:
        with NetCluster(args.hosts, args.rate, workdir, args.memory_budget, data_roots, coordinator_args) as c:
            time.sleep(1.0)  # the workers register
            yield c
    else:
        c = LoopbackCluster(args.workers, workdir, data_roots, coordinator_args, args.memory_budget)
        try:
            deadline = time.monotonic() + 30
            while len(worker_facts(c.address, c.token)) < args.workers and time.monotonic() < deadline:
                time.sleep(0.2)
            yield c
        finally:
            c.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="TPC-DS data (qengine tpcds gen); default: generated under the cache at --sf")
    parser.add_argument("--sf", type=float, default=1.0, help="scale factor to generate when --data is not given (default 1)")
    parser.add_argument("--queries", default="all", help="TPC-DS query numbers, comma-separated, or all (default)")
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams, one user each (default 4)")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"of {', '.join(POLICIES)} (default all)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each policy, their order alternating (default 1)")
    parser.add_argument("--workers", type=int, default=3, help="workers of the loopback cluster (default 3)")
    parser.add_argument("--memory-budget", default="1GB", help="each worker's memory budget (default 1GB)")
    parser.add_argument("--terasort-records", type=int, default=2_000_000, help="records of the mixed run's TeraSort (0: no mixed run)")
    parser.add_argument("--netcluster", action="store_true", help="on the namespace cluster of bench/netcluster.py (needs root)")
    parser.add_argument("--hosts", type=int, default=4, help="with --netcluster: hosts (default 4)")
    parser.add_argument("--rate", default="300mbit", help="with --netcluster: each host's link rate (default 300mbit)")
    parser.add_argument("--json", help="write every run and the summary to this file")
    args = parser.parse_args(argv)
    if args.streams < 2:
        parser.error("--streams must be at least 2")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            parser.error(f"unknown policy {p!r}: choose from {', '.join(POLICIES)}")
    if args.netcluster and (why := missing_requirement()):
        print(f"skipped: {why}")
        return 0
    from tpcds.extension import queries

    data = tpcds_data(args)
    selection = sorted(queries()) if args.queries == "all" else [int(q) for q in args.queries.split(",")]
    print(f"DuckDB's answers for {len(selection)} queries", flush=True)
    tpcds = tpcds_group(data, selection)
    outcomes: list[Outcome] = []
    scratch = os.path.join(cache_dir(), "throughput-work")  # removed once the run succeeds; its logs kept otherwise
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    with _signals_raise():
        records, inputs = None, None
        if args.terasort_records:
            records = terasort_data(args.terasort_records)
            inputs = summarize_records(records)
        data_roots = [data] + ([os.path.dirname(records)] if records else [])
        workers = args.hosts if args.netcluster else args.workers
        for repeat in range(args.repeat):
            order = policies if repeat % 2 == 0 else list(reversed(policies))
            for policy in order:
                print(f"{policy}: {args.streams} streams, repeat {repeat + 1}", flush=True)
                workdir = tempfile.mkdtemp(dir=scratch, prefix=f"{policy.replace('+', '-')}-")
                sort = terasort_group(records, args.terasort_records, workers, workdir, inputs) if records else None
                with cluster_for(policy, args, data_roots, workdir) as cluster:
                    outcomes.append(measure(policy, cluster, tpcds, sort, args, repeat))
    shutil.rmtree(scratch, ignore_errors=True)
    rows = summarize(outcomes, records is not None)
    report(rows, args)
    if args.json:
        write_json({"summary": rows, "runs": [asdict(o) for o in outcomes]}, args.json)
    return 0 if all(not r["wrong"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
