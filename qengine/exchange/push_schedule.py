"""The push schedule: in what order, in what pieces and how many at once a worker sends map
output to its reducers' hosts (prefetch).

Pushes have a scheduler of their own, apart from the reduce side's fetch limiter. With the
fetch limiter's byte cap, a worker's streams to its several destinations went one after
another, and as every worker sent in partition order, all senders converged on the same
receiver first: one downlink was full while the others sat idle. Here:

- every sender walks the ring of hosts from the one after itself (:func:`destination_order`):
  senders start on different receivers, and as each sends a piece to its next destination in
  turn, they stay spread, as in the ring schedule of an all-to-all exchange;
- blocks go in pieces of at most ``PIECE_BYTES`` (:func:`pieces`), so one large partition does
  not hold a link while the others wait, and memory in flight stays bounded;
- a worker has at most ``STREAMS`` pieces in flight, at most one per destination link, and at
  most ``IN_FLIGHT_BYTES`` (one larger piece may go alone) (:class:`PushLimiter`): a worker's
  uplink is its own bottleneck, and several streams from one sender to one receiver only
  share the same links. Sending to every destination at once starved one sender at 100 Mbit.

Pieces of one block are separate blocks of the same map task attempt at the receiver: a reader
names the (task, attempt) it wants and reads all of them, and a push that fails part-way has its
map task run again under a new attempt, so a piece is never counted twice.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future

import pyarrow as pa

PIECE_BYTES = 4 << 20  # at most this much of a stream per call; at 300 Mbit, about 0.1 s
STREAMS = 2  # pieces a worker has in flight at once
IN_FLIGHT_BYTES = 16 << 20  # bytes a worker has in flight at once (one larger piece may go alone)
# A spell of pushing shorter than this, or moving less, says little about the links' rate.
RATE_MIN_SECONDS = 0.05
RATE_MIN_BYTES = 1 << 20

Piece = list[tuple[int, pa.Table]]  # (partition, rows) of one call


def destination_order(sender: str, hosts: list[str]) -> list[str]:
    """``hosts`` in the order ``sender`` sends to them: around the ring of all of them (sorted,
    as every worker sees the same addresses), starting after the sender. When every host sends
    to every other, no two senders start on the same receiver."""
    ring = sorted({*hosts, sender})
    at = ring.index(sender)
    return [h for h in ring[at + 1 :] + ring[: at + 1] if h in hosts]


def pieces(parts: Piece, limit: int = PIECE_BYTES) -> list[Piece]:
    """Cut one destination's blocks into calls of at most ``limit`` bytes: whole blocks
    together while they fit, a larger block sliced by rows."""
    out: list[Piece] = []
    current: Piece = []
    size = 0
    for partition, table in parts:
        for part in _slices(table, limit):
            if current and size + part.nbytes > limit:
                out.append(current)
                current, size = [], 0
            current.append((partition, part))
            size += part.nbytes
    if current:
        out.append(current)
    return out


def _slices(table: pa.Table, limit: int) -> list[pa.Table]:
    if table.nbytes <= limit or table.num_rows <= 1:
        return [table]
    rows = max(1, table.num_rows * limit // table.nbytes)
    return [table.slice(start, rows) for start in range(0, table.num_rows, rows)]


def piece_bytes(piece: Piece) -> int:
    return sum(t.nbytes for _, t in piece)


class PushLimiter:
    """A worker's pushes in flight: at most ``streams`` pieces, one per destination link, and
    ``max_bytes`` (a larger piece may go alone). Shared by all the pushes a worker runs at once.

    It also measures the worker's push ``rate``: bytes per second over each spell in which it
    had pieces in flight, averaged with the earlier spells (``exchange.push_decision`` uses it)."""

    def __init__(self, streams: int = STREAMS, max_bytes: int = IN_FLIGHT_BYTES) -> None:
        self.streams = streams
        self.max_bytes = max_bytes
        self.rate: float | None = None
        self._busy: set[str] = set()
        self._bytes = 0
        self._spell_start = 0.0
        self._spell_bytes = 0
        self._cond = threading.Condition()

    def acquire(self, hosts: list[str], sizes: dict[str, int]) -> str:
        """Wait until one of ``hosts`` (the first free in that order) may take its next piece
        of ``sizes[host]`` bytes; returns it, holding its link."""
        with self._cond:
            while (host := self._free(hosts, sizes)) is None:
                self._cond.wait()
            if not self._busy:
                self._spell_start, self._spell_bytes = time.monotonic(), 0
            self._busy.add(host)
            self._bytes += sizes[host]
            return host

    def _free(self, hosts: list[str], sizes: dict[str, int]) -> str | None:
        if len(self._busy) >= self.streams:
            return None
        return next(
            (h for h in hosts if h not in self._busy and (self._bytes == 0 or self._bytes + sizes[h] <= self.max_bytes)),
            None,
        )

    def release(self, host: str, nbytes: int) -> None:
        with self._cond:
            self._busy.discard(host)
            self._bytes -= nbytes
            self._spell_bytes += nbytes
            if not self._busy:
                spell = time.monotonic() - self._spell_start
                if spell >= RATE_MIN_SECONDS and self._spell_bytes >= RATE_MIN_BYTES:
                    rate = self._spell_bytes / spell
                    self.rate = rate if self.rate is None else (self.rate + rate) / 2
            self._cond.notify_all()


def push_all(
    by_host: dict[str, list[Piece]],
    order: list[str],
    limiter: PushLimiter,
    send: Callable[[str, Piece], None],
    pool: Executor,
) -> None:
    """Send every piece with ``send(host, piece)`` on ``pool``: the next piece goes to the
    first host in ``order`` whose link is free, and that host then goes to the back of the
    order (one piece each in turn). Raises the first failure, once no piece is in flight."""
    queues = {h: collections.deque(by_host[h]) for h in order if by_host.get(h)}
    turn = list(queues)
    futures: list[Future] = []

    def run(host: str, piece: Piece, nbytes: int) -> None:
        try:
            send(host, piece)
        finally:
            limiter.release(host, nbytes)

    try:
        while turn and not any(f.done() and f.exception() is not None for f in futures):
            host = limiter.acquire(turn, {h: piece_bytes(queues[h][0]) for h in turn})
            piece = queues[host].popleft()
            turn.remove(host)
            if queues[host]:
                turn.append(host)
            try:
                futures.append(pool.submit(run, host, piece, piece_bytes(piece)))
            except BaseException:
                limiter.release(host, piece_bytes(piece))
                raise
    finally:
        for f in futures:
            f.exception()  # wait for every piece in flight
    for f in futures:
        f.result()
