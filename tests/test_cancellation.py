"""Cancelling a statement by its id (``Connection.cancel(cursor.query_id)``): from another thread
on a local cluster, from another connection on a standalone one, and by a client that goes away
while its statement runs. The statement fails with "query cancelled", and the cluster goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

import qengine
from tests.conftest import assert_same, subprocess_env, wait_until
from tests.test_multihost import cluster, data_root, register

# Runs for hours unless it is stopped: every pair of sales rows, against every item.
ENDLESS = "SELECT count(*) FROM sales a, sales b, items c WHERE a.qty + b.qty + c.item_id > 0"
CHECK = "SELECT store_id, count(*) AS n FROM sales GROUP BY store_id"
BOUND = 60.0  # seconds; only guards against hangs


def run_endless(cur) -> tuple[threading.Thread, list[BaseException]]:
    """Run the endless statement on ``cur`` in a thread of its own, once its tasks run; its error lands in the list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            cur.execute(ENDLESS).fetchall()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: cur.query_id is not None, BOUND, "the statement to start")
    time.sleep(0.5)  # its tasks are running on the workers
    return thread, errors


def test_a_query_is_cancelled_from_another_thread_by_its_id(default_engine, oracle) -> None:
    cur = default_engine.cursor()
    thread, errors = run_endless(cur)
    started = time.monotonic()
    assert default_engine.cancel(cur.query_id) is True
    thread.join(BOUND)
    assert not thread.is_alive(), "the cancelled query did not stop"
    assert time.monotonic() - started < 10
    assert len(errors) == 1 and isinstance(errors[0], qengine.OperationalError) and "query cancelled" in str(errors[0])
    assert default_engine.cancel(cur.query_id) is False  # ended: nothing to cancel
    assert_same(default_engine, oracle, CHECK)


def test_cancelling_an_unknown_query_finds_nothing(default_engine) -> None:
    assert default_engine.cancel("no-such-query") is False
    with pytest.raises(qengine.ProgrammingError, match="query_id must be a string"):
        default_engine.cancel(42)


def test_a_query_is_cancelled_from_another_connection_of_a_standalone_cluster(tmp_path, data_paths, oracle) -> None:
    with cluster(tmp_path, 2, data_roots=data_root(data_paths)) as c, c.connect() as mine, c.connect() as other:
        register(mine, data_paths)
        register(other, data_paths)
        cur = mine.cursor()
        thread, errors = run_endless(cur)
        assert [s["query"] for s in c.client().action("statements")] == [cur.query_id]
        assert other.cancel(cur.query_id) is True
        thread.join(BOUND)
        assert not thread.is_alive(), "the cancelled query did not stop"
        assert len(errors) == 1 and "query cancelled" in str(errors[0])
        assert_same(mine, oracle, CHECK)
        assert_same(other, oracle, CHECK)


def test_a_client_that_goes_away_cancels_its_query(tmp_path, data_paths, oracle) -> None:
    with cluster(tmp_path, 2, data_roots=data_root(data_paths)) as c:
        script = textwrap.dedent(f"""
            import qengine
            con = qengine.connect("qengine://{c.address}", token={c.token!r})
            for name, path in {data_paths!r}.items():
                con.register_parquet(name, path)
            con.execute({ENDLESS!r}).fetchall()
        """)
        client = subprocess.Popen([sys.executable, "-c", script], env=subprocess_env(), cwd=os.getcwd())
        try:
            wait_until(lambda: c.client().action("statements"), BOUND, "the client's statement to start")
            time.sleep(0.5)
        finally:
            client.kill()
            client.wait()
        wait_until(lambda: not c.client().action("statements"), 10, "the statement of the client that went away to be cancelled")
        with c.connect() as con:
            register(con, data_paths)
            assert_same(con, oracle, CHECK)


def test_closing_the_connection_under_a_running_statement_says_so() -> None:
    # the statement failed as an InternalError: "RuntimeError: cannot schedule new futures after shutdown"
    import threading
    import time

    con = qengine.connect(workers=2)
    outcome: list[Exception] = []

    def run() -> None:
        try:
            con.execute("SELECT sum(a.i * b.i) FROM range(60000) a(i), range(60000) b(i)").fetchall()
        except Exception as e:  # noqa: BLE001 - whatever it is, the test looks at it
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(2)
    con.close()
    thread.join(60)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], qengine.InterfaceError | qengine.OperationalError), repr(outcome)


def test_a_session_table_block_released_everywhere_fails_the_task_at_once() -> None:
    # the blocks of a table dropped while a statement ran were taken for lost inputs and
    # retried: the statement ran for 17 s to many minutes before it failed
    from qengine.errors import InputLostError
    from qengine.transport.rpc import Client, remote_error
    from qengine.transport.wire import schema_to_hex

    with qengine.connect(workers=2) as con:
        cluster = con._cluster
        first, second = cluster.addresses[:2]
        split = {"kind": "memory", "key": "table/999/0/0", "replicas": [second], "schema": schema_to_hex(pa.schema([("i", pa.int64())]))}
        spec = {"query": "q", "stage": 0, "task": 0, "sql": "SELECT * FROM t", "direct": None,
                "inputs": [{"name": "t", "kind": "scan", "columns": [["i", "c0"]], "split": split}],
                "output": {"kind": "result", "key": "q/result"}}
        events = [e for message in Client(first, cluster.token).stream("run_tasks", {"query": "q", "slots": 1, "tasks": [spec]})
                  for e in message]
        assert [e["event"] for e in events] == ["started", "failed"]
        error = remote_error(events[-1]["error"])
        assert isinstance(error, qengine.OperationalError) and not isinstance(error, InputLostError), repr(error)
        assert "dropped or replaced while the statement read it" in str(error)
