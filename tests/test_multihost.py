"""A standalone coordinator and workers started through the CLI, on loopback.

Every process a test starts is stopped in a ``finally``, whatever the test's outcome.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest

import qengine
from qengine.transport.rpc import Client
from tests.conftest import assert_same, free_port, wait_until

HEARTBEAT_TIMEOUT = 3.0
HANG_BOUND = 30.0  # seconds; only guards against hangs


class Cluster:
    """A coordinator and its workers as separate ``qengine`` processes."""

    def __init__(
        self,
        tmp: str,
        tls: tuple[str, str] | None = None,
        data_roots: list[str] | None = None,
        output_roots: list[str] = (),
        coordinator_args: list[str] = (),
    ) -> None:
        self.tmp = tmp
        self.tls = tls
        self.token = "test-token-" + os.urandom(8).hex()
        self.token_file = os.path.join(tmp, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        self.address = f"127.0.0.1:{free_port()}"
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        roots = [arg for root in data_roots or [tmp] for arg in ("--data-root", root)]
        roots += [arg for root in output_roots for arg in ("--output-root", root)]
        self.coordinator = self._start(
            ["coordinator", "--listen", self.address, "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT), *roots, *coordinator_args], "coordinator"
        )
        line = self.coordinator.stdout.readline()
        assert "listening on" in line, line

    def _tls_args(self) -> list[str]:
        return ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]] if self.tls else []

    def _start(self, args: list[str], name: str) -> subprocess.Popen:
        err = open(os.path.join(self.tmp, f"{name}.err"), "w")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "qengine.cli", *args, "--token-file", self.token_file, *self._tls_args()],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )
        self.procs.append(proc)
        return proc

    def add_worker(self, *args: str) -> str:
        n = len(self.workers)
        log = os.path.join(self.tmp, f"worker-{n}.log")
        proc = self._start(["worker", "--join", self.address, "--log", log, *args], f"worker-{n}")
        line = proc.stdout.readline()
        assert "serving on" in line, line + Path(self.tmp, f"worker-{n}.err").read_text()
        self.workers.append(proc)
        return line.split("serving on ")[1].split(",")[0]

    def root_certs(self) -> bytes | None:
        return Path(self.tls[0]).read_bytes() if self.tls else None

    def client(self, address: str | None = None, token: str | None = None) -> Client:
        return Client(address or self.address, token or self.token, self.root_certs(), role="coordinator")

    def members(self) -> list[dict]:
        return self.client().action("workers", timeout=10)

    def connect(self, **options: object):
        return qengine.connect(f"qengine://{self.address}", token=self.token, tls_root_certs=self.root_certs(), **options)

    def coordinator_log(self) -> str:
        return Path(self.tmp, "coordinator.err").read_text()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.coordinator.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)  # a test may have paused it
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()


@contextlib.contextmanager
def cluster(
    tmp_path,
    workers: int,
    tls: tuple[str, str] | None = None,
    data_roots: list[str] | None = None,
    output_roots: list[str] = (),
    coordinator_args: list[str] = (),
    worker_args: list[str] = (),
) -> Iterator[Cluster]:
    """A cluster whose sessions may read below ``data_roots`` (default: ``tmp_path``) and write
    below ``output_roots``; ``coordinator_args`` go to ``qengine coordinator`` as they are, and
    ``worker_args`` to each ``qengine worker``."""
    os.makedirs(tmp_path, exist_ok=True)
    c = Cluster(str(tmp_path), tls, data_roots, list(output_roots), list(coordinator_args))
    try:
        for _ in range(workers):
            c.add_worker(*worker_args)
        yield c
    finally:
        c.stop()


JOIN_SQL = """
    SELECT c.city, i.category, count(*) AS n, sum(s.qty) AS q
    FROM sales s JOIN customers c ON s.cust_id = c.cust_id JOIN items i ON s.item_id = i.item_id
    GROUP BY 1, 2 ORDER BY 1, 2
"""


def data_root(data_paths: dict[str, str]) -> list[str]:
    """The directory the test tables live in, as a cluster's data roots."""
    return [os.path.dirname(data_paths["sales"])]


def register(con, data_paths: dict[str, str]) -> None:
    for name, path in data_paths.items():
        con.register_parquet(name, path)


def test_three_workers_run_a_join_and_a_new_worker_is_used(tmp_path, data_paths, oracle):
    with cluster(tmp_path, 3, data_roots=data_root(data_paths)) as c:
        assert [m["alive"] for m in c.members()] == [True, True, True]
        with c.connect(broadcast_threshold=0, split_size="200KB") as con:
            register(con, data_paths)
            assert_same(con, oracle, JOIN_SQL)
            address = c.add_worker()
            wait_until(lambda: len([m for m in c.members() if m["alive"]]) == 4, HANG_BOUND, "the fourth worker")
            assert_same(con, oracle, JOIN_SQL)
            assert c.client(address).action("ping")["tasks_run"] > 0, "the worker that joined mid-session got no task"
            assert set(con.tables()) == {"sales", "customers", "items"}


def test_cli_sql_against_the_cluster(tmp_path, data_paths, oracle):
    with cluster(tmp_path, 2, data_roots=data_root(data_paths)) as c:
        out = subprocess.run(
            [sys.executable, "-m", "qengine.cli", "sql", "--cluster", c.address, "--token-file", c.token_file,
             "-d", os.path.dirname(data_paths["sales"]), "--format", "csv", "-c", "SELECT count(*) AS n FROM sales"],
            capture_output=True, text=True, timeout=HANG_BOUND,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["n", str(oracle.execute("SELECT count(*) FROM sales").fetchone()[0])]


def test_wrong_token_is_refused_and_logged(tmp_path):
    with cluster(tmp_path, 1) as c:
        with pytest.raises(qengine.OperationalError, match="token"):
            qengine.connect(f"qengine://{c.address}", token="not-the-token")
        with pytest.raises(qengine.ProgrammingError, match="token"):
            qengine.connect(f"qengine://{c.address}")
        worker = c.members()[0]["address"]
        with pytest.raises(qengine.OperationalError, match="token"):
            Client(worker, "not-the-token").action("ping", timeout=5)
        assert "refused" in c.coordinator_log()


def test_a_bad_cluster_address_fails_with_qengines_errors() -> None:
    """pyarrow's own exceptions came through: ArrowInvalid for a port out of range,
    ArrowNotImplementedError for a gRPC server that is not qengine's."""
    with pytest.raises(qengine.ProgrammingError, match="a port from 1 to 65535"):
        qengine.connect("qengine://127.0.0.1:99999", token="x")
    other = flight.FlightServerBase("grpc://127.0.0.1:0")  # answers every action UNIMPLEMENTED
    try:
        with pytest.raises(qengine.OperationalError, match="does not answer as a qengine server"):
            qengine.connect(f"qengine://127.0.0.1:{other.port}", token="x")
    finally:
        other.shutdown()


def test_hung_worker_is_marked_dead_and_its_query_goes_on_without_it(tmp_path, data_paths, oracle):
    with cluster(tmp_path, 2, data_roots=data_root(data_paths)) as c, c.connect(broadcast_threshold=0, split_size="200KB") as con:
        register(con, data_paths)
        expected = oracle.execute(JOIN_SQL).fetchall()
        assert con.execute(JOIN_SQL).fetchall() == expected
        victim = c.workers[1]
        victim.send_signal(signal.SIGSTOP)  # hangs: its calls never answer
        started = time.monotonic()
        assert con.execute(JOIN_SQL).fetchall() == expected
        assert time.monotonic() - started < HANG_BOUND
        assert [m["alive"] for m in c.members()] == [True, False]
        victim.kill()
        # The session goes on with the live worker.
        sql = "SELECT count(*) FROM sales"
        assert con.execute(sql).fetchall() == oracle.execute(sql).fetchall()


def test_sigkilled_worker_is_detected_within_the_timeout(tmp_path):
    with cluster(tmp_path, 2) as c:
        c.workers[0].kill()
        wait_until(lambda: not c.members()[0]["alive"], HEARTBEAT_TIMEOUT + 3, "the dead worker to be marked")


def test_coordinator_shutdown_stops_workers_and_workers_leave_a_dead_coordinator(tmp_path):
    with cluster(tmp_path, 2) as c:
        c.coordinator.send_signal(signal.SIGTERM)
        for w in c.workers:
            w.wait(timeout=HANG_BOUND)
        assert c.coordinator.wait(timeout=HANG_BOUND) == 0
    with cluster(tmp_path / "b", 1) as c:
        c.coordinator.kill()  # no goodbye: the worker notices the missing heartbeat replies
        assert c.workers[0].wait(timeout=HEARTBEAT_TIMEOUT + HANG_BOUND) == 0


def test_a_connection_closes_quietly_once_its_coordinator_is_gone(tmp_path):
    """close() raised OperationalError: the coordinator was unreachable."""
    with cluster(tmp_path, 1) as c:
        con = c.connect()
        assert con.execute("SELECT 1 AS a").fetchall() == [(1,)]
        c.coordinator.kill()
        c.coordinator.wait(timeout=HANG_BOUND)
        with pytest.raises(qengine.OperationalError):
            con.execute("SELECT 2 AS b")
        con.close()


def test_unreadable_path_is_named(tmp_path):
    with cluster(tmp_path, 1) as c:
        worker = c.members()[0]["address"]
        missing = str(tmp_path / "nowhere.parquet")
        assert Client(worker, c.token).action("check_paths", {"paths": [missing]})["unreadable"] == [missing]
        # outside its roots a file is unreadable to it, whether or not it exists: the answer told which did
        outside = [sys.executable, "/no/such/file"]
        assert Client(worker, c.token).action("check_paths", {"paths": outside})["unreadable"] == outside


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_with_a_self_signed_certificate(tmp_path, data_paths, oracle):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True, capture_output=True, timeout=HANG_BOUND,
    )
    with cluster(tmp_path, 2, tls=(cert, key), data_roots=data_root(data_paths)) as c:
        with c.connect(broadcast_threshold=0, split_size="200KB") as con:
            register(con, data_paths)
            assert_same(con, oracle, JOIN_SQL)
        with pytest.raises(qengine.OperationalError):
            qengine.connect(f"qengine://{c.address}", token=c.token)  # plaintext to a TLS server


SESSION_TIMEOUT = 1.5  # seconds, for the session lease tests
_CLIENT = """
import sys, qengine
con = qengine.connect("qengine://{address}", token={token!r})
con.register_parquet("sales", {sales!r})
con.execute("CREATE TABLE kept AS SELECT * FROM sales")
print("ready", flush=True)
sys.stdin.readline()
try:
    print(con.execute("SELECT count(*) FROM kept").fetchall()[0][0], flush=True)
except qengine.Error as e:
    print(type(e).__name__, e, flush=True)
"""


def _held_bytes(c: Cluster) -> int:
    return sum(c.client(m["address"]).action("ping", timeout=10)["bytes"] for m in c.members())


def _client_process(c: Cluster, data_paths: dict[str, str]) -> subprocess.Popen:
    script = _CLIENT.format(address=c.address, token=c.token, sales=data_paths["sales"])
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    c.procs.append(proc)  # stopped with the cluster, whatever the test's outcome
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sessions_of_killed_and_silent_clients_are_closed_and_idle_ones_kept(tmp_path, data_paths, oracle):
    """A client killed with SIGKILL never closes its session: the coordinator drops it, and
    what it stored on the workers, once it has not been heard from for --session-timeout. A
    connected client, however idle, keeps its session; one that was silent (suspended) is told
    its session was closed."""
    args = ["--session-timeout", str(SESSION_TIMEOUT)]
    with cluster(tmp_path, 2, data_roots=data_root(data_paths), coordinator_args=args) as c:
        expected = str(oracle.execute("SELECT count(*) FROM sales").fetchone()[0])
        killed = _client_process(c, data_paths)
        held = _held_bytes(c)
        assert held > 0, "the session table is not held on the workers"
        idle = _client_process(c, data_paths)
        stopped = _client_process(c, data_paths)
        assert _held_bytes(c) == 3 * held
        killed.kill()
        killed.wait()
        stopped.send_signal(signal.SIGSTOP)  # its keepalives stop, as a suspended laptop's do
        wait_until(lambda: _held_bytes(c) == held, HANG_BOUND, "the killed and the silent clients' tables to be dropped")
        stopped.send_signal(signal.SIGCONT)
        assert "its client was not heard from" in c.coordinator_log()
        idle.stdin.write("\n")
        idle.stdin.flush()
        assert idle.stdout.readline().strip() == expected
        stopped.stdin.write("\n")
        stopped.stdin.flush()
        answer = stopped.stdout.readline()
        assert answer.startswith("OperationalError") and "--session-timeout" in answer, answer
