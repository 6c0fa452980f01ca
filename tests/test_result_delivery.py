"""How a result reaches the client: a small result partition comes back with its task's answer
(nothing to fetch from the worker afterwards); a larger one streams from the worker that holds
it, batch by batch as the cursor fetches, locally and from a standalone coordinator. Every way
of fetching gives DuckDB's answer, and no block is left behind on a worker."""

from __future__ import annotations

import pyarrow as pa
import pytest

import qengine
from qengine.api import dbapi, result_stream
from qengine.runtime import task
from qengine.transport.rpc import Client
from tests.conftest import assert_same, engine_over, wait_until
from tests.test_multihost import cluster, data_root, register

BIG = "SELECT sale_id, cust_id, amount, note FROM sales ORDER BY sale_id"


@pytest.fixture
def result_fetches(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The result partitions streamed from workers (``Client.batches`` tickets of a ``/result`` key)."""
    fetched: list[dict] = []
    real = Client.batches

    def counting(self: Client, ticket: dict):
        if str(ticket.get("key", "")).endswith("/result"):
            fetched.append(ticket)
        return real(self, ticket)

    monkeypatch.setattr(Client, "batches", counting)
    return fetched


def _bytes_held(con) -> int:
    """Bytes of blocks the workers' stores hold."""
    return sum(int(con._cluster.pool.get(a).action("ping", {})["bytes"]) for a in con._cluster.addresses)


def _rows(oracle, sql: str) -> list[tuple]:
    return oracle.execute(sql).fetchall()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT store_id, count(*) AS n, sum(amount) AS total FROM sales GROUP BY store_id ORDER BY store_id",
        "SELECT count(*) FROM sales WHERE amount > 1e9",  # one row, over an empty input
        "SELECT * FROM sales WHERE sale_id < 0",  # no rows
    ],
)
def test_a_small_result_comes_with_its_task_s_answer(default_engine, oracle, result_fetches, sql: str) -> None:
    assert_same(default_engine, oracle, sql)
    assert result_fetches == []


def test_a_result_over_the_inline_size_is_fetched_from_its_worker(default_engine, oracle, result_fetches) -> None:
    assert default_engine.execute(BIG).fetch_arrow_table().nbytes > task.INLINE_RESULT_BYTES
    result_fetches.clear()
    assert_same(default_engine, oracle, BIG)
    assert result_fetches, "a result larger than INLINE_RESULT_BYTES was not fetched from its worker"


def test_no_result_block_is_left_on_the_workers(default_engine) -> None:
    for sql in ("SELECT count(*) FROM sales", BIG):
        default_engine.execute(sql).fetchall()
        assert _bytes_held(default_engine) == 0, sql


@pytest.fixture
def streaming(monkeypatch: pytest.MonkeyPatch, data_paths):
    """A cluster whose statements read nothing of their result ahead but its first batch."""
    monkeypatch.setattr(result_stream, "AHEAD_BYTES", 0)
    con = engine_over(data_paths, broadcast_threshold=0, coalesce_size=0)  # a result of 4 partitions
    yield con
    con.close()


def test_execute_returns_before_a_large_result_is_read(streaming, oracle) -> None:
    cur = streaming.execute(BIG)
    rows = cur._result.rows
    assert rows.handed_out == 0 and not rows.all_read, "the whole result was read before execute returned"
    expected = _rows(oracle, BIG)
    got: list[tuple] = []
    while batch := cur.fetchmany(997):
        got.extend(batch)
    assert got == expected
    assert cur.rowcount == len(expected)


def test_fetch_record_batch_streams_the_rows_in_batches_of_the_size_asked(streaming, oracle) -> None:
    cur = streaming.execute(BIG)
    first = cur.fetchmany(3)
    reader = cur.fetch_record_batch(rows_per_batch=500)
    assert isinstance(reader, pa.RecordBatchReader)
    sizes, rows = [], list(first)
    for batch in reader:
        sizes.append(batch.num_rows)
        rows += [tuple(r.values()) for r in batch.to_pylist()]
    assert rows == _rows(oracle, BIG)
    assert max(sizes) <= 500 and len(sizes) > 1
    assert reader.schema.names == ["sale_id", "cust_id", "amount", "note"]
    with pytest.raises(qengine.InterfaceError, match="rows_per_batch"):
        streaming.execute(BIG).fetch_record_batch(0)


def test_iterating_a_cursor_gives_every_row_once(streaming, oracle) -> None:
    assert list(streaming.execute(BIG)) == _rows(oracle, BIG)


def test_rows_are_made_python_values_a_slice_of_a_batch_at_a_time(streaming, oracle, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's batch may hold millions of rows: fetching one turns a slice of it into
    Python values, not all of it, and every fetch goes on where the last one stopped."""
    monkeypatch.setattr(dbapi, "ROWS_AT_ONCE", 7)
    cur = streaming.execute(BIG)
    got = [cur.fetchone(), cur.fetchone(), *cur.fetchmany(10)]
    assert len(cur._rows) == 7
    got += cur.fetchmany(3)
    got += [tuple(r.values()) for r in cur.fetch_arrow_table().slice(0, 6).to_pylist()]  # the rest of a slice
    assert got == _rows(oracle, BIG)[: len(got)] and cur.fetchone() is None
    cur = streaming.execute(BIG)
    got = [*cur.fetchmany(9), cur.fetchone()]
    got += [tuple(r.values()) for r in cur.fetch_record_batch(100).read_all().to_pylist()]
    assert got == _rows(oracle, BIG)


@pytest.mark.parametrize("leave", ["close", "execute again", "read to the end"])
def test_a_result_s_blocks_are_released_however_its_reader_leaves_it(streaming, leave: str) -> None:
    cur = streaming.cursor()
    cur.execute(BIG)
    cur.fetchmany(10)
    assert _bytes_held(streaming) > 0, "the rest of the result should still be held by the workers"
    if leave == "close":
        cur.close()
    elif leave == "execute again":
        cur.execute("SELECT 1").fetchall()
    else:
        cur.fetchall()
    assert _bytes_held(streaming) == 0


def test_a_worker_lost_after_rows_were_returned_fails_the_read_clearly(streaming, oracle) -> None:
    cur = streaming.execute(BIG)
    assert len(cur.fetchmany(5)) == 5
    killed = {w.process.pid for w in streaming._cluster.workers}
    for worker in streaming._cluster.workers:
        worker.process.kill()
    with pytest.raises(qengine.OperationalError, match=r"could not be read to its end after \d+ of its \d+ rows.*run the query again"):
        cur.fetchall()

    def replaced() -> bool:
        workers = streaming._cluster.workers
        return len(workers) == 2 and all(w.process.pid not in killed and w.process.poll() is None for w in workers)

    wait_until(replaced, 60, "both workers to be replaced")
    assert_same(streaming, oracle, "SELECT store_id, count(*) FROM sales GROUP BY store_id")


def test_a_remote_result_streams_from_the_coordinator(tmp_path, data_paths, oracle) -> None:
    with cluster(tmp_path, 2, data_roots=data_root(data_paths)) as c, c.connect(split_size="200KB") as con:
        register(con, data_paths)
        cur = con.execute(BIG)
        head = cur.fetchmany(7)
        rest = cur.fetch_record_batch(1000).read_all()
        assert head + [tuple(r.values()) for r in rest.to_pylist()] == _rows(oracle, BIG)
        cur.execute(BIG)
        cur.fetchone()
        cur.close()  # a result left half read
        assert_same(con, oracle, "SELECT store_id, count(*) FROM sales GROUP BY store_id")


def test_a_reader_and_the_cursor_it_came_from_never_hand_out_a_row_twice(streaming, oracle) -> None:
    cur = streaming.execute(BIG)
    head = cur.fetchmany(4)
    reader = cur.fetch_record_batch(50)
    first = reader.read_next_batch().to_pylist()
    between = cur.fetchmany(100)  # from the result's next batch: the reader has the rest of its own
    rest = reader.read_all().to_pylist()
    between += cur.fetchall()  # what the cursor took and had not handed out yet
    got = head + [tuple(r.values()) for r in first + rest] + between
    assert sorted(got) == sorted(_rows(oracle, BIG))


def test_a_reader_reads_its_own_result_after_the_cursor_moves_on(streaming, oracle) -> None:
    # the reader looked the cursor's result up when first read: it handed out the next
    # statement's rows, and the cursor's fetchall() then gave none
    cur = streaming.cursor()
    cur.execute("SELECT i AS x FROM range(5) t(i)")
    reader = cur.arrow()
    cur.execute("SELECT i * 100 AS x FROM range(3) t(i)")
    assert reader.read_all().num_rows == 0  # its result was closed, as DuckDB closes it
    assert sorted(cur.fetchall()) == [(0,), (100,), (200,)]
    ours = oracle.cursor()
    ours.execute("SELECT i AS x FROM range(5) t(i)")
    theirs = ours.arrow()
    ours.execute("SELECT i * 100 AS x FROM range(3) t(i)")
    assert theirs.read_all().num_rows == 0


def test_result_batches_are_cut_below_a_grpc_message_by_their_rows() -> None:
    """Batches over 16 MiB did not reach ADBC clients; a dictionary column's dictionary, which
    goes whole with each piece, must not count per row (its slices were cut one row each)."""
    from qengine.transport.rpc import MESSAGE_BYTES, _pieces

    plain = pa.record_batch({"s": pa.array(["x" * 40 + str(i) for i in range(600_000)])})
    pieces = list(_pieces(plain))
    assert len(pieces) > 2 and all(p.nbytes <= MESSAGE_BYTES for p in pieces)
    assert pa.Table.from_batches(pieces).column("s").to_pylist() == plain.column("s").to_pylist()
    words = pa.array(["w" * 200 + str(i) for i in range(50_000)])  # a 10 MB dictionary
    coded = pa.record_batch({"e": pa.DictionaryArray.from_arrays(pa.array(range(50_000), pa.int32()), words)})
    assert len(list(_pieces(coded))) == 1
