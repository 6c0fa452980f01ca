"""Two copies of every session-table partition, so that a session table outlives a lost worker.

A session table's rows live only in workers' block stores: no file backs them, and no lineage
can recompute rows the client registered or inserted. So each partition is kept on two workers
when the cluster has two or more: the one that wrote it, and a copy on another, chosen
round-robin over the others so the copies (and the reads that fall back to them) spread.

At the start of each statement the session drops the holders that have left the cluster and
copies each partition left with one holder to another live worker. A partition whose holders
were all lost keeps none, and its table's scans fail naming it (``MemorySource.splits``) rather
than answer with fewer rows.

Copies pass through this process, a Flight get from a holder and a put to the new one, a few
partitions at a time, each whole: a worker's put adds to whatever it holds under the key, so a
copy must arrive complete or not at all (this process holds up to ``THREADS`` partitions at once).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from qengine.catalog.sources import Partition
from qengine.errors import Error, WorkerUnreachableError
from qengine.runtime.query_state import Cluster

log = logging.getLogger("qengine.api.replicas")

COPIES = 2
THREADS = 4


class Replicas:
    """Keeps a session's table partitions at ``COPIES`` holders (fewer on a smaller cluster)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._turn = itertools.count()
        # One copying at a time: two statements healing together would copy a partition twice,
        # or twice to one worker, whose put would then hold its rows twice.
        self._lock = threading.Lock()
        # (key, worker) pairs never to copy to, as the worker may hold the key's rows already and
        # a put adds to them: a put that failed (its reply may have been lost after the rows
        # arrived), and a holder dropped for leaving the cluster (a standalone worker declared
        # dead after a pause comes back at its address with its blocks).
        self._barred: set[tuple[str, str]] = set()
        self._dropped: set[str] = set()  # dropped tables' key prefixes, "table/<uid>/" (see ``drop``)

    def store(self, partitions: list[Partition], rows: dict[str, pa.Table]) -> None:
        """Put rows this process holds (``rows``: key → table) on their partitions' first
        holders, all at once, then their copies on second ones from the same rows. A failed put
        to a first holder raises; a failed copy is left to the next :meth:`heal`."""

        def put(partition: Partition) -> None:
            holder = partition.holders[0]
            try:
                self.cluster.pool.get(holder).put({"key": partition.key}, rows[partition.key])
            except WorkerUnreachableError:
                self.cluster.suspect(holder)  # a worker just lost: the caller's next try leaves it out
                raise

        with ThreadPoolExecutor(max_workers=min(THREADS, max(1, len(partitions))), thread_name_prefix="qengine-put") as pool:
            list(pool.map(put, partitions))
        self.copy(partitions, rows)

    def copy(self, partitions: list[Partition], rows: dict[str, pa.Table] | None = None) -> list[Partition]:
        """Give each partition with too few holders a copy on another live worker; returns the
        partitions none of whose holders answered, so that no copy could be made: their rows may
        be gone with a lost worker, and the statement that wrote them must not report them kept.

        ``rows`` are partitions' tables where this process has them (registered data), so they
        are not fetched back from their holders. A put that fails is logged and retried by the
        next statement's :meth:`heal`: the partition is still whole on its holder.
        """
        with self._lock:
            return self._copy(partitions, rows or {})

    def heal(self, partitions: Iterable[Partition]) -> None:
        """Drop the holders that are no longer in the cluster, then copy every partition left
        with too few holders (one lost, or the cluster has grown past a single worker)."""
        with self._lock:
            live = set(self.cluster.addresses)
            partitions = list(partitions)
            for p in partitions:
                kept = [h for h in p.holders if h in live]
                if len(kept) < len(p.holders):
                    p.lost += len(p.holders) - len(kept)
                    self._barred.update((p.key, h) for h in p.holders if h not in live)
                    p.holders = kept  # replaced, not changed in place: a scan may be reading it
                    if not kept:
                        log.error("session table partition %s lost: every worker holding it has left the cluster", p.key)
            self._copy(partitions, {})

    def drop(self, prefix: str, release: Callable[[], object]) -> None:
        """Free the blocks under a dropped table's ``prefix`` (``table/<uid>/``) with
        ``release``, with no copy of them under way, and copy none of them again: a heal that
        had listed the table before put a copy that nothing freed."""
        with self._lock:
            self._dropped.add(prefix)
            release()

    def _copy(self, partitions: list[Partition], rows: dict[str, pa.Table]) -> list[Partition]:
        live = self.cluster.addresses
        wanted = min(COPIES, len(live))
        jobs = []
        lost = []
        for p in partitions:
            if _table_prefix(p.key) in self._dropped:
                continue
            held = [h for h in p.holders if h in live]
            if p.holders and not held:  # its only holders are gone already: no copy can be made
                lost.append(p)
                continue
            if not p.holders or len(held) >= wanted:
                continue
            others = [a for a in live if a not in p.holders and (p.key, a) not in self._barred]
            if others:
                jobs.append((p, others[next(self._turn) % len(others)]))
        if not jobs:
            return lost

        def one(job: tuple[Partition, str]) -> bool:
            partition, target = job
            return self._copy_one(partition, target, rows.get(partition.key))

        with ThreadPoolExecutor(max_workers=min(THREADS, len(jobs)), thread_name_prefix="qengine-copy") as pool:
            answered = list(pool.map(one, jobs))
        return lost + [p for (p, _), ok in zip(jobs, answered, strict=True) if not ok]

    def _copy_one(self, partition: Partition, target: str, table: pa.Table | None) -> bool:
        """Copy one partition to ``target`` and record it there; a failure is only logged.
        False when no holder answered for its rows."""
        if table is None:
            try:
                table = self._read(partition)
            except Error as e:
                log.warning("cannot copy session table partition %s: no holder answered: %s", partition.key, e)
                return False
        try:
            self.cluster.pool.get(target).put({"key": partition.key}, table)
        except Error as e:
            self._barred.add((partition.key, target))
            log.warning("cannot copy session table partition %s to %s: %s", partition.key, target, e)
            return True
        partition.holders = [*partition.holders, target]
        return True

    def _read(self, partition: Partition) -> pa.Table:
        """The partition's rows from the first of its holders that answers."""
        error: Error | None = None
        for holder in partition.holders:
            try:
                return self.cluster.pool.get(holder).get({"key": partition.key, "partition": 0})
            except Error as e:
                error = e
        assert error is not None  # only partitions with holders are copied
        raise error


def _table_prefix(key: str) -> str:
    """The ``table/<uid>/`` a partition key (``table/<uid>/<write>/<index>``) lies under."""
    return "/".join(key.split("/", 2)[:2]) + "/"
