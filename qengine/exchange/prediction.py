"""Predicting reduce-partition sizes before the map stage ends (SCache §3.2.2).

Hash: extrapolate the per-reducer bytes of the map tasks finished so far to all map tasks.
Range: every map task drew s×p sample keys; equation (1) gives reducer i the sum over map tasks
j of ``size_j × (samples of j that fall in i) / (samples of j)``, extrapolated the same way.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from qengine.exchange import partitioner
from qengine.exchange.placement import Reducer, predictions
from qengine.sandbox.connection import scratch_connection


def hash_prediction(finished: list[tuple[int, list[int]]], total_tasks: int, partitions: int) -> list[Reducer]:
    """``finished`` holds (host, bytes per reducer) of each finished map task."""
    scale = total_tasks / max(1, len(finished))
    return predictions(finished, partitions, scale)


def range_prediction(
    samples: list[tuple[int, pa.Array, int]],
    bounds: pa.Array,
    desc: bool,
    nulls_first: bool,
    total_tasks: int,
) -> list[Reducer]:
    """``samples`` holds (host, sample keys, output bytes) of each finished map task."""
    partitions = len(bounds) + 1
    per_task: list[tuple[int, list[int]]] = []
    con = scratch_connection()
    try:
        for host, keys, size in samples:
            if not len(keys):
                continue
            ids = partitioner.range_ids(con, pa.table({"k": keys}), "k", bounds, desc, nulls_first)
            counts = np.bincount(np.asarray(ids), minlength=partitions)
            per_task.append((host, [size * int(c) / len(keys) for c in counts]))
    finally:
        con.close()
    scale = total_tasks / max(1, len(samples))
    return predictions(per_task, partitions, scale)


def grouped(reducers: list[Reducer], groups: list[list[int]]) -> list[Reducer]:
    """Predictions for reduce tasks that each read a group of partitions."""
    out = []
    for g, members in enumerate(groups):
        size = sum(reducers[p].size for p in members)
        by_host: dict[int, float] = {}
        for p in members:
            r = reducers[p]
            if r.host is not None:
                by_host[r.host] = by_host.get(r.host, 0.0) + r.size * r.prob
        if by_host and size:
            host, top = max(by_host.items(), key=lambda kv: (kv[1], -kv[0]))
            out.append(Reducer(g, size, top / size, host))
        else:
            out.append(Reducer(g, size, 0.0, None))
    return out


# Coalescing keeps a group per worker until the groups would hold less than this (Spark AQE's
# parallelismFirst, with its 1 MB minPartitionSize).
MIN_COALESCED_BYTES = 1 << 20


def coalesce_target(sizes: list[float], target: float, workers: int = 1) -> float:
    """The bytes :func:`coalesce` puts in a group at most (see there)."""
    return min(target, max(MIN_COALESCED_BYTES, sum(sizes) / max(1, workers)))


def coalesce(sizes: list[float], target: float, workers: int = 1) -> list[list[int]]:
    """Group consecutive partitions until a group holds about ``target`` bytes (Spark AQE).

    With ``workers``, the target shrinks so there are about as many groups as workers while each
    still holds ``MIN_COALESCED_BYTES``: merging a 20 MB shuffle into one task would leave every
    other worker idle for the whole stage.
    """
    target = coalesce_target(sizes, target, workers)
    groups: list[list[int]] = [[]]
    acc = 0.0
    for p, b in enumerate(sizes):
        if groups[-1] and acc + b > target:
            groups.append([])
            acc = 0.0
        groups[-1].append(p)
        acc += b
    return groups
