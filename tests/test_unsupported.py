"""Constructs the planner does not model are refused by name, never run as something else.

Each statement is one DuckDB answers (checked first, so the refusal is not a parse error in
disguise); qengine must raise NotSupportedError naming the construct, not return rows.
"""

from __future__ import annotations

import pytest

import qengine

REFUSED = [
    ("ASOF JOIN", "SELECT count(*) FROM sales s ASOF JOIN customers c ON s.cust_id = c.cust_id AND s.sold_date >= c.joined"),
    ("POSITIONAL JOIN", "SELECT count(*) FROM sales POSITIONAL JOIN items"),
    ("TABLESAMPLE", "SELECT count(*) FROM sales TABLESAMPLE 10%"),
    ("TABLESAMPLE", "SELECT count(*) FROM sales USING SAMPLE 10 ROWS"),
    ("PIVOT", "SELECT * FROM (SELECT category, list_price FROM items) PIVOT (sum(list_price) FOR category IN ('Books', 'Music'))"),
    ("PIVOT", "PIVOT items ON category USING sum(list_price)"),
    ("UNPIVOT", "SELECT * FROM (SELECT item_id, list_price, list_price AS p2 FROM items) UNPIVOT (v FOR k IN (list_price, p2))"),
    ("LATERAL", "SELECT count(*) FROM items i, LATERAL (SELECT i.item_id + 1 AS x) t"),
    ("LATERAL", "SELECT count(*) FROM items i CROSS JOIN LATERAL (SELECT i.item_id AS x) t"),
    ("LIMIT … PERCENT", "SELECT item_id FROM items ORDER BY item_id LIMIT 10 PERCENT"),
    # DuckDB expands it to one aggregate for each column of the FROM clause
    ("ORDER BY ALL outside a query's own ORDER BY", "SELECT list(item_id ORDER BY ALL) FROM items"),
    ("COLUMNS(...)", "SELECT COLUMNS('item_id|brand') FROM items"),
    # DuckDB groups by item_id too (the HAVING reads it): a row per item, not per parity
    ("GROUP BY ALL with HAVING", "SELECT item_id % 2 AS odd, count(*) FROM items GROUP BY ALL HAVING item_id % 2 <> 5"),
    ("UNION BY NAME", "SELECT item_id, brand FROM items UNION ALL BY NAME SELECT item_id FROM items"),
    ("UNION BY NAME", "SELECT item_id FROM items UNION BY NAME SELECT brand AS item_id FROM items"),
    # they answered with the planner's column names and its rewritten fragment
    ("alias()", "SELECT alias(item_id) AS a FROM items"),
    ("current_query()", "SELECT current_query() AS q FROM items"),
    # DuckDB reads it as the whole row: the planner's own relation of that name was read
    ("a table's name as a value", "SELECT to_json(items) FROM items"),
    ("a table's name as a value", "SELECT first(i) FROM items i"),
    # each task draws from its own worker's generator: random() did not repeat after it
    ("setseed()", "SELECT setseed(0.5)"),
    # DuckDB computes such a CTE at each reference; qengine computed it once (200 rows matched, not 0)
    ("NOT MATERIALIZED", "WITH r AS NOT MATERIALIZED (SELECT item_id, random() AS x FROM items) "
                         "SELECT count(*) FROM r a JOIN r b ON a.item_id = b.item_id WHERE a.x = b.x"),
    # sqlglot reads the zone as a bare upper-cased word: "Referenced column AMERICA not found"
    ("time_bucket() with a time zone", "SELECT time_bucket(INTERVAL 1 DAY, TIMESTAMPTZ '2020-01-01 10:00:00+00', 'America/New_York')"),
]


@pytest.mark.parametrize(("construct", "sql"), REFUSED, ids=[f"{c}-{i}" for i, (c, _) in enumerate(REFUSED)])
def test_unmodelled_construct_is_refused_by_name(default_engine, oracle, construct, sql) -> None:
    oracle.execute(sql).fetchall()  # DuckDB answers it: it is valid SQL
    with pytest.raises(qengine.NotSupportedError) as e:
        default_engine.execute(sql)
    assert construct in str(e.value)


def test_refusal_also_covers_explain(default_engine) -> None:
    with pytest.raises(qengine.NotSupportedError, match="ASOF JOIN"):
        default_engine.execute("EXPLAIN SELECT * FROM sales s ASOF JOIN items i ON s.item_id >= i.item_id")


def test_ordinary_semi_and_anti_joins_still_run(default_engine, oracle) -> None:
    for sql in ("SELECT count(*) FROM sales SEMI JOIN items USING (item_id)", "SELECT count(*) FROM sales ANTI JOIN items USING (item_id)"):
        assert default_engine.execute(sql).fetchall() == oracle.execute(sql).fetchall()


def test_not_materialized_over_a_deterministic_cte_runs(default_engine, oracle) -> None:
    sql = "WITH r AS NOT MATERIALIZED (SELECT item_id FROM items) SELECT count(*) FROM r a JOIN r b ON a.item_id = b.item_id"
    assert default_engine.execute(sql).fetchall() == oracle.execute(sql).fetchall()


def test_natural_join_is_modelled_and_runs(default_engine, oracle) -> None:
    """NATURAL is a join method the optimizer expands into an equi-join: it must not be refused."""
    sql = "SELECT count(*), sum(s.qty) FROM sales s NATURAL JOIN customers c"
    assert default_engine.execute(sql).fetchall() == oracle.execute(sql).fetchall()



@pytest.mark.parametrize("kind", ["INTERSECT", "EXCEPT"])
def test_intersect_and_except_by_name_are_refused_by_name(default_engine, kind) -> None:
    """sqlglot parses these though DuckDB does not: refused like UNION BY NAME, not run positionally."""
    with pytest.raises(qengine.NotSupportedError, match=f"{kind} BY NAME"):
        default_engine.execute(f"SELECT item_id, brand FROM items {kind} BY NAME SELECT brand, item_id FROM items")
