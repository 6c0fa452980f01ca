"""Seeded sampling of map output and range bounds from weighted samples (SCache §3.2.2).

Each map task draws up to s×p keys from its output. A sample from a task with n rows that drew
k keys stands for n/k rows, so the bounds are weighted quantiles: reducers get about equal
shares of rows even when map outputs differ in size.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from qengine.sandbox.connection import scratch_connection

# s. The paper's s=3 left TeraSort's 16 reducers at max/mean 1.47 when the bounds come from half
# the map tasks (prefetch places reducers then); s=20, Spark RangePartitioner's own per-partition
# sample size, gives about 1.2. The keys are small, so 20×p per map task costs nothing measurable.
DEFAULT_SAMPLES_PER_PARTITION = 20


def sample_keys(column: pa.ChunkedArray | pa.Array, count: int, seed: int) -> pa.Array:
    """Up to ``count`` values drawn without replacement, deterministically for ``seed``."""
    n = len(column)
    rng = np.random.default_rng(seed)
    picked = np.arange(n) if n <= count else np.sort(rng.choice(n, size=count, replace=False))
    taken = column.take(pa.array(picked, pa.int64()))
    return taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken


def weighted_bounds(samples: list[tuple[pa.Array, int]], partitions: int) -> pa.Array:
    """P-1 ascending bounds from per-task (sample, task rows) pairs, by weighted quantiles."""
    keys, weights = [], []
    for sample, rows in samples:
        sample = sample.filter(sample.is_valid()) if sample.null_count else sample
        if len(sample):
            keys.append(sample)
            weights.append(np.full(len(sample), rows / len(sample)))
    if not keys or partitions <= 1:
        typ = samples[0][0].type if samples else pa.null()
        return pa.array([], type=typ)
    merged = pa.concat_arrays(keys)
    order = ascending(merged)
    cum = np.cumsum(np.concatenate(weights)[order])
    targets = cum[-1] * np.arange(1, partitions) / partitions
    idx = np.minimum(np.searchsorted(cum, targets, side="left"), len(cum) - 1)
    return merged.take(pa.array(order[idx]))


def ascending(keys: pa.Array) -> np.ndarray:
    """Positions of non-null ``keys`` in ascending order.

    Arrow orders every type it can sort as DuckDB's comparisons (and so the range partitioner)
    do; types it cannot sort, such as intervals and structs (which it asks sort keys for), are
    ordered by DuckDB.
    """
    import pyarrow.compute as pc  # here, not at the top: it costs a one-statement CLI run ~30 ms to import

    try:
        return pc.sort_indices(keys).to_numpy()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        con = scratch_connection()
        try:
            con.register("s", pa.table({"k": keys}))
            positions = con.execute("SELECT i FROM (SELECT k, row_number() OVER () - 1 AS i FROM s) ORDER BY k").fetchnumpy()
        finally:
            con.close()
        return np.asarray(positions["i"])
