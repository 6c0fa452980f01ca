"""One shuffle for two operators: an exchange an operator needs anyway hashes on the keys an
operator above it needs too, when they are among its own (``PhysicalPlanner.plan``'s ``want``),
and a join pairs its sides up on whichever of its keys one side is already hashed on.

Answers are checked against DuckDB; the plan checks count the shuffles and their keys.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import assert_same, engine_over, plan_lines

# TPC-DS q51's shape: daily totals, a running total per item, and the two channels joined by
# item and day. One shuffle per channel, on the item alone, serves all three.
RUNNING_TOTALS = """
WITH a AS (SELECT item_id, sold_date, sum(amount) AS s FROM sales WHERE store_id < 4 GROUP BY item_id, sold_date),
     b AS (SELECT item_id, sold_date, sum(qty) AS q FROM sales WHERE store_id >= 4 GROUP BY item_id, sold_date),
     wa AS (SELECT item_id, sold_date, sum(s) OVER (PARTITION BY item_id ORDER BY sold_date
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cs FROM a),
     wb AS (SELECT item_id, sold_date, sum(q) OVER (PARTITION BY item_id ORDER BY sold_date
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cq FROM b)
SELECT coalesce(wa.item_id, wb.item_id) AS item, coalesce(wa.sold_date, wb.sold_date) AS day, cs, cq
FROM wa FULL OUTER JOIN wb ON wa.item_id = wb.item_id AND wa.sold_date = wb.sold_date
"""


@pytest.fixture(scope="module")
def shuffling(data_paths):
    """Every join shuffles, and no partitions are merged, so a join whose sides are hashed
    differently gives wrong answers instead of hiding it in one task."""
    con = engine_over(data_paths, broadcast_threshold=0, coalesce_size=0)
    yield con
    con.close()


def _hash_exchanges(con, sql: str) -> list[list[str]]:
    """The keys of each hash exchange in ``sql``'s plan."""
    keys = []
    for line in plan_lines(con, sql):
        found = re.search(r"hash exchange on \(([^)]*)\)", line)
        if found:
            keys.append(found.group(1).split(", "))
    return keys


def test_a_window_over_an_aggregate_shares_its_shuffle(default_engine, oracle) -> None:
    sql = ("SELECT item_id, store_id, sum(qty) AS q, sum(sum(qty)) OVER (PARTITION BY store_id) AS store_total "
           "FROM sales GROUP BY item_id, store_id")
    keys = _hash_exchanges(default_engine, sql)
    assert len(keys) == 1 and len(keys[0]) == 1, keys  # partial aggregates hashed on the store alone
    stages = "\n".join(plan_lines(default_engine, sql)).split("\nStage ")
    final = next(s for s in stages if "Window" in s)
    assert "Aggregate" in final, final  # the final aggregate and the window run in one stage
    assert_same(default_engine, oracle, sql)


def test_a_join_over_windows_is_paired_up_on_the_windows_keys(shuffling, oracle) -> None:
    keys = _hash_exchanges(shuffling, RUNNING_TOTALS)
    assert len(keys) == 2 and all(len(k) == 1 for k in keys), keys
    assert_same(shuffling, oracle, RUNNING_TOTALS)


def test_a_join_on_more_keys_than_one_side_is_hashed_on(shuffling, oracle) -> None:
    # The aggregate's input is hashed on item_id by the join below it, so its output is too,
    # by item_id alone: the join above must hash its other side on item_id alone to match.
    sql = ("SELECT count(*), sum(t.n * u.m) FROM (SELECT s.item_id, s.cust_id, count(*) AS n FROM sales s "
           "JOIN items i ON s.item_id = i.item_id GROUP BY s.item_id, s.cust_id) t "
           "JOIN (SELECT item_id, cust_id, count(*) AS m FROM sales WHERE qty > 30 GROUP BY item_id, cust_id) u "
           "ON t.item_id = u.item_id AND t.cust_id = u.cust_id")
    assert_same(shuffling, oracle, sql)
    assert any(len(k) == 1 for k in _hash_exchanges(shuffling, sql))


def test_a_split_aggregate_keeps_all_its_keys_for_the_one_above(default_engine, oracle) -> None:
    # TPC-DS q65: per store and item, then averaged per store. The averages need only the
    # partial rows by store; hashing every sale by store alone would load a task per store.
    sql = ("SELECT store_id, avg(q) FROM (SELECT store_id, item_id, sum(qty) AS q FROM sales "
           "GROUP BY store_id, item_id) t GROUP BY store_id")
    assert sorted(len(k) for k in _hash_exchanges(default_engine, sql)) == [1, 2]
    assert_same(default_engine, oracle, sql)


def test_reads_of_one_shared_result_join_where_they_are(default_engine, oracle) -> None:
    # TPC-DS q47's shape: monthly totals ranked per item and store, joined to themselves a
    # month apart. Both reads are hashed on item and store by the window, so the join moves
    # nothing, though the totals are small enough to broadcast.
    sql = """
    WITH v AS (SELECT item_id, store_id, sold_date, sum(qty) AS q,
                      rank() OVER (PARTITION BY item_id, store_id ORDER BY sold_date) AS rn
               FROM sales GROUP BY item_id, store_id, sold_date)
    SELECT a.item_id, a.store_id, a.sold_date, a.q, b.q AS prev
    FROM v a JOIN v b ON a.item_id = b.item_id AND a.store_id = b.store_id AND a.rn = b.rn + 1
    """
    plan = "\n".join(plan_lines(default_engine, sql))
    assert "materialized" in plan and "broadcast" not in plan and "whole" not in plan, plan
    assert_same(default_engine, oracle, sql)


def test_an_inner_joins_rows_are_hashed_on_both_sides_keys(shuffling, oracle) -> None:
    # The first join hashes both sides on item_id, so its rows are hashed on i.item_id as well
    # as s.item_id: the join on i.item_id above needs only the per-item counts shuffled.
    sql = ("SELECT i.item_id, s.qty, t.c FROM sales s JOIN items i ON s.item_id = i.item_id "
           "JOIN (SELECT item_id, count(*) AS c FROM sales GROUP BY item_id) t ON i.item_id = t.item_id")
    assert len(_hash_exchanges(shuffling, sql)) == 3
    assert_same(shuffling, oracle, sql)


def test_a_union_of_aggregates_reads_their_partitions_as_they_are(shuffling, oracle) -> None:
    # TPC-DS q5 and q80's shape: per-channel totals, unioned, rolled up. Each total is hashed
    # by its final aggregate already; the union reads those partitions, dealing none out again.
    sql = ("SELECT k, sum(t) AS t FROM ("
           "SELECT item_id AS k, sum(qty) AS t FROM sales WHERE store_id < 4 GROUP BY item_id UNION ALL "
           "SELECT cust_id AS k, sum(qty) AS t FROM sales WHERE store_id >= 4 GROUP BY cust_id UNION ALL "
           "SELECT 7 AS k, 1 AS t) u GROUP BY ROLLUP (k)")
    plan = "\n".join(plan_lines(shuffling, sql))
    assert plan.count("roundrobin exchange") == 1, plan  # only the single-row VALUES is dealt out
    assert_same(shuffling, oracle, sql)


@pytest.mark.parametrize(
    "sql",
    [
        # a GROUP BY and an ORDER BY over a table of one split
        "SELECT city, count(*) AS n, max(name) AS last FROM customers GROUP BY city ORDER BY n DESC, city",
        # two such tables joined, then a window
        "SELECT c.city, i.brand, rank() OVER (PARTITION BY c.city ORDER BY i.item_id) AS r "
        "FROM customers c JOIN items i ON c.cust_id = i.item_id",
        # TPC-DS q9's shape: one such table beside aggregates gathered from a big one
        "SELECT c.name, (SELECT count(*) FROM sales WHERE qty > 50) AS big, (SELECT avg(amount) FROM sales) AS a "
        "FROM customers c WHERE c.cust_id = 7",
    ],
)
def test_tables_of_one_split_are_read_in_one_task_with_no_exchange(default_engine, oracle, sql: str) -> None:
    # customers and items are one row group each; sales scans as several splits
    lines = plan_lines(default_engine, sql)
    for scan in ("Scan customers", "Scan items"):
        at = [i for i, line in enumerate(lines) if line.strip().startswith(scan)]
        for i in at:
            header = next(lines[j] for j in range(i, -1, -1) if lines[j].startswith("Stage"))
            assert "1 task(s) → result" in header, "\n".join(lines)  # no exchange after it
    assert_same(default_engine, oracle, sql)


def test_with_broadcasts_off_tables_of_one_split_join_through_a_shuffle(shuffling, oracle) -> None:
    sql = "SELECT c.city, i.brand, count(*) AS n FROM customers c JOIN items i ON c.cust_id = i.item_id GROUP BY 1, 2"
    keys = _hash_exchanges(shuffling, sql)
    assert len(keys) >= 2, keys  # both sides hashed on the join key
    assert_same(shuffling, oracle, sql)


# q51's outer query: a running maximum per item over the full join of the two channels. The
# join's rows sit by the item of whichever side matched, which is what the window partitions by.
# By one side's item alone, NULL where that side had no match, the rows must be shuffled.
_ITEM = {
    "coalesce": ("coalesce(wa.item_id, wb.item_id)", 2),
    "case": ("CASE WHEN wa.item_id IS NOT NULL THEN wa.item_id ELSE wb.item_id END", 2),
    "one-side": ("wa.item_id", 3),
}


@pytest.mark.parametrize("spelling", sorted(_ITEM))
def test_a_window_over_a_full_join_partitions_by_its_coalesced_key_where_it_is(shuffling, oracle, spelling: str) -> None:
    item, shuffles = _ITEM[spelling]
    sql = RUNNING_TOTALS.replace(
        "SELECT coalesce(wa.item_id, wb.item_id) AS item,",
        f"SELECT {item} AS item, max(cs) OVER (PARTITION BY {item} ORDER BY coalesce(wa.sold_date, wb.sold_date) "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS best,",
    )
    assert "best" in sql
    keys = _hash_exchanges(shuffling, sql)
    assert len(keys) == shuffles and all(len(k) == 1 for k in keys), keys
    assert_same(shuffling, oracle, sql)
