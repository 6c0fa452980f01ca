"""The logical planner's greedy join order (``Builder._join_group``) on TPC-DS's shapes, checked
on the plan it builds and, for the answer, against DuckDB."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import ParquetSource
from qengine.planner.builder import Builder
from qengine.planner.decorrelate import decorrelate
from qengine.planner.frontend import optimize_query, parse
from qengine.planner.logical import Filter, Join, Scan, walk
from tests.conftest import assert_same

# q85's shape: returns meet their orders on order number and line (neither a key alone) and a
# demographics table on its key. The day filter keeps few orders, so joining them first leaves
# few returns for the demographics join; joining the demographics first would probe all of it
# with every return.
RETURNS_QUERY = """
SELECT d.status, count(*) AS n, sum(o.amount) AS amount
FROM orders o JOIN returns r ON o.order_no = r.order_no AND o.line = r.line
JOIN demo d ON r.demo_id = d.demo_id
WHERE o.day = 3
GROUP BY d.status
"""


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("join_order")
    rng = np.random.default_rng(7)
    n = 60_000
    orders = pa.table({
        "day": pa.array(rng.integers(0, 30, n)),
        "order_no": pa.array(np.arange(n) // 4),
        "line": pa.array(np.arange(n) % 4),
        "amount": pa.array(np.round(rng.random(n) * 100, 2)),
    })
    picked = rng.choice(n, 6_000, replace=False)
    returns = pa.table({  # first column not a key, as in TPC-DS (a table's first is taken for its key)
        "day": pa.array(rng.integers(0, 40, len(picked))),
        "order_no": pa.array(picked // 4),
        "line": pa.array(picked % 4),
        "demo_id": pa.array(rng.integers(0, 20_000, len(picked))),
    })
    demo = pa.table({"demo_id": pa.array(np.arange(20_000)), "status": pa.array(["M", "S", "W", "D"] * 5_000)})
    paths = {}
    for name, table in (("orders", orders), ("returns", returns), ("demo", demo)):
        (root / name).mkdir()
        path = str(root / name / "part-0.parquet")
        pq.write_table(table, path)
        paths[name] = path
    return paths


def _logical(sql: str, paths: dict[str, str]):
    catalog = Catalog()
    for name, path in paths.items():
        catalog.add_table(ParquetSource(name, [path]))
    return Builder(catalog).build(decorrelate(optimize_query(parse(sql, "duckdb")[0], catalog, "duckdb"))).node


def _joins_over(sql: str, paths: dict[str, str]) -> list[set[str]]:
    """For each join of the logical plan, the tables below it, bottom-most joins last."""
    return [{n.source.name for n in walk(j) if isinstance(n, Scan)} for j in walk(_logical(sql, paths)) if isinstance(j, Join)]


def _filtered_by_a_subquery(sql: str, paths: dict[str, str]) -> set[str]:
    """The tables read through a filter on a subquery's value right above their scan."""
    return {
        n.child.source.name for n in walk(_logical(sql, paths))
        if isinstance(n, Filter) and n.subqueries and isinstance(n.child, Scan)
    }


def test_returns_meet_their_orders_before_a_key_join(tables) -> None:
    joins = _joins_over(RETURNS_QUERY, tables)
    assert {"orders", "returns"} in joins, joins  # joined to each other before the demographics


def test_returns_joined_on_a_composite_key_answer_as_duckdb(tables) -> None:
    oracle = duckdb.connect()
    with qengine.connect(workers=2) as con:
        for name, path in tables.items():
            con.register_parquet(name, path)
            oracle.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{path}')")
        assert_same(con, oracle, RETURNS_QUERY)
    oracle.close()


# q6's and q58's shapes: a month (or a week's days) picked by an uncorrelated scalar or IN
# subquery. The subquery's column is unique (a DISTINCT, or the IN's grouping), so joining the
# dates to it keeps a month of them; taken for many-to-many, that join came after the sales had
# met every dimension unfiltered.
MONTH_QUERIES = {
    "scalar": """
SELECT i.category, count(*) AS n, sum(s.price) AS price
FROM sales s, days d, items i
WHERE s.day_id = d.day_id AND s.item_id = i.item_id
  AND d.month_seq = (SELECT DISTINCT month_seq FROM days WHERE year = 3 AND moy = 5)
GROUP BY i.category
""",
    "in": """
SELECT i.category, count(*) AS n, sum(s.price) AS price
FROM sales s, days d, items i
WHERE s.day_id = d.day_id AND s.item_id = i.item_id
  AND d.day_id IN (SELECT day_id FROM days WHERE week_seq = (SELECT week_seq FROM days WHERE day_id = 400))
GROUP BY i.category
""",
}


@pytest.fixture(scope="module")
def calendar(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("calendar")
    rng = np.random.default_rng(11)
    ndays, n = 1_440, 80_000
    day = np.arange(ndays)
    tables = {
        "days": pa.table({
            "day_id": pa.array(day),
            "week_seq": pa.array(day // 7),
            "month_seq": pa.array(day // 30),
            "year": pa.array(day // 360),
            "moy": pa.array(day % 360 // 30 + 1),
        }),
        "items": pa.table({"item_id": pa.array(np.arange(500)), "category": pa.array(["a", "b", "c", "d", "e"] * 100)}),
        "sales": pa.table({  # first column not a key, as in TPC-DS
            "day_id": pa.array(rng.integers(0, ndays, n)),
            "item_id": pa.array(rng.integers(0, 500, n)),
            "price": pa.array(np.round(rng.random(n) * 100, 2)),
        }),
    }
    paths = {}
    for name, table in tables.items():
        (root / name).mkdir()
        paths[name] = str(root / name / "part-0.parquet")
        pq.write_table(table, paths[name])
    return paths


@pytest.mark.parametrize("shape", sorted(MONTH_QUERIES))
def test_dates_meet_the_subquery_picking_them_before_the_sales(calendar, shape: str) -> None:
    joins = _joins_over(MONTH_QUERIES[shape], calendar)
    # The dates are cut to the month (or week) first: joined to the subquery's rows, or, for a
    # scalar subquery (which must fail on a second row, so it is read as a value), filtered by it.
    assert {"days"} in joins or "days" in _filtered_by_a_subquery(MONTH_QUERIES[shape], calendar), joins
    first_with_sales = joins[max(i for i, tables in enumerate(joins) if "sales" in tables)]
    assert "items" not in first_with_sales, joins  # and the sales meet those dates before the items


@pytest.mark.parametrize("shape", sorted(MONTH_QUERIES))
def test_dates_picked_by_a_subquery_answer_as_duckdb(calendar, shape: str) -> None:
    oracle = duckdb.connect()
    with qengine.connect(workers=2) as con:
        for name, path in calendar.items():
            con.register_parquet(name, path)
            oracle.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{path}')")
        assert_same(con, oracle, MONTH_QUERIES[shape])
    oracle.close()
