"""A worker's block store: shuffle blocks, query results and session-table pieces.

Blocks are keyed by a string (``<query>/<shuffle>`` or ``table/<id>/…``) and a partition; each
remembers the map task that produced it (``source``) and which attempt of that task
(``attempt``): a reader names the exact (task, attempt) blocks it wants, so a task that ran twice
(retried, recomputed after a lost worker, or speculated) is never read twice, and a block that
is gone is an error rather than fewer rows. A block lives in memory, or on local disk
as Arrow IPC: pull-mode map output is written to one file per map task with an index of which
record batches belong to which partition (Spark's sort-shuffle layout), and in-memory blocks
spill to disk when the store's memory budget is exceeded.

*Backups* are in-memory blocks kept only so that a lost worker's work need not be redone: a map
task's blocks pushed to their reducers' hosts (prefetch) stay on the sender, as SCache keeps
shuffle output after transferring it (§4.4), and blocks a reader on another worker has read
stay where they were read (a reader's own host drops what it read once all its inputs are
loaded, to free its memory). If a reducer's host is lost, its reducers read the senders' copies;
if a reducer's output is lost, its new attempt reads its inputs again instead of having their
map tasks run again. Backups are the first thing given up for memory (dropped, oldest first, never spilled:
recomputation remains), and at most ``BACKUP_SHARE`` of the budget (``BACKUP_BYTES`` without one)
is held as backups: past it, no more are kept (the first ones stay, as the coordinator counts on
them). They go with their query.

Eviction follows SCache §4.2. The unit is a round of reducers (``slots`` consecutive reduce
partitions placed on this host) and a unit is spilled whole (all-or-nothing). Incomplete units
(still waiting for map output) go first; then, across shuffles, the most recently submitted;
inside a shuffle, the round with the larger reducer ids.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from qengine.transport.wire import empty_table

_files = itertools.count()
BACKUP_BYTES = 32 << 20  # backups held at most, without a memory budget
BACKUP_SHARE = 0.5  # of the budget, with one


@dataclass
class Block:
    nbytes: int
    source: int
    attempt: int = 0
    table: pa.Table | None = None
    path: str | None = None
    batches: tuple[int, int] | None = None  # (first, count) inside a shared map-output file
    backup: bool = False  # a copy of a block pushed to its reducer's host

    def snapshot(self) -> tuple[pa.Table | None, str | None, tuple[int, int] | None]:
        """Where the data is right now; take it under the store lock, as a spill may move it."""
        return self.table, self.path, self.batches


def load(table: pa.Table | None, path: str | None, batches: tuple[int, int] | None) -> pa.Table:
    """A block's rows, from memory or from its Arrow IPC file."""
    if table is not None:
        return table
    assert path is not None
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        first, count = batches if batches is not None else (0, reader.num_record_batches)
        loaded = pa.Table.from_batches([reader.get_batch(i) for i in range(first, first + count)], schema=reader.schema)
    # Copy out of the mapping so the file can be deleted while the table is in use.
    return loaded.combine_chunks() if loaded.num_rows else loaded


def concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """The rows of ``tables`` as one table (``schema``'s empty table if there are none)."""
    tables = [t for t in tables if t.num_rows] or [empty_table(schema)]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def _named(want: list[list[int]] | None) -> Callable[[Block], bool]:
    """Whether a block is one of the (map task, attempt) pairs ``want`` names (None: any)."""
    pairs = {(t, a) for t, a in want} if want is not None else None
    return lambda b: pairs is None or (b.source, b.attempt) in pairs


class MissingBlocksError(KeyError):
    """Blocks a reader named are not in this store: see ``BlockStore.get``."""

    def __init__(self, key: str, partition: int, missing: list[tuple[int, int]]) -> None:
        tasks = [t for t, _ in missing]
        super().__init__(f"{len(missing)} blocks of {key} partition {partition} are not here (map tasks {tasks[:8]})")
        self.key, self.partition, self.missing = key, partition, missing

    def lost(self) -> list[list[int]]:
        """The missing blocks as ``[map task, partition, attempt]``, as ``errors.input_lost`` reports them."""
        return [[t, self.partition, a] for t, a in self.missing]


@dataclass
class _Shuffle:
    """What the coordinator told this store about a shuffle it receives reducers' data for."""

    seq: int
    expected: int
    rounds: dict[int, int] = field(default_factory=dict)  # partition → round on this host


SPILL_PREFIX = "qengine-shuffle-"
SPILL_LOCK = ".owner.lock"  # held (flock) by the process using a spill directory made by new_spill_dir


def new_spill_dir() -> str:
    """A spill directory of this process's own, locked for as long as the process lives.

    A worker that is killed cannot remove its spill files; the next one started on the machine
    does: every directory made here whose lock is free (its owner is gone, however it ended) is
    removed first. An flock, unlike a pid, holds across PID namespaces sharing one /tmp.
    """
    root = tempfile.gettempdir()
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if entry.startswith(SPILL_PREFIX) and os.path.isfile(os.path.join(path, SPILL_LOCK)) and _abandoned(path):
            shutil.rmtree(path, ignore_errors=True)
    path = tempfile.mkdtemp(prefix=SPILL_PREFIX)
    lock = os.open(os.path.join(path, SPILL_LOCK), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # kept open: released when the process ends
    return path


def _abandoned(path: str) -> bool:
    """Whether no process holds the lock of a spill directory (one we may not open is not ours)."""
    try:
        fd = os.open(os.path.join(path, SPILL_LOCK), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its owner runs
    finally:
        os.close(fd)
    return True


class BlockStore:
    def __init__(self, budget: int | None = None, spill_dir: str | None = None) -> None:
        self.budget = budget
        self.spill_dir = spill_dir or new_spill_dir()
        self._blocks: dict[tuple[str, int], list[Block]] = defaultdict(list)
        self._schemas: dict[str, pa.Schema] = {}
        self._staged: dict[str, list[tuple[int, pa.Table]]] = defaultdict(list)
        self._shuffles: dict[str, _Shuffle] = {}
        self._files: dict[str, list[str]] = defaultdict(list)
        self._spilled: dict[str, int] = defaultdict(int)
        self.memory = 0
        # id(block) → (key, partition, block) of every backup, oldest first; a block leaves it
        # as it leaves the store, so nothing here outlives its block
        self._backups: dict[int, tuple[str, int, Block]] = {}
        self.backup_bytes = 0
        self.backup_limit = int(budget * BACKUP_SHARE) if budget is not None else BACKUP_BYTES
        self._lock = threading.RLock()

    # ---- writing -----------------------------------------------------------------------

    def put(self, key: str, partition: int, table: pa.Table, source: int = -1, attempt: int = 0) -> None:
        with self._lock:
            self._schemas.setdefault(key, table.schema)
            # A copy of the same block kept here before (``put_backups``) would be read twice. Most
            # puts find no backup at all: they skip the scan.
            if self.backup_bytes and any(b.backup and (b.source, b.attempt) == (source, attempt) for b in self._blocks.get((key, partition), ())):
                self._take(key, partition, lambda b: b.backup and (b.source, b.attempt) == (source, attempt))
            if table.num_rows or not self._blocks.get((key, partition)):
                self._blocks[(key, partition)].append(Block(table.nbytes, source, attempt, table))
                self.memory += table.nbytes
            self._enforce_budget()

    def put_parts(self, key: str, parts: list[pa.Table], source: int = -1, attempt: int = 0) -> None:
        with self._lock:
            if parts:
                self._schemas.setdefault(key, parts[0].schema)
            for p, table in enumerate(parts):
                if table.num_rows:
                    self._blocks[(key, p)].append(Block(table.nbytes, source, attempt, table))
                    self.memory += table.nbytes
            self._enforce_budget()

    def put_backups(self, key: str, source: int, attempt: int, blocks: dict[int, pa.Table]) -> list[int]:
        """Keep a copy of blocks just pushed to their reducers' hosts; returns the partitions
        kept, which the coordinator counts on. Backups already kept stay: once the limit is
        reached no more are kept (dropping older ones would leave the coordinator counting on
        copies that are gone, and every reader of them would fail before they were made again)."""
        kept = []
        with self._lock:
            for p, table in blocks.items():
                self._schemas.setdefault(key, table.schema)
                block = Block(table.nbytes, source, attempt, table)
                if any((b.source, b.attempt) == (source, attempt) for b in self._blocks.get((key, p), ())):
                    continue  # held here already (pushed here): a second copy would be read twice
                if table.num_rows and self._keep_as_backup(key, p, block):
                    self._blocks[(key, p)].append(block)
                    self.memory += table.nbytes
                    kept.append(p)
            self._enforce_budget()
        return kept

    def _keep_as_backup(self, key: str, partition: int, block: Block) -> bool:
        """Count an in-memory block as a backup, if the limit leaves room. Under the lock."""
        if self.backup_bytes + block.nbytes > self.backup_limit:
            return False
        block.backup = True
        self._backups[id(block)] = (key, partition, block)
        self.backup_bytes += block.nbytes
        return True

    def _drop_backups(self, down_to: int) -> None:
        """Drop the oldest backups until at most ``down_to`` bytes are held. Under the lock."""
        while self._backups and self.backup_bytes > max(0, down_to):
            key, p, block = next(iter(self._backups.values()))
            self._take(key, p, lambda b, dropped=block: b is dropped)

    def write_parts(self, key: str, parts: list[pa.Table], source: int, attempt: int = 0) -> None:
        """Pull mode: one Arrow IPC file for the map task, one batch run per partition."""
        schema = parts[0].schema
        path = os.path.join(self.spill_dir, f"map-{next(_files)}.arrow")
        index: list[tuple[int, int]] = []
        batch = 0
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for part in parts:
                batches = part.to_batches() if part.num_rows else []
                for b in batches:
                    writer.write_batch(b)
                index.append((batch, len(batches)))
                batch += len(batches)
        with self._lock:
            self._schemas.setdefault(key, schema)
            self._files[key].append(path)
            for p, (part, span) in enumerate(zip(parts, index, strict=True)):
                if part.num_rows:
                    self._blocks[(key, p)].append(Block(part.nbytes, source, attempt, path=path, batches=span))

    def stage(self, key: str, table: pa.Table, source: int = -1, attempt: int = 0) -> None:
        """Hold unpartitioned map output until the range bounds are known."""
        with self._lock:
            self._schemas.setdefault(key, table.schema)
            self._staged[key].append((source, attempt, table))

    def take_staged(self, key: str, wanted: dict[int, int] | None = None) -> list[tuple[int, int, pa.Table]]:
        """Remove and return staged map output: of the tasks (and attempts) ``wanted`` names, or all."""
        with self._lock:
            staged = self._staged.get(key, [])
            taken = [s for s in staged if wanted is None or wanted.get(s[0]) == s[1]]
            self._staged[key] = [s for s in staged if s not in taken]
            return taken

    # ---- reading -----------------------------------------------------------------------

    def schema(self, key: str) -> pa.Schema | None:
        return self._schemas.get(key)

    def blocks(self, key: str, partition: int) -> list[Block]:
        with self._lock:
            return list(self._blocks.get((key, partition), ()))

    def get(self, key: str, partition: int, want: list[list[int]] | None = None) -> pa.Table | None:
        """The blocks of a partition as one table; None if this store never saw ``key``.

        ``want`` names the (map task, attempt) blocks to read, exactly: blocks of other attempts
        are left alone, and a named block that is not here raises :class:`MissingBlocksError`.
        """
        wanted = _named(want)
        with self._lock:
            schema = self._schemas.get(key)
            if want is not None:
                held = {(b.source, b.attempt) for b in self._blocks.get((key, partition), ())}
                missing = sorted({(t, a) for t, a in want} - held)
                if missing:
                    raise MissingBlocksError(key, partition, missing)
            if schema is None:
                return None
            snapshots = [b.snapshot() for b in self._blocks.get((key, partition), ()) if wanted(b)]
        return concat([load(*snap) for snap in snapshots], schema)

    def drop_blocks(self, key: str, partition: int, want: list[list[int]] | None = None) -> None:
        """Remove the blocks of a partition that ``want`` names (or all): read by their reader."""
        with self._lock:
            self._take(key, partition, _named(want))

    def retire_blocks(self, key: str, partition: int, want: list[list[int]] | None = None) -> None:
        """Blocks of a partition that its reader has used (those ``want`` names, or all) become
        backups: a shuffle partition has one reader, which retires what it read once its output
        is made. Kept while memory allows, they spare a reader made again after a lost worker
        from having its inputs made again too (and a reader that failed part-way retired nothing)."""
        wanted = _named(want)
        with self._lock:
            for block in self._blocks.get((key, partition), ()):
                if not wanted(block) or block.backup or block.table is None:
                    continue
                if not self._keep_as_backup(key, partition, block):  # full: read, so gone
                    self._take(key, partition, lambda b, retired=block: b is retired)

    def take_blocks(self, key: str, source: int, attempt: int, partitions: list[int] | None = None) -> dict[int, pa.Table]:
        """Remove and return one map task attempt's blocks of ``partitions`` (default all), to push them."""
        with self._lock:
            schema = self._schemas.get(key)
            if schema is None:
                return {}
            if partitions is None:
                partitions = [p for k, p in self._blocks if k == key]
            taken = {
                p: [b.snapshot() for b in self._take(key, p, lambda b: (b.source, b.attempt) == (source, attempt))]
                for p in partitions
            }
        return {p: concat([load(*snap) for snap in snaps], schema) for p, snaps in taken.items() if snaps}

    def copy_blocks(self, key: str, source: int, attempt: int) -> dict[int, pa.Table]:
        """One map task attempt's blocks, partition by partition, left where they are: what a
        copy on another worker is made from (``TaskRunner.copy_blocks``). Backups are not
        copied: they are copies already."""
        with self._lock:
            schema = self._schemas.get(key)
            snaps = {
                p: [b.snapshot() for b in blocks if (b.source, b.attempt) == (source, attempt) and not b.backup]
                for (k, p), blocks in self._blocks.items()
                if k == key
            }
        if schema is None:
            return {}
        return {p: concat([load(*snap) for snap in s], schema) for p, s in snaps.items() if s}

    def _take(self, key: str, partition: int, taken: Callable[[Block], bool]) -> list[Block]:
        """Remove the partition's blocks for which ``taken`` holds; returns them. Under the lock."""
        stored = self._blocks.get((key, partition), [])
        out: list[Block] = []
        rest: list[Block] = []
        for b in stored:
            (out if taken(b) else rest).append(b)
        if rest:
            self._blocks[(key, partition)] = rest
        else:
            self._blocks.pop((key, partition), None)
        self.memory -= sum(b.nbytes for b in out if b.table is not None)
        self._forget_backups(out)
        return out

    def _forget_backups(self, blocks: list[Block]) -> None:
        """Blocks leaving the store are backups no more. Under the lock."""
        for b in blocks:
            if b.backup:
                b.backup = False
                self.backup_bytes -= b.nbytes
                del self._backups[id(b)]

    # ---- memory budget -----------------------------------------------------------------

    def expect(self, key: str, seq: int, expected: int, partitions: list[int], slots: int) -> None:
        """Register a shuffle whose reducers run here: defines the eviction units."""
        with self._lock:
            rounds = {p: i // max(1, slots) for i, p in enumerate(sorted(partitions))}
            self._shuffles[key] = _Shuffle(seq, expected, rounds)

    def _unit(self, key: str, partition: int) -> tuple[str, str, int]:
        """The eviction unit of a block: its reducer round here, or the partition alone for
        blocks whose reducer runs elsewhere (map output waiting to be pushed)."""
        shuffle = self._shuffles.get(key)
        if shuffle is not None and partition in shuffle.rounds:
            return (key, "round", shuffle.rounds[partition])
        return (key, "partition", partition)

    def _unit_priority(self, unit: tuple[str, str, int]) -> tuple[int, int, int]:
        """Higher sorts first for eviction: (incomplete, submission order, round).

        A round is complete once every map task has delivered to it. A map task with no rows for
        one reducer sends nothing for it, so deliveries are counted over the whole round.
        """
        key, kind, number = unit
        shuffle = self._shuffles.get(key)
        if shuffle is None:
            return (0, -1, number)
        if kind == "partition":
            return (1, shuffle.seq, number)  # leaving this host anyway
        members = [p for p, r in shuffle.rounds.items() if r == number]
        delivered = {b.source for p in members for b in self._blocks.get((key, p), ())}
        complete = len(delivered) >= shuffle.expected
        return (0 if complete else 1, shuffle.seq, number)

    def _enforce_budget(self) -> None:
        if self.budget is None or self.memory <= self.budget:
            return
        self._drop_backups(self.backup_bytes - (self.memory - self.budget))
        if self.memory <= self.budget:
            return
        units: dict[tuple[str, str, int], list[tuple[str, int]]] = defaultdict(list)
        for (key, p), blocks in self._blocks.items():
            if any(b.table is not None for b in blocks):
                units[self._unit(key, p)].append((key, p))
        order = sorted(units, key=self._unit_priority, reverse=True)
        for unit in order:
            if self.memory <= self.budget:
                break
            for key, p in units[unit]:
                self._spill(key, p)

    def _spill(self, key: str, partition: int) -> None:
        for block in self._blocks.get((key, partition), ()):
            if block.table is None or block.backup:  # a backup is dropped, never spilled
                continue
            path = os.path.join(self.spill_dir, f"spill-{next(_files)}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, block.table.schema) as writer:
                writer.write_table(block.table)
            self._files[key].append(path)
            self._spilled[key] += block.nbytes
            self.memory -= block.nbytes
            block.table, block.path, block.batches = None, path, None

    # ---- lifecycle ---------------------------------------------------------------------

    def release(self, prefix: str) -> int:
        """Drop everything under ``prefix``, delete its files; returns the bytes it had spilled."""
        with self._lock:
            for k in [k for k in self._blocks if k[0].startswith(prefix)]:
                self.memory -= sum(b.nbytes for b in self._blocks[k] if b.table is not None)
                self._forget_backups(self._blocks.pop(k))
            for registry in (self._schemas, self._staged, self._shuffles):
                for k in [k for k in registry if k.startswith(prefix)]:
                    del registry[k]
            paths = [p for k in [k for k in self._files if k.startswith(prefix)] for p in self._files.pop(k)]
            gone = [k for k in self._spilled if k.startswith(prefix)]
            spilled = sum(self._spilled.pop(k) for k in gone)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return spilled

    def nbytes(self) -> int:
        return self.memory

    def spilled_bytes(self) -> int:
        """Bytes of blocks on disk now (spilled, not yet released)."""
        with self._lock:
            return sum(self._spilled.values())

    def close(self) -> None:
        """Remove the spill directory (its own, or the one it was given) with every file in it."""
        shutil.rmtree(self.spill_dir, ignore_errors=True)
