"""Each running query's claim on the workers' slots, as the coordinator hands it to the workers
with every batch of tasks (``runtime.fair_queue`` acts on it there).

Users share the cluster by weight (``qengine coordinator --user-weight alice=3``; a user not
named weighs 1), and a user's running queries share the user's weight equally, as jobs share a
Spark FAIR pool: a user who runs four queries at once does not get four times the cluster of one
who runs one. A query's weight is worked out again for each batch it sends, so it follows the
user's queries as they start and end. The arrival order orders queries under the ``fifo``
policy, and breaks ties under ``fair``.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from qengine.runtime.fair_queue import POLICIES, ShareTerms

DEFAULT_USER = "default"  # a query that names no user (a local connection's)


class Shares:
    """The coordinator's running queries by user, and the terms each query's tasks carry."""

    def __init__(self, policy: str = "fair", weights: dict[str, float] | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"scheduling policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        for user, weight in (weights or {}).items():
            if not weight > 0:
                raise ValueError(f"the weight of user {user!r} must be a positive number, not {weight!r}")
        self.policy = policy
        self.weights = dict(weights or {})
        self._lock = threading.Lock()
        self._order = itertools.count()
        self._queries: dict[str, tuple[str, int]] = {}  # query → (user, arrival order)
        self._per_user: collections.Counter[str] = collections.Counter()

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
                self._per_user[user] -= 1
                if self._per_user[user] <= 0:
                    del self._per_user[user]

    def terms(self, query: str) -> ShareTerms:
        """What ``query``'s next batch of tasks tells its workers."""
        with self._lock:
            user, order = self._queries.get(query, (DEFAULT_USER, 0))
            weight = self.weights.get(user, 1.0) / max(1, self._per_user[user])
            return ShareTerms(weight, order, self.policy)

    def running(self) -> int:
        """Queries running on the cluster now."""
        with self._lock:
            return len(self._queries)

    def user_weight(self, user: str) -> float:
        return self.weights.get(user, 1.0)
