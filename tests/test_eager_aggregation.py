"""Eager aggregation: a GROUP BY over a join with a whole dimension table, grouped by several of
the dimension's columns, aggregates the other side by its join key first
(``PhysicalPlanner._aggregate_before_join``). Answers are checked against DuckDB in every
exchange mode; the plan checks say where the rewrite applies and where it must not."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qengine.planner import logical as lp
from qengine.planner.frontend import parse
from tests.conftest import assert_same

# Three customer columns against one join key and one sales column: the rewrite pays.
WIDE = (
    "SELECT c.name, c.city, c.segment, s.store_id, count(*) AS n, count(s.note) AS notes, sum(s.amount) AS total, "
    "avg(s.qty) AS q, min(s.price) AS lo, max(s.sold_date) AS last "
    "FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.name, c.city, c.segment, s.store_id"
)


def _aggregates_sales_before_joining(con, sql: str) -> bool:
    """Whether some aggregate of the plan reads the sales table directly (not a join of it)."""
    plan = con.session.plan(parse(sql, "duckdb")[0])
    for stage in plan.stages:
        for node in lp.walk(stage.root):
            if isinstance(node, lp.Aggregate):
                table = lp.table_read(node.child)
                if table is not None and table.source.name == "sales":
                    return True
    return False


def test_aggregates_the_fact_side_by_its_key_before_the_join(engine, oracle) -> None:
    assert _aggregates_sales_before_joining(engine, WIDE)
    assert_same(engine, oracle, WIDE)


@pytest.mark.parametrize(
    "sql",
    [
        # The dimension is filtered: the join drops sales rows, so aggregate after it.
        "SELECT c.name, c.city, c.segment, sum(s.amount) AS total FROM sales s JOIN customers c "
        "ON s.cust_id = c.cust_id WHERE c.city = 'Lima' GROUP BY c.name, c.city, c.segment",
        # One dimension column against the key and a sales column: no narrower, so no rewrite.
        "SELECT c.city, s.store_id, sum(s.amount) AS total FROM sales s JOIN customers c "
        "ON s.cust_id = c.cust_id GROUP BY c.city, s.store_id",
        # An aggregate of a dimension column cannot be taken before the join.
        "SELECT c.name, c.city, c.segment, sum(s.amount * c.cust_id) AS total FROM sales s JOIN customers c "
        "ON s.cust_id = c.cust_id GROUP BY c.name, c.city, c.segment",
        # DISTINCT does not split into partial and final aggregates.
        "SELECT c.name, c.city, c.segment, count(DISTINCT s.item_id) AS items FROM sales s JOIN customers c "
        "ON s.cust_id = c.cust_id GROUP BY c.name, c.city, c.segment",
    ],
)
def test_left_alone_where_it_does_not_apply(default_engine, oracle, sql: str) -> None:
    assert not _aggregates_sales_before_joining(default_engine, sql)
    assert_same(default_engine, oracle, sql)


def test_a_dimension_whose_key_repeats_still_gives_the_join_s_answer(default_engine, oracle, tmp_path) -> None:
    # The planner takes a table's first column for its key; here it is not unique, so each
    # sale meets two or three rows. A partial row must stand for its sales once per match.
    path = os.path.join(str(tmp_path), "regions")
    os.makedirs(path)
    ids = [i % 240 for i in range(600)]
    pq.write_table(
        pa.table({"cust_id": pa.array(ids, pa.int64()), "region": [f"r{i % 7}" for i in range(600)],
                  "zone": [f"z{i % 3}" for i in range(600)], "band": [i % 4 for i in range(600)]}),
        os.path.join(path, "part-0.parquet"),
    )
    default_engine.register_parquet("regions", path)
    oracle.execute(f"CREATE OR REPLACE VIEW regions AS SELECT * FROM read_parquet('{path}/*.parquet')")
    sql = ("SELECT r.region, r.zone, r.band, count(*) AS n, sum(s.qty) AS q, max(s.amount) AS top "
           "FROM sales s JOIN regions r ON s.cust_id = r.cust_id GROUP BY r.region, r.zone, r.band")
    assert _aggregates_sales_before_joining(default_engine, sql)
    assert_same(default_engine, oracle, sql)
