"""The physical planner's choice between broadcasting a join side and shuffling both sides."""

from __future__ import annotations

import pytest

from qengine.planner import logical as lp
from qengine.planner.physical import PhysicalPlanner
from tests.conftest import assert_same, engine_over, plan_lines

MB = 1 << 20


@pytest.mark.parametrize(
    ("small", "big", "broadcast"),
    [
        (9 * MB, 10 * MB, True),  # under the threshold: always
        (20 * MB, 100 * MB, True),  # 4 consumers' copies (80 MB) cost less than shuffling 100 MB
        (30 * MB, 100 * MB, False),  # 120 MB of copies: shuffle instead
        (90 * MB, 10_000 * MB, False),  # never past 8× the threshold, however big the other side
    ],
)
def test_broadcast_when_copies_cost_less_than_a_shuffle(small: int, big: int, broadcast: bool) -> None:
    planner = PhysicalPlanner(partitions=4, broadcast_threshold=10 * MB, widths={}, names=lp.Names())
    assert planner._broadcastable(small, big) is broadcast


def test_a_small_table_is_broadcast_rather_than_a_guessed_small_filter_of_a_big_one(data_paths, oracle) -> None:
    # Three equality filters make the sales side look tiny (0.05³ of 40,000 rows), smaller than
    # items; but that is a guess about a table over the threshold, while items' size is known.
    # Broadcasting the sales side would run the whole join in items' single task.
    sql = ("SELECT i.category, sum(s.qty) AS q FROM sales s JOIN items i ON s.item_id = i.item_id "
           "WHERE s.qty > 5 AND s.store_id = 3 AND s.note = 'gift' GROUP BY i.category")
    con = engine_over(data_paths, broadcast_threshold="100KB")
    try:
        lines = plan_lines(con, sql)
        stage_of_sales = next(i for i in range(len(lines)) if lines[i].strip().startswith("Scan sales"))
        header = next(lines[i] for i in range(stage_of_sales, -1, -1) if lines[i].startswith("Stage"))
        assert "broadcast" not in header, "\n".join(lines)
        assert any(line.strip().startswith("Scan items") and "whole" in line for line in lines), "\n".join(lines)
        assert_same(con, oracle, sql)
    finally:
        con.close()


def test_a_broadcast_shared_output_is_read_whole_by_its_consumers(data_paths, oracle) -> None:
    # The CTE is computed once; its two joins each broadcast it. Copying it through a stage of
    # its own per reader would move the same rows again: every consumer task reads all of it.
    sql = ("WITH top AS (SELECT item_id FROM sales GROUP BY item_id HAVING count(*) > 170) "
           "SELECT (SELECT count(*) FROM sales s JOIN top t ON s.item_id = t.item_id) AS a, "
           "(SELECT sum(qty) FROM sales s JOIN top t ON s.cust_id = t.item_id) AS b")
    con = engine_over(data_paths, broadcast_threshold="100KB")
    try:
        stages = "\n".join(plan_lines(con, sql)).split("\nStage ")
        assert sum("(materialized, whole, in every task)" in s for s in stages) == 2, "\n".join(stages)
        relays = [s for s in stages if "broadcast exchange" in s.splitlines()[0] and "Aggregate" not in s]
        assert not relays, "\n".join(relays)
        assert_same(con, oracle, sql)
    finally:
        con.close()
