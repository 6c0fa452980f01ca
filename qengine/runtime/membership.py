"""The worker registry of a standalone coordinator: who has joined, who is alive.

Workers started with ``qengine worker --join`` register here and then send a heartbeat every
second or so. A worker silent for longer than the timeout, or one that a query's call found
unreachable and that then failed a ping, is marked dead: it gets no more tasks, and the queries
that had tasks or blocks on it recover on the live workers (``runtime.query_run``). New workers
may join at any time, and a worker marked dead that comes back joins again under a new id; each
query takes the live workers of its start.

The registry offers the same face as :class:`qengine.runtime.local_cluster.LocalCluster` (``addresses``,
``pool``, ``lost``, ``suspect``, ``close``), so the scheduler does not care which one it runs on.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from qengine.errors import OperationalError
from qengine.runtime.cluster_load import ClusterLoad
from qengine.runtime.membership_changes import MembershipChanges
from qengine.runtime.network_load import NetworkLoad
from qengine.runtime.query_history import QueryHistory
from qengine.runtime.shares import Shares
from qengine.transport.rpc import ClientPool

log = logging.getLogger("qengine.runtime.coordinator")

DEFAULT_HEARTBEAT_TIMEOUT = 5.0
SUSPECT_PING_TIMEOUT = 2.0


@dataclass
class Member:
    id: int
    address: str
    memory_budget: int | None
    last_seen: float = field(default_factory=time.monotonic)
    alive: bool = True


class WorkerRegistry:
    def __init__(self, token: str, heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT, tls_root: bytes | None = None) -> None:
        if heartbeat_timeout <= 0:
            raise OperationalError("the heartbeat timeout must be positive")
        self.heartbeat_timeout = heartbeat_timeout
        self.pool = ClientPool(token, tls_root)
        self.load = ClusterLoad()  # every query's tasks per worker (runtime.cluster_load)
        self.shares = Shares()  # every running query's claim on the workers' slots (runtime.shares)
        self.network = NetworkLoad()  # the bytes under way between hosts (runtime.network_load)
        self.history = QueryHistory()  # the statements run and running (runtime.query_history)
        self._members: dict[int, Member] = {}
        self.changes = MembershipChanges()  # told when a worker is marked dead or joins
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="heartbeat-monitor", daemon=True)
        self._monitor.start()

    # ---- joining and heartbeats -----------------------------------------------------------

    def register(self, address: str, memory_budget: int | None = None) -> int:
        """Admit a worker after checking that it answers with the cluster token; returns its id."""
        self.pool.get(address).action("ping", timeout=5)  # the worker must be reachable from here
        with self._lock:
            for member in list(self._members.values()):
                if member.address == address and member.alive:
                    member.last_seen = time.monotonic()
                    return member.id
                if member.address == address:  # back after being declared dead: forget that entry
                    del self._members[member.id]
            worker_id = next(self._ids)
            self._members[worker_id] = Member(worker_id, address, memory_budget)
        log.info("worker %d joined from %s", worker_id, address)
        self.changes.changed()
        return worker_id

    def heartbeat(self, worker_id: int) -> bool:
        """Record a heartbeat; False tells a worker it was declared dead and must re-register."""
        with self._lock:
            member = self._members.get(worker_id)
            if member is None or not member.alive:
                return False
            member.last_seen = time.monotonic()
            return True

    def _watch(self) -> None:
        while not self._stop.wait(min(0.5, self.heartbeat_timeout / 4)):
            now = time.monotonic()
            with self._lock:
                late = [m for m in self._members.values() if m.alive and now - m.last_seen > self.heartbeat_timeout]
                for member in late:
                    member.alive = False
            for member in late:
                self.pool.forget(member.address)  # calls waiting on it fail instead of hanging
                log.warning("worker %d at %s missed its heartbeats for %.1fs: marked dead", member.id, member.address, self.heartbeat_timeout)
            if late:
                self.changes.changed()

    # ---- the cluster face ---------------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        with self._lock:
            return [m.address for m in self._members.values() if m.alive]

    def memory_budget(self) -> int | None:
        """The live workers' memory budgets together; None when one has none (no limit)."""
        with self._lock:
            budgets = [m.memory_budget for m in self._members.values() if m.alive]
        return None if not budgets or None in budgets else sum(budgets)

    def members(self) -> list[Member]:
        with self._lock:
            return list(self._members.values())

    def worker_states(self) -> list[dict]:
        """Every member, dead ones too: id, address, whether alive, seconds since its last
        heartbeat, and memory budget (as :meth:`LocalCluster.worker_states`)."""
        now = time.monotonic()
        return [
            {"id": m.id, "address": m.address, "alive": m.alive, "heartbeat_age": now - m.last_seen, "memory_budget": m.memory_budget}
            for m in self.members()
        ]

    def lost(self, addresses: list[str]) -> dict[str, str]:
        """Those of ``addresses`` (a query's workers) that are marked dead, with why."""
        with self._lock:
            live = {m.address for m in self._members.values() if m.alive}
            dead = {m.address: m for m in self._members.values() if not m.alive}
        return {
            a: f"worker {dead[a].id} at {a} was marked dead" if a in dead else f"worker at {a} left the cluster"
            for a in addresses
            if a not in live
        }

    def suspect(self, address: str) -> None:
        """A call to ``address`` failed: mark it dead now if it refuses a ping outright (its
        process is gone), rather than after its heartbeats have been missed for a whole
        timeout. A ping that only times out proves nothing on a busy host: the heartbeats decide."""
        started = time.monotonic()
        try:
            self.pool.get(address).action("ping", timeout=SUSPECT_PING_TIMEOUT)
            return
        except Exception:  # noqa: BLE001 - any failure to answer counts
            if time.monotonic() - started >= SUSPECT_PING_TIMEOUT / 2:
                return
        with self._lock:
            for member in self._members.values():
                if member.address == address and member.alive:
                    member.alive = False
                    log.warning("worker %d at %s does not answer: marked dead", member.id, address)
        self.pool.forget(address)

    def check_readable(self, paths: list[str]) -> None:
        """Every live worker must be able to read every path (a shared file system)."""
        for address in self.addresses:
            reply = self.pool.get(address).action("check_paths", {"paths": paths}, timeout=30)
            if reply["unreadable"]:
                raise OperationalError(
                    f"worker {address} cannot read {reply['unreadable'][0]}: data paths must be readable by every "
                    "worker, at the same path (a shared file system)"
                )

    def running_query(self) -> contextlib.AbstractContextManager[None]:
        """A standalone cluster's workers are started by their operators, not by queries."""
        return contextlib.nullcontext()

    def close(self) -> None:
        """Stop the live workers (they were started to serve this coordinator) and the monitor."""
        if self._stop.is_set():
            return
        self._stop.set()
        for address in self.addresses:
            with contextlib.suppress(Exception):  # best effort: a worker that is gone is gone
                self.pool.get(address).action("shutdown", timeout=2)
        self.pool.close()
