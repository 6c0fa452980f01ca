"""How loaded each host's link is, from the exchange's own byte counts (ShuffleWatcher's NetSat).

Every transfer between hosts the coordinator starts is counted while it is under way: a push of
map output to a reducer's host (prefetch), and the remote part of a reducer's input, which it
fetches when it runs (pull). A host's load is the bytes it sends or receives that are still
under way, in seconds of its link: divided by the rate its pushes were measured at
(``exchange.push_decision.PushRates``, which this keeps for every session of the coordinator).
The network counts as saturated when some host has ``SATURATED_SECONDS`` of traffic before it:
about the same as the paper's 75-100% NWSaturationThreshold over a NetSat period of a second.
Hosts whose rate is not known yet never count as saturated: a loopback cluster, whose pushes
are fast, never is.
"""

from __future__ import annotations

import collections
import itertools
import threading

from qengine.exchange.push_decision import PushRates

SATURATED_SECONDS = 0.75


class NetworkLoad:
    """Bytes under way to and from each worker address, over every query of the coordinator."""

    def __init__(self) -> None:
        self.rates = PushRates()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._transfers: dict[int, tuple[str | None, list[tuple[str, str, int]]]] = {}  # handle → (owner, transfers)
        self._pending: collections.Counter[str] = collections.Counter()

    def begin(self, transfers: list[tuple[str, str, int]], owner: str | None = None) -> int | None:
        """Count (sender, receiver, bytes) transfers as under way until :meth:`end` is given
        the handle returned, or :meth:`release` their ``owner`` (a query); None when no byte
        changes hosts."""
        moving = [(s, r, b) for s, r, b in transfers if b > 0 and s != r]
        if not moving:
            return None
        with self._lock:
            handle = next(self._ids)
            self._transfers[handle] = (owner, moving)
            for sender, receiver, nbytes in moving:
                self._pending[sender] += nbytes
                self._pending[receiver] += nbytes
        return handle

    def end(self, handle: int | None) -> None:
        if handle is None:
            return
        with self._lock:
            self._forget(handle)

    def release(self, owner: str) -> None:
        """End every transfer ``owner`` still counts: a query that has ended, whose failed
        calls may never report theirs."""
        with self._lock:
            for handle in [h for h, (o, _) in self._transfers.items() if o == owner]:
                self._forget(handle)

    def _forget(self, handle: int) -> None:
        _, moving = self._transfers.pop(handle, (None, []))
        for sender, receiver, nbytes in moving:
            for host in (sender, receiver):
                self._pending[host] -= nbytes
                if self._pending[host] <= 0:
                    del self._pending[host]

    def seconds(self, address: str) -> float:
        """The traffic under way at ``address``, in seconds of its link (0 when its rate is unknown)."""
        rate = self.rates.slowest([address])
        with self._lock:
            pending = self._pending.get(address, 0)
        return pending / rate if rate else 0.0

    def saturated(self, addresses: list[str]) -> bool:
        """Whether one of ``addresses`` has ``SATURATED_SECONDS`` of traffic under way."""
        return any(self.seconds(a) >= SATURATED_SECONDS for a in addresses)
