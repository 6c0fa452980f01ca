"""TPC-H (22 queries) and TPC-DS (99 queries) at scale factor 0.01, checked against DuckDB.

Data and query texts come from DuckDB's tpch/tpcds extensions (the pinned wheels, loaded from
their files, no network). Each query runs on a 2-worker cluster with default settings and with
broadcast joins off, so every join also takes the shuffle path.
"""

from __future__ import annotations

import os

import duckdb
import pytest

import qengine
from tests.conftest import assert_same
from tpcds import extension as tpcds_extension
from tpcds.gen import generate

SF = 0.01


def _tpch_extension() -> str:
    import glob

    duckdb_extension_tpch = pytest.importorskip("duckdb_extension_tpch")
    base = os.path.dirname(duckdb_extension_tpch.__file__)
    return glob.glob(os.path.join(base, "extensions", f"v{duckdb.__version__}", "*.duckdb_extension"))[0]


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, str]]:
    root = str(tmp_path_factory.mktemp("tpch"))
    con = duckdb.connect()
    con.execute(f"LOAD '{_tpch_extension()}'")
    con.execute(f"CALL dbgen(sf={SF})")
    for (table,) in con.execute("SHOW TABLES").fetchall():
        os.makedirs(os.path.join(root, table))
        con.execute(f"COPY {table} TO '{root}/{table}/part-0.parquet' (FORMAT parquet, ROW_GROUP_SIZE 10000)")
    queries = dict(con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall())
    con.close()
    return root, queries


@pytest.fixture(scope="module")
def tpcds(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("tpcds"))
    # Row groups of 2,000 rows: at SF 0.01 a table of one row group is read in one task, and
    # what is computed from it alone moves through no exchange; these make the fact tables and
    # date_dim scan as several tasks, so the queries exercise the distributed paths.
    generate(SF, root, force=True, row_group_rows=2_000)
    return root


def _oracle(root: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table in os.listdir(root):
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{root}/{table}/*.parquet')")
    return con


def _cluster(root: str, mode: str):
    options = {"broadcast_threshold": 0} if mode == "shuffle" else {}
    con = qengine.connect(workers=2, split_size="256KB", **options)
    for table in os.listdir(root):
        con.register_parquet(table, os.path.join(root, table))
    return con


@pytest.fixture(scope="module", params=["default", "shuffle"])
def tpch_engine(request: pytest.FixtureRequest, tpch):
    con = _cluster(tpch[0], request.param)
    yield con
    con.close()


@pytest.fixture(scope="module", params=["default", "shuffle"])
def tpcds_engine(request: pytest.FixtureRequest, tpcds):
    con = _cluster(tpcds, request.param)
    yield con
    con.close()


@pytest.fixture(scope="module")
def tpch_oracle(tpch):
    con = _oracle(tpch[0])
    yield con
    con.close()


@pytest.fixture(scope="module")
def tpcds_oracle(tpcds):
    con = _oracle(tpcds)
    yield con
    con.close()


@pytest.mark.parametrize("number", range(1, 23))
def test_tpch_query(tpch, tpch_engine, tpch_oracle, number: int) -> None:
    assert_same(tpch_engine, tpch_oracle, tpch[1][number])


@pytest.mark.parametrize("number", range(1, 100))
def test_tpcds_query(tpcds_engine, tpcds_oracle, number: int) -> None:
    assert_same(tpcds_engine, tpcds_oracle, tpcds_extension.queries()[number])


def test_tpcds_harness_warms_up_then_times_each_engine_repeat_times(tpcds) -> None:
    """``qengine tpcds run``'s protocol: every query checked, then timed ``repeat`` times in each
    engine after an untimed warm-up; a query's seconds are the medians of its runs."""
    import statistics

    from tpcds.run import run

    seen = []
    report = run(tpcds, [3, 7, 96], {"workers": 2, "split_size": "256KB"}, lambda done, q: seen.append((done, q.query)), repeat=3)
    assert seen == [(1, 3), (2, 7), (3, 96)]
    assert report.config["repeat"] == 3
    for q in report.queries:
        assert q.ok, q.error
        assert len(q.qengine_runs) == len(q.duckdb_runs) == 3
        assert q.qengine_seconds == round(statistics.median(q.qengine_runs), 4)
        assert q.duckdb_seconds == round(statistics.median(q.duckdb_runs), 4)
        assert q.tasks and q.rows is not None
    spread = report.repeat_ratios()
    assert len(spread) == 3
    assert report.totals()["ratio_range_over_repeats"] == [round(min(spread), 3), round(max(spread), 3)]
