"""Unit tests of a worker's BlockStore (no cluster): reads, dropping what was read, the pull-mode
map-output layout, the memory budget with spill, and SCache §4.2 eviction order.

Every table here is a single INT64 column built from a fresh numpy array, so a table of ``n``
rows is exactly ``8 * n`` bytes (``pa.Table.nbytes``) and budgets can be worked out by hand.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pyarrow as pa
import pytest

from qengine.exchange.store import BlockStore, MissingBlocksError, concat, new_spill_dir
from qengine.transport.wire import empty_table

ROWS = 100
BLOCK = 8 * ROWS  # bytes of one ``block()`` table


def block(start: int, rows: int = ROWS) -> pa.Table:
    return pa.table({"x": pa.array(np.arange(start, start + rows, dtype=np.int64))})


def values(table: pa.Table | None) -> list[int]:
    assert table is not None
    return table.column("x").to_pylist()


def arrow_files(store: BlockStore) -> list[str]:
    return sorted(f for f in os.listdir(store.spill_dir) if f.endswith(".arrow"))


def in_memory(store: BlockStore, key: str, partition: int) -> bool:
    """Every block of the partition is in memory (and there is at least one)."""
    blocks = store.blocks(key, partition)
    return bool(blocks) and all(b.table is not None and b.path is None for b in blocks)


def spilled(store: BlockStore, key: str, partition: int) -> bool:
    """Every block of the partition is on disk (and there is at least one)."""
    blocks = store.blocks(key, partition)
    return bool(blocks) and all(b.table is None and b.path is not None and os.path.exists(b.path) for b in blocks)


def resident_bytes(store: BlockStore, parts: list[tuple[str, int]]) -> int:
    return sum(b.nbytes for k, p in parts for b in store.blocks(k, p) if b.table is not None)


@pytest.fixture
def make_store(tmp_path):
    stores: list[BlockStore] = []

    def make(budget: int | None = None) -> BlockStore:
        d = tmp_path / f"store{len(stores)}"
        d.mkdir()
        store = BlockStore(budget=budget, spill_dir=str(d))
        stores.append(store)
        return store

    yield make
    for s in stores:
        s.close()


# ---- reading ---------------------------------------------------------------------------


def test_put_get_round_trip(make_store):
    store = make_store()
    store.put("q/s", 0, block(0), source=0)
    store.put("q/s", 0, block(100), source=1)
    store.put("q/s", 1, block(1000, 7), source=0)
    assert values(store.get("q/s", 0)) == list(range(200))
    assert values(store.get("q/s", 1)) == list(range(1000, 1007))
    assert store.memory == store.nbytes() == 2 * BLOCK + 7 * 8
    # A plain read does not remove anything.
    assert values(store.get("q/s", 0)) == list(range(200))
    assert store.schema("q/s") == block(0).schema


def test_get_unknown_key_is_none(make_store):
    store = make_store()
    assert store.get("q/s", 0) is None
    store.put("q/s", 0, block(0))
    assert store.get("q/other", 0) is None


def test_get_known_key_empty_partition_is_empty_table(make_store):
    store = make_store()
    store.put("q/s", 0, block(0))
    empty = store.get("q/s", 5)
    assert empty is not None
    assert empty.num_rows == 0
    assert empty.schema == block(0).schema
    # An empty map output still registers the key and its schema.
    store.put("q/e", 3, block(0, 0))
    got = store.get("q/e", 3)
    assert got is not None and got.num_rows == 0 and got.schema == block(0).schema


def test_read_blocks_are_retired_as_backups(make_store):
    """A reader's inputs stay readable after it retires them (its output may be lost and
    made again), and are the first thing given up for memory."""
    store = make_store(budget=4 * BLOCK)
    store.put("q/s", 0, block(0), source=0)
    store.put("q/s", 0, block(100), source=1)
    store.put("q/s", 1, block(200), source=0)
    assert values(store.get("q/s", 0)) == list(range(200))
    store.retire_blocks("q/s", 0)
    assert store.memory == 3 * BLOCK
    assert store.backup_bytes == 2 * BLOCK
    assert values(store.get("q/s", 0, want=[[0, 0], [1, 0]])) == list(range(200))
    store.put("q/s", 2, block(300), source=0)
    store.put("q/s", 3, block(400), source=0)  # over budget: the oldest retired block goes, nothing spills
    assert arrow_files(store) == []
    assert [(b.source, b.backup) for b in store.blocks("q/s", 0)] == [(1, True)]
    assert store.memory == 4 * BLOCK
    with pytest.raises(MissingBlocksError):
        store.get("q/s", 0, want=[[0, 0]])


def test_reads_name_exact_task_attempts(make_store):
    store = make_store()
    for src in range(3):
        store.put("q/s", 0, block(100 * src), source=src)
    store.put("q/s", 0, block(900), source=1, attempt=1)  # task 1 ran again: its second attempt
    assert values(store.get("q/s", 0, want=[[0, 0], [2, 0]])) == list(range(100)) + list(range(200, 300))
    assert values(store.get("q/s", 0, want=[[1, 1]])) == list(range(900, 1000))
    assert store.get("q/s", 0, want=[]).num_rows == 0
    # A named block that is not here is an error, never fewer rows.
    with pytest.raises(MissingBlocksError) as missing:
        store.get("q/s", 0, want=[[0, 0], [7, 0], [2, 1]])
    assert missing.value.missing == [(2, 1), (7, 0)] and missing.value.partition == 0
    assert missing.value.lost() == [[2, 0, 1], [7, 0, 0]]
    with pytest.raises(MissingBlocksError):
        make_store().get("q/other", 3, want=[[0, 0]])  # a store that never saw the key
    assert store.memory == 4 * BLOCK
    # Retire only map task 1's first attempt.
    store.retire_blocks("q/s", 0, want=[[1, 0]])
    assert store.backup_bytes == BLOCK
    assert sorted((b.source, b.attempt, b.backup) for b in store.blocks("q/s", 0)) == [(0, 0, False), (1, 0, True), (1, 1, False), (2, 0, False)]


# ---- pull layout -----------------------------------------------------------------------


def _map_output(task: int) -> list[pa.Table]:
    """Three partitions; partition 0 has two record batches, partition 2 is empty for task 1."""
    base = 10_000 * task
    p0 = pa.concat_tables([block(base, 30), block(base + 30, 20)])
    p1 = block(base + 100, 40)
    p2 = block(base + 200, 10) if task == 0 else block(0, 0)
    return [p0, p1, p2]


def test_write_parts_one_file_per_map_task(make_store):
    store = make_store()
    outputs = {task: _map_output(task) for task in (0, 1)}
    for task, parts in outputs.items():
        store.write_parts("q/s", parts, source=task)
    assert store.memory == 0  # pull-mode output lives on disk

    files = arrow_files(store)
    assert len(files) == 2
    # Every block of a map task points into that task's one file in the spill directory.
    file_of: dict[int, str] = {}
    for p in range(3):
        for b in store.blocks("q/s", p):
            assert b.path is not None and os.path.dirname(b.path) == store.spill_dir
            assert file_of.setdefault(b.source, b.path) == b.path
    assert set(file_of) == {0, 1}  # both map tasks' files were seen, and they are the two files on disk
    assert sorted(os.path.basename(path) for path in file_of.values()) == files
    for task, path in file_of.items():
        with pa.memory_map(path) as src:
            whole = pa.ipc.open_file(src).read_all()
        # Each file holds every partition of its map task.
        assert sorted(values(whole)) == sorted(v for p in outputs[task] for v in values(p))

    for p in range(3):
        for task, parts in outputs.items():
            if parts[p].num_rows:
                assert values(store.get("q/s", p, want=[[task, 0]])) == values(parts[p])
        # Several map tasks' files for the same partition concatenate.
        got = store.get("q/s", p)
        assert values(got) == values(outputs[0][p]) + values(outputs[1][p])
        assert got.schema == block(0).schema
    for b in store.blocks("q/s", 0):
        assert b.table is None and b.path is not None and b.batches is not None
    assert store.blocks("q/s", 2)[0].source == 0 and len(store.blocks("q/s", 2)) == 1

    # Retiring file blocks leaves them where they are, outside the memory count.
    assert values(store.get("q/s", 1)) == values(outputs[0][1]) + values(outputs[1][1])
    store.retire_blocks("q/s", 1)
    assert values(store.get("q/s", 1)) == values(outputs[0][1]) + values(outputs[1][1])
    assert store.memory == 0 and store.backup_bytes == 0

    paths = [os.path.join(store.spill_dir, f) for f in files]
    assert store.release("q/") == 0  # nothing was spilled, the files were map output
    assert not any(os.path.exists(p) for p in paths)
    assert arrow_files(store) == []
    assert store.get("q/s", 0) is None


# ---- memory budget -------------------------------------------------------------------


def test_budget_spills_without_losing_rows(make_store):
    budget = 4 * BLOCK + 400
    store = make_store(budget)
    parts = [(k, p) for k in ("q/a", "q/b") for p in range(5)]
    expected: dict[tuple[str, int], list[int]] = {}
    for i, (k, p) in enumerate(parts):
        store.put(k, p, block(i * ROWS), source=0)
        expected[(k, p)] = list(range(i * ROWS, (i + 1) * ROWS))
        assert store.memory <= budget
        assert store.memory == resident_bytes(store, parts)
    assert store.memory <= budget
    files = arrow_files(store)
    assert files, "putting more than the budget must spill"
    spilled_bytes = sum(b.nbytes for k, p in parts for b in store.blocks(k, p) if b.table is None)
    assert spilled_bytes >= len(parts) * BLOCK - budget
    for k, p in parts:
        assert values(store.get(k, p)) == expected[(k, p)]

    # Consuming a spilled partition reads it from disk and leaves memory alone.
    k, p = next((k, p) for k, p in parts if spilled(store, k, p))
    before = store.memory
    assert values(store.get(k, p)) == expected[(k, p)]
    assert store.memory == before

    assert store.release("q/") == spilled_bytes
    assert store.memory == 0
    assert arrow_files(store) == []
    assert store.get("q/a", 0) is None


# ---- eviction order (SCache §4.2) -------------------------------------------------------


def test_eviction_incomplete_unit_first_within_shuffle(make_store):
    # Round 0 = {0, 1} is still waiting for map task 1; round 1 = {2, 3} has both map tasks.
    # Without the incompleteness rule round 1 (larger reducer ids) would go first.
    store = make_store(budget=5 * BLOCK)
    store.expect("q/s", seq=0, expected=2, partitions=[0, 1, 2, 3], slots=2)
    store.put("q/s", 0, block(0), source=0)
    store.put("q/s", 1, block(100), source=0)
    for src in (0, 1):
        store.put("q/s", 2, block(1000 + 100 * src), source=src)
        store.put("q/s", 3, block(2000 + 100 * src), source=src)
    # 6 blocks > 5: spilling the incomplete round (2 blocks) is enough.
    assert spilled(store, "q/s", 0) and spilled(store, "q/s", 1)
    assert in_memory(store, "q/s", 2) and in_memory(store, "q/s", 3)
    assert store.memory == 4 * BLOCK
    assert len(arrow_files(store)) == 2


def test_eviction_incomplete_unit_first_across_shuffles(make_store):
    # The older shuffle is incomplete, the newer one complete: incompleteness wins over seq.
    store = make_store(budget=3 * BLOCK)
    store.expect("q/old", seq=0, expected=2, partitions=[0, 1], slots=2)
    store.expect("q/new", seq=1, expected=1, partitions=[0, 1], slots=2)
    store.put("q/old", 0, block(0), source=0)
    store.put("q/old", 1, block(100), source=0)
    store.put("q/new", 0, block(200), source=0)
    store.put("q/new", 1, block(300), source=0)  # triggers; the complete unit is the one just put
    assert spilled(store, "q/old", 0) and spilled(store, "q/old", 1)
    assert in_memory(store, "q/new", 0) and in_memory(store, "q/new", 1)
    assert store.memory == 2 * BLOCK


def test_eviction_most_recent_shuffle_first(make_store):
    # Both complete. The newer shuffle's unit is round 0 and the older one's is round 1, so
    # only the shuffle order can explain evicting the newer one.
    store = make_store(budget=3 * BLOCK)
    store.expect("q/a", seq=0, expected=1, partitions=[0, 1, 2, 3], slots=2)
    store.expect("q/b", seq=1, expected=1, partitions=[0, 1], slots=2)
    store.put("q/b", 0, block(0), source=0)
    store.put("q/b", 1, block(100), source=0)
    store.put("q/a", 2, block(200), source=0)
    store.put("q/a", 3, block(300), source=0)  # the older shuffle's put triggers the spill
    assert spilled(store, "q/b", 0) and spilled(store, "q/b", 1)
    assert in_memory(store, "q/a", 2) and in_memory(store, "q/a", 3)
    assert store.memory == 2 * BLOCK
    assert values(store.get("q/b", 1)) == list(range(100, 200))


def test_eviction_larger_reducer_round_first(make_store):
    # This host's reducers are 2, 5, 9, 11 with 2 slots: round 0 = {2, 5}, round 1 = {9, 11}
    # (rounds are positions among this host's partitions, not partition ids // slots).
    store = make_store(budget=3 * BLOCK)
    store.expect("q/s", seq=0, expected=1, partitions=[11, 2, 9, 5], slots=2)
    store.put("q/s", 9, block(0), source=0)
    store.put("q/s", 11, block(100), source=0)
    store.put("q/s", 2, block(200), source=0)
    store.put("q/s", 5, block(300), source=0)  # round 0 triggers, round 1 goes
    assert spilled(store, "q/s", 9) and spilled(store, "q/s", 11)
    assert in_memory(store, "q/s", 2) and in_memory(store, "q/s", 5)
    assert store.memory == 2 * BLOCK


def test_eviction_all_or_nothing(make_store):
    # Rounds of 3 reducers, 2 map tasks each: 12 blocks of BLOCK/2. The budget is exceeded by
    # one half-block, yet the whole round 1 (6 blocks, 3 partitions) is spilled together.
    half = ROWS // 2
    store = make_store(budget=11 * 8 * half)
    store.expect("q/s", seq=0, expected=2, partitions=list(range(6)), slots=3)
    n = 0
    for partitions in ([0, 1, 2], [3, 4, 5]):
        for src in (0, 1):
            for p in partitions:
                store.put("q/s", p, block(n * half, half), source=src)
                n += 1
    for p in (3, 4, 5):
        assert spilled(store, "q/s", p)
        assert len(store.blocks("q/s", p)) == 2
    for p in (0, 1, 2):
        assert in_memory(store, "q/s", p)
    assert store.memory == 6 * 8 * half
    assert len(arrow_files(store)) == 6
    assert sorted(v for p in range(6) for v in values(store.get("q/s", p))) == list(range(12 * half))


def test_eviction_foreign_partition_does_not_drag_a_round(make_store):
    # This host runs reducers 1 and 3 (one round, complete). A map task here has just written its
    # block for reducer 0, which lives elsewhere and is about to be pushed. Spilling that single
    # block is enough; the round {1, 3} must stay in memory.
    store = make_store(budget=2 * BLOCK)
    store.expect("q/s", seq=0, expected=1, partitions=[1, 3], slots=2)
    store.put("q/s", 1, block(0), source=0)
    store.put("q/s", 3, block(100), source=0)
    store.put("q/s", 0, block(200), source=5)
    assert spilled(store, "q/s", 0)
    assert in_memory(store, "q/s", 1) and in_memory(store, "q/s", 3)


@pytest.mark.parametrize(("key", "prefix"), [("table/7/0", "table/7/"), ("q/s1", "q/s1")])
def test_release_reports_spill_of_narrower_prefix(make_store, key, prefix):
    store = make_store(budget=BLOCK)
    store.put(key, 0, block(0))
    store.put(key, 1, block(100))
    assert store.memory == BLOCK
    assert store.release(prefix) == BLOCK
    assert arrow_files(store) == []


# ---- take_blocks ---------------------------------------------------------------------------


def test_take_blocks_removes_one_map_task(make_store):
    store = make_store()
    mine = [block(0, 10), block(0, 0), block(20, 30)]
    other = [block(1000, 5), block(1100, 6), block(1200, 7)]
    store.put_parts("q/s", mine, source=4)
    store.put_parts("q/s", other, source=9)
    assert store.memory == (10 + 30 + 5 + 6 + 7) * 8
    store.put_parts("q/s", [block(5000, 3)] * 3, source=4, attempt=1)  # a later attempt of task 4 stays
    taken = store.take_blocks("q/s", 4, 0)
    assert sorted(taken) == [0, 2]  # only partitions where task 4 had rows
    assert values(taken[0]) == values(mine[0])
    assert values(taken[2]) == values(mine[2])
    assert store.memory == (5 + 6 + 7 + 3 * 3) * 8
    for p in range(3):
        assert [(b.source, b.attempt) for b in store.blocks("q/s", p)] == [(9, 0), (4, 1)]
        assert values(store.get("q/s", p, want=[[9, 0]])) == values(other[p])
    assert store.take_blocks("q/s", 4, 0) == {}


def test_take_blocks_of_spilled_and_file_blocks(make_store):
    store = make_store(budget=BLOCK)
    store.put_parts("q/s", [block(0), block(100)], source=0)  # over budget: spilled
    store.write_parts("q/s", [block(500, 10), block(600, 10)], source=1)
    assert store.memory <= BLOCK
    assert any(b.table is None for p in (0, 1) for b in store.blocks("q/s", p) if b.source == 0)
    taken = store.take_blocks("q/s", 0, 0)
    assert values(taken[0]) == list(range(100)) and values(taken[1]) == list(range(100, 200))
    assert store.memory == 0
    taken = store.take_blocks("q/s", 1, 0)
    assert values(taken[0]) == list(range(500, 510)) and values(taken[1]) == list(range(600, 610))
    assert store.blocks("q/s", 0) == [] and store.blocks("q/s", 1) == []


# ---- concurrency ---------------------------------------------------------------------------


def test_concurrent_put_and_retire_lose_no_rows(make_store):
    partitions, writers, puts, rows = 4, 4, 150, 20
    store = make_store(budget=10 * 8 * rows)
    store.expect("q/s", seq=0, expected=writers, partitions=list(range(partitions)), slots=2)
    got: list[list[int]] = [[] for _ in range(partitions)]
    done = threading.Event()
    warm = threading.Event()  # readers start once a writer has gone past the budget: spills happen
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        rnd = random.Random(w)
        try:
            for i in range(puts):
                start = (w * puts + i) * rows
                # every put a map task of its own: a block is named by its task and attempt
                store.put("q/s", rnd.randrange(partitions), block(start, rows), source=w * puts + i)
                if i == 30:
                    warm.set()
        except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)

    seen: list[set[tuple[int, int]]] = [set() for _ in range(partitions)]

    def drain(p: int) -> None:
        """Read the blocks not read yet, by name, and retire exactly those, as a reducer does."""
        want = [[b.source, b.attempt] for b in store.blocks("q/s", p) if (b.source, b.attempt) not in seen[p]]
        table = store.get("q/s", p, want=want)  # None until the first put registers the key
        if table is not None:
            got[p].extend(values(table))
            seen[p].update((t, a) for t, a in want)
            store.retire_blocks("q/s", p, want=want)

    def reader(p: int) -> None:
        try:
            warm.wait(timeout=60)
            while not done.is_set():
                drain(p)
            drain(p)
        except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)

    threads_w = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    threads_r = [threading.Thread(target=reader, args=(p,)) for p in range(partitions)]
    for t in threads_r + threads_w:
        t.start()
    for t in threads_w:
        t.join(timeout=60)
    done.set()
    for t in threads_r:
        t.join(timeout=60)
    assert not errors, errors
    everything = sorted(v for part in got for v in part)
    assert everything == list(range(writers * puts * rows))
    assert store.memory == store.backup_bytes  # what is left in memory was read, and retired
    assert arrow_files(store), "the budget should have forced spills during the run"


# ---- backups of pushed blocks -----------------------------------------------------------


def test_backups_are_read_by_their_exact_attempt(make_store):
    """A sender's copy of pushed blocks answers a reader that names it, as the pushed block
    did; other attempts' blocks are not mixed in."""
    store = make_store()
    store.put_parts("q/s", [block(0, 3), block(100, 3)], source=2)  # task 2's own, local, blocks
    pushed = store.take_blocks("q/s", 2, 0, [1])
    assert store.put_backups("q/s", 2, 0, pushed) == [1]
    assert store.backup_bytes == 3 * 8
    assert values(store.get("q/s", 1, want=[[2, 0]])) == [100, 101, 102]
    with pytest.raises(MissingBlocksError):
        store.get("q/s", 1, want=[[2, 1]])
    store.retire_blocks("q/s", 1, want=[[2, 0]])  # a copy read is still a copy
    assert store.backup_bytes == 3 * 8
    assert store.memory == 6 * 8


def test_backups_beyond_their_limit_are_not_kept(make_store):
    """The coordinator counts on the copies a push reports kept: the first ones stay, and past
    the limit no more are kept."""
    store = make_store(budget=8 * BLOCK)  # backups may take half: 4 blocks
    kept = [store.put_backups("q/s", task, 0, {task % 2: block(task * ROWS)}) for task in range(6)]
    assert kept == [[0], [1], [0], [1], [], []]
    assert store.backup_bytes == 4 * BLOCK
    held = sorted(b.source for p in range(2) for b in store.blocks("q/s", p))
    assert held == [0, 1, 2, 3]
    assert arrow_files(store) == []  # backups are never spilled
    # A block read once the limit is reached is not kept either: it is dropped.
    store.put("q/s", 5, block(500), source=7)
    store.retire_blocks("q/s", 5)
    assert store.blocks("q/s", 5) == [] and store.backup_bytes == 4 * BLOCK


def test_memory_pressure_drops_backups_before_spilling(make_store):
    store = make_store(budget=4 * BLOCK)
    store.put_backups("q/s", 0, 0, {0: block(0), 1: block(100)})
    store.put("q/s", 2, block(200), source=1)
    store.put("q/s", 3, block(300), source=1)
    assert arrow_files(store) == []
    store.put("q/s", 4, block(400), source=1)  # over budget: one backup goes, nothing spills
    assert arrow_files(store) == []
    assert store.backup_bytes == BLOCK
    assert store.memory == 4 * BLOCK
    assert [values(store.get("q/s", p)) for p in (2, 3, 4)] == [list(range(s, s + ROWS)) for s in (200, 300, 400)]


def test_copy_blocks_reads_one_attempt_and_leaves_it_in_place(make_store):
    """A copy for a second worker (``runtime.block_copies``) is one map task attempt's blocks,
    from its pull-mode file or from memory; the blocks stay where they are, and backups (copies
    already) are not copied again."""
    store = make_store()
    store.write_parts("q/s", [block(0, 2), block(10, 0), block(20, 3)], source=4, attempt=1)
    store.put_parts("q/s", [block(50, 1)], source=4, attempt=0)  # an older attempt's block
    store.put_backups("q/s", 9, 0, {0: block(90, 2)})
    copied = store.copy_blocks("q/s", 4, 1)
    assert {p: values(t) for p, t in copied.items()} == {0: [0, 1], 2: [20, 21, 22]}
    assert values(store.get("q/s", 2, want=[[4, 1]])) == [20, 21, 22]  # still here
    assert store.copy_blocks("q/s", 9, 0) == {}
    assert store.copy_blocks("q/other", 4, 1) == {}


def test_a_block_and_its_copy_are_never_both_held(make_store):
    """A worker holding a copy of a block that is then pushed to it (or holding the block and
    then sent a copy) keeps one of the two: a reader naming the block must read its rows once."""
    store = make_store()
    assert store.put_backups("q/s", 3, 0, {1: block(0, 4)}) == [1]
    store.put("q/s", 1, block(0, 4), source=3, attempt=0)  # the block itself arrives
    assert values(store.get("q/s", 1, want=[[3, 0]])) == [0, 1, 2, 3]
    assert store.backup_bytes == 0
    assert store.put_backups("q/s", 3, 0, {1: block(0, 4)}) == []  # held already: not kept twice
    assert values(store.get("q/s", 1, want=[[3, 0]])) == [0, 1, 2, 3]
    assert store.put_backups("q/s", 3, 1, {1: block(7, 1)}) == [1]  # another attempt is another block
    assert values(store.get("q/s", 1, want=[[3, 1]])) == [7]


# ---- spill directories of killed workers -----------------------------------------------------


def test_a_new_spill_dir_removes_those_of_processes_gone(tmp_path, monkeypatch):
    """A killed worker cannot remove its spill files; the next worker on the machine does, and
    leaves alone the directory of a worker that still runs."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = "import sys, time; from qengine.exchange.store import new_spill_dir; print(new_spill_dir(), flush=True); time.sleep(60)"

    def worker() -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        path = proc.stdout.readline().strip()
        with open(os.path.join(path, "map-0.arrow"), "w") as f:
            f.write("blocks")
        return proc, path

    (killed, gone), (running, kept) = worker(), worker()
    try:
        killed.kill()
        killed.wait()
        mine = new_spill_dir()
        assert not os.path.exists(gone)
        assert os.listdir(kept) and os.path.exists(os.path.join(kept, "map-0.arrow"))
        assert os.path.dirname(mine) == str(tmp_path) and mine != kept
    finally:
        for proc in (killed, running):
            proc.kill()
            proc.wait()
            proc.stdout.close()


def test_drop_blocks_removes_exactly_what_was_named(make_store):
    """A reader's own host drops what it reads, as it reads it: memory goes at once."""
    store = make_store()
    store.put("q/s", 0, block(0), source=0)
    store.put("q/s", 0, block(100), source=1)
    store.drop_blocks("q/s", 0, want=[[1, 0]])
    assert [b.source for b in store.blocks("q/s", 0)] == [0]
    assert store.memory == BLOCK
    store.drop_blocks("q/s", 0)
    assert store.blocks("q/s", 0) == [] and store.memory == 0


def test_released_backups_are_not_held_on_to(make_store):
    """A backup that leaves the store (read, released) leaves no reference behind that would
    keep its rows in memory."""
    store = make_store()
    table = block(0)
    store.put_backups("q/s", 0, 0, {0: table})
    store.put("q/t", 0, block(100), source=1)
    store.retire_blocks("q/t", 0)
    assert store.backup_bytes == 2 * BLOCK
    store.release("q/")
    assert store.backup_bytes == 0 and store.memory == 0
    assert store._backups == {}


def test_empty_tables_keep_their_fields_metadata():
    """Empty tables are made once per schema, told apart by the fields' metadata too (where the
    types Arrow lacks travel), which a schema's == leaves out."""
    plain = pa.schema([pa.field("a", pa.int64())])
    tagged = pa.schema([pa.field("a", pa.int64(), metadata={b"qengine.type": b"HUGEINT"})])
    assert plain == tagged  # why the cache cannot be keyed by the schema itself
    assert empty_table(plain).schema.field("a").metadata is None
    assert empty_table(tagged).schema.field("a").metadata == {b"qengine.type": b"HUGEINT"}
    assert concat([], tagged).schema.field("a").metadata == {b"qengine.type": b"HUGEINT"}
    assert empty_table(tagged).num_rows == 0
