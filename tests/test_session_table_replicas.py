"""Session tables keep every partition on two workers, so they survive the loss of one.

On a 3-worker local cluster: after CREATE TABLE AS, INSERT … SELECT / VALUES and register, each
partition has two distinct holders holding the same rows, the copies spread over the workers,
and DROP frees every copy. A holder that leaves the cluster is replaced by a copy on a live
worker before the next statement; a partition whose holders all left fails its table's reads,
naming it, rather than answering with fewer rows. The worker-side read falls back from a
holder that does not answer to the next. The last tests kill worker processes for real.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import qengine
from qengine.api.dbapi import Connection
from qengine.api.replicas import Replicas
from qengine.catalog.sources import Partition
from qengine.exchange.store import BlockStore
from qengine.runtime.task import TaskRunner
from qengine.transport.wire import schema_to_hex
from tests.conftest import duckdb_over, free_port, wait_until

SUM_SQL = "SELECT count(*), sum(x) FROM {}"
CTAS_SELECT = "SELECT sale_id AS x, qty, note FROM sales WHERE qty > 10"


def three_workers(data_paths: dict[str, str]) -> Connection:
    """3 workers, small splits so that a CTAS writes several partitions, sales registered."""
    con = qengine.connect(workers=3, split_size="200KB")
    con.register_parquet("sales", data_paths["sales"])
    return con


@pytest.fixture(scope="module")
def engine(data_paths: dict[str, str]) -> Iterator[Connection]:
    con = three_workers(data_paths)
    yield con
    con.close()


@pytest.fixture
def fresh(data_paths: dict[str, str]) -> Iterator[Connection]:
    """A cluster of its own, for a test that kills workers."""
    con = three_workers(data_paths)
    yield con
    con.close()


@pytest.fixture(scope="module")
def sales_oracle(data_paths: dict[str, str]) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_over({"sales": data_paths["sales"]})
    yield con
    con.close()


def partitions(con: Connection, name: str) -> list[Partition]:
    return con.session.catalog.table(name).partitions


def held(con: Connection, address: str, key: str) -> pa.Table:
    """The rows one worker holds under a session table's key, fetched from it directly."""
    return con._cluster.pool.get(address).get({"key": key, "partition": 0})


def answer(con: Connection, name: str) -> list[tuple]:
    return con.execute(SUM_SQL.format(name)).fetchall()


def assert_two_copies(con: Connection, name: str) -> None:
    """Every partition on two distinct live workers, each holding exactly its rows."""
    parts = partitions(con, name)
    assert parts
    live = set(con._cluster.addresses)
    for p in parts:
        assert len(p.holders) == 2 and len(set(p.holders)) == 2, p
        assert set(p.holders) <= live, (p, live)
        first, second = (held(con, h, p.key) for h in p.holders)
        assert first.num_rows == p.rows
        assert second.equals(first), p


def registered(con: Connection, name: str, rows: int = 30_000) -> pa.Table:
    table = pa.table({"x": np.arange(rows, dtype=np.int64) * 3, "tag": [f"t{i % 7}" for i in range(rows)]})
    con.register(name, table)
    return table


def duckdb_answer(table: pa.Table) -> list[tuple]:
    """DuckDB's count and sum over the rows that were registered."""
    con = duckdb.connect()
    try:
        con.register("t", table)
        return con.execute(SUM_SQL.format("t")).fetchall()
    finally:
        con.close()


def kill(con: Connection, address: str) -> None:
    """SIGKILL the worker process at ``address`` and wait for it to be gone."""
    worker = next(w for w in con._cluster.workers if w.address == address)
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait(timeout=10)


class Shrunk:
    """The engine's cluster as the session would see it once the workers ``gone`` had left:
    healing is checked here without killing the module's workers (they keep their blocks)."""

    def __init__(self, con: Connection, gone: set[str]) -> None:
        self.pool = con._cluster.pool
        self.addresses = [a for a in con._cluster.addresses if a not in gone]


# ---- two copies after every write --------------------------------------------------------


def test_create_table_as_keeps_two_equal_copies_spread_over_the_workers(engine, sales_oracle) -> None:
    engine.execute(f"CREATE TABLE ctas_copies AS {CTAS_SELECT}")
    try:
        parts = partitions(engine, "ctas_copies")
        assert len(parts) >= 3
        assert_two_copies(engine, "ctas_copies")
        assert len({p.holders[1] for p in parts}) >= 2, "every copy went to one worker"
        assert answer(engine, "ctas_copies") == sales_oracle.execute(SUM_SQL.format(f"({CTAS_SELECT})")).fetchall()
    finally:
        engine.execute("DROP TABLE ctas_copies")


def test_inserts_keep_two_equal_copies(engine, sales_oracle) -> None:
    engine.execute("CREATE TABLE insert_copies (x BIGINT, note VARCHAR)")
    try:
        engine.execute("INSERT INTO insert_copies VALUES (1, 'a'), (2, NULL), (40, 'c')")
        engine.execute("INSERT INTO insert_copies SELECT sale_id, note FROM sales WHERE store_id = 3")
        engine.cursor().executemany("INSERT INTO insert_copies (x) VALUES (?)", [(7,), (8,)])
        assert_two_copies(engine, "insert_copies")
        expected = sales_oracle.execute(
            "SELECT count(*) + 5, sum(sale_id) + 1 + 2 + 40 + 7 + 8 FROM sales WHERE store_id = 3"
        ).fetchall()
        assert answer(engine, "insert_copies") == expected
    finally:
        engine.execute("DROP TABLE insert_copies")


def test_registered_table_keeps_two_equal_copies(engine) -> None:
    table = registered(engine, "registered_copies")
    try:
        parts = partitions(engine, "registered_copies")
        assert len(parts) == 3
        assert_two_copies(engine, "registered_copies")
        assert {p.holders[1] for p in parts} == set(engine._cluster.addresses)
        assert answer(engine, "registered_copies") == duckdb_answer(table)
    finally:
        engine.execute("DROP TABLE registered_copies")


def test_drop_releases_every_copy(engine) -> None:
    engine.execute(f"CREATE TABLE dropped_copies AS {CTAS_SELECT}")
    copies = [(h, p.key) for p in partitions(engine, "dropped_copies") for h in p.holders]
    assert len(copies) == 2 * len(partitions(engine, "dropped_copies"))
    engine.execute("DROP TABLE dropped_copies")
    for address, key in copies:
        with pytest.raises(qengine.OperationalError, match="holds no blocks"):
            held(engine, address, key)


def test_one_worker_keeps_one_copy() -> None:
    with qengine.connect(workers=1) as con:
        table = registered(con, "one", 1_000)
        con.execute("CREATE TABLE one_ctas AS SELECT x FROM one WHERE x % 2 = 0")
        (address,) = con._cluster.addresses
        for name in ("one", "one_ctas"):
            assert [p.holders for p in partitions(con, name)] == [[address]]
        assert answer(con, "one") == duckdb_answer(table)


# ---- healing, with the lost workers simulated --------------------------------------------


def test_a_holder_that_left_is_replaced_by_a_copy_on_a_live_worker(engine, monkeypatch) -> None:
    table = registered(engine, "healed")
    try:
        before = answer(engine, "healed")
        gone = partitions(engine, "healed")[0].holders[0]
        monkeypatch.setattr(engine.session.replicas, "cluster", Shrunk(engine, {gone}))
        assert answer(engine, "healed") == before == duckdb_answer(table)
        for p in partitions(engine, "healed"):
            assert gone not in p.holders
            assert len(set(p.holders)) == 2
            first, second = (held(engine, h, p.key) for h in p.holders)
            assert second.equals(first)
        assert [p.lost for p in partitions(engine, "healed")].count(1) == 2  # the two it held
    finally:
        monkeypatch.undo()
        engine.execute("DROP TABLE healed")


def test_a_partition_whose_holders_all_left_fails_its_reads(engine, monkeypatch) -> None:
    registered(engine, "orphaned")
    try:
        gone = set(partitions(engine, "orphaned")[1].holders)
        monkeypatch.setattr(engine.session.replicas, "cluster", Shrunk(engine, gone))
        message = "session table orphaned lost partition 1: both workers holding it were lost"
        with pytest.raises(qengine.OperationalError, match=f"^{re.escape(message)}$"):
            answer(engine, "orphaned")
        with pytest.raises(qengine.OperationalError, match=re.escape(message)):  # and every read after
            engine.execute("SELECT x FROM orphaned WHERE x < 10").fetchall()
    finally:
        monkeypatch.undo()
        engine.execute("DROP TABLE orphaned")


# ---- the worker's read of a memory split -------------------------------------------------


@pytest.fixture
def runner(engine) -> Iterator[TaskRunner]:
    """A task runner outside any worker: its own empty store, the engine's clients."""
    store = BlockStore()
    yield TaskRunner(store, f"127.0.0.1:{free_port()}", engine._cluster.pool)
    store.close()


def memory_split(con: Connection, name: str, replicas: list[str]) -> dict:
    p = partitions(con, name)[0]
    schema = schema_to_hex(con.session.catalog.table(name).schema)
    return {"kind": "memory", "address": replicas[0], "replicas": replicas, "key": p.key, "schema": schema}


def test_memory_split_reads_the_first_holder_that_answers(engine, runner) -> None:
    registered(engine, "fallback")
    try:
        p = partitions(engine, "fallback")[0]
        nobody = f"127.0.0.1:{free_port()}"
        got = runner._memory_split(memory_split(engine, "fallback", [nobody, p.holders[1]]))
        assert got.equals(held(engine, p.holders[0], p.key))
        with pytest.raises(qengine.OperationalError):
            runner._memory_split(memory_split(engine, "fallback", [nobody, f"127.0.0.1:{free_port()}"]))
    finally:
        engine.execute("DROP TABLE fallback")


def test_memory_split_reads_its_own_copy_first(engine, runner) -> None:
    registered(engine, "local_copy")
    try:
        p = partitions(engine, "local_copy")[0]
        mine = pa.table({"x": pa.array([5], pa.int64()), "tag": ["mine"]})
        runner.store.put(p.key, 0, mine)
        nobody = f"127.0.0.1:{free_port()}"
        assert runner._memory_split(memory_split(engine, "local_copy", [nobody, runner.address])).equals(mine)
    finally:
        engine.execute("DROP TABLE local_copy")


# ---- real lost workers -------------------------------------------------------------------


def test_session_tables_survive_killing_one_holder(fresh, sales_oracle) -> None:
    table = registered(fresh, "reg")
    fresh.execute(f"CREATE TABLE ctas AS {CTAS_SELECT}")
    fresh.execute("CREATE TABLE ins (x BIGINT)")
    fresh.execute("INSERT INTO ins SELECT sale_id FROM sales WHERE qty < 30")
    fresh.execute("INSERT INTO ins VALUES (1), (2)")
    expected = {
        "reg": duckdb_answer(table),
        "ctas": sales_oracle.execute(SUM_SQL.format(f"({CTAS_SELECT})")).fetchall(),
        "ins": sales_oracle.execute("SELECT count(*) + 2, sum(sale_id) + 3 FROM sales WHERE qty < 30").fetchall(),
    }
    before = {name: answer(fresh, name) for name in expected}
    assert before == expected
    victim = partitions(fresh, "ctas")[0].holders[0]
    kill(fresh, victim)
    assert {name: answer(fresh, name) for name in expected} == expected
    assert {name: answer(fresh, name) for name in expected} == expected  # healed by now
    for name in expected:
        assert_two_copies(fresh, name)
        assert all(victim not in p.holders for p in partitions(fresh, name))


def test_losing_both_holders_of_a_partition_fails_the_table(fresh) -> None:
    registered(fresh, "doomed")
    parts = partitions(fresh, "doomed")
    victims = set(parts[0].holders)
    lost = next(i for i, p in enumerate(parts) if set(p.holders) <= victims)
    for address in victims:
        kill(fresh, address)
    message = f"session table doomed lost partition {lost}: both workers holding it were lost"
    with pytest.raises(qengine.OperationalError, match=re.escape(message)):
        answer(fresh, "doomed")


@pytest.mark.parametrize("statement", ["ctas", "insert"])
def test_a_writer_lost_before_its_rows_are_copied_runs_the_statement_again(fresh, sales_oracle, statement: str) -> None:
    """A worker lost after a CREATE TABLE AS or INSERT's last task, before its new partitions
    were copied, took them with it: the statement reported them stored, and the table (for an
    INSERT, the rows it held before too) could not be read again."""
    if statement == "insert":
        fresh.execute("CREATE TABLE w AS SELECT sale_id AS x FROM sales WHERE qty <= 10")
    victim = fresh._cluster.workers[1]
    killed: list[int] = []

    def progress(done: int, total: int) -> None:
        if done == total and not killed:
            killed.append(done)
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait(timeout=10)

    sql = "CREATE TABLE w AS SELECT sale_id AS x FROM sales" if statement == "ctas" else "INSERT INTO w SELECT sale_id FROM sales WHERE qty > 10"
    fresh.cursor().execute(sql, progress=progress)
    assert killed
    assert answer(fresh, "w") == sales_oracle.execute(SUM_SQL.format("(SELECT sale_id AS x FROM sales)")).fetchall()


def test_an_idle_connection_copies_a_lost_holder_s_partitions_before_its_next_statement(fresh) -> None:
    """Copies were made again only at the next statement: a connection idle through two losses,
    the cluster healed in between, lost the table."""
    table = registered(fresh, "idle")
    first = partitions(fresh, "idle")[0].holders[0]
    kill(fresh, first)

    def copied_again() -> bool:
        live = set(fresh._cluster.addresses)
        return len(live) == 3 and all(len(p.holders) == 2 and set(p.holders) <= live for p in partitions(fresh, "idle"))

    wait_until(lambda: first not in fresh._cluster.addresses, 60, "the cluster to notice the loss")
    wait_until(copied_again, 60, "the lost holder's partitions to be copied with no statement run")
    kill(fresh, partitions(fresh, "idle")[0].holders[0])
    assert answer(fresh, "idle") == duckdb_answer(table)


def test_registering_just_after_a_worker_died_leaves_it_out(fresh) -> None:
    # the put to the dead worker failed the registration with a raw "unreachable" error
    fresh.execute("SELECT 1").fetchall()
    kill(fresh, fresh._cluster.addresses[0])
    table = registered(fresh, "late")
    assert answer(fresh, "late") == duckdb_answer(table)


def test_a_new_partition_whose_only_holder_already_left_is_reported_lost(engine) -> None:
    """Once the cluster had dropped a lost writer, its partition (one holder, not live) was
    skipped as having all the holders a smaller cluster wants, and its write reported stored."""
    address, other = engine._cluster.addresses[:2]
    lonely = Partition([address], "table/999999/0/0", 1, 8)
    one_left = Replicas(Shrunk(engine, {address, other}))  # a cluster of two that lost the writer
    assert one_left.copy([lonely]) == [lonely]


def test_a_dropped_table_is_never_copied_again(engine) -> None:
    # a heal that had listed the table before its DROP put a copy on a worker, which nothing freed
    registered(engine, "gone_soon")
    parts = partitions(engine, "gone_soon")
    engine.execute("DROP TABLE gone_soon")
    one_holder = [Partition(p.holders[:1], p.key, p.rows, p.bytes) for p in parts]  # as a heal listed them
    assert engine.session.replicas.copy(one_holder) == []
    assert all(len(p.holders) == 1 for p in one_holder)
    for address in engine._cluster.addresses:
        with pytest.raises(qengine.Error):
            held(engine, address, parts[0].key)
