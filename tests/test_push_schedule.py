"""The push schedule (``exchange.push_schedule``): senders start on different receivers, blocks
go in bounded pieces, a worker's pushes share its links and bytes in flight, and every block is
delivered exactly once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from qengine.exchange.push_schedule import PushLimiter, destination_order, piece_bytes, pieces, push_all

HOSTS = [f"10.0.0.{i}:7000" for i in range(1, 6)]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_no_two_senders_start_on_the_same_receiver(n: int) -> None:
    hosts = HOSTS[:n]
    orders = {s: destination_order(s, [h for h in hosts if h != s]) for s in hosts}
    firsts = [order[0] for order in orders.values()]
    assert len(set(firsts)) == n
    for step in range(n - 1):  # nor at any later step, while they keep in step
        assert len({order[step] for order in orders.values()}) == n
    for s, order in orders.items():
        assert sorted(order) == sorted(h for h in hosts if h != s)


def test_the_order_is_the_same_whatever_order_the_hosts_come_in() -> None:
    assert destination_order(HOSTS[1], [HOSTS[4], HOSTS[0], HOSTS[2]]) == [HOSTS[2], HOSTS[4], HOSTS[0]]


def test_a_destination_that_is_the_sender_itself_is_not_left_out() -> None:
    assert destination_order(HOSTS[1], [HOSTS[1], HOSTS[0]]) == [HOSTS[0], HOSTS[1]]


def table(rows: int, start: int = 0) -> pa.Table:
    return pa.table({"k": pa.array(range(start, start + rows), pa.int64())})


def test_pieces_keep_under_the_limit_and_lose_no_row() -> None:
    """Small blocks travel together; a block larger than a piece is sliced by rows."""
    parts = [(0, table(10)), (1, table(10, 10)), (2, table(10_000, 20)), (3, table(5, 10_020))]
    limit = 8 * 1000
    out = pieces(parts, limit)
    assert all(piece_bytes(p) <= limit for p in out)
    assert [p for p, _ in out[0]][:2] == [0, 1]
    got = {}
    for piece in out:
        for partition, t in piece:
            got.setdefault(partition, []).extend(t.column("k").to_pylist())
    assert {p: sorted(v) for p, v in got.items()} == {p: t.column("k").to_pylist() for p, t in parts}


class Links:
    """A fake network: records each piece, the links in use and the bytes in flight."""

    def __init__(self, limiter: PushLimiter, delay: float = 0.002, fail_on: str | None = None) -> None:
        self.limiter = limiter
        self.delay = delay
        self.fail_on = fail_on
        self.lock = threading.Lock()
        self.busy: dict[str, int] = {}
        self.in_flight = 0
        self.worst_streams = 0
        self.worst_per_link = 0
        self.worst_bytes = 0
        self.received: list[tuple[str, int, list[int]]] = []

    def send(self, host: str, piece) -> None:
        nbytes = piece_bytes(piece)
        with self.lock:
            self.busy[host] = self.busy.get(host, 0) + 1
            self.in_flight += nbytes
            self.worst_streams = max(self.worst_streams, sum(self.busy.values()))
            self.worst_per_link = max(self.worst_per_link, self.busy[host])
            self.worst_bytes = max(self.worst_bytes, self.in_flight)
        time.sleep(self.delay)
        with self.lock:
            self.busy[host] -= 1
            self.in_flight -= nbytes
            if host == self.fail_on:
                raise ConnectionError(f"{host} is gone")
            for partition, t in piece:
                self.received.append((host, partition, t.column("k").to_pylist()))


def test_every_block_is_delivered_exactly_once_under_a_tiny_memory_bound() -> None:
    """Three pushes at once from one worker, 4 destinations, 2 KB pieces and 4 KB in flight: no
    more than two pieces and 4 KB are ever in flight, one per link, and every row arrives once."""
    limiter = PushLimiter(streams=2, max_bytes=4096)
    links = Links(limiter)
    sender = HOSTS[0]
    expected: dict[tuple[str, int], list[int]] = {}
    pushes = []
    for task in range(3):
        by_host = {}
        for d, host in enumerate(HOSTS[1:]):
            parts = [(10 * d + p, table(300, 10_000 * task + 1000 * d + 300 * p)) for p in range(3)]
            for p, t in parts:
                expected[(host, p)] = expected.get((host, p), []) + t.column("k").to_pylist()
            by_host[host] = pieces(parts, 2048)
        pushes.append(by_host)
    with ThreadPoolExecutor(2) as pool, ThreadPoolExecutor(3) as callers:
        done = [
            callers.submit(push_all, by_host, destination_order(sender, list(by_host)), limiter, links.send, pool)
            for by_host in pushes
        ]
        for f in done:
            f.result(timeout=30)
    assert links.worst_streams <= 2 and links.worst_per_link == 1 and links.worst_bytes <= 4096
    got: dict[tuple[str, int], list[int]] = {}
    for host, partition, keys in links.received:
        got.setdefault((host, partition), []).extend(keys)
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in expected.items()}


def test_a_failed_piece_fails_the_push_once_nothing_is_in_flight() -> None:
    limiter = PushLimiter(streams=2, max_bytes=1 << 20)
    links = Links(limiter, fail_on=HOSTS[2])
    by_host = {h: pieces([(0, table(100))], 256) for h in HOSTS[1:]}
    with ThreadPoolExecutor(2) as pool, pytest.raises(ConnectionError, match="is gone"):
        push_all(by_host, destination_order(HOSTS[0], list(by_host)), limiter, links.send, pool)
    assert links.in_flight == 0
    assert limiter.acquire([HOSTS[1]], {HOSTS[1]: 10}) == HOSTS[1]  # nothing is left held
    limiter.release(HOSTS[1], 10)


def test_a_piece_larger_than_the_bound_goes_alone() -> None:
    limiter = PushLimiter(streams=2, max_bytes=100)
    assert limiter.acquire([HOSTS[1]], {HOSTS[1]: 500}) == HOSTS[1]
    taken = []
    t = threading.Thread(target=lambda: taken.append(limiter.acquire([HOSTS[2]], {HOSTS[2]: 10})))
    t.start()
    t.join(0.2)
    assert not taken  # waits for the large piece
    limiter.release(HOSTS[1], 500)
    t.join(5)
    assert taken == [HOSTS[2]]


def test_the_limiter_measures_the_rate_its_pushes_reached() -> None:
    """Two pieces of 1 MB in flight together for about 0.1 s: about 20 MB/s."""
    limiter = PushLimiter(streams=2, max_bytes=4 << 20)
    assert limiter.rate is None
    a = limiter.acquire([HOSTS[1]], {HOSTS[1]: 1 << 20})
    b = limiter.acquire([HOSTS[2]], {HOSTS[2]: 1 << 20})
    time.sleep(0.1)
    limiter.release(a, 1 << 20)
    limiter.release(b, 1 << 20)
    assert limiter.rate is not None and 5e6 < limiter.rate < 2.2e7
