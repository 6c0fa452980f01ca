"""Seeded sampling of map output and range bounds from weighted samples (SCache §3.2.2).

Each map task draws up to s×p keys from its output. A sample from a task with n rows that drew
k keys stands for n/k rows, so the bounds are weighted quantiles: reducers get about equal
shares of rows even when map outputs differ in size.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

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
    parts = []
    for keys, rows in samples:
        keys = keys.filter(keys.is_valid()) if keys.null_count else keys
        if len(keys):
            weight = rows / len(keys)
            parts.append(pa.table({"k": keys, "w": pa.array(np.full(len(keys), weight))}))
    if not parts or partitions <= 1:
        typ = samples[0][0].type if samples else pa.null()
        return pa.array([], type=typ)
    merged = pa.concat_tables(parts, promote_options="permissive")
    con = duckdb.connect()
    try:
        con.register("s", merged)
        ordered = con.execute("SELECT k, sum(w) OVER (ORDER BY k ROWS UNBOUNDED PRECEDING) AS cw FROM s ORDER BY k").to_arrow_table()
    finally:
        con.close()
    cum = ordered.column("cw").to_numpy()
    total = cum[-1]
    targets = total * np.arange(1, partitions) / partitions
    idx = np.minimum(np.searchsorted(cum, targets, side="left"), len(cum) - 1)
    return ordered.column("k").take(pa.array(idx)).combine_chunks()
