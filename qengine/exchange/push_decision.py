"""Whether a shuffle pushes its map output to its reducers' hosts ahead of time, or lets them
fetch it when they run.

Pushing (SCache's pre-fetch) pays only while map work remains to hide the transfer under. A
pull reducer fetches while the host's other reducers sort, which hides the transfer too; a push
that outlasts the map stage leaves the reducers waiting for the network and then sorting with
nothing else to do. On a 4-host cluster at 300 Mbit with 128 MB splits, about 0.05 s of map work
was left when the reducers were placed, and pushing made the job 8% slower than fetching.

So once the reducers are placed, the shuffle pushes only if the map work left covers at least
``OVERLAP`` of the time the transfer is expected to take. The map work left is the map tasks not
finished, spread over the slots, at the median time of those finished. The transfer is every
byte that changes hosts, split evenly over the senders, at the rate each worker's pushes have
been seen to reach (``task.PushLimiter`` measures it, the push replies carry it, and
:class:`PushRates` keeps the last one per worker). Until a worker has pushed once its rate is
unknown, and the shuffle pushes: that is how it is learnt. On loopback the transfer takes
nearly no time, so a shuffle pushes whenever any map task is left.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

OVERLAP = 0.5  # push when the map work left covers at least this share of the transfer


class PushRates:
    """Each worker's push rate (bytes per second while it had pushes in flight), as its last
    push reply said. A coordinator keeps one for its lifetime; thread-safe."""

    def __init__(self) -> None:
        self._rates: dict[str, float] = {}
        self._lock = threading.Lock()

    def learn(self, address: str, rate: float) -> None:
        if rate > 0:
            with self._lock:
                self._rates[address] = rate

    def slowest(self, addresses: list[str]) -> float | None:
        """The lowest rate among ``addresses``, or None if one of them has never pushed."""
        with self._lock:
            rates = [self._rates.get(a) for a in addresses]
        return None if not rates or any(r is None for r in rates) else min(r for r in rates if r is not None)


@dataclass(frozen=True)
class PushDecision:
    push: bool
    map_left: float  # seconds of map work left, on the slots
    transfer: float | None  # seconds the transfer is expected to take; None: no rate known yet
    saturated: bool = False  # fetched because the network was saturated (ShuffleWatcher's NASS)

    def describe(self) -> str:
        """What EXPLAIN ANALYZE says about it."""
        verb = "pushed" if self.push else "fetched"
        if self.saturated:
            return f"{verb}: the network was saturated by other queries' shuffles (NASS delays this one)"
        if self.transfer is None:
            return f"{verb}: {self.map_left:.2f}s of map work left, link rate not yet measured"
        return f"{verb}: {self.map_left:.2f}s of map work left, transfer ≈ {self.transfer:.2f}s"


def decide(pending: int, slots: int, task_seconds: float, remote_bytes: float, senders: int, rate: float | None) -> PushDecision:
    """Push or fetch: ``pending`` map tasks not finished over ``slots`` slots at ``task_seconds``
    each; ``remote_bytes`` to move between hosts, sent by ``senders`` workers at ``rate`` bytes
    per second each (None: not measured yet)."""
    map_left = pending / max(1, slots) * task_seconds
    if pending == 0:
        return PushDecision(False, 0.0, None if rate is None else remote_bytes / max(1, senders) / rate)
    if rate is None:
        return PushDecision(True, map_left, None)
    transfer = remote_bytes / max(1, senders) / rate
    return PushDecision(map_left >= OVERLAP * transfer, map_left, transfer)
