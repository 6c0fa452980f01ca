"""A push that a reducer's host fails leaves the blocks meant for it with their sender.

A map task's blocks are taken out of its worker's store to be pushed (``TaskRunner.push``). If
the host they were meant for fails, because it died or stopped answering, they must not be lost
with the call: the sender holds them again and reports which hosts failed, so the coordinator
reads them from the sender instead of running the map task again. Blocks that reached a host
that answered are reported sent, and keep a copy at the sender as before.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from qengine.errors import OperationalError
from qengine.exchange import push_schedule
from qengine.exchange.store import BlockStore
from qengine.runtime import task
from qengine.runtime.task import TaskRunner

KEY, TASK, ATTEMPT = "q1/0", 3, 1
SENDER, GOOD, BAD = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


class Hosts:
    """Stands in for the worker's client pool: ``GOOD`` keeps what it is sent; ``BAD`` takes
    its first ``answers`` pieces, then refuses the rest, as a worker killed mid-push does."""

    def __init__(self, answers: int = 0) -> None:
        self.answers = answers
        self.got: dict[str, list[tuple[int, int]]] = {GOOD: [], BAD: []}

    def get(self, address: str) -> Hosts:
        self._to = address
        return self

    def forget(self, address: str) -> None:
        pass

    def put_blocks(self, key: str, task: int, attempt: int, piece: list[tuple[int, pa.Table]], copies: bool = False) -> list[int]:
        address = self._to
        if address == BAD and len(self.got[BAD]) >= self.answers:
            raise OperationalError(f"worker {address} refused the connection")
        self.got[address].extend((p, t.num_rows) for p, t in piece)
        return []


def partition(p: int, rows: int) -> pa.Table:
    return pa.table({"k": pa.array(range(p * 1000, p * 1000 + rows), pa.int64())})


@pytest.fixture
def store(tmp_path) -> BlockStore:
    store = BlockStore(spill_dir=str(tmp_path))
    yield store
    store.close()


def pushed(store: BlockStore, hosts: Hosts, parts: list[pa.Table]) -> dict:
    store.put_parts(KEY, parts, TASK, ATTEMPT)
    runner = TaskRunner(store, SENDER, hosts, threads=1)  # type: ignore[arg-type]
    destinations = {"0": GOOD, "1": BAD, "2": SENDER}
    return runner.push({"key": KEY, "task": TASK, "attempt": ATTEMPT, "destinations": destinations})


def test_blocks_for_a_failed_host_stay_with_the_sender(store: BlockStore) -> None:
    parts = [partition(0, 10), partition(1, 20), partition(2, 30)]
    hosts = Hosts()
    result = pushed(store, hosts, parts)
    assert result["sent"] == {"0": GOOD}
    assert list(result["unreachable"]) == [BAD] and "refused" in result["unreachable"][BAD]
    assert result["sent_bytes"] == parts[0].nbytes
    assert hosts.got == {GOOD: [(0, 10)], BAD: []}
    mine = [[TASK, ATTEMPT]]
    assert store.get(KEY, 1, want=mine).equals(parts[1])  # held again, to be fetched from here
    assert store.get(KEY, 2, want=mine).equals(parts[2])  # never left
    assert result["backups"] == [0] and store.get(KEY, 0, want=mine).equals(parts[0])  # a copy of what went
    assert not [b for b in store.blocks(KEY, 1) if b.backup]  # held, not as a copy: no limit drops it


def test_a_block_the_failed_host_got_only_part_of_is_held_whole(store: BlockStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task, "pieces", lambda parts: push_schedule.pieces(parts, 4000))  # partition 1 in several
    parts = [partition(0, 10), partition(1, 2000), partition(2, 0)]
    hosts = Hosts(answers=1)
    result = pushed(store, hosts, parts)
    landed = sum(rows for p, rows in hosts.got[BAD] if p == 1)
    assert 0 < landed < 2000, hosts.got  # the host took some of it before it failed
    assert result["sent"] == {"0": GOOD} and list(result["unreachable"]) == [BAD]
    assert store.get(KEY, 1, want=[[TASK, ATTEMPT]]).equals(parts[1])
