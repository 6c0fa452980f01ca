"""Fragment SQL rendered ahead of time: ``render.join_sides`` names everything in it that the
estimates decide, so SQL rendered with other estimates is reused only where it is the same."""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.planner import logical as lp
from qengine.planner.logical import col
from qengine.planner.render import join_sides, render


def _joins() -> tuple[lp.Join, lp.Join]:
    """(x0 JOIN x1) LEFT JOIN x2, on one key each."""
    reads = [lp.ExchangeRead(shuffle_id=i, kind="hash", names=[f"k{i}", f"v{i}"], table=f"x{i}") for i in range(3)]
    inner = lp.Join(reads[0], reads[1], "inner", [col("k0")], [col("k1")])
    outer = lp.Join(inner, reads[2], "left", [col("k0")], [col("k2")], residual=exp.GT(this=col("v0"), expression=col("v2")))
    return inner, outer


def _estimate(join: lp.Join, left: float, right: float) -> None:
    join.left.est_rows, join.right.est_rows = left, right


def test_the_sql_changes_exactly_when_the_join_sides_do() -> None:
    inner, outer = _joins()
    _estimate(inner, 1000.0, 10.0)
    _estimate(outer, 10.0, 5.0)
    sides, sql = join_sides(outer), render(outer)
    assert sides == (False, False)
    _estimate(inner, 2000.0, 3.0)  # other sizes, the same sides: the same SQL
    assert join_sides(outer) == sides and render(outer) == sql
    _estimate(outer, 5.0, 10.0)  # the LEFT JOIN's smaller side is now its left one: swapped
    assert join_sides(outer) == (True, False)
    swapped = render(outer)
    assert swapped != sql and "RIGHT JOIN" in swapped
    _estimate(inner, 3.0, 2000.0)
    assert join_sides(outer) == (True, True) and render(outer) != swapped
