"""Predicate pushdown (qengine.planner.pushdown): answers equal DuckDB's in every exchange mode,
filters that may move do move, and the ones that must stay (above ROLLUP, LIMIT, a window over
other columns, the NULL-extended side of an outer join) stay."""

from __future__ import annotations

import pytest
import sqlglot

from qengine.planner.pushdown import _fold
from tests.conftest import assert_same, plan_lines

PER_STORE = "SELECT store_id, sum(qty) AS q, count(*) AS n FROM sales GROUP BY store_id"
PER_ITEM = "SELECT item_id, sum(amount) AS a FROM sales GROUP BY item_id"

QUERIES = [
    # below GROUP BY, through a derived table
    f"SELECT * FROM ({PER_STORE}) t WHERE store_id = 3",
    f"SELECT * FROM ({PER_STORE}) t WHERE store_id BETWEEN 2 AND 4 AND q > 1000",
    # copied across equi-joins on the key: inner, left (left to right), both ways of inner
    f"SELECT a.store_id, a.q, b.n FROM ({PER_STORE}) a JOIN ({PER_STORE}) b ON a.store_id = b.store_id WHERE a.store_id = 5",
    f"SELECT a.store_id, a.q, b.n FROM ({PER_STORE}) a LEFT JOIN ({PER_STORE}) b ON a.store_id = b.store_id + 1 WHERE a.store_id IN (2, 3)",
    f"SELECT a.item_id, a.a, b.a FROM ({PER_ITEM}) a LEFT JOIN ({PER_ITEM}) b ON a.item_id = b.item_id WHERE a.item_id < 40 AND b.a IS NULL",
    f"SELECT a.item_id, a.a, i.brand FROM ({PER_ITEM}) a JOIN items i ON a.item_id = i.item_id WHERE i.item_id >= 280",
    # a filter on the NULL-extended side of an outer join stays above it
    "SELECT c.cust_id, s.sale_id FROM customers c LEFT JOIN sales s ON c.cust_id = s.cust_id WHERE s.sale_id IS NULL",
    "SELECT c.cust_id, s.qty FROM sales s RIGHT JOIN customers c ON c.cust_id = s.cust_id WHERE c.cust_id < 20 AND s.qty IS NULL",
    "SELECT c.cust_id, s.qty FROM sales s FULL JOIN customers c ON c.cust_id = s.cust_id WHERE c.cust_id < 20 OR s.qty > 98",
    # a filter no NULL-padded row passes makes the outer join inner on that side; one they can pass does not
    "SELECT s.sale_id, c.name FROM sales s LEFT JOIN customers c ON s.cust_id = c.cust_id WHERE c.segment = 'corp'",
    "SELECT s.sale_id, c.name FROM sales s LEFT JOIN customers c ON s.cust_id = c.cust_id WHERE NOT c.name IS NULL AND s.qty > 90",
    "SELECT s.sale_id, c.name FROM sales s LEFT JOIN customers c ON s.cust_id = c.cust_id WHERE coalesce(c.segment, 'none') = 'none'",
    "SELECT c.cust_id, s.qty FROM sales s RIGHT JOIN customers c ON c.cust_id = s.cust_id AND s.qty > 90 WHERE s.qty + 1 > 95",
    "SELECT c.cust_id, s.qty FROM sales s FULL JOIN customers c ON c.cust_id = s.cust_id WHERE s.qty > 98",
    "SELECT c.cust_id, s.qty FROM sales s FULL JOIN customers c ON c.cust_id = s.cust_id WHERE s.qty > 98 AND c.city IN ('Oslo', 'Lima')",
    # semi and anti joins
    "SELECT count(*) FROM sales s WHERE s.item_id IN (SELECT item_id FROM items WHERE category = 'Books') AND s.item_id > 200",
    "SELECT count(*) FROM sales s WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.item_id = s.item_id AND i.category = 'Home') AND s.item_id < 100",
    # set operations
    "SELECT * FROM (SELECT cust_id AS k FROM sales UNION ALL SELECT cust_id FROM customers) u WHERE k < 10",
    "SELECT * FROM (SELECT cust_id AS k FROM sales UNION SELECT cust_id FROM customers) u WHERE k BETWEEN 5 AND 50",
    "SELECT * FROM (SELECT item_id AS k FROM sales EXCEPT SELECT item_id FROM items WHERE category = 'Music') u WHERE k > 250",
    "SELECT * FROM (SELECT item_id AS k FROM sales INTERSECT SELECT item_id FROM items) u WHERE k % 7 = 0",
    # must stay: above ROLLUP (subtotal rows have NULL keys), above LIMIT, on a non-partition column of a window
    "SELECT * FROM (SELECT store_id, sum(qty) AS q FROM sales GROUP BY ROLLUP (store_id)) t WHERE store_id IS NULL",
    "SELECT * FROM (SELECT sale_id, qty FROM sales ORDER BY sale_id LIMIT 300) t WHERE qty > 50",
    "SELECT * FROM (SELECT store_id, qty, sum(qty) OVER (PARTITION BY store_id) AS s FROM sales) t WHERE store_id = 2 AND qty > 90",
    "SELECT * FROM (SELECT sale_id, store_id, rank() OVER (ORDER BY amount DESC) AS r FROM sales) t WHERE store_id = 4 AND r < 200",
    # a CTE read twice keeps one plan: each reader filters its own copy of the rows, and the plan
    # only the rows some reader keeps
    f"WITH t AS ({PER_STORE}) SELECT a.store_id, a.q, b.q FROM t a JOIN t b ON a.store_id = b.store_id + 1 WHERE a.store_id = 4",
    f"WITH t AS ({PER_STORE}) SELECT a.store_id, a.q, b.q FROM t a, t b WHERE a.store_id = 4 AND b.store_id = 6 AND b.q > 10",
    f"WITH t AS ({PER_STORE}) SELECT a.store_id, a.q FROM t a, t b WHERE a.store_id = 4 AND b.q > a.q",
    # an OR is split: the part on grouping keys goes below, the whole stays above
    f"SELECT * FROM ({PER_STORE}) t WHERE (store_id = 2 AND q > 10000) OR store_id = 5",
    f"SELECT * FROM ({PER_STORE}) t WHERE (store_id = 2 AND q > 10000) OR q < 100",
    "SELECT * FROM (SELECT cust_id, 'a' AS kind FROM sales UNION ALL SELECT cust_id, 'b' FROM customers) u "
    "WHERE kind = 'b' AND cust_id < 30",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_same_answer_as_duckdb(engine, oracle, sql: str) -> None:
    assert_same(engine, oracle, sql)


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def test_filter_on_a_grouping_key_runs_before_the_aggregation(default_engine) -> None:
    lines = plan_lines(default_engine, f"SELECT * FROM ({PER_STORE}) t WHERE store_id = 3")
    filters = [i for i, line in enumerate(lines) if line.strip().startswith("Filter")]
    assert len(filters) == 1, "\n".join(lines)
    i = filters[0]
    # the only filter sits right under the partial aggregate and right above the scan
    assert "= 3" in lines[i] and lines[i - 1].strip().startswith("Aggregate"), "\n".join(lines)
    assert lines[i + 1].strip().startswith("Scan sales") and _depth(lines[i + 1]) > _depth(lines[i]) > _depth(lines[i - 1])


def test_key_filter_is_copied_to_the_other_side_of_a_join(default_engine) -> None:
    sql = f"SELECT a.store_id, a.q, b.n FROM ({PER_STORE}) a LEFT JOIN ({PER_STORE}) b ON a.store_id = b.store_id WHERE a.store_id = 5"
    lines = plan_lines(default_engine, sql)
    filtered_scans = [i for i, line in enumerate(lines) if line.strip().startswith("Filter") and "= 5" in line
                      and lines[i + 1].strip().startswith("Scan sales")]
    assert len(filtered_scans) == 2, "\n".join(lines)


def test_filter_on_the_outer_side_is_not_copied(default_engine) -> None:
    # coalesce(b.n, 0) > 3 is about the NULL-extended side and true for NULL: it must not move into b (or a)
    sql = f"SELECT a.store_id, b.n FROM ({PER_STORE}) a LEFT JOIN ({PER_STORE}) b ON a.store_id = b.store_id WHERE coalesce(b.n, 0) > 3"
    lines = plan_lines(default_engine, sql)
    assert not any(line.strip().startswith("Filter") and lines[i + 1].strip().startswith("Scan")
                   for i, line in enumerate(lines[:-1])), "\n".join(lines)


@pytest.mark.parametrize(("where", "join"), [
    ("c.segment = 'corp'", "Join INNER"),
    ("NOT c.name IS NULL", "Join INNER"),
    ("c.segment IS NULL", "Join LEFT"),
    ("coalesce(c.segment, 'none') = 'none'", "Join LEFT"),
    ("c.segment = 'corp' OR s.qty > 90", "Join LEFT"),
])
def test_a_filter_no_padded_row_passes_makes_an_outer_join_inner(default_engine, oracle, where: str, join: str) -> None:
    sql = f"SELECT s.sale_id, c.name FROM sales s LEFT JOIN customers c ON s.cust_id = c.cust_id WHERE {where}"
    lines = plan_lines(default_engine, sql)
    assert sum(join in line for line in lines) == 1, "\n".join(lines)
    if join == "Join INNER":  # and the filter then reads customers' rows as they are scanned
        assert any(line.strip().startswith("Filter") and lines[i + 1].strip().startswith("Scan customers")
                   for i, line in enumerate(lines[:-1])), "\n".join(lines)
    assert_same(default_engine, oracle, sql)


def test_a_cte_read_by_filtering_readers_computes_only_the_rows_they_keep(default_engine) -> None:
    sql = f"WITH t AS ({PER_STORE}) SELECT a.store_id, a.q, b.q FROM t a, t b WHERE a.store_id = 4 AND b.store_id = 6"
    lines = plan_lines(default_engine, sql)
    below = [i for i, line in enumerate(lines) if line.strip().startswith("Filter") and lines[i + 1].strip().startswith("Scan sales")]
    assert len(below) == 1 and "4" in lines[below[0]] and "6" in lines[below[0]] and " OR " in lines[below[0]], "\n".join(lines)


def test_a_union_branch_a_constant_filter_excludes_reads_nothing(default_engine) -> None:
    sql = "SELECT * FROM (SELECT cust_id, 'a' AS kind FROM sales UNION ALL SELECT cust_id, 'b' FROM customers) u WHERE kind = 'b'"
    lines = plan_lines(default_engine, sql)
    below = [lines[i] for i, line in enumerate(lines) if lines[i + 1:i + 2] and lines[i + 1].strip().startswith("Scan sales")]
    assert below and below[0].strip() == "Filter FALSE", "\n".join(lines)


def test_constant_comparisons_fold_so_estimates_see_them(default_engine) -> None:
    # 'b' = 'b' in the second branch is TRUE: nothing is left to filter there, so no filter
    # (whose guessed selectivity would shrink the branch's estimate) sits on its scan
    sql = "SELECT * FROM (SELECT cust_id, 'a' AS kind FROM sales UNION ALL SELECT cust_id, 'b' FROM customers) u WHERE kind = 'b'"
    lines = plan_lines(default_engine, sql)
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("Scan customers"))
    assert not lines[i - 1].strip().startswith("Filter"), "\n".join(lines)


@pytest.mark.parametrize(
    ("sql", "folded"),
    [
        ("'s' = 'w'", "FALSE"),
        ("'s' = 's' AND c1 > 2", "c1 > 2"),
        ("'s' <> 's' OR c1 = 1", "c1 = 1"),
        ("NOT ('s' = 'w')", "TRUE"),
        ("1 = 1.0", "TRUE"),
        ("'1' = 1", "'1' = 1"),  # a string and a number: DuckDB casts, so it is left to DuckDB
        ("c1 = 1 OR ('a' = 'a' AND c2 = 3)", "c1 = 1 OR (c2 = 3)"),
        ("CAST('2000-01-01' AS DATE) + INTERVAL '1' DAY = CAST('2000-01-02' AS DATE)", "CAST('2000-01-01' AS DATE) + INTERVAL '1' DAY = CAST('2000-01-02' AS DATE)"),
    ],
)
def test_only_comparisons_of_two_literals_fold(sql: str, folded: str) -> None:
    assert _fold(sqlglot.parse_one(sql, read="duckdb")).sql(dialect="duckdb") == folded


def test_of_two_equally_selective_joins_the_smaller_side_goes_first(default_engine, oracle) -> None:
    # Both are key joins of sales with an unfiltered dimension, so both keep every sale: the tie
    # goes to the smaller dimension (items), whatever the FROM order says.
    sql = ("SELECT count(*), max(c.name), max(i.brand) FROM sales s, customers c, items i "
           "WHERE s.cust_id = c.cust_id AND s.item_id = i.item_id")
    lines = plan_lines(default_engine, sql)
    scans = {name: _depth(line) for line in lines for name in ("customers", "items") if line.strip().startswith(f"Scan {name}")}
    assert scans["items"] > scans["customers"], "\n".join(lines)
    assert_same(default_engine, oracle, sql)
