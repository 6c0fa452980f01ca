"""Single-row aggregate subqueries over the same tables read them once
(``planner.merge_aggregates``): counted on the plan, answers checked against DuckDB."""

from __future__ import annotations

import pytest

from qengine.planner import logical as lp
from qengine.planner.frontend import parse
from tests.conftest import assert_same


def _sales_scans(con, sql: str) -> int:
    plan = con.session.plan(parse(sql, "duckdb")[0])
    return sum(1 for s in plan.stages for n in lp.walk(s.root) if isinstance(n, lp.Scan) and n.source.name == "sales")


# q9's shape: three subqueries for each of two quantity ranges; one scan per range.
BUCKETS = """
SELECT CASE WHEN (SELECT count(*) FROM sales WHERE qty BETWEEN 1 AND 40) > 1000
            THEN (SELECT avg(amount) FROM sales WHERE qty BETWEEN 1 AND 40)
            ELSE (SELECT max(price) FROM sales WHERE qty BETWEEN 1 AND 40) END AS low,
       CASE WHEN (SELECT count(DISTINCT cust_id) FROM sales WHERE qty BETWEEN 41 AND 99) > 50
            THEN (SELECT sum(amount) FROM sales WHERE qty BETWEEN 41 AND 99)
            ELSE (SELECT min(price) FROM sales WHERE qty BETWEEN 41 AND 99) END AS high
FROM items WHERE item_id = 1
"""

# q88's shape: the same join, counted in different slices; one scan, the slices as CASEs. The
# last subquery has no filter of its own, and one slice is empty.
SLICES = """
SELECT * FROM
  (SELECT count(*) AS oslo FROM sales s, customers c WHERE s.cust_id = c.cust_id AND s.qty > 10 AND c.city = 'Oslo') a,
  (SELECT count(*) AS lima, avg(s.amount) AS lima_avg FROM sales s, customers c
     WHERE s.cust_id = c.cust_id AND s.qty > 10 AND c.city = 'Lima') b,
  (SELECT count(DISTINCT s.item_id) AS items, min(s.sold_date) AS first FROM sales s, customers c
     WHERE s.cust_id = c.cust_id AND s.qty > 10 AND c.segment = 'gov' AND s.note IS NULL) d,
  (SELECT sum(s.amount) AS none FROM sales s, customers c WHERE s.cust_id = c.cust_id AND s.qty > 10 AND c.city = 'Nowhere') e,
  (SELECT count(s.note) AS notes, stddev_samp(s.amount) AS spread FROM sales s, customers c
     WHERE s.cust_id = c.cust_id AND s.qty > 10) f
"""


@pytest.mark.parametrize(("sql", "scans"), [(BUCKETS, 2), (SLICES, 1)], ids=["q9-ranges", "q88-slices"])
def test_subqueries_over_the_same_tables_read_them_once(default_engine, oracle, sql: str, scans: int) -> None:
    assert _sales_scans(default_engine, sql) == scans
    assert_same(default_engine, oracle, sql)


@pytest.mark.parametrize(
    ("sql", "scans"),
    [
        # grouped: more than one row each
        ("SELECT * FROM (SELECT store_id, count(*) AS n FROM sales WHERE qty > 5 GROUP BY store_id) a, "
         "(SELECT store_id AS s2, count(*) AS m FROM sales WHERE qty > 5 GROUP BY store_id) b WHERE a.store_id = b.s2", 2),
        # list() keeps NULLs, so it cannot see the other subquery's rows as NULLs
        ("SELECT * FROM (SELECT list(item_id ORDER BY sale_id) AS l FROM sales WHERE qty > 97) a, "
         "(SELECT count(*) AS n FROM sales WHERE qty > 97) b", 2),
        # the same CTE read twice
        ("WITH t AS (SELECT count(*) AS n FROM sales WHERE qty > 50) "
         "SELECT * FROM t a, t b, (SELECT count(*) AS m FROM sales WHERE qty > 50) c", 2),
    ],
    ids=["grouped", "list-keeps-nulls", "cte-read-twice"],
)
def test_left_apart_where_merging_would_change_them(default_engine, oracle, sql: str, scans: int) -> None:
    assert _sales_scans(default_engine, sql) == scans
    assert_same(default_engine, oracle, sql)
