"""The local cluster's processes: start, stop, no orphans, dead workers, logs and the Flight token.

Every test that starts a cluster closes it in a ``finally`` (or a ``with``), even when it fails,
and the subprocess test kills what it started if the assertions fail.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psutil
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import qengine
from tests.conftest import REPO, subprocess_env, wait_until

HANG_BOUND = 20.0  # seconds; only guards against hangs


def worker_children() -> dict[int, psutil.Process]:
    """Worker processes that are children of this test process."""
    out = {}
    for p in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any("qengine.runtime.worker" in part for part in p.cmdline()):
                out[p.pid] = p
    return out


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def with_deadline(fn: Callable[[], object], seconds: float = HANG_BOUND) -> object:
    """Run ``fn`` in a thread; fail the test (rather than hang) if it takes longer than ``seconds``."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"call did not return within {seconds} s (hang)")
    if "error" in box:
        raise box["error"]
    return box.get("result")


@contextlib.contextmanager
def cluster_connection(**options: object) -> Iterator[object]:
    con = qengine.connect(**options)
    try:
        yield con
    finally:
        con.close()


def kill_leftovers(pids: list[int]) -> None:
    """Last-resort cleanup for processes this test started (only qengine workers, by pid)."""
    for pid in pids:
        with contextlib.suppress(psutil.Error, OSError):
            if any("qengine.runtime.worker" in part for part in psutil.Process(pid).cmdline()):
                os.kill(pid, signal.SIGKILL)


def remove_log_dir(path: str | None) -> None:
    """A cluster with a dead worker keeps its logs for debugging; the tests that kill workers tidy up."""
    if path and os.path.basename(path).startswith("qengine-logs-"):
        shutil.rmtree(path, ignore_errors=True)


# ---- start and stop ---------------------------------------------------------------------------


def test_workers_start_and_stop() -> None:
    before = set(worker_children())
    con = qengine.connect(workers=2)
    try:
        cluster = con._cluster
        new = set(worker_children()) - before
        assert len(new) == 2
        assert new == {w.process.pid for w in cluster.workers}
        assert len(cluster.addresses) == 2
        assert all(port_open(a) for a in cluster.addresses)
        assert con.execute("SELECT 41 + 1 AS x").fetchall() == [(42,)]
        addresses = list(cluster.addresses)
    finally:
        started = time.monotonic()
        con.close()
    assert time.monotonic() - started < HANG_BOUND
    wait_until(lambda: all(gone(pid) for pid in new), 5, "the workers to exit")
    assert not (set(worker_children()) & new)
    wait_until(lambda: not any(port_open(a) for a in addresses), 5, "the workers' ports to close")
    with pytest.raises(qengine.InterfaceError, match="closed"):
        con.close()  # a second close is a mistake, as PEP 249 has it; the cluster stays stopped


def test_context_manager_cleans_up_when_the_body_raises() -> None:
    before = set(worker_children())
    pids: set[int] = set()
    with pytest.raises(RuntimeError, match="body failed"), qengine.connect(workers=2) as con:
        pids = set(worker_children()) - before
        assert len(pids) == 2
        addresses = list(con._cluster.addresses)
        raise RuntimeError("body failed")
    wait_until(lambda: all(gone(pid) for pid in pids), 5, "the workers to exit")
    assert not any(port_open(a) for a in addresses)


def test_close_removes_the_log_dir_of_a_healthy_cluster() -> None:
    with cluster_connection(workers=1) as con:
        log_dir = con._cluster.log_dir
        assert os.path.isdir(log_dir)
    assert not os.path.exists(log_dir)


# ---- no orphans ---------------------------------------------------------------------------------


SCRIPT = """
import sys
import qengine
con = qengine.connect(workers=2)
assert con.execute("SELECT 1 AS one").fetchall() == [(1,)]
print(con._cluster.log_dir, " ".join(str(w.process.pid) for w in con._cluster.workers), flush=True)
sys.stdin.read()  # until the test closes our stdin, or kills us
"""


def _read_line(stream, seconds: float) -> str:
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    return box[0].decode() if box else ""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "exit without close"])
def test_no_orphan_workers_when_the_coordinator_process_ends(how: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), cwd=REPO
    )
    pids: list[int] = []
    log_dir = None
    try:
        line = _read_line(proc.stdout, 60)
        assert line.strip(), f"the script did not report worker pids; stderr: {proc.stderr.read1(4096) if proc.poll() is not None else ''}"
        log_dir, *rest = line.split()
        pids = [int(p) for p in rest]
        assert len(pids) == 2
        for pid in pids:
            assert psutil.Process(pid).ppid() == proc.pid
            assert not gone(pid)
        if how == "exit without close":
            proc.stdin.close()
        else:
            os.kill(proc.pid, getattr(signal, how))
        proc.wait(timeout=30)
        wait_until(
            lambda: all(gone(pid) for pid in pids), 10,
            lambda: f"the orphaned workers to exit: {[(pid, psutil.Process(pid).status()) for pid in pids if not gone(pid)]}",
        )
        if how == "exit without close":
            assert proc.returncode == 0
            # nothing from the workers (logs, tracebacks) reached the script's terminal
            stderr = proc.stderr.read().decode()
            assert "Traceback" not in stderr and "qengine.runtime.worker" not in stderr, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(pids)
        remove_log_dir(log_dir)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()


# ---- dead workers ---------------------------------------------------------------------------------


def test_killed_worker_is_replaced_and_the_next_query_answers(data_paths, oracle) -> None:
    with cluster_connection(workers=2) as con:
        log_dir = con._cluster.log_dir
        con.register_parquet("sales", data_paths["sales"])
        sql = "SELECT store_id, count(sale_id), sum(qty) FROM sales GROUP BY store_id ORDER BY 1"
        expected = oracle.execute(sql).fetchall()
        assert con.execute(sql).fetchall() == expected
        victim = con._cluster.workers[1]
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(timeout=10)
        # The query after the loss answers, and so does every one after it.
        for _ in range(2):
            assert with_deadline(lambda: con.execute(sql).fetchall()) == expected
        wait_until(lambda: len(con._cluster.workers) == 2 and victim not in con._cluster.workers, 30, "a replacement worker")
        replacement = next(w for w in con._cluster.workers if w.id not in (0, 1))
        assert replacement.alive() and replacement.process.pid != victim.process.pid
        assert not os.path.exists(victim.spill_dir)  # the lost worker's spill files went with it
        pids = [w.process.pid for w in con._cluster.workers]
    for pid in pids:
        wait_until(lambda pid=pid: gone(pid), 10, "the workers to exit")
    remove_log_dir(log_dir)


def test_worker_killed_during_a_query_is_recovered(data_paths, oracle) -> None:
    """A worker dies while a query runs (after its first task finished): the query answers
    right, says what it recovered, and closing the cluster leaves no spill directory."""
    with cluster_connection(workers=2, broadcast_threshold=0, split_size="200KB") as con:  # sales in several tasks
        log_dir = con._cluster.log_dir
        spill_dirs = list(con._cluster.spill_dirs)
        assert len(spill_dirs) == 2 and all(os.path.isdir(d) for d in spill_dirs)
        for name in ("sales", "customers"):
            con.register_parquet(name, data_paths[name])
        victim = con._cluster.workers[1].process
        killed = threading.Event()

        def progress(done: int, total: int) -> None:
            if not killed.is_set():
                killed.set()
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait(timeout=10)

        sql = "SELECT c.city, count(s.sale_id) FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city ORDER BY 1"
        cursor = con.cursor()
        assert with_deadline(lambda: cursor.execute(sql, progress=progress).fetchall()) == oracle.execute(sql).fetchall()
        assert killed.is_set()
        recovery = cursor.stats.recovery
        assert len(recovery.lost_workers) == 1 and "exited with code -9" in recovery.lost_workers[0]
        assert recovery.retried + recovery.recomputed >= 1
        spill_dirs = list(con._cluster.spill_dirs)
    assert not any(os.path.exists(d) for d in spill_dirs)
    remove_log_dir(log_dir)


# ---- logs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("program", "stop", "busy"), [
    ("while True: pass", False, True),  # works without answering (a long call holding the GIL)
    ("import time; time.sleep(60)", False, False),  # answers nothing and does nothing: stuck
    ("while True: pass", True, False),  # stopped (SIGSTOP): hung, whatever it was doing
], ids=["spinning", "sleeping", "stopped"])
def test_a_worker_that_does_not_answer_is_busy_only_while_it_works(program: str, stop: bool, busy: bool) -> None:
    """The watchdog gives a worker that does not answer but uses CPU longer before replacing it
    as hung: on a loaded host, workers deep in a large result were killed and their work redone."""
    from qengine.runtime.local_cluster import WorkerHandle

    process = subprocess.Popen([sys.executable, "-c", program])
    try:
        handle = WorkerHandle(0, "127.0.0.1:1", process)
        handle.look()
        if stop:
            process.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        assert handle.look() is busy
    finally:
        process.kill()
        process.wait()


def test_worker_logs_go_to_the_log_dir_not_the_terminal(data_paths, capfd) -> None:
    capfd.readouterr()
    with cluster_connection(workers=2) as con:
        con.register_parquet("sales", data_paths["sales"])
        log_dir = con._cluster.log_dir
        con.execute("SELECT count(sale_id) FROM sales").fetchall()
        with pytest.raises(qengine.DataError):
            con.execute("SELECT CAST(note AS INTEGER) FROM sales WHERE note IS NOT NULL").fetchall()
        logs = {}
        for w in con._cluster.workers:
            path = os.path.join(log_dir, f"worker-{w.id}.log")
            assert os.path.isfile(path)
            with open(path) as f:
                logs[w.id] = f.read()
        assert all(f"worker {i} serving on" in text for i, text in logs.items())
        # the failed task's traceback went to a log file
        assert any("Conversion Error" in text for text in logs.values())
        assert con._cluster.token not in "".join(logs.values())
    out, err = capfd.readouterr()
    assert "serving on" not in out + err
    assert "Conversion Error" not in out + err
    assert "Traceback" not in out + err


# ---- network exposure and the token --------------------------------------------------------------


def _ipv4(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def test_workers_listen_on_localhost_only(default_engine) -> None:
    cluster = default_engine._cluster
    assert all(a.startswith("127.0.0.1:") for a in cluster.addresses)
    for w in cluster.workers:
        listening = [c for c in psutil.Process(w.process.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert listening
        # gRPC may bind an IPv6 socket to the IPv4-mapped loopback (::ffff:127.0.0.1): still loopback only
        assert {str(_ipv4(c.laddr.ip)) for c in listening} == {"127.0.0.1"}, listening
        assert w.address in {f"127.0.0.1:{c.laddr.port}" for c in listening}


def test_token_is_not_on_the_worker_command_line(default_engine) -> None:
    cluster = default_engine._cluster
    for w in cluster.workers:
        assert cluster.token not in " ".join(psutil.Process(w.process.pid).cmdline())


def _clients(address: str, token: str) -> dict[str, tuple[flight.FlightClient, flight.FlightCallOptions]]:
    headers = {
        "no token": [],
        "wrong token": [(b"authorization", b"Bearer " + b"0" * len(token))],
        "token without Bearer": [(b"authorization", token.encode())],
        "right token": [(b"authorization", f"Bearer {token}".encode())],
    }
    return {k: (flight.FlightClient(f"grpc+tcp://{address}"), flight.FlightCallOptions(headers=h, timeout=10)) for k, h in headers.items()}


def test_flight_servers_refuse_calls_without_the_token(default_engine, oracle) -> None:
    cluster = default_engine._cluster
    for address in cluster.addresses:
        clients = _clients(address, cluster.token)
        try:
            for name in ("no token", "wrong token", "token without Bearer"):
                client, options = clients[name]
                with pytest.raises(flight.FlightUnauthenticatedError):
                    list(client.do_action(flight.Action("ping", b"{}"), options))
                with pytest.raises(flight.FlightUnauthenticatedError):
                    client.do_get(flight.Ticket(json.dumps({"key": "x", "partition": 0}).encode()), options).read_all()
                with pytest.raises(flight.FlightUnauthenticatedError):
                    descriptor = flight.FlightDescriptor.for_command(json.dumps({"key": "table/evil/0/0"}).encode())
                    writer, _ = client.do_put(descriptor, pa.schema([("a", pa.int64())]), options)
                    writer.write_table(pa.table({"a": [1]}))
                    writer.close()
                # a call without the token cannot stop the worker either
                with pytest.raises(flight.FlightUnauthenticatedError):
                    list(client.do_action(flight.Action("shutdown", b"{}"), options))
            # the same call with the token works (so the refusals above are about the token)
            client, options = clients["right token"]
            reply = json.loads(list(client.do_action(flight.Action("ping", b"{}"), options))[0].body.to_pybytes())
            assert reply["pid"] in {w.process.pid for w in cluster.workers}
        finally:
            for client, _ in clients.values():
                client.close()
    # the cluster is unharmed
    assert all(w.alive() for w in cluster.workers)
    sql = "SELECT count(cust_id) FROM customers"
    assert default_engine.execute(sql).fetchone() == oracle.execute(sql).fetchone()


def test_queries_share_the_coordinator_s_threads_and_closing_stops_them(data_paths) -> None:
    con = qengine.connect(workers=2, split_size="200KB")
    try:
        con.register_parquet("sales", data_paths["sales"])
        sql = "SELECT store_id, count(*), sum(qty) FROM sales GROUP BY store_id"
        coordinator = con.session.coordinator
        con.execute(sql).fetchall()
        first = coordinator.tasks._threads | coordinator.aux._threads
        for _ in range(5):
            con.execute(sql).fetchall()
        # the first query's threads still serve (a pool adds one when none is idle at a call)
        threads = coordinator.tasks._threads | coordinator.aux._threads
        assert first <= threads and all(t.is_alive() for t in first)
        assert len(coordinator.tasks._threads) <= coordinator.tasks._max_workers
    finally:
        con.close()
    wait_until(lambda: not any(t.is_alive() for t in threads), 10, "the coordinator's call threads to stop")


def test_local_workers_are_out_of_reach_of_the_terminals_ctrl_c(data_paths) -> None:
    """Ctrl-C signals the terminal's foreground process group: local workers are in a session
    of their own and ignore SIGINT anyway, so they outlive it and the next query runs."""
    with qengine.connect(workers=2) as con:
        con.register_parquet("sales", data_paths["sales"])
        before = con.execute("SELECT count(*) FROM sales").fetchone()
        for w in con._cluster.workers:
            assert os.getpgid(w.process.pid) != os.getpgid(0)
            assert os.getsid(w.process.pid) != os.getsid(0)
            os.kill(w.process.pid, signal.SIGINT)
        time.sleep(0.5)
        assert all(w.alive() for w in con._cluster.workers)
        assert con.execute("SELECT count(*) FROM sales").fetchone() == before


@pytest.mark.parametrize("listen", ["0.0.0.0:7777", "0.0.0.00:7777", "0:7777", "[::]:7777", "[::0]:7777", "[0::0]:7777"])
def test_every_spelling_of_the_any_address_is_refused(listen: str) -> None:
    # only 0.0.0.0, :: and [::] were refused; 0.0.0.00 and [::0] served every interface
    from qengine.cli.cluster import parse_listen

    with pytest.raises(qengine.ProgrammingError, match="listen on a concrete address"):
        parse_listen(listen)
    assert parse_listen("127.0.0.1:7777") == ("127.0.0.1", 7777)


@pytest.mark.parametrize(("listen", "words"), [("::1:7777", "in brackets"), ("127.0.0.1:99999", "as HOST:PORT"), (":7777", "as HOST:PORT")])
def test_a_listen_address_qengine_cannot_read_is_refused(listen: str, words: str) -> None:
    """An unbracketed IPv6 address reached pyarrow, which failed with a traceback."""
    from qengine.cli.cluster import parse_listen

    with pytest.raises(qengine.ProgrammingError, match=words):
        parse_listen(listen)
    assert parse_listen("[::1]:7777") == ("[::1]", 7777)
