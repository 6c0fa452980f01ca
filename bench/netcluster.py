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

Every job runs once untimed in each mode first (the workers warm), then ``--repeat`` times in
each mode, the order of the modes alternating from one repeat to the next (pull first, then
prefetch first). The table gives medians with their range of job time, map stage, reduce stage,
the reducers' shuffle-read wait, the push tail and bytes moved between hosts, and the
prefetch/pull ratios of the medians. While each timed run goes, every host's link is sampled
(its bridge port's byte counters, every ``SAMPLE_SECONDS``): the table adds each mode's mean
use of the links over the job, and ``<cache>/netcluster-<job>-links.png`` charts every host's
downlink and uplink over time, for the last repeat of each job and mode, so the overlap of
pushes with map work can be seen.
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
import threading
import time
from collections.abc import Iterator

from shuffle import JOBS as SHUFFLE_JOBS
from shuffle import generate as generate_shuffle_data
from shuffle import measure, median_of, mode_order, ratio, spread

import qengine
from qengine.cli.common import cache_dir, register_directory
from qengine.cli.processes import stop_processes
from sortbench.sortjob import copy_sql
from tpcds.report import write_json

SAMPLE_SECONDS = 0.05  # how often the link monitor reads the byte counters
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


def rate_bytes(rate: str) -> float:
    """Bytes per second of a tc rate such as ``300mbit`` or ``1gbit``."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale / 8
    raise qengine.ProgrammingError(f"--rate {rate!r}: give it as tc does, e.g. 300mbit")


class LinkMonitor:
    """Samples each host's link while a job runs: bytes into the host (its downlink, sent by
    the bridge port) and out of it (its uplink), from the bridge-side veth's counters."""

    def __init__(self, links: dict[str, str]) -> None:
        self.links = links  # host name → its bridge-side interface
        self.samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> dict[str, tuple[int, int]]:
        out = {}
        for host, link in self.links.items():
            base = f"/sys/class/net/{link}/statistics"
            with open(f"{base}/tx_bytes") as down, open(f"{base}/rx_bytes") as up:
                out[host] = (int(down.read()), int(up.read()))
        return out

    def __enter__(self) -> LinkMonitor:
        self.samples = [(time.perf_counter(), self._read())]

        def run() -> None:
            while not self._stop.wait(SAMPLE_SECONDS):
                self.samples.append((time.perf_counter(), self._read()))

        self._thread = threading.Thread(target=run, name="link-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.samples.append((time.perf_counter(), self._read()))

    def series(self) -> dict[str, list[tuple[float, float, float]]]:
        """Per host: (seconds since start, downlink bytes/s, uplink bytes/s) per interval."""
        t0 = self.samples[0][0]
        out: dict[str, list[tuple[float, float, float]]] = {h: [] for h in self.links}
        for (t1, a), (t2, b) in zip(self.samples, self.samples[1:], strict=False):
            dt = max(t2 - t1, 1e-6)
            for h in self.links:
                out[h].append((t2 - t0, (b[h][0] - a[h][0]) / dt, (b[h][1] - a[h][1]) / dt))
        return out

    def mean_use(self, rate: float) -> float:
        """The mean share of the links' capacity used over the run, both ways and all hosts."""
        (t1, first), (t2, last) = self.samples[0], self.samples[-1]
        moved = sum(last[h][0] - first[h][0] + last[h][1] - first[h][1] for h in self.links)
        return moved / (2 * len(self.links) * rate * max(t2 - t1, 1e-6))


class NetCluster:
    """H host namespaces + a coordinator namespace on a bridge, each link shaped to ``rate``."""

    def __init__(
        self,
        hosts: int,
        rate: str,
        workdir: str,
        memory_budget: str | None = None,
        data_roots: list[str] = (),
        coordinator_args: list[str] = (),
    ) -> None:
        """Sessions may read below ``workdir`` and ``data_roots``, and COPY may write below
        ``workdir``; ``coordinator_args`` go to ``qengine coordinator`` as they are."""
        if hosts < 1:
            raise qengine.ProgrammingError("--hosts must be at least 1")
        self.hosts = hosts
        self.rate = rate
        self.workdir = workdir
        self.memory_budget = memory_budget
        self.data_roots = [workdir, *data_roots]
        self.coordinator_args = list(coordinator_args)
        tag = f"{os.getpid() % 100000}"
        self.prefix = f"qe{tag}"
        self.subnet = SUBNET.format(os.getpid() % 200 + 20)
        self.bridge = f"{self.prefix}br"
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.host_links: dict[str, str] = {}  # host name → its bridge-side interface
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
        if shaped:
            self.host_links[name] = outside
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
        self._start(self.namespaces[0], ["coordinator", "--listen", self.address, "--heartbeat-timeout", "10", *roots, *self.coordinator_args], "coordinator")
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
        stop_processes(self.procs)
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
    """Every job of ``args.job`` (``sqls`` over the tables under ``root``): once untimed in each
    mode, then ``args.repeat`` times in each, the mode that goes first alternating; each timed
    run with its links sampled."""
    # TeraSort keeps one task per range partition (its layout); the others use the default coalescing.
    options = {"coalesce_size": 0} if args.job == "terasort" else {}
    if args.split_size:
        options["split_size"] = args.split_size
    connections = {}
    try:
        for mode in ("pull", "prefetch"):
            connections[mode] = cluster.connect(shuffle=mode, **options)
            register_directory(connections[mode], root)
        for name, sql in sqls.items():
            for mode in ("pull", "prefetch"):
                seconds = measure(connections[mode], name, sql)["seconds"]
                print(f"  {name:10s} {mode:8s} {seconds:7.2f}s (warm-up)", flush=True)
        rate = rate_bytes(args.rate)
        results = []
        for round_ in range(args.repeat):
            for name, sql in sqls.items():
                for mode in mode_order(round_):
                    with LinkMonitor(cluster.host_links) as links:
                        run = measure(connections[mode], name, sql)
                    results.append({"mode": mode, **run, "link_use": links.mean_use(rate), "links": links.series()})
                    print(f"  {name:10s} {mode:8s} {run['seconds']:7.2f}s  links {100 * results[-1]['link_use']:.0f}% used", flush=True)
        return results
    finally:
        for con in connections.values():
            con.close()


def report(results: list[dict], args: argparse.Namespace) -> dict:
    from rich.console import Console
    from rich.table import Table

    keys = ("seconds", "map_seconds", "reduce_seconds", "read_wait", "push_tail", "remote_bytes", "link_use")
    heads = ("job s", "map stage s", "reduce stage s", "read wait s", "push tail s", "cross-host MB", "links used")
    table = Table(title=f"{args.job} on {args.hosts} hosts at {args.rate}: median (range) of {args.repeat}, both modes warm, alternating")
    for h in ("job", "mode", *heads):
        table.add_column(h, justify="right")
    summary = {}
    for job in dict.fromkeys(r["job"] for r in results):
        med = {}
        for mode in ("pull", "prefetch"):
            runs = [r for r in results if r["job"] == job and r["mode"] == mode]
            # a missing stage counts as 0 s
            med[mode] = {k: median_of(runs, k, missing=0) for k in keys}
            cells = [
                spread(runs, k, "MB", missing=0) if k == "remote_bytes"
                else f"{100 * med[mode][k]:.0f}%" if k == "link_use" else spread(runs, k, missing=0)
                for k in keys
            ]
            table.add_row(job, mode, *cells)
        ratios = {k: ratio(med["prefetch"][k], med["pull"][k]) for k in keys}
        summary[job] = {"medians": med, "prefetch_over_pull": ratios}
        table.add_row(job, "prefetch/pull", *[f"{ratios[k]:.3f}" if ratios[k] is not None else "-" for k in keys], end_section=True)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return summary


def chart_links(results: list[dict], args: argparse.Namespace, path: str) -> None:
    """Each host's downlink and uplink over the last timed run of every job and mode, as a
    share of the link rate: a row per job, a column per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rate = rate_bytes(args.rate)
    jobs = list(dict.fromkeys(r["job"] for r in results))
    fig, axes = plt.subplots(len(jobs), 2, figsize=(12, 2.6 * len(jobs)), squeeze=False, sharey=True)
    for row, job in enumerate(jobs):
        for col, mode in enumerate(("pull", "prefetch")):
            ax = axes[row][col]
            last = [r for r in results if r["job"] == job and r["mode"] == mode][-1]
            for host, points in sorted(last["links"].items()):
                t = [p[0] for p in points]
                ax.plot(t, [100 * p[1] / rate for p in points], label=f"{host} down", linewidth=1)
                ax.plot(t, [100 * p[2] / rate for p in points], label=f"{host} up", linewidth=1, linestyle="--")
            ax.set_title(f"{job}, {mode}: {last['seconds']:.2f} s", fontsize=9)
            ax.set_ylim(0, 110)
            ax.set_ylabel("% of link rate", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[row][1].legend(fontsize=6, ncol=2, loc="upper right")
    axes[-1][0].set_xlabel("seconds since the job started", fontsize=8)
    axes[-1][1].set_xlabel("seconds since the job started", fontsize=8)
    fig.suptitle(f"{args.job} on {args.hosts} hosts at {args.rate}: link use, last repeat", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate", default="300mbit", help="each host's link rate, as tc writes it (default 300mbit)")
    parser.add_argument("--job", choices=sorted(JOB_BUILDERS), default="terasort")
    parser.add_argument("--records", type=int, default=5_000_000, help="terasort records (100 bytes each)")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per table of the shuffle jobs")
    parser.add_argument("--data", help="TPC-DS Parquet directory, for --job tpcds")
    parser.add_argument("--queries", default="4,11,14,23,64,74,78,95", help="TPC-DS queries, for --job tpcds")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per job and mode (default 3)")
    parser.add_argument("--memory-budget", default=None, help="each worker's shuffle memory budget")
    parser.add_argument("--split-size", default=None, help="bytes of input per map task in both modes, e.g. 32MB (default: the engine's)")
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
        chart = os.path.splitext(out)[0] + "-links.png"
        chart_links(results, args, chart)
        write_json({"args": vars(args), "summary": summary, "runs": results}, out)
        print(f"report: {out}\nlinks chart: {chart}")
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
