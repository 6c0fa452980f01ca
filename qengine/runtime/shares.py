"""Each running query's claim on the workers' slots, as the coordinator hands it to the workers
with every batch of tasks (``runtime.fair_queue`` acts on it there).

Users share the cluster by weight (``qengine coordinator --user-weight alice=3``; a user not
named weighs 1), and a user's running queries share the user's weight equally, as jobs share a
Spark FAIR pool: a user who runs four queries at once does not get four times the cluster of one
who runs one. A query's weight is worked out again for each batch it sends, so it follows the
user's queries as they start and end. The arrival order orders queries under the ``fifo``
policy, and breaks ties under ``fair``.

It also holds the two ShuffleWatcher switches (``--no-nass``, ``--no-samp``) and SAMP's choice of
hosts: a shuffle-heavy query that starts while others run has its map tasks, and so its map
output and its reducers (SARP), kept to as many hosts as its share of the cluster, chosen among
those the other queries' choices use least, so that most of its shuffle stays on its hosts.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from qengine.errors import ProgrammingError
from qengine.runtime.fair_queue import POLICIES, ShareTerms

DEFAULT_USER = "default"  # a query that names no user (a local connection's)


class Shares:
    """The coordinator's running queries by user, and the terms each query's tasks carry."""

    def __init__(self, policy: str = "fair", weights: dict[str, float] | None = None, nass: bool = False, samp: bool = False) -> None:
        """``nass`` and ``samp`` switch ShuffleWatcher's two mechanisms on (see
        ``runtime.network_load`` and :meth:`samp_hosts`)."""
        if policy not in POLICIES:
            raise ProgrammingError(f"scheduling policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        for user, weight in (weights or {}).items():
            if not weight > 0:
                raise ProgrammingError(f"the weight of user {user!r} must be a positive number, not {weight!r}")
        self.policy = policy
        self.weights = dict(weights or {})
        self.nass, self.samp = nass, samp
        self._lock = threading.Lock()
        self._order = itertools.count()
        self._queries: dict[str, tuple[str, int]] = {}  # query → (user, arrival order)
        self._per_user: collections.Counter[str] = collections.Counter()
        self._hosts: dict[str, list[str]] = {}  # query → the hosts SAMP keeps it to

    @contextmanager
    def claim(self, query: str, user: str = DEFAULT_USER) -> Iterator[None]:
        """Hold ``query``'s claim while it runs."""
        with self._lock:
            self._queries[query] = (user, next(self._order))
            self._per_user[user] += 1
        try:
            yield
        finally:
            with self._lock:
                self._queries.pop(query, None)
                self._hosts.pop(query, None)
                self._per_user[user] -= 1
                if self._per_user[user] <= 0:
                    del self._per_user[user]

    def terms(self, query: str) -> ShareTerms:
        """What ``query``'s next batch of tasks tells its workers."""
        with self._lock:
            user, order = self._queries.get(query, (DEFAULT_USER, 0))
            return ShareTerms(self._weight(user), order, self.policy)

    def _weight(self, user: str) -> float:
        return self.user_weight(user) / max(1, self._per_user[user])

    def samp_hosts(self, query: str, heavy: bool, hosts: list[str]) -> list[str] | None:
        """SAMP: the hosts a shuffle-heavy query's map tasks and reducers are kept to, or None
        for all of them (SAMP off, a light query, a query alone, or a share of every host)."""
        with self._lock:
            if not (self.samp and heavy and len(self._queries) > 1 and len(hosts) > 1 and query in self._queries):
                return None
            user, order = self._queries[query]
            total = sum(self.user_weight(u) for u in self._per_user)
            count = max(1, min(len(hosts), round(len(hosts) * self._weight(user) / total)))
            if count == len(hosts):
                return None
            used = collections.Counter(h for chosen in self._hosts.values() for h in chosen)
            ranked = sorted(range(len(hosts)), key=lambda i: (used[hosts[i]], (i - order) % len(hosts)))
            chosen = [hosts[i] for i in sorted(ranked[:count])]
            self._hosts[query] = chosen
            return chosen

    def running(self) -> int:
        """Queries running on the cluster now."""
        with self._lock:
            return len(self._queries)

    def user_weight(self, user: str) -> float:
        return self.weights.get(user, 1.0)
