"""The physical planner's choice between broadcasting a join side and shuffling both sides."""

from __future__ import annotations

import pytest

from qengine.planner import logical as lp
from qengine.planner.physical import PhysicalPlanner

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
