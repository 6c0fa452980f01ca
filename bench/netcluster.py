"""A multi-host cluster on one machine, with rate-limited links: where the exchange pays off.

Each host is a Linux network namespace joined by a veth pair to a bridge; each host's link is
shaped with ``tc … tbf`` in both directions (300mbit by default, as the SCache paper's EC2
nodes). One ``qengine worker`` runs in each host namespace and the coordinator in its own; the
benchmark talks to the coordinator over the bridge. Traffic only ever goes to the addresses of
the namespaces this script creates, and everything (processes, namespaces, links) is torn down
on exit, on Ctrl-C and on errors. It needs root and skips with a message otherwise.

    python bench/netcluster.py --hosts 4 --rate 300mbit --job terasort --records 5000000
    python bench/netcluster.py --hosts 4 --job shuffle --rows 2000000
    python bench/netcluster.py --hosts 4 --job tpcds --data DIR --queries 4,11,14,23,64,74,78,95

Jobs run in ``pull`` and ``prefetch`` mode alternately, ``--repeat`` times each; the table gives
medians of map stage, reduce stage and job time, the reducers' shuffle-read wait and bytes
moved between hosts, and the prefetch/pull ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from shuffle import JOBS as SHUFFLE_JOBS
from shuffle import generate as generate_shuffle_data
from shuffle import measure, median_of, ratio

import qengine
from qengine.cli.common import cache_dir, register_directory
from sortbench.sortjob import copy_sql
from tpcds.report import write_json

SUBNET = "10.213.{}"  # a /24 per run; .254 is the bridge (this process), .100 the coordinator
COORDINATOR_PORT = 7777
WORKER_PORT = 7000


def missing_requirement() -> str | None:
    """Why this machine cannot build the simulated cluster, or None when it can."""
    if os.geteuid() != 0:
        return "bench/netcluster.py needs root (network namespaces and tc); run it with sudo"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"bench/netcluster.py needs the `{tool}` command (iproute2)"
    probe = f"qeprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create network namespaces here ({made.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class NetCluster:
    """H host namespaces + a coordinator namespace on a bridge, each link shaped to ``rate``."""

    def __init__(
        self, hosts: int, rate: str, workdir: str, memory_budget: str | None = None, data_roots: list[str] = ()
    ) -> None:
        """Sessions may read below ``workdir`` and ``data_roots``, and COPY may write below ``workdir``."""
        if hosts < 1:
            raise qengine.ProgrammingError("--hosts must be at least 1")
        self.hosts = hosts
        self.rate = rate
        self.workdir = workdir
        self.memory_budget = memory_budget
        self.data_roots = [workdir, *data_roots]
        tag = f"{os.getpid() % 100000}"
        self.prefix = f"qe{tag}"
        self.subnet = SUBNET.format(os.getpid() % 200 + 20)
        self.bridge = f"{self.prefix}br"
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.token = secrets.token_hex(16)
        self.token_file = os.path.join(workdir, "token")
        self.address = f"{self.subnet}.100:{COORDINATOR_PORT}"

    # ---- network -------------------------------------------------------------------------------

    def _add_host(self, name: str, ip: str, shaped: bool) -> None:
        ns = f"{self.prefix}-{name}"
        outside, inside = f"{self.prefix}{name}", f"{self.prefix}{name}i"
        _run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        self.links.append(outside)
        _run("ip", "link", "set", inside, "netns", ns)
        _run("ip", "link", "set", outside, "master", self.bridge, "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", inside)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
        if shaped:  # the host's uplink (egress inside) and downlink (egress of the bridge port)
            # burst must cover rate/HZ or tbf cannot reach its rate; 256 KB does up to ~500mbit
            tbf = ["tbf", "rate", self.rate, "burst", "256kb", "latency", "50ms"]
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", inside, "root", *tbf)
            _run("tc", "qdisc", "add", "dev", outside, "root", *tbf)

    def _start(self, ns: str, args: list[str], name: str) -> subprocess.Popen:
        err = open(os.path.join(self.workdir, f"{name}.err"), "w")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "qengine.cli", *args, "--token-file", self.token_file],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )
        self.procs.append(proc)
        line = proc.stdout.readline()
        if not line:
            raise qengine.OperationalError(f"{name} did not start; see {err.name}")
        return proc

    def __enter__(self) -> NetCluster:
        try:
            self._up()
        except BaseException:
            self.close()
            raise
        return self

    def _up(self) -> None:
        with open(self.token_file, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(self.token)
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        _run("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self._add_host("c", f"{self.subnet}.100", shaped=False)
        roots = [arg for root in self.data_roots for arg in ("--data-root", root)] + ["--output-root", self.workdir]
        self._start(self.namespaces[0], ["coordinator", "--listen", self.address, "--heartbeat-timeout", "10", *roots], "coordinator")
        for h in range(self.hosts):
            self._add_host(f"h{h}", f"{self.subnet}.{h + 1}", shaped=True)
            args = ["worker", "--join", self.address, "--listen", f"{self.subnet}.{h + 1}:{WORKER_PORT}",
                    "--log", os.path.join(self.workdir, f"worker-{h}.log")]
            if self.memory_budget:
                args += ["--memory-budget", self.memory_budget]
            self._start(self.namespaces[-1], args, f"worker-{h}")

    def connect(self, **options: object):
        return qengine.connect(f"qengine://{self.address}", token=self.token, **options)

    def close(self) -> None:
        """Stop every process, then delete the namespaces and links; never raises."""
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self.procs, self.namespaces, self.links = [], [], []

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C, so the teardown in ``finally`` runs for both."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---- jobs ----------------------------------------------------------------------------------------


# Each builder returns the job's SQL by name (run in that order) and the data root directory,
# whose subdirectories register_directory makes the tables.


def _terasort(args: argparse.Namespace, workdir: str) -> tuple[dict[str, str], str]:
    from sortbench import gensort

    files = 4 * args.hosts  # in the name: the layout depends on --hosts, as for the shuffle job
    root = os.path.join(cache_dir(), f"netcluster-terasort-{args.records}-{files}")
    data = os.path.join(root, "records")
    if not os.path.isdir(data) or not os.listdir(data):
        gensort.generate(args.records, data, per_file=max(1, args.records // files))
    return {"terasort": copy_sql(os.path.join(workdir, "sorted"), force=True)}, root


def _shuffle(args: argparse.Namespace, workdir: str) -> tuple[dict[str, str], str]:
    root = os.path.join(cache_dir(), f"netcluster-shuffle-{args.rows}-{4 * args.hosts}")
    if not os.path.isdir(root):
        generate_shuffle_data(root, args.rows, 4 * args.hosts)
    return dict(SHUFFLE_JOBS), root


def _tpcds(args: argparse.Namespace, workdir: str) -> tuple[dict[str, str], str]:
    from tpcds.extension import queries
    from tpcds.run import parse_selection

    if not args.data or not os.path.isdir(args.data):
        raise qengine.ProgrammingError("--job tpcds needs --data DIR (from `qengine tpcds gen`)")
    texts = queries()
    return {f"q{n}": texts[n] for n in parse_selection(args.queries)}, args.data


JOB_BUILDERS = {"terasort": _terasort, "shuffle": _shuffle, "tpcds": _tpcds}


def run_jobs(cluster: NetCluster, args: argparse.Namespace, sqls: dict[str, str], root: str) -> list[dict]:
    """Every job of ``args.job`` (``sqls`` over the tables under ``root``) in pull and prefetch
    mode alternately, ``args.repeat`` times."""
    # TeraSort keeps one task per range partition (its layout); the others use the default coalescing.
    options = {"coalesce_size": 0} if args.job == "terasort" else {}
    connections = {}
    try:
        for mode in ("pull", "prefetch"):
            connections[mode] = cluster.connect(shuffle=mode, **options)
            register_directory(connections[mode], root)
        results = []
        for _ in range(args.repeat):
            for name, sql in sqls.items():
                for mode in ("pull", "prefetch"):
                    results.append({"mode": mode, **measure(connections[mode], name, sql)})
                    print(f"  {name:10s} {mode:8s} {results[-1]['seconds']:7.2f}s", flush=True)
        return results
    finally:
        for con in connections.values():
            con.close()


def report(results: list[dict], args: argparse.Namespace) -> dict:
    from rich.console import Console
    from rich.table import Table

    keys = ("seconds", "map_seconds", "reduce_seconds", "read_wait", "remote_bytes")
    heads = ("job s", "map stage s", "reduce stage s", "read wait s", "cross-host MB")
    table = Table(title=f"{args.job} on {args.hosts} hosts at {args.rate} (median of {args.repeat})")
    for h in ("job", "mode", *heads):
        table.add_column(h, justify="right")
    summary = {}
    for job in dict.fromkeys(r["job"] for r in results):
        med = {}
        for mode in ("pull", "prefetch"):
            runs = [r for r in results if r["job"] == job and r["mode"] == mode]
            med[mode] = {k: median_of(runs, k, missing=0) for k in keys}  # a missing stage counts as 0 s
            cells = [f"{med[mode][k] / 1e6:.1f}" if k == "remote_bytes" else f"{med[mode][k]:.3f}" for k in keys]
            table.add_row(job, mode, *cells)
        ratios = {k: ratio(med["prefetch"][k], med["pull"][k]) for k in keys}
        summary[job] = {"medians": med, "prefetch_over_pull": ratios}
        table.add_row(job, "prefetch/pull", *[f"{ratios[k]:.3f}" if ratios[k] is not None else "-" for k in keys])
    Console().print(table)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate", default="300mbit", help="each host's link rate, as tc writes it (default 300mbit)")
    parser.add_argument("--job", choices=sorted(JOB_BUILDERS), default="terasort")
    parser.add_argument("--records", type=int, default=5_000_000, help="terasort records (100 bytes each)")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per table of the shuffle jobs")
    parser.add_argument("--data", help="TPC-DS Parquet directory, for --job tpcds")
    parser.add_argument("--queries", default="4,11,14,23,64,74,78,95", help="TPC-DS queries, for --job tpcds")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--memory-budget", default=None, help="each worker's shuffle memory budget")
    parser.add_argument("--out", default=None, help="JSON report (default: the cache directory)")
    args = parser.parse_args(argv)
    reason = missing_requirement()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
        return 0
    workdir = tempfile.mkdtemp(prefix="qengine-netcluster-")
    try:
        sqls, root = JOB_BUILDERS[args.job](args, workdir)
        with _signals_raise(), NetCluster(args.hosts, args.rate, workdir, args.memory_budget, [root]) as cluster:
            results = run_jobs(cluster, args, sqls, root)
        summary = report(results, args)
        out = args.out or os.path.join(cache_dir(), f"netcluster-{args.job}.json")
        write_json({"args": vars(args), "summary": summary, "runs": results}, out)
        print(f"report: {out}")
    except qengine.Error as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the simulated cluster was torn down", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
