"""SCache Algorithms 1 and 2 against examples worked by hand."""

from __future__ import annotations

import pytest

from qengine.exchange.placement import Reducer, accumulate, min_heap, predictions, round_robin


def test_first_pass_puts_the_largest_reducer_on_the_least_loaded_host() -> None:
    # Largest first: r0(10)→h0, r1(8)→h1, r2(6)→h1 (8<10), r3(4)→h0 (10<14), r4(2)→h0 (tie 14/14, first host).
    reducers = [Reducer(0, 10), Reducer(1, 8), Reducer(2, 6), Reducer(3, 4), Reducer(4, 2)]
    placed = min_heap(reducers, [0, 1], m=4, swap=False)
    assert placed.hosts == {0: 0, 1: 1, 2: 1, 3: 0, 4: 0}
    assert placed.loads == {0: 16, 1: 14}
    assert placed.imbalance() == pytest.approx(16 / 15)
    # Round robin: r0,r2,r4 on h0 (18) and r1,r3 on h1 (12): worse balance.
    assert round_robin(reducers, [0, 1]).imbalance() == pytest.approx(18 / 15)


def test_swap_pass_moves_a_reducer_to_the_host_that_produced_it() -> None:
    # First pass: A(10)→h0, B(10)→h1, C(6)→h0 (tie 10/10), D(4)→h1: h0=16, h1=14, max=16.
    # A was produced entirely on h1 (prob 1, m=4): nor=(1-1/4)/(1-1/4)/10=0.1, cap 17.6. Moving A to h1
    # would make h1 24, so B (unsealed, largest on h1) goes back to h0: h0=16, h1=14, both ≤ 17.6.
    reducers = [Reducer(0, 10, 1.0, 1), Reducer(1, 10, 0.5, 0), Reducer(2, 6, 1.0, 0), Reducer(3, 4, 1.0, 1)]
    placed = min_heap(reducers, [0, 1], m=4)
    assert placed.hosts == {0: 1, 1: 0, 2: 0, 3: 1}
    assert placed.loads == {0: 16, 1: 14}


def test_swap_bound_keeps_a_reducer_off_its_preferred_host() -> None:
    # First pass: A(10)→h0, B(9)→h1, C(3)→h1: h0=10, h1=12, max=12.
    # A prefers h1 with prob 0.5 = 1/m (m=2), so nor=0 and the cap is 12: B and C go back to h0
    # (h0=12, h1=10) and A is sealed on h1. B then prefers h1 (nor=0.1, cap 13.2), but h1 would
    # reach 19 and nothing unsealed is left there to send back: B stays on h0.
    reducers = [Reducer(0, 10, 0.5, 1), Reducer(1, 9, 1.0, 1), Reducer(2, 3, 1.0, 0)]
    placed = min_heap(reducers, [0, 1], m=2)
    assert placed.hosts == {0: 1, 1: 0, 2: 0}
    assert max(placed.loads.values()) <= 12 * 1.1


def test_swap_never_exceeds_the_bound() -> None:
    reducers = [Reducer(i, size, 1.0, i % 3) for i, size in enumerate([50, 40, 30, 30, 20, 20, 10, 5])]
    before = min_heap(reducers, [0, 1, 2], m=8, swap=False)
    after = min_heap(reducers, [0, 1, 2], m=8)
    assert max(after.loads.values()) <= max(before.loads.values()) * 1.1 + 1e-9
    assert sum(after.loads.values()) == pytest.approx(sum(r.size for r in reducers))


def test_accumulate_keeps_reducers_where_earlier_shuffles_put_their_data() -> None:
    # The earlier shuffle put 20 bytes of reducer 0 on h1 and 20 of reducer 1 on h0. The new shuffle
    # produces 5 of each on the other host. Merged: r0=25 (prob 0.8, h1), r1=25 (prob 0.8, h0).
    previous = {0: Reducer(0, 20, 1.0, 1), 1: Reducer(1, 20, 1.0, 0)}
    new = [Reducer(0, 5, 1.0, 0), Reducer(1, 5, 1.0, 1)]
    placed = accumulate(new, [0, 1], m=4, previous=previous)
    assert placed.hosts == {0: 1, 1: 0}
    assert placed.loads == {0: 25, 1: 25}


def test_accumulate_follows_the_new_shuffle_when_it_dominates() -> None:
    previous = {0: Reducer(0, 1, 1.0, 0)}
    new = [Reducer(0, 30, 1.0, 1), Reducer(1, 30, 1.0, 0)]
    placed = accumulate(new, [0, 1], m=2, previous=previous)
    assert placed.hosts[0] == 1 and placed.hosts[1] == 0


def test_predictions_extrapolate_and_find_the_main_producer() -> None:
    # Two finished map tasks out of four (scale 2): host 0 wrote [6, 0, 2], host 1 wrote [2, 4, 2].
    pred = predictions([(0, [6, 0, 2]), (1, [2, 4, 2])], partitions=3, scale=2.0)
    assert [p.size for p in pred] == [16, 8, 8]
    assert (pred[0].host, pred[0].prob) == (0, 0.75)
    assert (pred[1].host, pred[1].prob) == (1, 1.0)
    assert pred[2].prob == 0.5
