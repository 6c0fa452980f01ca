"""EXPLAIN in the user's words: columns as the user wrote them (``s.cust_id``, an alias, the
aggregate ``sum(s.amount)``), never the planner's internal ``c17``; and EXPLAIN ANALYZE's
planned and actual task counts with the reason they differ."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qengine.runtime.stats import QueryStats
from tests.conftest import assert_same, plan_lines

# the planner's column names, sqlglot's made-up aliases and qengine's placeholder tables
INTERNAL = re.compile(r"\bc\d+\b|\b_(col|u|q)_\d|__")

JOIN_AGG_SORT = (
    "SELECT c.city, sum(s.amount) AS total FROM sales s JOIN customers c ON s.cust_id = c.cust_id "
    "WHERE s.qty > 5 GROUP BY c.city ORDER BY total DESC"
)
# A join to a filtered table every task reads whole, on a column sales is laid out by (sale_id):
# the customers' key range leaves one of sales' row groups to scan.
KEY_RANGE_JOIN = (
    "SELECT s.store_id, count(*) AS n FROM sales s JOIN customers c ON s.sale_id = c.cust_id "
    "WHERE c.city = 'Oslo' GROUP BY s.store_id"
)

# (query, what its plan must say in the user's words)
QUERIES = [
    pytest.param(
        JOIN_AGG_SORT,
        ["hash exchange on (c.city)", "Join INNER s.cust_id = c.cust_id", "Filter s.qty > 5", "sum(s.amount) AS total",
         "Sort total DESC", "range exchange on (total DESC)", "Scan sales [s.qty, s.cust_id, s.amount]"],
        id="aliases-join-group-sort",
    ),
    pytest.param(
        "SELECT store_id, sale_id, rank() OVER (PARTITION BY store_id ORDER BY amount DESC) AS r FROM sales ORDER BY r, sale_id LIMIT 10",
        ["hash exchange on (sales.store_id)", "Window rank() OVER (PARTITION BY sales.store_id ORDER BY sales.amount DESC)",
         "AS r", "Sort r ASC, sale_id ASC"],
        id="window",
    ),
    pytest.param(
        "SELECT i.category, avg(s.price) AS avg_price, count(DISTINCT s.cust_id) FROM sales s JOIN items i USING (item_id) "
        "GROUP BY i.category HAVING count(*) > 10",
        ["Join INNER s.item_id = i.item_id", "avg(s.price) AS avg_price", "count(DISTINCT s.cust_id)", "Filter count(*) > 10",
         "keys [i.category]"],
        id="avg-distinct-having",
    ),
    pytest.param(
        "SELECT store_id, count(*) AS n, sum(qty) AS q FROM sales GROUP BY store_id",
        # the partial aggregate and the final one that combines them, each as the user's aggregate
        ["Aggregate (partial) keys [sales.store_id] aggs [count(*), sum(sales.qty)]",
         "Aggregate (final) keys [sales.store_id] aggs [count(*), sum(sales.qty)]", "count(*) AS n, sum(sales.qty) AS q"],
        id="two-phase-aggregate",
    ),
    pytest.param(
        "WITH t AS (SELECT store_id, count(*) AS n, sum(qty) AS q FROM sales GROUP BY store_id) "
        "SELECT a.store_id, a.n, b.q FROM t a JOIN t b ON a.store_id = b.store_id + 1",
        ["Join INNER a.store_id = b.store_id + 1", "Project a.store_id, a.n, b.q"],
        id="shared-cte",
    ),
    pytest.param(
        "SELECT x.cust_id, y.item_id FROM sales x LEFT JOIN sales y ON x.sale_id = y.sale_id + 1 AND y.qty > x.qty WHERE x.store_id = 2",
        ["Join LEFT x.sale_id = y.sale_id + 1 residual y.qty > x.qty", "Filter x.store_id = 2", "Scan sales [y.sale_id"],
        id="self-join",
    ),
    pytest.param(
        "SELECT category, brand, sum(list_price) AS lp, grouping(brand) AS g FROM items GROUP BY ROLLUP (category, brand)",
        ["grouping_id", "sum(items.list_price) AS lp", "keys [items.category, items.brand"],
        id="rollup",
    ),
    pytest.param(
        "SELECT cust_id AS id FROM customers UNION SELECT item_id FROM items ORDER BY id",
        ["customers.cust_id AS id", "Sort id ASC"],
        id="union",
    ),
    pytest.param(
        "SELECT count(*) FROM sales WHERE store_id = (SELECT DISTINCT store_id FROM sales WHERE sale_id = 7)",
        ["Filter sales.store_id = (SELECT store_id FROM stage ", "subquery ← ExchangeRead stage "],
        id="scalar-subquery",
    ),
    pytest.param(
        "SELECT count(*) FROM sales s1 WHERE s1.qty > 50 AND EXISTS "
        "(SELECT * FROM sales s2 WHERE s1.cust_id = s2.cust_id AND s1.store_id <> s2.store_id)",
        ["Join INNER s1.cust_id = s2.cust_id residual s1.store_id <> min(s2.store_id) OR s1.store_id <> max(s2.store_id)"],
        id="decorrelated-exists",
    ),
    pytest.param(
        "SELECT sale_id FROM sales WHERE amount > (SELECT avg(amount) FROM sales) AND store_id = 3",
        ["Join INNER residual sales.amount > avg(amount)", "Filter sales.store_id = 3"],
        id="uncorrelated-subquery-join",
    ),
    pytest.param(
        'SELECT cust_id AS "Customer Id", count(*) AS "N" FROM sales GROUP BY 1 ORDER BY "N" DESC',
        ["sales.cust_id AS Customer Id, count(*) AS N", "Sort N DESC"],  # aliases as spelled, as the result's columns are
        id="quoted-aliases",
    ),
    pytest.param("SELECT * FROM (VALUES (1, 'a'), (2, 'b'))", ["Project col0, col1"], id="values"),
    pytest.param(
        "SELECT t.k, t.total FROM (SELECT store_id AS k, sum(qty) AS total FROM sales GROUP BY store_id) t "
        "WHERE t.total > 100 ORDER BY t.k",
        ["sales.store_id AS k", "Filter sum(sales.qty) > 100", "Sort k ASC"],
        id="derived-table",
    ),
]


@pytest.mark.parametrize(("sql", "wanted"), QUERIES)
def test_explain_names_columns_as_the_user_wrote_them(default_engine, sql: str, wanted: list[str]) -> None:
    lines = plan_lines(default_engine, sql)
    text = "\n".join(lines)
    assert not [line for line in lines if INTERNAL.search(line)], text
    for words in wanted:
        assert words in text, f"{words!r} not in\n{text}"


def test_explain_analyze_names_columns_and_still_answers(default_engine, oracle) -> None:
    lines = [r[0] for r in default_engine.execute("EXPLAIN ANALYZE " + JOIN_AGG_SORT).fetchall()]
    assert not [line for line in lines if INTERNAL.search(line)], "\n".join(lines)
    assert any("hash exchange on (c.city)" in line for line in lines), "\n".join(lines)
    assert_same(default_engine, oracle, JOIN_AGG_SORT)


def _task_lines(con, sql: str) -> dict[int, tuple[int, int, int, str]]:
    """Stage → (planned in its header, planned and run in its [tasks] line, the reason) of
    ``EXPLAIN ANALYZE sql``; checks the run count against the [actual] line."""
    lines = [r[0] for r in con.execute("EXPLAIN ANALYZE " + sql).fetchall()]
    out = {}
    stage = header = None
    for line in lines:
        if m := re.match(r"Stage (\d+): (\d+) task\(s\)", line):
            stage, header = int(m.group(1)), int(m.group(2))
        elif m := re.match(r"  \[actual\] tasks=(\d+)", line):
            actual = int(m.group(1))
        elif m := re.match(r"  \[tasks\] (\d+) planned, (\d+) run(?: \((.*)\))?$", line):
            planned, run = int(m.group(1)), int(m.group(2))
            assert run == actual, "\n".join(lines)
            out[stage] = (header, planned, run, m.group(3) or "")
    assert out, "\n".join(lines)
    return out


def test_reducers_coalesced_say_so(default_engine) -> None:
    # a few hundred bytes of partial aggregates in 4 hash partitions: read by one task
    counts = _task_lines(default_engine, JOIN_AGG_SORT)
    coalesced = [c for c in counts.values() if "reduce partitions coalesced" in c[3]]
    assert coalesced, counts
    for header, planned, run, why in coalesced:
        assert header == planned and run < planned, counts
        assert f"{planned} reduce partitions coalesced into {run}, each task reading up to " in why, why
    # a stage that ran as planned gives no coalescing as its reason
    assert all("coalesced" not in why for _, planned, run, why in counts.values() if planned == run), counts


def test_a_scan_split_by_row_groups_says_so(default_engine) -> None:
    splits = len(default_engine.session.catalog.table("sales").splits(2, default_engine.session.coordinator.options.split_bytes))
    assert splits > 1
    counts = _task_lines(default_engine, "SELECT count(*) FROM sales")
    scan = [c for c in counts.values() if "split into" in c[3]]
    assert scan == [(splits, splits, splits, f"split into {splits} by row groups")], counts


def test_a_scan_pruned_by_key_ranges_says_so(default_engine, oracle, data_paths) -> None:
    lo, hi = oracle.execute("SELECT min(cust_id), max(cust_id) FROM customers WHERE city = 'Oslo'").fetchone()
    files = sorted(Path(data_paths["sales"]).glob("*.parquet"))
    spans = []
    for path in files:
        md = pq.ParquetFile(path).metadata
        index = md.schema.to_arrow_schema().get_field_index("sale_id")
        spans += [(md.row_group(i).column(index).statistics.min, md.row_group(i).column(index).statistics.max) for i in range(md.num_row_groups)]
    kept = sum(1 for a, b in spans if a <= hi and b >= lo)
    assert kept < len(spans)
    counts = _task_lines(default_engine, KEY_RANGE_JOIN)
    pruned = [c for c in counts.values() if "pruned by key ranges" in c[3]]
    assert len(pruned) == 1, counts
    header, planned, run, why = pruned[0]
    assert header == planned and run <= kept < planned, counts
    assert f"{len(spans) - kept} of {len(spans)} row groups pruned by key ranges, the rest re-split into {run}" in why, why
    assert_same(default_engine, oracle, KEY_RANGE_JOIN)


def test_the_reasons_survive_the_stats_json(default_engine) -> None:
    cur = default_engine.cursor()
    cur.execute(KEY_RANGE_JOIN).fetchall()
    stats = cur.stats
    assert any(s.row_groups_pruned for s in stats.stages) and any(s.partitions_read > s.tasks for s in stats.stages)
    again = QueryStats.from_json(stats.to_json())
    assert again.stages == stats.stages


def test_explain_names_a_file_read_in_from_as_written(default_engine, data_paths) -> None:
    path = str(Path(data_paths["items"]) / "*.parquet")
    lines = plan_lines(default_engine, f"SELECT it.brand FROM read_parquet('{path}') AS it WHERE it.item_id > 3")
    text = "\n".join(lines)
    assert not [line for line in lines if INTERNAL.search(line)] and "__parquet" not in text, text
    assert f"Scan read_parquet('{path}') [" in text and "Filter it.item_id > 3" in text, text


def test_a_query_over_constants_runs_its_one_planned_task(default_engine) -> None:
    assert _task_lines(default_engine, "SELECT 1 + 1 AS two") == {0: (1, 1, 1, "")}


def test_files_skipped_by_a_partition_filter_say_so(default_engine, tmp_path) -> None:
    years = (2021, 2022, 2023)
    for year in years:
        os.makedirs(tmp_path / f"year={year}")
        pq.write_table(pa.table({"v": list(range(year, year + 50))}), tmp_path / f"year={year}" / "f.parquet", row_group_size=10)
    default_engine.register_parquet("explain_years", str(tmp_path))
    counts = _task_lines(default_engine, "SELECT count(*) FROM explain_years WHERE year = 2022")
    scans = [c for c in counts.values() if "split into" in c[3]]
    assert len(scans) == 1, counts
    header, planned, run, why = scans[0]
    assert header == planned == run and f"{len(years) - 1} of {len(years)} files skipped by partition filter" in why, why
