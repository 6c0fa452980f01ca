"""Ctrl-C and Ctrl-D in the ``qengine sql`` shell, driven through a pseudo-terminal as a user
drives it, and what an interrupt does on the cluster.

Ctrl-C during a query cancels it: the shell says so and is back at its prompt at once, the
query's tasks stop on the workers (they do not run on to their end) and its blocks are freed,
and the next query runs on the same workers. Ctrl-C at the prompt drops a half-typed statement;
Ctrl-D leaves with status 0 and takes the local cluster with it.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pexpect
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from tests.conftest import subprocess_env, wait_until

ROWS = 100_000
# A cross join of 10^10 pairs: minutes of work on these workers unless it is stopped.
LONG_QUERY = "SELECT count(*) FROM nums a, nums b WHERE (a.x * b.x) % 7 = 3"
PROMPT = "qengine> "
STARTUP = 90.0  # seconds for the shell to start its cluster, on a busy machine
PROMPT_BACK = 5.0  # seconds from Ctrl-C to the prompt: "at once", with room for a loaded machine
SETTLE = 15.0  # seconds for workers to go idle, or to exit


def _write_numbers(directory: str) -> None:
    """``nums``: one column of ROWS integers, in row groups small enough for several scan splits."""
    table = pa.table({"x": np.arange(ROWS, dtype=np.int64)})
    pq.write_table(table, os.path.join(directory, "nums.parquet"), row_group_size=ROWS // 10)


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = p.cpu_times()
            total += times.user + times.system
    return total


def _cpu_in(processes: list[psutil.Process], seconds: float) -> float:
    """CPU seconds ``processes`` use together over the next ``seconds``."""
    before = _cpu_seconds(processes)
    time.sleep(seconds)
    return _cpu_seconds(processes) - before


def _busy(processes: list[psutil.Process]) -> bool:
    return _cpu_in(processes, 1.0) > 0.2  # a running task takes a core, or its share of a busy machine's


def _idle(processes: list[psutil.Process]) -> bool:
    return _cpu_in(processes, 1.0) < 0.1


@pytest.fixture
def shell(tmp_path):
    """``qengine sql`` with 2 local workers in a pseudo-terminal, over a directory holding ``nums``;
    yields (the pexpect child, its worker processes). The shell and its workers are killed
    afterwards whatever happened."""
    data = tmp_path / "data"
    data.mkdir()
    _write_numbers(str(data))
    # HOME in tmp_path: the shell's history file goes there, not into the real home directory.
    env = dict(subprocess_env(), HOME=str(tmp_path), TERM="xterm", COLUMNS="200")
    child = pexpect.spawn(
        sys.executable, ["-m", "qengine.cli", "sql", "-d", str(data), "--workers", "2"],
        cwd=str(tmp_path), env=env, timeout=SETTLE, dimensions=(40, 200),
        # an interrupt may cut the progress bar's output inside a character
        encoding="utf-8", codec_errors="replace",
    )
    workers: list[psutil.Process] = []
    try:
        child.expect_exact(PROMPT, timeout=STARTUP)
        workers.extend(psutil.Process(child.pid).children(recursive=True))
        assert len(workers) == 2, f"expected the shell's 2 workers, found {workers}"
        yield child, workers
    finally:
        if child.isalive():
            child.terminate(force=True)
        for worker in workers:  # in a session of their own: the shell's signals do not reach them
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        psutil.wait_procs(workers, timeout=SETTLE)


def _run(child: pexpect.spawn, sql: str, expected: str) -> None:
    """Type ``sql`` at the prompt and require ``expected`` and no error before the next prompt."""
    child.sendline(sql)
    child.expect_exact(PROMPT)
    output = child.before
    assert expected in output and "Error" not in output, output


@pytest.mark.timeout(300)
def test_ctrl_c_cancels_the_running_query_and_the_shell_goes_on(shell) -> None:
    child, workers = shell
    child.sendline(LONG_QUERY + ";")
    # The query is under way when its workers are busy (10^10 pairs: they stay busy for minutes).
    wait_until(lambda: _busy(workers), 60, "the workers to start the long query")
    interrupted = time.monotonic()
    child.sendintr()
    child.expect(r"Interrupted: the query was cancelled", timeout=PROMPT_BACK)
    child.expect_exact(PROMPT, timeout=PROMPT_BACK)
    assert time.monotonic() - interrupted < PROMPT_BACK
    # The query's task stopped on its worker: the workers go idle, long before it could have ended.
    wait_until(lambda: _idle(workers), SETTLE, "the workers to stop the cancelled query's task")
    # The same shell, on the same workers, still answers.
    _run(child, "SELECT count(*) AS n, max(x) AS top FROM nums;", str(ROWS - 1))
    assert all(w.is_running() for w in workers)
    assert psutil.Process(child.pid).children(recursive=True) == workers


@pytest.mark.timeout(300)
def test_ctrl_c_at_the_prompt_clears_the_line_and_ctrl_d_exits(shell) -> None:
    child, workers = shell
    # A half-typed line (echoed, so the shell has it): Ctrl-C drops it, and the prompt comes back.
    child.send("SELECT no_such_column_xyz FROM nums")
    child.expect_exact("FROM nums")
    child.sendintr()
    child.expect_exact(PROMPT)
    _run(child, "SELECT 40 + 2 AS answer;", "42")
    # A statement typed over several lines: Ctrl-C at its continuation prompt drops all of it.
    child.sendline("SELECT no_such_column_xyz")
    child.expect_exact("...> ")
    child.sendintr()
    child.expect_exact(PROMPT)
    _run(child, "SELECT 7 * 6 AS product;", "42")
    # Ctrl-D on an empty line leaves the shell, which stops its workers.
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
    _, alive = psutil.wait_procs(workers, timeout=SETTLE)
    assert not alive, f"workers outlived the shell: {alive}"


def _pings(con) -> list[dict]:
    cluster = con.session.cluster
    return [cluster.pool.get(address).action("ping") for address in cluster.addresses]


def _worker_bytes(con) -> int:
    return sum(ping["bytes"] for ping in _pings(con))


@pytest.mark.timeout(300)
def test_an_interrupted_query_stops_its_tasks_and_frees_its_blocks(tmp_path) -> None:
    """The same interrupt in a Python program (KeyboardInterrupt in the thread running the query),
    with the cluster's state looked at: the query's broadcast blocks, held on the workers while
    its second stage runs, are freed, and its running tasks stop."""
    _write_numbers(str(tmp_path))
    # Small splits and no replicated tables: the join reads a broadcast written by a first stage.
    with qengine.connect(workers=2, replicate_size=0, split_size="200KB") as con:
        con.register_parquet("nums", str(tmp_path / "nums.parquet"))
        workers = [psutil.Process(ping["pid"]) for ping in _pings(con)]
        _interrupt_under_way(con, lambda: _worker_bytes(con), workers)
        assert con.execute("SELECT count(*) FROM nums").fetchone() == (ROWS,)


@pytest.mark.timeout(300)
def test_an_interrupted_remote_query_is_cancelled_on_the_coordinator(tmp_path) -> None:
    """On a standalone cluster the query runs in the coordinator: the client's Ctrl-C must reach
    it as a cancel, so that the workers stop and free the query's blocks, and the session goes on."""
    from tests.test_multihost import cluster

    data = tmp_path / "data"
    data.mkdir()
    _write_numbers(str(data))
    with cluster(tmp_path / "cluster", 2, data_roots=[str(data)]) as c, c.connect(replicate_size=0, split_size="200KB") as con:
        con.register_parquet("nums", str(data / "nums.parquet"))
        workers = [psutil.Process(p.pid) for p in c.workers]
        pings = [c.client(m["address"]) for m in c.members()]

        def held() -> int:
            return sum(client.action("ping", timeout=10)["bytes"] for client in pings)

        _interrupt_under_way(con, held, workers)
        assert con.execute("SELECT count(*) FROM nums").fetchone() == (ROWS,)


def _interrupt_under_way(con, held: Callable[[], int], workers: list[psutil.Process]) -> None:
    """Run LONG_QUERY and interrupt it (KeyboardInterrupt in this thread) once its second stage
    runs, that is once the workers hold its blocks and work; then require the interrupt soon,
    the blocks freed and the workers idle: the query was stopped, not run to its end."""
    running = threading.Event()
    sent: list[float] = []

    def interrupt_once_under_way() -> None:
        running.wait()
        wait_until(lambda: held() > 0 and _busy(workers), 60, "the long query's second stage")
        if running.is_set():  # the query is still running: interrupt it, not the test after it
            sent.append(time.monotonic())
            _thread.interrupt_main()

    interrupter = threading.Thread(target=interrupt_once_under_way, daemon=True)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        running.set()
        try:
            con.execute(LONG_QUERY)
        finally:
            running.clear()
    interrupter.join(SETTLE)
    wait_until(lambda: held() == 0, SETTLE, lambda: f"the blocks to be freed ({held()} bytes left)")
    wait_until(lambda: _idle(workers), SETTLE, "the workers to stop the interrupted query's tasks")
    assert time.monotonic() - sent[0] < 2 * SETTLE
