"""The physical planner's choice between broadcasting a join side and shuffling both sides."""

from __future__ import annotations

import pytest

from qengine.planner import logical as lp
from qengine.planner.physical import PhysicalPlanner
from tests.conftest import _engine, assert_same, plan_lines

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
    con = _engine(data_paths, broadcast_threshold="100KB")
    try:
        lines = plan_lines(con, sql)
        stage_of_sales = next(i for i in range(len(lines)) if lines[i].strip().startswith("Scan sales"))
        header = next(lines[i] for i in range(stage_of_sales, -1, -1) if lines[i].startswith("Stage"))
        assert "broadcast" not in header, "\n".join(lines)
        assert any(line.strip().startswith("Scan items") and "whole" in line for line in lines), "\n".join(lines)
        assert_same(con, oracle, sql)
    finally:
        con.close()
