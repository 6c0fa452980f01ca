"""Bad input: every failure reaches the caller as a qengine (PEP 249) error that says what went wrong.

Syntax errors name the line and column, unknown names are named, statements qengine does not run
are refused by name, a task failing inside a worker fails the query promptly (the connection
stays usable), SQL cannot reach the host's files through DuckDB's table functions, and nothing
but ``qengine.Error`` subclasses escapes, with the underlying exception kept as ``__cause__``.
"""

from __future__ import annotations

import os
import time

import duckdb
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from tests.conftest import assert_same, wait_until

HANG_BOUND = 20.0  # seconds; only guards against hangs, not a performance check


def error_of(con, sql: str, params: list | None = None) -> qengine.Error:
    """Run ``sql`` and return the qengine error it raised (fails if it returned or raised anything else)."""
    try:
        con.execute(sql, params)
    except qengine.Error as e:
        return e
    except Exception as e:  # noqa: BLE001 - a non-qengine exception is exactly what this reports
        pytest.fail(f"{sql!r} raised a non-qengine {type(e).__name__}: {e}")
    pytest.fail(f"{sql!r} did not fail")


# ---- syntax, names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "line"),
    [
        ("SELEC 1", 1),
        ("SELECT sale_id FROM sales WHERE", 1),
        ("SELECT sale_id,\n       qty\nFROM sales\nWHERE qty = (1 +", 4),
        ("SELECT 1 AS a,\n  2 AS b,\n  FROM", 3),
    ],
)
def test_syntax_error_names_line_and_column(default_engine, sql: str, line: int) -> None:
    e = error_of(default_engine, sql)
    assert isinstance(e, qengine.ProgrammingError)
    message = str(e).lower()
    assert "line" in message and "column" in message, message
    assert f"line {line}" in message, message
    assert e.__cause__ is not None  # the parser's own exception is kept


def test_unterminated_string_is_a_programming_error(default_engine) -> None:
    e = error_of(default_engine, "SELECT 'abc FROM sales")
    assert isinstance(e, qengine.ProgrammingError)


@pytest.mark.parametrize("sql", ["", "   ", "\n\t", ";"])
def test_empty_statement(default_engine, sql: str) -> None:
    assert isinstance(error_of(default_engine, sql), qengine.ProgrammingError)


@pytest.mark.parametrize(
    ("sql", "missing"),
    [
        ("SELECT * FROM no_such_table", "no_such_table"),
        ("SELECT s.sale_id FROM sales s JOIN no_such_table n ON s.cust_id = n.cust_id", "no_such_table"),
        ("SELECT sale_id FROM sales WHERE cust_id IN (SELECT cust_id FROM no_such_table)", "no_such_table"),
        ("INSERT INTO no_such_table VALUES (1)", "no_such_table"),
        ("SELECT no_such_column FROM sales", "no_such_column"),
        ("SELECT sale_id FROM sales WHERE no_such_column > 3", "no_such_column"),
        ("SELECT s.sale_id FROM sales s JOIN customers c ON s.cust_id = c.no_such_column", "no_such_column"),
        ("SELECT store_id, count(sale_id) FROM sales GROUP BY store_id ORDER BY no_such_column", "no_such_column"),
        ("SELECT sum(no_such_column) FROM sales", "no_such_column"),
    ],
)
def test_unknown_table_or_column_is_named(default_engine, sql: str, missing: str) -> None:
    e = error_of(default_engine, sql)
    assert isinstance(e, qengine.ProgrammingError)
    assert missing in str(e)


@pytest.mark.parametrize(
    ("sql", "word"),
    [
        ("PRAGMA x", "PRAGMA"),
        ("SET threads=1", "SET"),
        ("ATTACH 'other.db'", "ATTACH"),
        ("ATTACH 'other.db' AS other", "ATTACH"),
        ("UPDATE sales SET qty = 1", "UPDATE"),
        ("DELETE FROM sales", "DELETE"),
        ("CREATE INDEX i ON sales (qty)", "INDEX"),
        pytest.param("SELECT 1 AS a; PRAGMA x", "PRAGMA", id="after-a-query"),
    ],
)
def test_unsupported_statement_is_refused_by_name(default_engine, sql: str, word: str) -> None:
    e = error_of(default_engine, sql)
    assert isinstance(e, qengine.NotSupportedError | qengine.ProgrammingError)
    assert word.lower() in str(e).lower()


@pytest.mark.parametrize(
    ("sql", "cls"),
    [
        ("SELECT no_such_function(qty) FROM sales", qengine.ProgrammingError),
        ("SELECT CAST(qty AS NO_SUCH_TYPE) FROM sales", qengine.ProgrammingError),
        ("SELECT CAST('x' AS INTEGER) AS v", qengine.DataError),
        ("SELECT 2147483647::INTEGER + qty FROM sales", qengine.DataError),
        ("CREATE TABLE bad_type_table (a NO_SUCH_TYPE)", qengine.ProgrammingError),
    ],
)
def test_error_classes(default_engine, sql: str, cls: type) -> None:
    e = error_of(default_engine, sql)
    assert isinstance(e, cls), f"{type(e).__name__}: {e}"
    assert "bad_type_table" not in default_engine.tables()


# ---- failures inside workers ------------------------------------------------------------------


def _worker_bytes(con) -> int:
    cluster = con._cluster
    return sum(cluster.pool.get(a).action("ping", timeout=10)["bytes"] for a in cluster.addresses)


def _wait_for_release(con, before: int, seconds: float = HANG_BOUND) -> None:
    """Wait until the workers hold no more bytes than ``before``; fail if they do not within ``seconds``."""
    wait_until(
        lambda: _worker_bytes(con) <= before, seconds,
        lambda: f"the workers to release the failed query's blocks (back to {before} bytes, now {_worker_bytes(con)})",
        interval=0.1,
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CAST(note AS INTEGER) FROM sales WHERE note IS NOT NULL",
        # fails in a later stage, after an exchange has written blocks to the workers
        "SELECT c.city, sum(CAST(s.note AS INTEGER)) FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city",
    ],
)
def test_failing_task_fails_the_query_and_the_connection_recovers(default_engine, oracle, sql: str) -> None:
    started = time.monotonic()
    e = error_of(default_engine, sql)
    elapsed = time.monotonic() - started
    assert isinstance(e, qengine.DataError), f"{type(e).__name__}: {e}"
    assert "convert" in str(e).lower() or "cast" in str(e).lower()
    assert e.__cause__ is not None  # the Flight error that carried it is kept
    assert elapsed < HANG_BOUND
    # the same connection still answers correctly
    assert_same(default_engine, oracle, "SELECT note, count(sale_id), sum(qty) FROM sales GROUP BY note")


def test_failed_single_stage_query_releases_its_blocks(default_engine) -> None:
    # Only the rows at the end of the table fail to convert, so the scan tasks over earlier rows
    # succeed and store their result blocks on the workers before the query fails.
    before = _worker_bytes(default_engine)
    sql = "SELECT sale_id, CAST(CASE WHEN sale_id < 39000 THEN '1' ELSE note END AS INTEGER) AS v FROM sales WHERE note IS NOT NULL"
    e = error_of(default_engine, sql)
    assert isinstance(e, qengine.DataError), f"{type(e).__name__}: {e}"
    _wait_for_release(default_engine, before)


def test_failed_multi_stage_query_releases_its_blocks(data_paths, tmp_path) -> None:
    # A CSV table has one scan task per file: 12 tasks that all fail, on 2 workers with one slot each, so most are
    # still queued when the first fails. They join a broadcast of customers, written to the workers beforehand.
    for i in range(12):
        rows = "".join(f"{(i * 800 + j) % 500},code{j}\n" for j in range(800))
        (tmp_path / f"part-{i:02d}.csv").write_text("cust_id,code\n" + rows)
    with qengine.connect(workers=2, slots=1) as con:
        con.register_parquet("customers", data_paths["customers"])
        con.register_csv("codes", str(tmp_path))
        before = _worker_bytes(con)
        sql = "SELECT c.city, sum(CAST(t.code AS INTEGER)) FROM codes t JOIN customers c ON t.cust_id = c.cust_id GROUP BY c.city"
        e = error_of(con, sql)
        assert isinstance(e, qengine.DataError)
        _wait_for_release(con, before)


def test_repeated_failures_do_not_wear_the_cluster_down(default_engine, oracle) -> None:
    for _ in range(5):
        assert isinstance(error_of(default_engine, "SELECT CAST(note AS INTEGER) FROM sales WHERE note IS NOT NULL"), qengine.DataError)
    assert_same(default_engine, oracle, "SELECT store_id, max(amount) FROM sales GROUP BY store_id")


# ---- no file access through SQL ---------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_csv_auto('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT content FROM read_text('/etc/passwd')",
        "SELECT * FROM read_blob('/etc/passwd')",
        "SELECT * FROM read_json('/etc/passwd')",
        "SELECT * FROM read_parquet('/etc/passwd')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM '/etc/passwd'",
        "SELECT (SELECT count(*) FROM read_text('/etc/passwd')) AS n",
        "SELECT sale_id FROM sales WHERE note IN (SELECT content FROM read_text('/etc/passwd'))",
        "WITH t AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM t",
        "SELECT * FROM sales, LATERAL (SELECT * FROM read_text('/etc/passwd')) f",
    ],
)
def test_sql_cannot_read_host_files(default_engine, sql: str) -> None:
    e = error_of(default_engine, sql)
    assert isinstance(e, qengine.Error)
    assert "root:" not in str(e)  # no file content in the message either


def test_read_csv_does_not_read_a_passwd_like_file(default_engine, tmp_path) -> None:
    # a .csv file (so the file-type check passes) outside every directory data was registered from
    path = tmp_path / "passwd.csv"
    path.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    e = error_of(default_engine, f"SELECT * FROM read_csv('{path}')")
    assert isinstance(e, qengine.ProgrammingError), f"{type(e).__name__}: {e}"
    assert "outside the data roots" in str(e), str(e)
    assert "root:" not in str(e)


def test_allowed_roots_confine_table_functions_and_registration(data_paths, oracle, tmp_path) -> None:
    root = os.path.dirname(data_paths["sales"])
    assert os.path.commonpath([root, str(tmp_path)]) != root  # tmp_path is outside the root
    # readable files of the right types, so only the roots check can refuse them
    outside_csv = tmp_path / "outside.csv"
    outside_csv.write_text("a,b\n1,2\n")
    outside_parquet = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), outside_parquet)
    # under the root as written, outside it once the ".." is resolved
    traversal = os.path.join(root, os.path.relpath(outside_parquet, root))
    assert traversal.startswith(root + os.sep) and ".." in traversal
    roots_refusal = f"is outside the data roots {[os.path.realpath(root)]}"
    with qengine.connect(workers=1, allowed_roots=[root]) as con:
        sql = f"SELECT count(item_id) FROM read_parquet('{data_paths['items']}/*.parquet')"
        assert con.execute(sql).fetchone() == oracle.execute(sql).fetchone()
        for sql in ("SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM read_parquet('/etc/passwd')"):
            assert isinstance(error_of(con, sql), qengine.ProgrammingError)  # refused by file type already
        for sql in (
            f"SELECT * FROM read_csv('{outside_csv}')",
            f"SELECT * FROM read_parquet('{outside_parquet}')",
            f"SELECT * FROM read_parquet('{traversal}')",
        ):
            e = error_of(con, sql)
            assert isinstance(e, qengine.ProgrammingError), f"{type(e).__name__}: {e}"
            assert roots_refusal in str(e), str(e)
        for register, path in ((con.register_csv, outside_csv), (con.register_parquet, outside_parquet)):
            with pytest.raises(qengine.ProgrammingError) as info:
                register("outside", str(path))
            assert roots_refusal in str(info.value), str(info.value)
        assert "outside" not in con.tables()


def test_registering_missing_or_bad_files(default_engine, tmp_path) -> None:
    with pytest.raises(qengine.ProgrammingError):
        default_engine.register_parquet("missing_table", str(tmp_path / "nope"))
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("this is not parquet")
    with pytest.raises(qengine.ProgrammingError):
        default_engine.register_parquet("bad_table", str(not_parquet))
    assert "missing_table" not in default_engine.tables()
    assert "bad_table" not in default_engine.tables()


# ---- only qengine errors escape ---------------------------------------------------------------


BAD_INPUTS = [
    ("SELEC 1", None),
    ("SELECT 'abc", None),
    ("SELECT * FROM no_such_table", None),
    ("SELECT no_such_column FROM sales", None),
    ("SELECT no_such_function(1)", None),
    ("SELECT CAST(note AS INTEGER) FROM sales WHERE note IS NOT NULL", None),
    ("SELECT 1 UNION SELECT 1, 2", None),
    ("SELECT sale_id FROM sales LIMIT -1", None),
    ("SELECT * FROM generate_series(DATE '2024-01-01', DATE '2024-01-03', INTERVAL 1 DAY)", None),
    ("SELECT ? AS a", [object()]),
    ("SELECT ? AS a, ? AS b", [1]),
    ("SELECT $2 AS a", [1]),
    ("PRAGMA x", None),
    ("EXPLAIN", None),
    ("EXPLAIN PRAGMA x", None),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r", None),
    ("CREATE TABLE t_no_columns", None),
    ("INSERT INTO sales VALUES (1)", None),
    ("SELECT * FROM read_parquet(note) ", None),
]


@pytest.mark.parametrize(("sql", "params"), BAD_INPUTS)
def test_only_qengine_errors_escape(default_engine, sql: str, params: list | None) -> None:
    e = error_of(default_engine, sql, params)
    assert isinstance(e, qengine.Error)
    # an InternalError means qengine itself broke on this input; user mistakes are not internal errors
    assert not isinstance(e, qengine.InternalError), f"{type(e).__name__}: {e}"


def test_internal_failures_keep_their_cause(default_engine, monkeypatch) -> None:
    """A bug inside qengine surfaces as InternalError, with the original exception chained."""

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(default_engine.session, "execute", broken)
    e = error_of(default_engine, "SELECT 1 AS a")
    assert isinstance(e, qengine.InternalError)
    assert isinstance(e.__cause__, KeyError)
    assert "boom" in str(e)


def test_non_string_sql(default_engine) -> None:
    for sql in (None, 42, b"SELECT 1"):
        with pytest.raises(qengine.ProgrammingError, match="must be a string"):
            default_engine.execute(sql)


# ---- connect() arguments ----------------------------------------------------------------------


def _children() -> set[int]:
    return {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 0},
        {"workers": -1},
        {"workers": "2"},
        {"workers": 1.5},
        {"dialect": "nope"},
        {"partitions": 0},
        {"slots": 0},
        {"broadcast_threshold": "lots"},
        {"broadcast_threshold": -1},
        {"replicate_size": "big"},
        {"replicate_size": -1},
        # sizes as text were not checked for sign: taken, or failed inside ("inf")
        {"split_size": "-1MB"},
        {"broadcast_threshold": "-5"},
        {"replicate_size": "inf"},
        {"shuffle_memory": "nan"},
    ],
)
def test_bad_connect_arguments(kwargs: dict) -> None:
    before = _children()
    with pytest.raises(qengine.ProgrammingError):
        qengine.connect(**kwargs)
    assert _children() <= before  # refused before any worker was started


def test_connect_to_a_remote_target_is_not_supported() -> None:
    with pytest.raises(qengine.NotSupportedError):
        qengine.connect("grpc://example.invalid:1234")


def test_scratch_connections_are_sandboxed_and_see_only_their_own_inputs(tmp_path) -> None:
    from qengine.sandbox.connection import scratch_connection

    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    first, second = scratch_connection(), scratch_connection()
    try:
        with pytest.raises(duckdb.Error, match="disabled"):
            first.execute(f"SELECT * FROM read_csv('{secret}')").fetchall()
        with pytest.raises(duckdb.Error, match="locked"):
            first.execute("SET enable_external_access = true")
        first.register("mine", pa.table({"x": [1, 2]}))
        assert first.execute("SELECT sum(x) FROM mine").fetchone() == (3,)
        with pytest.raises(duckdb.CatalogException):
            second.execute("SELECT * FROM mine").fetchall()
    finally:
        first.close()
        second.close()
