"""Deterministic tests of shuffle-size prediction (SCache §3.2.2), seeded sampling and range bounds.

Range prediction accuracy: the spec's target is a max relative error ≤ 10% over non-empty
reducers with s = 3 samples per partition. On this data (200k Zipf(1.1) keys, 8 map tasks of
uneven size, 8 reducers) that is not reachable: s = 3 draws 24 samples per map task, 192 in
all, and a reducer's share estimated from ~24 of them has a relative standard error of about
sqrt(7/192) ≈ 19%, so the max over 8 reducers is typically ~40% (measured: 60% for SEED; median
40%, 0/100 seeds within 10%). The error shrinks like 1/sqrt(s). For SEED alone the smallest
passing s is 25, but that is luck (27, 39, 46 and 58 fail for the same seed), so the accuracy
test uses the smallest s on the grid (3, 60, 80, 100, 150, 200) that met the target for ≥ 95%
of 100 other seeds: s = 80 (``ACCURATE_S``; 95/100 seeds, median 6.7%; SEED 7.0%). Every seed
tried met it at s = 200. The spec's s = 3 is still exercised for determinism, balance and the
exactness of equation (1).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from qengine.exchange import partitioner
from qengine.exchange.placement import Reducer
from qengine.exchange.prediction import coalesce, grouped, hash_prediction, range_prediction
from qengine.exchange.sampling import sample_keys, weighted_bounds
from qengine.sandbox.connection import safe_connection

SEED = 20260501
ROWS = 200_000
TASKS = 8
P = 8
SPEC_S = 3  # the paper's s; qengine's default is 20
ACCURATE_S = 80  # s = 3 misses the 10% target by far; see the module docstring


# ---- hash prediction -------------------------------------------------------------------


def test_hash_prediction_extrapolates_finished_tasks():
    # 2 of 4 map tasks finished: sizes double. Reducer 3 saw nothing.
    finished = [(0, [100, 0, 50, 0]), (1, [100, 300, 30, 0])]
    got = hash_prediction(finished, total_tasks=4, partitions=4)
    assert [r.rid for r in got] == [0, 1, 2, 3]
    assert [r.size for r in got] == [400.0, 600.0, 160.0, 0.0]
    # Equal shares: the lower host id wins the tie.
    assert (got[0].host, got[0].prob) == (0, pytest.approx(0.5))
    assert (got[1].host, got[1].prob) == (1, pytest.approx(1.0))
    assert (got[2].host, got[2].prob) == (0, pytest.approx(50 / 80))
    assert (got[3].host, got[3].prob) == (None, 0.0)


def test_hash_prediction_sums_tasks_of_one_host():
    finished = [(2, [10, 10]), (2, [30, 0]), (5, [35, 90])]
    got = hash_prediction(finished, total_tasks=6, partitions=2)
    assert [r.size for r in got] == [150.0, 200.0]  # scale 6 / 3
    assert (got[0].host, got[0].prob) == (2, pytest.approx(40 / 75))
    assert (got[1].host, got[1].prob) == (5, pytest.approx(0.9))


def test_hash_prediction_all_finished_and_none_finished():
    got = hash_prediction([(0, [7, 1, 2])], total_tasks=1, partitions=3)
    assert [r.size for r in got] == [7.0, 1.0, 2.0]
    assert all(r.host == 0 and r.prob == 1.0 for r in got)
    empty = hash_prediction([], total_tasks=5, partitions=2)
    assert [(r.rid, r.size, r.prob, r.host) for r in empty] == [(0, 0.0, 0.0, None), (1, 0.0, 0.0, None)]


# ---- range prediction on a skewed dataset -----------------------------------------------


def zipf_tasks(seed: int) -> list[pa.Table]:
    """ROWS Zipf(1.1) keys split into TASKS map outputs of uneven size (roughly 0.3x…1.7x)."""
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.1, ROWS).astype(np.int64)
    weights = rng.uniform(0.3, 1.7, TASKS)
    cuts = np.concatenate([[0], np.cumsum(weights / weights.sum() * ROWS).astype(np.int64)])
    cuts[-1] = ROWS
    return [pa.table({"k": keys[a:b], "v": np.arange(a, b, dtype=np.float64)}) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


@pytest.fixture(scope="module")
def tasks() -> list[pa.Table]:
    return zipf_tasks(SEED)


def draw(tasks: list[pa.Table], s: int, seed: int = SEED) -> tuple[list[pa.Array], pa.Array]:
    samples = [sample_keys(t.column("k"), s * P, seed + j) for j, t in enumerate(tasks)]
    bounds = weighted_bounds([(smp, t.num_rows) for smp, t in zip(samples, tasks, strict=True)], P)
    return samples, bounds


def predict(tasks: list[pa.Table], samples: list[pa.Array], bounds: pa.Array) -> list[Reducer]:
    finished = [(j % 2, smp, t.nbytes) for j, (smp, t) in enumerate(zip(samples, tasks, strict=True))]
    return range_prediction(finished, bounds, desc=False, nulls_first=False, total_tasks=len(tasks))


def actual(tasks: list[pa.Table], bounds: pa.Array) -> tuple[np.ndarray, np.ndarray, list[dict[int, float]]]:
    """Bytes, rows and bytes-per-host of each reducer after really partitioning every map task."""
    size, rows = np.zeros(P), np.zeros(P)
    by_host: list[dict[int, float]] = [{} for _ in range(P)]
    con = safe_connection()
    try:
        for j, t in enumerate(tasks):
            ids = partitioner.range_ids(con, t, "k", bounds, False, False)
            for p, part in enumerate(partitioner.split(t, ids, P)):
                size[p] += part.nbytes
                rows[p] += part.num_rows
                by_host[p][j % 2] = by_host[p].get(j % 2, 0.0) + part.nbytes
    finally:
        con.close()
    return size, rows, by_host


def max_relative_error(pred: list[Reducer], size: np.ndarray) -> float:
    nonempty = size > 0
    predicted = np.array([r.size for r in pred])
    return float(np.max(np.abs(predicted[nonempty] - size[nonempty]) / size[nonempty]))


def test_range_prediction_accuracy(tasks):
    samples, bounds = draw(tasks, ACCURATE_S)
    pred = predict(tasks, samples, bounds)
    size, _, _ = actual(tasks, bounds)
    assert [r.rid for r in pred] == list(range(P))
    assert sum(r.size for r in pred) == pytest.approx(size.sum())  # all tasks finished: no extrapolation
    assert np.count_nonzero(size) >= P - 1
    err = max_relative_error(pred, size)
    assert err <= 0.10, f"max relative error {err:.3f} with s={ACCURATE_S}"


def test_range_prediction_spec_s_is_not_accurate_enough(tasks):
    """Documents the measurement behind ACCURATE_S: with 8 map tasks, s = 3 misses 10% by far."""
    samples, bounds = draw(tasks, SPEC_S)
    size, _, _ = actual(tasks, bounds)
    err = max_relative_error(predict(tasks, samples, bounds), size)
    assert 0.10 < err < 0.75  # 0.60 for SEED


@pytest.mark.parametrize("s", [SPEC_S, ACCURATE_S])
def test_range_bounds_balance_load(tasks, s):
    """max/mean of actual reducer rows ≤ 1.5, leaving out the reducer holding the top key.

    Key 1 alone is ~9.5% of the rows (1/ζ(1.1)), under the 12.5% a reducer should get, so
    ties do not force a reducer over the bound here; the one holding key 1 is still excluded
    as the spec asks, since a single key can never be split. Measured for SEED: 1.48 at s = 3
    (reducer 0 holds key 1 alone; the heaviest is reducer 2) and 1.14 at s = 80. Across 40
    other seeds s = 3 reached up to 1.66 (36/40 within 1.5); s ≥ 10 stayed within 1.43.
    """
    samples, bounds = draw(tasks, s)
    _, rows, _ = actual(tasks, bounds)
    assert rows.sum() == ROWS
    keys = np.concatenate([t.column("k").to_numpy() for t in tasks])
    uniq, counts = np.unique(keys, return_counts=True)
    top = int(uniq[counts.argmax()])
    con = safe_connection()
    try:
        top_reducer = int(partitioner.range_ids(con, pa.table({"k": pa.array([top], pa.int64())}), "k", bounds, False, False)[0])
    finally:
        con.close()
    others = np.delete(rows, top_reducer)
    assert others.max() / rows.mean() <= 1.5


def test_range_prediction_is_exact_when_samples_are_the_whole_output(tasks):
    """Equation (1) with every row as a sample reproduces the real sizes and host shares."""
    small = [t.slice(0, 2_000) for t in tasks]
    samples = [t.column("k").combine_chunks() for t in small]
    _, bounds = draw(small, SPEC_S)
    pred = predict(small, samples, bounds)
    size, _, by_host = actual(small, bounds)
    for p in range(P):
        assert pred[p].size == pytest.approx(size[p])
        if size[p]:
            host, top = max(by_host[p].items(), key=lambda kv: (kv[1], -kv[0]))
            assert pred[p].host == host
            assert pred[p].prob == pytest.approx(top / size[p])


def test_range_prediction_extrapolates_and_skips_empty_samples():
    bounds = pa.array([10, 20], pa.int64())
    keys = pa.array([1, 2, 15, 25], pa.int64())
    # Two of four tasks finished; one produced nothing (no sample) and counts as finished.
    got = range_prediction([(0, keys, 400), (1, pa.array([], pa.int64()), 0)], bounds, False, False, total_tasks=4)
    assert [r.size for r in got] == [400.0, 200.0, 200.0]  # 400·(2/4, 1/4, 1/4)·(4/2)
    assert all(r.host == 0 and r.prob == 1.0 for r in got)
    desc = range_prediction([(3, keys, 400)], bounds, True, False, total_tasks=1)
    assert [r.size for r in desc] == [100.0, 100.0, 200.0]  # DESC mirrors the partition ids


# ---- grouping and coalescing -------------------------------------------------------------


def test_coalesce_hand_worked():
    assert coalesce([10, 10, 10, 10], 20) == [[0, 1], [2, 3]]
    assert coalesce([5, 30, 5, 5, 5, 25], 20) == [[0], [1], [2, 3, 4], [5]]
    assert coalesce([0, 0, 50, 0, 1], 10) == [[0, 1], [2], [3, 4]]
    assert coalesce([1, 2, 3], 100) == [[0, 1, 2]]
    assert coalesce([7], 1) == [[0]]


def test_grouped_hand_worked():
    reducers = [
        Reducer(0, 100.0, 0.5, 1),  # 50 from host 1
        Reducer(1, 300.0, 0.4, 2),  # 120 from host 2
        Reducer(2, 60.0, 1.0, 1),  # 60 from host 1
        Reducer(3, 0.0, 0.0, None),
        Reducer(4, 40.0, 0.5, 2),  # 20 from host 2
        Reducer(5, 40.0, 0.5, 3),  # 20 from host 3
    ]
    got = grouped(reducers, [[0, 1, 2], [3], [4, 5]])
    assert [r.rid for r in got] == [0, 1, 2]
    # Group 0: host 1 has 50 + 60 = 110, host 2 has 120 → host 2, 120 / 460.
    assert (got[0].size, got[0].host) == (460.0, 2)
    assert got[0].prob == pytest.approx(120 / 460)
    # Group 1: nothing at all.
    assert (got[1].size, got[1].prob, got[1].host) == (0.0, 0.0, None)
    # Group 2: a 20/20 tie between hosts 2 and 3 goes to the lower id.
    assert (got[2].size, got[2].host) == (80.0, 2)
    assert got[2].prob == pytest.approx(0.25)


def test_coalesce_keeps_a_group_per_worker_while_groups_hold_a_megabyte():
    mb = 1 << 20
    assert coalesce([4 * mb] * 4, 32 * mb, workers=2) == [[0, 1], [2, 3]]
    assert coalesce([4 * mb] * 4, 32 * mb) == [[0, 1, 2, 3]]
    assert coalesce([100_000] * 4, 32 * mb, workers=2) == [[0, 1, 2, 3]]  # too small to spread
    assert coalesce([40 * mb] * 4, 32 * mb, workers=2) == [[0], [1], [2], [3]]
    assert len(coalesce([3 * mb] * 8, 64 * mb, workers=4)) == 4


def test_coalesce_then_grouped_keeps_total():
    sizes = [30.0, 5.0, 5.0, 40.0, 2.0, 3.0]
    reducers = [Reducer(i, b, 1.0, i % 2) for i, b in enumerate(sizes)]
    groups = coalesce(sizes, 40.0)
    assert groups == [[0, 1, 2], [3], [4, 5]]
    assert sorted(p for g in groups for p in g) == list(range(len(sizes)))
    got = grouped(reducers, groups)
    assert sum(r.size for r in got) == sum(sizes)
    assert [(r.host, r.prob) for r in got] == [(0, pytest.approx(35 / 40)), (1, 1.0), (1, pytest.approx(0.6))]


# ---- determinism -----------------------------------------------------------------------


def test_sample_keys_deterministic():
    column = pa.chunked_array([np.arange(0, 500, dtype=np.int64), np.arange(500, 1000, dtype=np.int64)])
    a = sample_keys(column, 24, seed=7)
    b = sample_keys(column, 24, seed=7)
    assert a.equals(b)
    assert len(a) == 24 and len(set(a.to_pylist())) == 24  # without replacement
    assert a.to_pylist() == sorted(a.to_pylist())  # picked positions are kept in order
    assert not a.equals(sample_keys(column, 24, seed=8))
    # Fewer rows than asked for: everything, in order.
    assert sample_keys(pa.array([3, 1, 2]), 24, seed=7).to_pylist() == [3, 1, 2]


def test_samples_and_bounds_deterministic(tasks):
    s1, b1 = draw(tasks, SPEC_S)
    s2, b2 = draw(tasks, SPEC_S)
    assert all(x.equals(y) for x, y in zip(s1, s2, strict=True))
    assert b1.equals(b2)
    assert len(b1) == P - 1
    assert b1.to_pylist() == sorted(b1.to_pylist())
    assert [r.size for r in predict(tasks, s1, b1)] == [r.size for r in predict(tasks, s2, b2)]
    # A different seed draws different samples.
    s3, _ = draw(tasks, SPEC_S, seed=SEED + 1000)
    assert not all(x.equals(y) for x, y in zip(s1, s3, strict=True))
    # And the data itself is reproducible.
    again = zipf_tasks(SEED)
    assert all(x.equals(y) for x, y in zip(tasks, again, strict=True))
