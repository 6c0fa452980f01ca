"""Which query a worker starts a task of when one of its slots frees: the worker's slots are
shared by every query that has tasks queued there, so that a query does not wait behind another's
queue, and a heavier user gets more of the worker than a lighter one.

With the ``fair`` policy, each query's *service* is the slot time its tasks have used here
(ended tasks' durations, and running tasks' time so far), divided by its weight; the query with
the least starts next (weighted fair queueing, as Spark's FAIR pools and Trino's resource groups
share a cluster by weight). Counting running tasks alone would not do: with two slots, two
queries weighted 3 to 1 would each hold one slot for ever. A query that arrives, or comes back
after a while with nothing queued, starts level with the least-served query present, not at
zero: it would otherwise take every slot until it had caught up with time it never asked for.

With the ``fifo`` policy the earliest query (the coordinator's arrival order) starts first, as a
single queue would; the throughput benchmark compares the two.

Each query also keeps its own cap (its ``slots``), and the worker runs at most as many tasks at
once as the largest cap of the queries it holds, so one query alone runs as it always did.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

POLICIES = ("fair", "fifo")


@dataclass(frozen=True)
class ShareTerms:
    """What a query's calls tell a worker about its claim on the worker's slots."""

    weight: float = 1.0
    order: int = 0  # arrival order at its coordinator: earlier is smaller
    policy: str = "fair"

    @classmethod
    def of_json(cls, body: dict | None) -> ShareTerms:
        body = body or {}
        return cls(float(body.get("weight", 1.0)), int(body.get("order", 0)), str(body.get("policy", "fair")))

    def to_json(self) -> dict:
        return {"weight": self.weight, "order": self.order, "policy": self.policy}


@dataclass
class _Account:
    terms: ShareTerms
    service: float  # slot seconds of ended tasks here, weighted in ``key``
    running: dict[object, float] = field(default_factory=dict)  # task → when it started


class FairQueue:
    """The worker's record of each query's use of its slots, and the choice of who goes next.

    Not thread-safe: the task queue calls it under its own lock.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._accounts: dict[str, _Account] = {}

    def terms(self, query: str, terms: ShareTerms) -> None:
        """A query's terms, from its latest call (its weight changes as its user's other
        queries come and go). A query new here starts level with the least-served one."""
        account = self._accounts.get(query)
        if account is None:
            now = self._clock()
            level = min((self._used(a, now) for a in self._accounts.values()), default=0.0)
            self._accounts[query] = _Account(terms, level * terms.weight)
        else:
            account.terms = terms

    def pick(self, candidates: list[str]) -> str:
        """Of the queries with a task waiting and room under their own cap, the one to start."""
        now = self._clock()

        def key(query: str) -> tuple[float, int]:
            account = self._accounts[query]
            if account.terms.policy == "fifo":
                return (0.0, account.terms.order)
            return (self._used(account, now), account.terms.order)

        return min(candidates, key=key)

    def started(self, query: str, task: object) -> None:
        self._accounts[query].running[task] = self._clock()

    def ended(self, query: str, task: object) -> None:
        account = self._accounts[query]
        account.service += self._clock() - account.running.pop(task)

    def forget(self, query: str) -> None:
        """The query has nothing queued or running here any more."""
        self._accounts.pop(query, None)

    @staticmethod
    def _used(account: _Account, now: float) -> float:
        running = sum(now - since for since in account.running.values())
        return (account.service + running) / max(account.terms.weight, 1e-9)
