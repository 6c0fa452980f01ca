"""DuckDB's Python conveniences on qengine: relations (``con.sql``), DataFrames found by their
variable's name in FROM, ``$name`` parameters, ``read_parquet``/``read_csv``/``table``, the
default connection, and cursors' ``df``/``arrow``/``pl``.

Differential: the same calls on a qengine connection and on a DuckDB connection over the same
Parquet files (the ``oracle``), with the same Python variables in scope, give the same frames,
tables and rows. One 2-worker cluster serves the module.
"""

from __future__ import annotations

import datetime as dt
import os
import sys

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import qengine
from tests.conftest import engine_over
from tpcds.compare import compare

QUERIES = [
    "SELECT note, count(*) AS n, sum(price) AS total, min(sold_date) AS first, avg(amount) AS mean FROM sales GROUP BY note",
    "SELECT c.city, c.segment, count(s.sale_id) AS n FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city, c.segment",
    "SELECT sale_id, price, sold_date, note, joined FROM sales JOIN customers USING (cust_id) WHERE sale_id < 300",
]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the module's connection may read and write: the tests' temporary directory."""
    return str(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def con(data_paths: dict[str, str], roots: str):
    connection = engine_over(data_paths, allowed_roots=[roots], output_roots=[roots])
    yield connection
    connection.close()


def same_frames(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Equal DataFrames, rows in any order: columns, dtypes and values."""
    assert list(got.columns) == list(expected.columns)
    by = list(expected.columns)
    pd.testing.assert_frame_equal(
        got.sort_values(by, na_position="first").reset_index(drop=True),
        expected.sort_values(by, na_position="first").reset_index(drop=True),
        check_exact=False,
    )


def same_table(got: pa.Table, expected: pa.Table, sql: str) -> None:
    result = compare(got, expected, sql)
    assert result.ok, f"{result.message}\nSQL: {sql}"


# ---- relations ----------------------------------------------------------------------------


@pytest.mark.parametrize("sql", QUERIES)
def test_relation_results_are_duckdbs(con, oracle, sql: str) -> None:
    rel, expected = con.sql(sql), oracle.sql(sql)
    same_frames(rel.df(), expected.df())
    got = rel.to_arrow_table()
    assert isinstance(got, pa.Table)
    assert got.schema == expected.arrow().read_all().schema
    # arrow() is a reader, as in DuckDB 1.5 (it was a table): code written for DuckDB reads it
    reader = rel.arrow()
    assert isinstance(reader, pa.RecordBatchReader) and isinstance(expected.arrow(), pa.RecordBatchReader)
    same_table(reader.read_all(), expected.arrow().read_all(), sql)
    assert isinstance(con.execute(sql).arrow(), pa.RecordBatchReader) and isinstance(con.execute(sql).to_arrow_table(), pa.Table)
    same_table(got, expected.arrow().read_all(), sql)
    same_table(pa.Table.from_pylist([dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]), expected.arrow().read_all(), sql)
    assert rel.columns == expected.columns
    assert rel.types == [str(t) for t in expected.types]
    assert rel.shape == expected.shape


def test_fetches_read_on_from_one_run_as_in_duckdb(con, oracle) -> None:
    sql = "SELECT sale_id, qty FROM sales WHERE sale_id < 7 ORDER BY sale_id"
    ours, theirs = con.sql(sql), oracle.sql(sql)
    for step in (lambda r: r.fetchone(), lambda r: r.fetchmany(2), lambda r: r.fetchall(), lambda r: r.fetchall(),
                 lambda r: r.fetchmany(3), lambda r: r.fetchone()):
        assert step(ours) == step(theirs)


def test_a_relation_runs_when_its_rows_are_asked_for(con) -> None:
    duck = duckdb.connect()
    try:
        for c in (con, duck):
            c.execute("CREATE TABLE lazy_t (x INTEGER)")
        rels = [c.sql("SELECT count(*) AS n, sum(x) AS s FROM lazy_t") for c in (con, duck)]
        for c in (con, duck):
            c.execute("INSERT INTO lazy_t VALUES (4), (5)")
        ours, theirs = (r.fetchall() for r in rels)
        assert ours == theirs == [(2, 9)]
    finally:
        con.execute("DROP TABLE IF EXISTS lazy_t")
        duck.close()


def test_statements_that_are_not_queries_run_at_once(con, oracle, roots: str) -> None:
    out = os.path.join(roots, "copied")
    try:
        assert con.sql("CREATE TABLE at_once AS SELECT cust_id, city FROM customers WHERE cust_id < 10") is None
        assert con.sql("INSERT INTO at_once VALUES (1000, 'Rome')") is None
        assert con.sql(f"COPY (SELECT * FROM at_once) TO '{out}' (FORMAT parquet)") is None
        expected = "SELECT cust_id, city FROM customers WHERE cust_id < 10 UNION ALL SELECT 1000, 'Rome'"
        same_table(pq.read_table(out), oracle.sql(expected).arrow().read_all(), expected)
        # several statements run at once; the last one's rows are the relation's
        rel = con.sql("INSERT INTO at_once VALUES (1001, 'Oslo'); SELECT count(*) AS n FROM at_once")
        assert rel.fetchall() == [(12,)] and rel.columns == ["n"]
        assert con.sql("DROP TABLE at_once") is None
        assert "at_once" not in con.tables()
    finally:
        con.execute("DROP TABLE IF EXISTS at_once")


def test_query_names_the_relation(con, oracle) -> None:
    inner = "SELECT cust_id, city FROM customers WHERE segment = 'corp'"
    outer = "SELECT city, count(*) AS n FROM corp GROUP BY city"
    got = con.sql(inner).query("corp", outer)
    same_table(got.to_arrow_table(), oracle.sql(inner).query("corp", outer).arrow().read_all(), outer)
    with pytest.raises(qengine.ProgrammingError, match="customers"):  # DuckDB would read the relation: refused
        con.sql(inner).query("customers", "SELECT * FROM customers")


def test_show_and_repr_print_the_rows(con, oracle, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT cust_id, name FROM customers WHERE cust_id < 3"
    con.sql(sql).show()
    shown = capsys.readouterr().out
    assert repr(con.sql(sql)) == shown
    for cust_id, name in oracle.sql(sql).fetchall():
        assert str(cust_id) in shown and name in shown
    assert "cust_id" in shown and "3 row(s)" in shown
    many = repr(con.sql("SELECT cust_id FROM customers"))
    assert "500 row(s) (first 40 shown)" in many
    assert len([line for line in many.splitlines() if line.strip("│ ").isdigit()]) == 40


def test_explain_is_a_relation(con) -> None:
    rel = con.sql("EXPLAIN SELECT count(*) FROM sales")
    assert rel.columns == ["plan"]
    assert rel.fetchall() == con.execute("EXPLAIN SELECT count(*) FROM sales").fetchall()


# ---- cursors ------------------------------------------------------------------------------


def test_cursor_df_arrow_pl_are_duckdbs(con, oracle) -> None:
    polars = pytest.importorskip("polars")
    from polars.testing import assert_frame_equal

    sql = QUERIES[2]
    same_frames(con.execute(sql).df(), oracle.execute(sql).df())
    same_frames(con.execute(sql).fetchdf(), oracle.execute(sql).fetchdf())
    got = con.execute(sql).to_arrow_table()
    assert isinstance(got, pa.Table)
    same_table(got, oracle.execute(sql).to_arrow_table(), sql)
    ordered = sql + " ORDER BY sale_id"
    assert_frame_equal(con.execute(ordered).pl(), oracle.execute(ordered).pl())
    assert_frame_equal(con.sql(ordered).pl(), oracle.sql(ordered).pl())
    assert isinstance(con.sql(ordered).pl(), polars.DataFrame)
    repeated = "SELECT 1 AS a, 2 AS a, 3 AS a_1"  # polars refuses two columns of one name: renamed as DuckDB renames them
    assert_frame_equal(con.execute(repeated).pl(), oracle.execute(repeated).pl())
    cur = con.execute(ordered)
    first = cur.fetchone()
    assert cur.to_arrow_table().num_rows == len(oracle.execute(ordered).fetchall()) - 1 and first is not None  # the rest


def test_pl_without_polars_says_how_to_get_it(con, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars now fails
    with pytest.raises(qengine.InterfaceError, match="pip install polars"):
        con.execute("SELECT 1 AS x").pl()
    with pytest.raises(qengine.InterfaceError, match="pip install polars"):
        con.sql("SELECT 1 AS x").pl()


# ---- replacement scans --------------------------------------------------------------------


def test_dataframes_in_variables_are_tables(con, oracle) -> None:
    polars = pytest.importorskip("polars")
    rng = np.random.default_rng(7)
    picks = pd.DataFrame({"cust_id": rng.integers(0, 600, 50), "weight": rng.random(50), "tag": [None, "a", "b", "c", "d"] * 10})
    sql = "SELECT p.tag, c.city, count(*) AS n, sum(p.weight) AS w FROM picks p JOIN customers c USING (cust_id) GROUP BY p.tag, c.city"
    tables_before = con.tables()
    expected = oracle.sql(sql).arrow().read_all()
    same_table(con.sql(sql).to_arrow_table(), expected, sql)
    same_table(con.execute(sql).fetch_arrow_table(), expected, sql)
    same_table(con.cursor().execute(sql).fetch_arrow_table(), expected, sql)
    frame = pa.Table.from_pandas(picks)
    for picks in (frame, polars.from_arrow(frame), frame.to_batches()[0], frame.to_reader()):  # noqa: B007 - read by name
        same_table(con.sql(sql).to_arrow_table(), expected, sql)
    # the data was a session table for each statement alone
    assert con.tables() == tables_before
    assert not [name for name in con.session.catalog.tables if name.startswith("__scan")]


def test_a_registered_table_wins_over_a_variable(con, oracle) -> None:
    customers = pd.DataFrame({"cust_id": [1]})  # noqa: F841 - the name is the point
    sql = "SELECT count(*) FROM customers"
    assert con.sql(sql).fetchall() == oracle.sql(sql).fetchall() != [(1,)]
    with_cte = "WITH picks AS (SELECT 1 AS cust_id) SELECT count(*) FROM picks"
    picks = pd.DataFrame({"cust_id": [1, 2, 3]})  # noqa: F841
    assert con.sql(with_cte).fetchall() == oracle.sql(with_cte).fetchall() == [(1,)]


def test_relations_in_variables_are_inlined(con, oracle) -> None:
    inner = "SELECT cust_id, city FROM customers WHERE city <> 'Lima'"
    outer = "SELECT r.city, count(*) AS n FROM sales s JOIN recent r USING (cust_id) GROUP BY r.city"
    recent = oracle.sql(inner)
    expected = oracle.sql(outer).arrow().read_all()
    recent = con.sql(inner)  # noqa: F841
    same_table(con.sql(outer).to_arrow_table(), expected, outer)
    same_table(con.execute(outer).fetch_arrow_table(), expected, outer)

    def made_in_a_function():
        small = pd.DataFrame({"k": [1, 2, 3]})  # noqa: F841 - read by the relation after the function returned
        return con.sql("SELECT sum(k) AS s FROM small"), oracle.sql("SELECT sum(k) AS s FROM small")

    ours, theirs = made_in_a_function()
    assert ours.fetchall() == theirs.fetchall() == [(6,)]
    nested = ours.query("o", "SELECT s * 2 AS d FROM o")
    assert nested.fetchall() == [(12,)]


def test_a_variable_that_is_not_data_is_refused(con) -> None:
    threshold = 5  # noqa: F841
    with pytest.raises(qengine.ProgrammingError, match="'threshold' is a Python int"):
        con.sql("SELECT * FROM threshold").fetchall()
    with pytest.raises(qengine.ProgrammingError, match="does not exist"):
        con.sql("SELECT * FROM no_such_thing").fetchall()
    other = qengine.connect(workers=1, lazy_start=True)
    try:
        foreign = other.sql("SELECT 1 AS x")  # noqa: F841
        with pytest.raises(qengine.ProgrammingError, match="another connection"):
            con.sql("SELECT * FROM foreign").fetchall()
    finally:
        other.close()


# ---- named parameters ---------------------------------------------------------------------


def test_named_parameters_bind_as_in_duckdb(con, oracle) -> None:
    sql = "SELECT count(*) AS n, sum(qty) AS q FROM sales WHERE qty > $lo AND note = $note AND price < $hi"
    for params in ({"lo": 50, "note": "gift", "hi": 200.5}, {"lo": 10, "note": "promo", "hi": 100.0}, {"LO": 10, "Note": "bulk", "hi": 1e9}):
        assert con.execute(sql, params).fetchall() == oracle.execute(sql, params).fetchall()
    assert con.execute("SELECT $a + $b AS s, $a AS a", {"a": 1, "b": 2}).fetchall() == [(3, 1)]
    with pytest.raises(qengine.ProgrammingError, match=r"no value for parameter \$note"):
        con.execute(sql, {"lo": 1, "hi": 2})
    with pytest.raises(qengine.ProgrammingError, match=r"parameter \$extra is not in the statement"):
        con.execute(sql, {"lo": 1, "hi": 2, "note": "x", "extra": 3})
    with pytest.raises(qengine.ProgrammingError, match=r"\$name placeholders"):
        con.execute("SELECT ? AS x", {"a": 1})
    # lists still bind ? as before, the same text after a dict run included
    assert con.execute("SELECT count(*) FROM sales WHERE qty > ?", [50]).fetchall() == oracle.execute(
        "SELECT count(*) FROM sales WHERE qty > ?", [50]).fetchall()


def test_sql_takes_params_as_duckdb_s_does(con, oracle) -> None:
    # sql(query, params=...) failed with InternalError(TypeError)
    for sql, params in (("SELECT count(*) AS n FROM sales WHERE qty > ? AND note = ?", [10, "gift"]),
                        ("SELECT ?::DATE + 1 AS d", [dt.date(2024, 2, 28)]),
                        ("SELECT sum(qty) AS q FROM sales WHERE qty < $hi", {"hi": 40})):
        ours, theirs = con.sql(sql, params=params), oracle.sql(sql, params=params)
        assert ours.columns == theirs.columns
        assert ours.fetchall() == theirs.fetchall()
    assert con.sql("CREATE TABLE p AS SELECT ? AS x", params=[7]) is None
    assert con.sql("SELECT x FROM p").fetchall() == [(7,)]


# ---- reading files and tables -------------------------------------------------------------


def test_read_parquet_read_csv_and_table(con, oracle, data_paths: dict[str, str], roots: str) -> None:
    sales = os.path.join(data_paths["sales"], "*.parquet")
    sql = f"SELECT * FROM read_parquet('{sales}')"
    same_frames(con.read_parquet(sales).df(), oracle.sql(sql).df())
    files = sorted(os.path.join(data_paths["sales"], f) for f in os.listdir(data_paths["sales"]))[:2]
    assert con.read_parquet(files).shape == oracle.read_parquet(files).shape
    csv = os.path.join(roots, "quoted 'name'.csv")
    pacsv.write_csv(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), csv)
    same_frames(con.read_csv(csv).df(), oracle.read_csv(csv).df())
    same_frames(con.table("customers").df(), oracle.table("customers").df())
    with pytest.raises(qengine.ProgrammingError, match="does not exist"):
        con.table("no_such_table")
    # options go to the SQL readers, which take those they model and refuse the others
    same_frames(con.read_parquet(sales, hive_partitioning=False).df(), oracle.read_parquet(sales, hive_partitioning=False).df())
    with pytest.raises(qengine.NotSupportedError, match="union_by_name"):
        con.read_parquet(sales, union_by_name=True).fetchall()
    with pytest.raises(qengine.NotSupportedError, match="options are not supported"):
        con.read_csv(csv, header=False).fetchall()


@pytest.mark.parametrize("layout", ["newline_delimited", "array"])
def test_read_json(con, oracle, roots: str, layout: str) -> None:
    path = os.path.join(roots, f"items-{layout}.json")
    oracle.execute(f"COPY (SELECT * FROM items) TO '{path}' (FORMAT json, ARRAY {str(layout == 'array').lower()})")
    same_frames(con.read_json(path).df(), oracle.read_json(path).df())
    same_frames(con.read_json(path, format=layout).df(), oracle.read_json(path, format=layout).df())


@pytest.mark.parametrize("files", [("scalars", "objects"), ("objects", "scalars"), ("objects",), ("named",)])
def test_read_json_reads_each_file_as_duckdb_reads_them_all(con, oracle, roots: str, files: tuple[str, ...]) -> None:
    # beside a file of scalars, DuckDB reads a file of objects as values of one JSON column; each
    # file read alone with the detected columns made its objects rows of NULLs
    texts = {"scalars": "1\n2\n3\n", "objects": '{"a": "1"}\n{"a": 2}\n{"a": true}\n', "named": '{"json": 5}\n{"json": 6}\n'}
    paths = []
    for name in files:
        paths.append(os.path.join(roots, f"mixed-{name}.json"))
        with open(paths[-1], "w") as f:
            f.write(texts[name])
    sql = f"SELECT * FROM read_json({paths})"
    assert sorted(con.execute(sql).fetchall(), key=str) == sorted(oracle.execute(sql).fetchall(), key=str)


def test_a_json_column_read_from_json_files_stays_json(con, oracle, roots: str) -> None:
    # it reached fragments as VARCHAR: typeof() said so, and DESCRIBE did too
    path = os.path.join(roots, "typed.json")
    with open(path, "w") as f:
        f.write('{"id": 1, "v": {"x": 1}, "w": [1, "a"]}\n{"id": 2, "v": 5, "w": [2]}\n')
    for sql in (f"SELECT id, v, typeof(v), typeof(w), w FROM read_json('{path}')", f"DESCRIBE SELECT * FROM read_json('{path}')",
                f"SELECT v->>'$.x' AS x, typeof(v) FROM (SELECT v FROM read_json('{path}') ORDER BY id) s"):
        assert sorted(con.execute(sql).fetchall(), key=str) == sorted(oracle.execute(sql).fetchall(), key=str)


def test_read_parquet_stays_inside_the_roots(con, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = "/var/tmp/qengine_outside.parquet"  # not under the connection's roots
    pq.write_table(pa.table({"a": [1]}), outside)
    try:
        with pytest.raises(qengine.ProgrammingError, match="outside"):
            con.read_parquet(outside).fetchall()
    finally:
        os.remove(outside)


# ---- the default connection and the connection's PEP 249 extras ---------------------------


def test_default_connection(oracle) -> None:
    default = qengine.default_connection()
    try:
        assert qengine.default_connection() is default
        numbers = pd.DataFrame({"n": [3, 4, 5]})  # noqa: F841
        assert qengine.sql("SELECT sum(n) AS s FROM numbers").fetchall() == duckdb.sql("SELECT sum(n) AS s FROM numbers").fetchall()
        assert qengine.execute("SELECT $x * 2 AS y", {"x": 21}).fetchall() == [(42,)]
        assert qengine.sql("SELECT 42 AS x").df().equals(duckdb.sql("SELECT 42 AS x").df())
    finally:
        default.close()


def test_connection_attributes_and_close() -> None:
    con = qengine.connect(workers=1, lazy_start=True)
    for name in ("Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError", "IntegrityError",
                 "InternalError", "ProgrammingError", "NotSupportedError"):
        assert getattr(con, name) is getattr(qengine, name)
    cur = con.cursor()
    con.close()
    for call in (con.close, lambda: con.sql("SELECT 1"), lambda: cur.execute("SELECT 1"), lambda: con.read_parquet("x.parquet"),
                 lambda: con.table("t")):
        with pytest.raises(qengine.InterfaceError):
            call()


def test_a_standalone_cluster_binds_names_and_gives_relations(tmp_path, data_paths: dict[str, str], oracle) -> None:
    from tests.test_multihost import cluster, data_root, register

    sql = "SELECT count(*) AS n FROM sales WHERE qty > $lo AND note = $note"
    params = {"lo": 40, "note": "gift"}
    with cluster(tmp_path, 1, data_roots=data_root(data_paths)) as c, c.connect() as remote:
        register(remote, data_paths)
        assert remote.execute(sql, params).fetchall() == oracle.execute(sql, params).fetchall()
        with pytest.raises(qengine.ProgrammingError, match=r"no value for parameter \$note"):
            remote.execute(sql, {"lo": 1})
        rel = remote.sql("SELECT city, count(*) AS n FROM customers GROUP BY city")
        expected = oracle.sql("SELECT city, count(*) AS n FROM customers GROUP BY city")
        same_frames(rel.df(), expected.df())
        assert (rel.columns, rel.types, rel.shape) == (expected.columns, [str(t) for t in expected.types], expected.shape)
        assert remote.sql("CREATE TABLE remote_t AS SELECT 1 AS x") is None
        with pytest.raises(qengine.NotSupportedError, match="standalone"):
            rel.query("r", "SELECT * FROM r")
        frame = pd.DataFrame({"x": [1]})  # noqa: F841
        with pytest.raises(qengine.NotSupportedError, match="'frame'"):
            remote.sql("SELECT * FROM frame").fetchall()
        # sent as Arrow, a time lost its UTC offset silently, and an integer beyond BIGINT was an InternalError
        with pytest.raises(qengine.NotSupportedError, match="a time with a UTC offset cannot be bound"):
            remote.execute("SELECT ? AS t", [dt.time(10, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))])
        with pytest.raises(qengine.NotSupportedError, match="beyond BIGINT's range"):
            remote.execute("SELECT ? AS n", [2**63])
        assert remote.execute("SELECT ? AS n", [2**63 - 1]).fetchall() == [(2**63 - 1,)]


def test_the_same_text_reads_what_the_variable_holds_now(con, oracle) -> None:
    """Plans of a statement that read a variable are not reused for the same text later."""
    sql = "SELECT count(*) AS n, sum(v) AS s FROM vals WHERE v > 1"
    for vals in (pd.DataFrame({"v": [1, 2, 3]}), pd.DataFrame({"v": [5, 6]}), pa.table({"v": [0.5, 7.5, 9.0]})):  # noqa: B007
        assert con.sql(sql).fetchall() == oracle.sql(sql).fetchall()
        assert con.execute(sql).fetchall() == oracle.execute(sql).fetchall()
    outer = "SELECT count(*) AS n FROM picked WHERE cust_id > 2"
    for bound in (10, 20):
        picked = con.sql(f"SELECT cust_id FROM customers WHERE cust_id < {bound}")  # noqa: F841
        assert con.sql(outer).fetchall() == [(bound - 3,)]


def test_relational_methods_are_duckdbs(con, oracle, roots: str) -> None:
    """filter, project/select, order, limit and aggregate build on a relation as DuckDB's do;
    write_parquet and write_csv write one file of its rows."""
    for c in (con, oracle):
        c.execute("CREATE OR REPLACE VIEW rel_sales AS SELECT sale_id, store_id, qty, amount, note FROM sales")
    try:
        built = [
            lambda r: r.filter("qty > 90 AND note IS NOT NULL").order("sale_id DESC").limit(7, 3),
            lambda r: r.project("sale_id, qty * 2 AS double_qty").order("sale_id").limit(5),
            lambda r: r.select("store_id").filter("store_id IS NULL").limit(3),
            lambda r: r.aggregate("store_id, count(*) AS n, sum(qty) AS q", "store_id"),
            lambda r: r.aggregate("max(amount) AS top"),
        ]
        for build in built:
            ours, theirs = build(con.sql("SELECT * FROM rel_sales")), build(oracle.sql("SELECT * FROM rel_sales"))
            same_frames(ours.df(), theirs.df())
        out = os.path.join(roots, "relation.parquet")
        con.sql("SELECT * FROM rel_sales").filter("qty < 5").write_parquet(out)
        same_table(pq.read_table(out), oracle.sql("SELECT * FROM rel_sales WHERE qty < 5").arrow().read_all(), "write_parquet")
        csv = os.path.join(roots, "relation.csv")
        con.sql("SELECT * FROM rel_sales").limit(10).write_csv(csv)
        assert oracle.read_csv(csv).shape == (10, 5)
        with pytest.raises(qengine.ProgrammingError, match="cannot read a filter"):
            con.sql("SELECT * FROM rel_sales").filter("qty >")
    finally:
        for c in (con, oracle):
            c.execute("DROP VIEW IF EXISTS rel_sales")


def test_a_frame_of_repeated_column_names_is_named_as_duckdb_names_it(con, oracle) -> None:
    """It failed inside: "Multiple matches for FieldRef.Name"."""
    sql = "SELECT 1, 1, 2 AS a, 3 AS A"
    got, expected = con.execute(sql).df(), oracle.execute(sql).df()
    assert got.columns.tolist() == expected.columns.tolist() == ["1", "1_1", "a", "A_1"]
    same_frames(got, expected)
