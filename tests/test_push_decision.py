"""Push or fetch (``exchange.push_decision``): a shuffle pushes only while enough map work is
left to hide the transfer under, and says which it did in EXPLAIN ANALYZE."""

from __future__ import annotations

import pytest

from qengine.exchange.push_decision import OVERLAP, PushRates, decide

MB = 1e6


def test_a_transfer_longer_than_the_map_work_left_is_fetched_instead() -> None:
    """300 MB over 4 senders at 37.5 MB/s is 2 s; one more round of map tasks (0.2 s) would
    hide a tenth of it."""
    decision = decide(pending=4, slots=8, task_seconds=0.4, remote_bytes=300 * MB, senders=4, rate=37.5 * MB)
    assert not decision.push
    assert decision.transfer == pytest.approx(2.0) and decision.map_left == pytest.approx(0.2)
    assert decision.describe() == "fetched: 0.20s of map work left, transfer ≈ 2.00s"


def test_map_work_covering_enough_of_the_transfer_is_pushed_under() -> None:
    half = decide(pending=40, slots=8, task_seconds=0.2, remote_bytes=300 * MB, senders=4, rate=37.5 * MB)
    assert half.push and half.map_left == pytest.approx(OVERLAP * half.transfer)
    less = decide(pending=39, slots=8, task_seconds=0.2, remote_bytes=300 * MB, senders=4, rate=37.5 * MB)
    assert not less.push


def test_on_fast_links_any_map_work_left_is_enough() -> None:
    assert decide(pending=1, slots=8, task_seconds=0.05, remote_bytes=30 * MB, senders=3, rate=2000 * MB).push


def test_with_no_map_task_left_nothing_is_pushed() -> None:
    assert not decide(pending=0, slots=8, task_seconds=0.2, remote_bytes=30 * MB, senders=3, rate=None).push


def test_until_the_rate_is_measured_the_shuffle_pushes_to_learn_it() -> None:
    decision = decide(pending=2, slots=8, task_seconds=0.1, remote_bytes=300 * MB, senders=4, rate=None)
    assert decision.push and decision.transfer is None
    assert "not yet measured" in decision.describe()


def test_the_slowest_worker_sets_the_rate_and_an_unmeasured_one_means_none() -> None:
    rates = PushRates()
    rates.learn("a", 40 * MB)
    rates.learn("b", 30 * MB)
    rates.learn("c", 0.0)  # a reply with nothing measured teaches nothing
    assert rates.slowest(["a", "b"]) == 30 * MB
    assert rates.slowest(["a", "c"]) is None
