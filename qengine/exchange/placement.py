"""Reducer placement: SCache's heuristic MinHeap (Algorithm 1) and accumulate scheduling
(Algorithm 2), plus the naive round-robin placement they are measured against.

Inputs are per-reducer predictions: the predicted size, the host that produced the largest
share of the reducer's data, and that share (``prob``). Algorithm 1 first balances load (the
largest reducer goes to the least-loaded host, via a min-heap), then walks the reducers again,
largest first, moving each toward the host that produced most of its data when that costs at
most a bounded amount of balance: no host may exceed ``(1 + nor) · max`` where ``max`` is the
heaviest host after the first pass and ``nor = (prob − 1/m) / (1 − 1/m) / 10`` (m = number of
map partitions), so a reducer produced evenly everywhere (prob ≈ 1/m) may cost nothing and a
reducer produced entirely on one host may cost at most 10%.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass
class Reducer:
    """A reduce partition's prediction: ``size`` bytes, ``prob`` of them produced on ``host``."""

    rid: int
    size: float
    prob: float = 0.0
    host: int | None = None


@dataclass
class Placement:
    """Reducer → host, with each host's load."""

    hosts: dict[int, int]
    loads: dict[int, float] = field(default_factory=dict)

    def imbalance(self) -> float:
        """max / mean host load (1.0 is perfect balance, and no load at all)."""
        return imbalance(list(self.loads.values())) or 1.0


def imbalance(loads: list[float]) -> float | None:
    """max / mean of host loads; None when there is no load."""
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean else None


def _loads(assignment: dict[int, int], sizes: dict[int, float], hosts: list[int]) -> dict[int, float]:
    loads = {h: 0.0 for h in hosts}
    for rid, h in assignment.items():
        loads[h] += sizes[rid]
    return loads


def round_robin(reducers: list[Reducer], hosts: list[int]) -> Placement:
    """Reducer i on host i mod H: what a scheduler unaware of sizes does."""
    assignment = {r.rid: hosts[i % len(hosts)] for i, r in enumerate(sorted(reducers, key=lambda r: r.rid))}
    return Placement(assignment, _loads(assignment, {r.rid: r.size for r in reducers}, hosts))


def min_heap(
    reducers: list[Reducer], hosts: list[int], m: int, swap: bool = True, initial: dict[int, float] | None = None
) -> Placement:
    """Algorithm 1. ``m`` is the number of map partitions that produced the data; ``initial``
    is load the hosts already carry (reducers of a lost host placed again over the others)."""
    if not hosts:
        raise ValueError("no hosts to place reducers on")
    sizes = {r.rid: r.size for r in reducers}
    order = sorted(reducers, key=lambda r: (r.size, -r.rid))  # ascending; taken from the end
    # (load, reducers, tie-break, host): among equally loaded hosts the one with the fewest
    # reducers, so that empty or tiny reducers, which add no load, still spread over the hosts
    # (each one is a task that costs its host a slot for a while).
    heap = [((initial or {}).get(h, 0.0), 0, i, h) for i, h in enumerate(hosts)]
    heapq.heapify(heap)
    assignment: dict[int, int] = {}
    for r in reversed(order):
        load, count, tie, host = heapq.heappop(heap)
        assignment[r.rid] = host
        heapq.heappush(heap, (load + r.size, count + 1, tie, host))
    loads = _loads(assignment, sizes, hosts)
    if not swap:
        return Placement(assignment, loads)
    peak = max(loads.values())
    sealed: set[int] = set()
    for r in reversed(order):
        target, current = r.host, assignment[r.rid]
        if target is None or target not in loads or target == current:
            sealed.add(r.rid)
            continue
        nor = max(0.0, (r.prob - 1 / m) / (1 - 1 / m) / 10) if m > 1 else 0.0
        if _swap(r.rid, current, target, peak * (1 + nor), assignment, sizes, loads, sealed):
            sealed.add(r.rid)
    return Placement(assignment, loads)


def _swap(
    rid: int,
    current: int,
    target: int,
    cap: float,
    assignment: dict[int, int],
    sizes: dict[int, float],
    loads: dict[int, float],
    sealed: set[int],
) -> bool:
    """Move ``rid`` to ``target``, sending back unsealed reducers from ``target`` as needed so
    that neither host ends above ``cap``. Returns False (and changes nothing) if impossible."""
    size = sizes[rid]
    back: list[int] = []
    moved = 0.0
    candidates = sorted(
        (x for x, h in assignment.items() if h == target and x not in sealed and x != rid),
        key=lambda x: (-sizes[x], x),
    )
    for x in candidates:
        if loads[target] + size - moved <= cap:
            break
        if loads[current] - size + moved + sizes[x] <= cap:
            back.append(x)
            moved += sizes[x]
    if loads[target] + size - moved > cap or loads[current] - size + moved > cap:
        return False
    assignment[rid] = target
    for x in back:
        assignment[x] = current
    loads[target] += size - moved
    loads[current] -= size - moved
    return True


def accumulate(
    reducers: list[Reducer],
    hosts: list[int],
    m: int,
    previous: dict[int, Reducer] | None = None,
) -> Placement:
    """Algorithm 2: place a new shuffle feeding the same stage as earlier ones.

    ``previous[rid]`` holds what earlier shuffles put on reducer ``rid``: their total size and
    the host it was placed on. Sizes accumulate; where the earlier data outweighs the new
    shuffle's largest single-host share, the earlier host becomes the preferred one, so the swap
    pass keeps reducers where their earlier input already is.
    """
    previous = previous or {}
    merged = []
    for r in reducers:
        before = previous.get(r.rid)
        if before is None:
            merged.append(Reducer(r.rid, r.size, r.prob, r.host))
            continue
        total = r.size + before.size
        if before.size >= r.size * r.prob:
            prob = before.size / total if total else 1.0
            merged.append(Reducer(r.rid, total, prob, before.host))
        else:
            merged.append(Reducer(r.rid, total, (r.size * r.prob) / total if total else r.prob, r.host))
    return min_heap(merged, hosts, m)


def predictions(block_sizes: list[tuple[int, list[int]]], partitions: int, scale: float = 1.0) -> list[Reducer]:
    """Per-reducer predictions from finished map tasks' blocks.

    ``block_sizes`` lists (host, bytes per reducer) for every finished map task; ``scale``
    extrapolates to all map tasks (total tasks / finished tasks).
    """
    per_host: list[dict[int, float]] = [{} for _ in range(partitions)]
    for host, sizes in block_sizes:
        for rid, b in enumerate(sizes[:partitions]):
            per_host[rid][host] = per_host[rid].get(host, 0.0) + b
    out = []
    for rid in range(partitions):
        total = sum(per_host[rid].values())
        if total:
            host, top = max(per_host[rid].items(), key=lambda kv: (kv[1], -kv[0]))
            out.append(Reducer(rid, total * scale, top / total, host))
        else:
            out.append(Reducer(rid, 0.0, 0.0, None))
    return out
