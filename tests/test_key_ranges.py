"""Scans pruned by the key range of a filtered table every task reads whole: a fact table laid
out by date, joined to one year of its calendar, reads only that year's row groups, spread over
the workers; answers stay DuckDB's."""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.catalog.sources import ParquetSource
from qengine.planner import logical as lp
from qengine.planner.frontend import parse
from qengine.runtime.task import _run_fragment
from qengine.sandbox.connection import safe_connection
from qengine.sandbox.pool import Lease
from tests.conftest import assert_same

DAYS, PER_DAY, GROUP = 400, 50, 1_000  # 20 row groups of 20 days each
SALES = DAYS * PER_DAY
QUERY = (
    "SELECT d.year, s.shop, sum(s.amount) AS total, count(*) AS n FROM sales s "
    "JOIN dates d ON s.date_sk = d.date_sk WHERE d.year = {year} GROUP BY d.year, s.shop"
)


@pytest.fixture(scope="module")
def calendar(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Sales in date order (row groups hold disjoint date ranges), shops in no order, a
    calendar of 100-day years and the shops' regions."""
    root = tmp_path_factory.mktemp("calendar")
    rng = np.random.default_rng(7)
    date_sk = np.repeat(np.arange(DAYS, dtype=np.int64), PER_DAY)
    sales = pa.table({"date_sk": date_sk, "shop": rng.integers(0, 30, SALES), "amount": rng.integers(1, 1000, SALES)})
    dates = pa.table({"date_sk": np.arange(DAYS, dtype=np.int64), "year": np.arange(DAYS) // 100})
    shops = pa.table({"shop": np.arange(30, dtype=np.int64), "region": np.arange(30) % 3})
    paths = {"sales": str(root / "sales"), "dates": str(root / "dates"), "shops": str(root / "shops")}
    for name, table, group in (("sales", sales, GROUP), ("dates", dates, DAYS), ("shops", shops, 30)):
        os.makedirs(paths[name])
        pq.write_table(table, os.path.join(paths[name], "part-0.parquet"), row_group_size=group)
    return paths


def _oracle(paths: dict[str, str]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name, path in paths.items():
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{path}/*.parquet')")
    return con


def test_clustered_tells_ranges_from_scatter(calendar) -> None:
    sales = ParquetSource("sales", [os.path.join(calendar["sales"], "part-0.parquet")])
    assert sales.clustered("date_sk")
    assert not sales.clustered("shop")  # every row group holds every shop
    assert not sales.clustered("missing")


@pytest.mark.parametrize("year", [1, 3, 9])
def test_a_filtered_calendar_prunes_and_spreads_the_fact_scan(calendar, year: int) -> None:
    sql = QUERY.format(year=year)
    oracle = _oracle(calendar)
    with qengine.connect(workers=2, split_size="64KB") as con:
        for name, path in calendar.items():
            con.register_parquet(name, path)
        assert_same(con, oracle, sql)
        cur = con.execute(sql)
        scan = next(s for s in cur.stats.stages if s.stage == 0)
    # Each task reads the calendar whole (DAYS rows) and its share of the sales that can match.
    sales_read = scan.rows_in - scan.tasks * DAYS
    if year < DAYS // 100:
        assert sales_read == 100 * PER_DAY  # the year's five row groups, and no other
        assert scan.tasks == 2  # spread over both workers, though only five groups are left
    else:
        assert sales_read == 0  # no such year: nothing to read


def _build_filters(con, sql: str) -> list[str]:
    """The whole tables whose key range the plan computes to prune its sales scan."""
    plan = con.session.plan(parse(sql, "duckdb")[0])
    [stage] = [s for s in plan.stages if s.scan is not None and s.scan.source.name == "sales"]
    return [lp.table_read(f.build).source.name for f in stage.runtime_filters if f.build is not None]


def test_only_a_filtered_table_on_a_laid_out_column_prunes(calendar) -> None:
    """A key range is computed only where it can prune: the build side is filtered, and the
    scanned join column is laid out in ranges (the sales' dates, not their shops)."""
    oracle = _oracle(calendar)
    unfiltered = "SELECT d.year, sum(s.amount) AS total FROM sales s JOIN dates d ON s.date_sk = d.date_sk GROUP BY d.year"
    scattered = ("SELECT sh.region, sum(s.amount) AS total FROM sales s JOIN shops sh ON s.shop = sh.shop "
                 "WHERE sh.region = 1 GROUP BY sh.region")
    with qengine.connect(workers=2, split_size="64KB") as con:
        for name, path in calendar.items():
            con.register_parquet(name, path)
        for sql in (unfiltered, scattered):
            assert_same(con, oracle, sql)
            assert _build_filters(con, sql) == []
        assert _build_filters(con, QUERY.format(year=1)) == ["dates"]
        stages = con.execute(unfiltered).stats.stages
        scan = next(s for s in stages if s.stage == 0)
        assert scan.rows_in - scan.tasks * DAYS == SALES


def test_an_empty_input_beside_a_scan_is_copied_before_the_fragment_runs(tmp_path) -> None:
    """DuckDB may push a Bloom filter into an Arrow input joined to a Parquet scan, which it
    cannot do for Arrow and fails only once the join's build side is done; an empty input,
    the usual one to get it, is copied into a DuckDB table from the start."""
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"k": np.arange(100), "v": np.arange(100)}), path)
    inputs = {
        "e": pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.int64())}),
        "x": pa.table({"k": np.arange(5), "w": np.arange(5)}),
    }
    sql = "SELECT sum(v), count(w) FROM (SELECT * FROM s UNION ALL SELECT * FROM e) AS u JOIN x USING (k)"
    lease = Lease(safe_connection(1, (path,)))
    try:
        result = _run_fragment(lease, sql, inputs, {"s": f"SELECT * FROM read_parquet('{path}')"}, [], None)
        assert result.to_pylist() == [{"sum(v)": 10, "count(w)": 5}]
        tables = {name for (name,) in lease.con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
        assert tables == {"e"}  # the non-empty input stays registered as it is
    finally:
        lease.con.close()
