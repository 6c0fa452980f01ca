"""Arrow Flight SQL, as its real clients use it: the ADBC Flight SQL driver's DB-API (queries,
parameters, prepared statements, metadata, updates, cancellation) and pandas ``read_sql`` over
it, against a ``qengine serve`` this module starts and stops. Every answer is compared with
DuckDB's on the same files."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from google.protobuf import any_pb2

import qengine
from tests.conftest import free_port, subprocess_env, wait_until
from tests.test_multihost import cluster
from tpcds.compare import compare

BOUND = 60.0  # seconds; only guards against hangs
ENDLESS = "SELECT count(*) FROM sales a, sales b, items c WHERE a.qty + b.qty + c.item_id > 0"


class Served:
    """A ``qengine serve`` process and how to reach it."""

    def __init__(self, tmp: str, data: str, *extra: str, workers: int = 2, wait: bool = True) -> None:
        """``wait``: until serve says it serves (its workers joined), else only until it starts."""
        self.token = "flight-sql-" + os.urandom(8).hex()
        self.token_file = os.path.join(tmp, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token)
        self.address = f"127.0.0.1:{free_port()}"
        self.err = os.path.join(tmp, "serve.err")
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "qengine.cli", "serve", "-d", data, "--listen", self.address, "--token-file", self.token_file,
                 "--workers", str(workers), *extra],
                stdout=subprocess.PIPE, stderr=err, text=True, env=subprocess_env(),
            )
        if not wait:
            return
        line = self.proc.stdout.readline()
        if "qengine serve:" not in line:
            self.stop()
            raise AssertionError(f"serve did not start: {line}{Path(self.err).read_text()}")
        self.workers = psutil.Process(self.proc.pid).children()

    def connect(self, scheme: str = "grpc", token: str | None = None, **db_kwargs: str) -> adbc_driver_manager.dbapi.Connection:
        kwargs = {adbc_driver_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token or self.token}", **db_kwargs}
        return flight_sql.connect(f"{scheme}://{self.address}", db_kwargs=kwargs, autocommit=True)

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it; it must stop its workers too."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            self.proc.stdout.close()


@contextlib.contextmanager
def served(tmp: str, data: str, *extra: str, workers: int = 2) -> Iterator[Served]:
    server = Served(tmp, data, *extra, workers=workers)
    try:
        yield server
    finally:
        server.stop()
        gone, alive = psutil.wait_procs(server.workers, timeout=15)
        for proc in alive:
            proc.kill()
        assert not alive, f"serve left workers running: {alive}"


@pytest.fixture(scope="module")
def server(data_paths: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = os.path.dirname(next(iter(data_paths.values())))
    with served(str(tmp_path_factory.mktemp("serve")), data) as s:
        yield s


@pytest.fixture(scope="module")
def adbc(server: Served) -> Iterator[adbc_driver_manager.dbapi.Connection]:
    con = server.connect()
    yield con
    con.close()


def same(got: pa.Table, expected: pa.Table, sql: str) -> None:
    result = compare(got, expected, sql)
    assert result.ok, f"{result.message}\nSQL: {sql}"


QUERIES = [
    "SELECT store_id, count(*) AS n, sum(price) AS revenue, avg(amount) AS a FROM sales GROUP BY store_id",
    "SELECT i.brand, sum(s.qty) AS q FROM sales s JOIN items i ON s.item_id = i.item_id GROUP BY i.brand ORDER BY q DESC, i.brand",
    "SELECT * FROM sales WHERE note IS NULL ORDER BY sale_id LIMIT 50",
    "SELECT cust_id, min(sold_date) AS first, max(sold_date) AS last FROM sales WHERE cust_id < 20 GROUP BY cust_id",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_give_duckdbs_answers(adbc, oracle, sql: str) -> None:
    with adbc.cursor() as cur:
        cur.execute(sql)
        got = cur.fetch_arrow_table()
    same(got, oracle.execute(sql).to_arrow_table(), sql)


ENUM_SQL = "SELECT CAST(note AS ENUM('gift', 'promo', 'bulk', 'return')) AS e, count(*) AS n FROM sales GROUP BY 1 ORDER BY 2, 1"


def test_an_enum_column_reaches_flight_sql_and_qengine_clients(server: Served, adbc, oracle, data_paths) -> None:
    # pyarrow's generator stream sent no dictionary: the client failed to read any ENUM result
    expected = oracle.execute(ENUM_SQL).to_arrow_table()
    with adbc.cursor() as cur:
        cur.execute(ENUM_SQL)
        got = cur.fetch_arrow_table()
    assert pa.types.is_dictionary(got.schema.field("e").type)
    assert got.to_pylist() == expected.to_pylist()
    with qengine.connect(f"qengine://{server.address}", token=server.token) as con:
        con.register_parquet("sales", data_paths["sales"])
        assert con.execute(ENUM_SQL).fetchall() == oracle.execute(ENUM_SQL).fetchall()


def test_a_large_result_streams_in_batches(adbc, oracle) -> None:
    sql = "SELECT sale_id, cust_id, amount, note FROM sales"
    with adbc.cursor() as cur:
        cur.execute(sql)
        reader = cur.fetch_record_batch()
        batches = list(reader)
    assert len(batches) > 1  # several of the workers' result partitions, not one table made whole first
    same(pa.Table.from_batches(batches), oracle.execute(sql).to_arrow_table(), sql)


def test_a_result_batch_larger_than_a_grpc_message_reaches_adbc(adbc) -> None:
    """A worker's batch of a million rows (about 17 MB) exceeded the 16 MiB message an ADBC
    client takes ("received message larger than max"); batches are cut below it."""
    sql = "SELECT range AS i, repeat('x', 40) || range AS s FROM range(1000000)"
    with adbc.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    assert table.num_rows == 1_000_000
    assert sorted(table.column("i").to_pylist())[::250_000] == [0, 250_000, 500_000, 750_000]
    assert table.column("s").to_pylist()[:3] == ["x" * 40 + str(i) for i in table.column("i").to_pylist()[:3]]


def test_parameters_and_a_reused_prepared_statement(adbc, oracle) -> None:
    sql = "SELECT count(*) AS n, sum(qty) AS q FROM sales WHERE store_id = ? AND note = ?"
    with adbc.cursor() as cur:
        cur.adbc_prepare(sql)
        for params in [(3, "gift"), (5, "promo"), (1, "none such")]:
            cur.execute(sql, params)
            same(cur.fetch_arrow_table(), oracle.execute(sql, list(params)).to_arrow_table(), f"{sql} with {params}")


def test_metadata_lists_the_served_tables_with_their_columns(adbc, data_paths) -> None:
    objects = adbc.adbc_get_objects(depth="all").read_all().to_pylist()
    assert [c["catalog_name"] for c in objects] == ["memory"]  # as information_schema says
    [schema] = objects[0]["catalog_db_schemas"]
    assert schema["db_schema_name"] == "main"
    tables = {t["table_name"]: t for t in schema["db_schema_tables"]}
    assert set(data_paths) <= set(tables)
    for name, path in data_paths.items():
        expected = pq.read_schema(os.path.join(path, sorted(os.listdir(path))[0]))
        assert [c["column_name"] for c in tables[name]["table_columns"]] == expected.names
        assert tables[name]["table_type"] == "TABLE"
    assert adbc.adbc_get_table_schema("items").names == pq.read_schema(os.path.join(data_paths["items"], "part-0.parquet")).names
    assert adbc.adbc_get_table_types() == ["TABLE", "VIEW"]
    filtered = adbc.adbc_get_objects(depth="tables", table_name_filter="it%").read_all().to_pylist()
    assert [t["table_name"] for t in filtered[0]["catalog_db_schemas"][0]["db_schema_tables"]] == ["items"]
    info = adbc.adbc_get_info()
    assert info["vendor_name"] == "qengine" and info["vendor_arrow_version"] == pa.__version__


def test_updates_create_insert_and_drop(adbc, oracle) -> None:
    with adbc.cursor() as cur:
        cur.execute("CREATE TABLE big_sales AS SELECT sale_id, store_id, amount FROM sales WHERE amount > 150")
        assert cur.rowcount == oracle.execute("SELECT count(*) FROM sales WHERE amount > 150").fetchone()[0]
        cur.executemany("INSERT INTO big_sales VALUES (?, ?, ?)", [(-1, 99, 1.5), (-2, None, 2.5)])
        assert cur.rowcount == 2
        cur.execute("CREATE VIEW per_store AS SELECT store_id, count(*) AS n FROM big_sales GROUP BY store_id")
        sql = "SELECT * FROM per_store"
        cur.execute(sql)
        got = cur.fetch_arrow_table()
        expected = oracle.execute(
            "SELECT store_id, count(*) AS n FROM (SELECT store_id FROM sales WHERE amount > 150 UNION ALL VALUES (99), (NULL)) "
            "GROUP BY store_id"
        ).to_arrow_table()
        same(got, expected, sql)
        tables = adbc.adbc_get_objects(depth="tables").read_all().to_pylist()[0]["catalog_db_schemas"][0]["db_schema_tables"]
        assert {"big_sales": "TABLE", "per_store": "VIEW"}.items() <= {t["table_name"]: t["table_type"] for t in tables}.items()
        assert adbc.adbc_get_table_schema("per_store").names == ["store_id", "n"]
        cur.execute("DROP VIEW per_store")
        cur.execute("DROP TABLE big_sales")
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="big_sales"):
            cur.execute("SELECT * FROM big_sales")


def test_pandas_read_sql_over_adbc(adbc, oracle) -> None:
    sql = "SELECT brand, count(*) AS n, max(list_price) AS top FROM items GROUP BY brand ORDER BY brand"
    got = pd.read_sql(sql, adbc)
    expected = oracle.execute(sql).to_arrow_table().to_pandas()  # decimals as Decimal, as ADBC gives them
    pd.testing.assert_frame_equal(got, expected)


def test_errors_reach_the_client_as_the_right_classes(adbc) -> None:
    with adbc.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="no_such_column"):
            cur.execute("SELECT no_such_column FROM sales")
        with pytest.raises(adbc_driver_manager.NotSupportedError, match="UPDATE"):
            cur.execute("UPDATE sales SET qty = 1")
        cur.execute("SELECT 1 AS one")  # the connection goes on
        assert cur.fetchall() == [(1,)]


def test_flight_sql_requests_qengine_does_not_serve_are_unimplemented(server: Served, adbc) -> None:
    """Bulk ingest, Flight's session options (ADBC asks them for the current catalog) and
    other Flight SQL commands were INVALID_ARGUMENT or UNKNOWN with qengine's own envelope:
    a client could not tell "not supported" from its own mistake."""
    with adbc.cursor() as cur, pytest.raises(adbc_driver_manager.NotSupportedError, match="CommandStatementIngest is not supported"):
        cur.adbc_ingest("new_table", pa.table({"a": [1, 2]}), mode="create")
    client = flight.FlightClient(f"grpc://{server.address}")
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {server.token}".encode())])
    try:
        with pytest.raises(NotImplementedError, match="GetSessionOptions is not supported"):
            list(client.do_action(flight.Action("GetSessionOptions", b""), options))
        xdbc = any_pb2.Any(type_url="type.googleapis.com/arrow.flight.protocol.sql.CommandGetXdbcTypeInfo", value=b"")
        with pytest.raises(NotImplementedError, match="CommandGetXdbcTypeInfo is not supported"):
            client.get_flight_info(flight.FlightDescriptor.for_command(xdbc.SerializeToString()), options)
        with pytest.raises(pa.ArrowInvalid, match="names a command, not a path"):
            client.get_flight_info(flight.FlightDescriptor.for_path("t"), options)
    finally:
        client.close()


def test_a_view_over_a_dropped_table_spoils_no_listing(adbc) -> None:
    """adbc_get_objects failed for the whole catalog ("Table 'gone_base' does not exist")."""
    with adbc.cursor() as cur:
        cur.execute("CREATE TABLE gone_base AS SELECT 1 AS a")
        cur.execute("CREATE VIEW over_gone AS SELECT * FROM gone_base")
        cur.execute("DROP TABLE gone_base")
        try:
            tables = adbc.adbc_get_objects(depth="all").read_all().to_pylist()[0]["catalog_db_schemas"][0]["db_schema_tables"]
            names = [t["table_name"] for t in tables]
            assert "over_gone" in names and "items" in names
        finally:
            cur.execute("DROP VIEW over_gone")


def test_a_client_as_quick_as_the_open_port_waits_for_the_workers(data_paths, oracle, tmp_path) -> None:
    """The port opens before serve's workers have joined: a query then failed with "no worker
    has joined this coordinator yet"."""
    server = Served(str(tmp_path), os.path.dirname(next(iter(data_paths.values()))), wait=False)
    workers: list[psutil.Process] = []
    try:
        wait_until(lambda: _accepts(server.address), BOUND, "serve's port to open")
        workers = psutil.Process(server.proc.pid).children()
        con = server.connect()
        try:
            with con.cursor() as cur:
                cur.execute("SELECT count(*) FROM items")
                assert cur.fetchall() == oracle.execute("SELECT count(*) FROM items").fetchall()
        finally:
            con.close()
    finally:
        workers = psutil.Process(server.proc.pid).children() or workers
        server.stop()
        _, alive = psutil.wait_procs(workers, timeout=15)
        for proc in alive:
            proc.kill()


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
        return True
    return False


def test_a_wrong_token_is_refused(server: Served) -> None:
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated|token"):
        con = server.connect(token="not-the-token")
        try:
            con.cursor().execute("SELECT 1")
        finally:
            con.close()


def test_cancel_stops_a_running_query_and_the_server_goes_on(server: Served, adbc, oracle) -> None:
    con = server.connect()
    cur = con.cursor()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            cur.execute(ENDLESS)
            cur.fetchall()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    watcher = qengine.connect(f"qengine://{server.address}", token=server.token)
    # the coordinator lists it among every client's statements, as Flight SQL's user's
    wait_until(lambda: [q for q in watcher.queries() if q["user"] == "flightsql"], BOUND, "the statement to be listed running")
    time.sleep(1.0)  # its tasks run on the workers
    started = time.monotonic()
    cur.adbc_cancel()
    thread.join(BOUND)
    assert not thread.is_alive(), "the cancelled query did not stop"
    assert len(errors) == 1 and isinstance(errors[0], adbc_driver_manager.Error), errors
    # The cluster stopped its tasks: the next query does not wait behind them.
    sql = "SELECT count(*) AS n FROM sales"
    with adbc.cursor() as other:
        other.execute(sql)
        same(other.fetch_arrow_table(), oracle.execute(sql).to_arrow_table(), sql)
    assert time.monotonic() - started < BOUND
    wait_until(lambda: "cancel" in Path(server.err).read_text(), BOUND, "the server to log the cancelled statement")
    con.close()
    # ... and the statement itself stopped on the cluster: the coordinator lists none running
    wait_until(lambda: not watcher.queries(), BOUND, lambda: f"the cancelled statement to end: {watcher.queries()}")
    watcher.close()


def test_clients_at_once_each_get_their_answer(server: Served, oracle) -> None:
    sqls = [f"SELECT store_id, count(*) AS n FROM sales WHERE qty > {q} GROUP BY store_id" for q in (10, 50, 90)]
    results: dict[str, pa.Table] = {}

    def run(sql: str) -> None:
        con = server.connect()
        try:
            with con.cursor() as cur:
                cur.execute(sql)
                results[sql] = cur.fetch_arrow_table()
        finally:
            con.close()

    threads = [threading.Thread(target=run, args=(sql,)) for sql in sqls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    for sql in sqls:
        same(results[sql], oracle.execute(sql).to_arrow_table(), sql)


def test_qengine_connections_share_the_port(server: Served, data_paths, oracle) -> None:
    sql = "SELECT count(*) AS n FROM items"
    with qengine.connect(f"qengine://{server.address}", token=server.token) as con:
        con.register_parquet("items", data_paths["items"])
        same(con.execute(sql).fetch_arrow_table(), oracle.execute(sql).to_arrow_table(), sql)


def test_tls(tmp_path, data_paths, oracle) -> None:
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True, capture_output=True, timeout=BOUND,
    )
    data = os.path.dirname(data_paths["items"])
    with served(str(tmp_path), data, "--tls-cert", cert, "--tls-key", key, workers=1) as s:
        roots = {adbc_driver_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: Path(cert).read_text()}
        con = s.connect("grpc+tls", **roots)
        try:
            sql = "SELECT brand, count(*) AS n FROM items GROUP BY brand"
            with con.cursor() as cur:
                cur.execute(sql)
                same(cur.fetch_arrow_table(), oracle.execute(sql).to_arrow_table(), sql)
        finally:
            con.close()
        plain = s.connect("grpc")
        try:
            with pytest.raises(adbc_driver_manager.Error):
                plain.cursor().execute("SELECT 1")
        finally:
            plain.close()


def test_a_standalone_coordinator_speaks_flight_sql(tmp_path, data_paths, oracle) -> None:
    """``qengine coordinator -d DIR`` serves DIR's tables to Flight SQL clients beside its own
    sessions, with the same token; a view one client makes is there for the next."""
    data = os.path.dirname(data_paths["sales"])
    with cluster(tmp_path, 2, data_roots=[data], coordinator_args=["-d", data]) as c:
        kwargs = {adbc_driver_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {c.token}"}
        first = flight_sql.connect(f"grpc://{c.address}", db_kwargs=kwargs, autocommit=True)
        try:
            with first.cursor() as cur:
                cur.execute("CREATE VIEW big_items AS SELECT * FROM items WHERE list_price > 50")
        finally:
            first.close()
        second = flight_sql.connect(f"grpc://{c.address}", db_kwargs=kwargs, autocommit=True)
        try:
            sql = "SELECT category, count(*) AS n FROM big_items GROUP BY category"
            with second.cursor() as cur:
                cur.execute(sql)
                got = cur.fetch_arrow_table()
            same(got, oracle.execute(sql.replace("big_items", "(SELECT * FROM items WHERE list_price > 50)")).to_arrow_table(), sql)
            tables = second.adbc_get_objects(depth="tables").read_all().to_pylist()[0]["catalog_db_schemas"][0]["db_schema_tables"]
            assert {"sales", "customers", "items", "big_items"} <= {t["table_name"] for t in tables}
        finally:
            second.close()


def test_a_prepared_statement_knows_its_schema_and_its_mistakes(adbc, oracle) -> None:
    sql = "SELECT brand, count(*) AS n, max(list_price) AS top FROM items GROUP BY brand"
    with adbc.cursor() as cur:
        schema = cur.adbc_execute_schema(sql)  # prepared, not run: the schema came with the prepare
        expected = oracle.execute(f"SELECT * FROM ({sql}) LIMIT 0").to_arrow_table().schema
        assert [(f.name, f.type) for f in schema] == [(f.name, f.type) for f in expected]
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="syntax error"):
            cur.adbc_prepare("SELEC brand FROM items")
        cur.adbc_prepare("SELECT ? + 1 AS x")  # its schema waits for its parameters
        cur.execute("SELECT ? + 1 AS x", (41,))
        assert cur.fetchall() == [(42,)]
