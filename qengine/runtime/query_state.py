"""What one query's run keeps while it runs: each stage's progress and outputs, where reducers
were placed ahead of time, and the task counts that coalescing and pruning change.

The scheduling loop (:mod:`qengine.runtime.query_run`), the shuffle driver
(:mod:`qengine.runtime.shuffle_driver`) and the task specs (:mod:`qengine.runtime.task_specs`)
all read and update this state; keeping it in one place lets each of them be a module of its own.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import InitVar, dataclass, field
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from qengine.errors import Error
from qengine.exchange.metrics import ShuffleStats
from qengine.exchange.placement import Reducer
from qengine.exchange.prediction import coalesce, coalesce_target
from qengine.planner.stages import Stage, StagePlan
from qengine.runtime.cluster_load import ClusterLoad
from qengine.runtime.membership_changes import MembershipChanges
from qengine.runtime.network_load import NetworkLoad
from qengine.runtime.query_history import QueryHistory
from qengine.runtime.shares import DEFAULT_USER, Shares
from qengine.runtime.stats import RecoveryStats, SharingStats, StageStats
from qengine.transport.rpc import ClientPool

RECENT_DURATIONS = 256  # finished tasks per stage that paces and LATE's estimates look at

SHUFFLE_KINDS = ("hash", "range", "roundrobin", "single")


class TaskTime(NamedTuple):
    """How long one task attempt ran on a worker, as paces and LATE's estimates measure it."""

    worker: int
    seconds: float  # from its reported start to its end (for an attempt a copy beat: until then)
    read: int = 0  # rows it read (0: not known)
    # Whether it started before its worker had finished any task: a fresh worker process
    # imports modules and opens its first DuckDB connections in its first tasks
    # (``slow_workers.COLD_ALLOWANCE``).
    cold: bool = False


class Cluster(Protocol):
    pool: ClientPool
    load: ClusterLoad  # every query's tasks per worker
    shares: Shares  # every running query's claim on the workers' slots
    network: NetworkLoad  # the bytes under way between hosts, over every query
    history: QueryHistory  # the statements run and running, for the web UI

    @property
    def addresses(self) -> list[str]: ...

    def lost(self, addresses: list[str]) -> dict[str, str]: ...

    def suspect(self, address: str) -> None: ...

    def check_readable(self, paths: list[str]) -> None: ...

    def running_query(self) -> contextlib.AbstractContextManager[None]: ...

    @property
    def changes(self) -> MembershipChanges: ...


@dataclass
class ExecutionOptions:
    """The scheduler's share of a session's settings (see ``qengine.api.options.SessionSettings``)."""

    slots: int
    coalesce_bytes: int
    split_bytes: int
    samples_per_partition: int
    shuffle: str
    prefetch_fraction: float
    speculation: bool = True
    user: str = DEFAULT_USER  # whose share of the cluster the session's queries run in


@dataclass
class StageRun:
    stage: Stage
    tasks: int
    splits: list[dict] | None
    stats: StageStats
    # The stage's reads of one partition per task, and the shuffles among them: looked at for
    # every task it starts and ends, so worked out once, not from the stage each time.
    partitioned_reads: list[Any] = field(init=False)
    shuffle_inputs: frozenset[int] = field(init=False)
    parents: list[int] = field(init=False)  # the stages it reads
    # Each task's worker; a task free to run anywhere has None until it takes a slot.
    placement: list[Any] = field(default_factory=list)
    groups: list[list[int]] | None = None
    schema: str | None = None
    samples: dict[int, tuple[pa.Array, int, int]] = field(default_factory=dict)
    outputs: list[dict] = field(default_factory=list)
    aux_pending: int = 0
    started: float = 0.0
    submitted: bool = False
    done: bool = False
    # shuffle-producing stages
    task_bytes: dict[int, list[int]] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)
    finalized: set[int] = field(default_factory=set)
    pushed: set[int] = field(default_factory=set)
    bounds: pa.Array | None = None
    finalize_body: dict[str, Any] = field(default_factory=dict)  # what every finalize request shares
    ranges: dict[str, list[int] | None] = field(default_factory=dict)
    prediction: list[Reducer] | None = None
    maps_done_at: float | None = None
    shuffle: ShuffleStats | None = None
    # The fragment's SQL rendered while the stage waited for its inputs, with the join sides
    # it was rendered for (see QueryRun._wait)
    rendered: tuple[tuple[bool, ...], str] | None = None
    # Output columns of untyped NULL, which the worker tags (see planner.null_columns)
    null_columns: frozenset[str] = frozenset()
    # Whether DuckDB picks the fragment's join build sides (``task_specs.duckdb_builds``): a
    # walk of the stage's plan, done once, not for every task's spec
    build_sides: bool = False
    sql: str = ""  # the fragment as rendered for its tasks
    form: dict | None = None  # its direct form, when it has one (planner.direct)
    # ---- attempts and lineage (see runtime.query_run) ----
    # Each task's attempts that may still commit (the current one, and a speculative copy)
    wanted: list[set[int]] = field(default_factory=list)
    attempts_made: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)  # attempts lost with their worker
    input_losses: list[int] = field(default_factory=list)  # attempts whose inputs were lost
    completed: set[int] = field(default_factory=set)  # tasks whose output is committed and held
    ever_completed: set[int] = field(default_factory=set)  # counted in the statistics once
    committed: dict[int, int] = field(default_factory=dict)  # task → the attempt whose output counts
    # partition → map task → (holding worker, attempt, bytes, rows) of every non-empty committed block
    blocks: dict[int, dict[int, tuple[int, int, int, int]]] = field(default_factory=dict)
    # partition → map task → (sending worker, attempt) of pushed blocks the sender kept a copy of
    backups: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)
    keep: dict[int, list[int] | None] = field(default_factory=dict)  # a recomputed task's partitions
    local_only: set[int] = field(default_factory=set)  # recomputed tasks: their blocks stay put
    waiting: set[int] = field(default_factory=set)  # tasks waiting for their inputs to be recomputed
    # task → attempt → (worker, start time, speculative) of attempts running now
    running: dict[int, dict[int, tuple[int, float, bool]]] = field(default_factory=dict)
    # The times of the latest ``RECENT_DURATIONS`` finished tasks: paces and LATE's estimates
    # take medians of them on every look, which over every task of a stage of thousands cost
    # O(tasks) a look
    durations: collections.deque[TaskTime] = field(default_factory=lambda: collections.deque(maxlen=RECENT_DURATIONS))
    outrun: list[TaskTime] = field(default_factory=list)  # attempts a copy beat, timed until then (never cold)
    speculated: set[int] = field(default_factory=set)  # tasks that have had their speculative copy
    # partition → side calls in flight moving its blocks (pushes, finalizations that push):
    # its reader waits for them to land
    carrying: collections.Counter[int] = field(default_factory=collections.Counter)
    # (committed tasks, block entries) when every row was last found in a block: see ``settled``
    accounted_at: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        self.partitioned_reads = self.stage.partitioned_reads
        self.parents = self.stage.parents
        self.shuffle_inputs = frozenset(r.shuffle_id for r in self.partitioned_reads if r.kind in SHUFFLE_KINDS)

    @property
    def pending(self) -> int:
        """Tasks whose output is not committed (yet, or again after a lost worker)."""
        return self.tasks - len(self.completed)

    def partitions_of(self, index: int) -> list[int]:
        """The shuffle partitions task ``index`` of this (reading) stage reads."""
        return self.groups[index] if self.groups is not None else [index]

    def settled(self) -> bool:
        """Every map task has committed and every row it made is in a block on record (a
        range task's once it is partitioned): readers may start on partitions nothing is
        moving, though pushes of others may still be in flight.

        Readers ask at every turn of the scheduling loop while the last pushes land, and
        counting every block's rows each time cost O(tasks) a turn (a second of a 2,000-task
        scan): the count is made again only once tasks or block entries came or went."""
        if not self.submitted or self.pending or self.waiting:
            return False
        mark = (len(self.completed), sum(map(len, self.blocks.values())))
        if mark != self.accounted_at:
            if self.unaccounted_rows():
                return False
            self.accounted_at = mark
        return True

    def start_attempts(self) -> None:
        """Every task at its first attempt (once the task count is final)."""
        self.wanted = [set() for _ in range(self.tasks)]
        self.attempts_made = [0] * self.tasks
        self.failures = [0] * self.tasks
        self.input_losses = [0] * self.tasks

    def new_attempt(self, index: int) -> int:
        attempt = self.attempts_made[index]
        self.attempts_made[index] += 1
        self.wanted[index].add(attempt)
        return attempt

    def record_blocks(self, index: int, worker: int, attempt: int, result: dict, host_of: dict[int, int] | None = None) -> None:
        """Where a committed attempt's non-empty blocks are: on ``worker``, or for partitions in
        ``host_of`` (sent by the finalization that partitioned them) on their reducer's host."""
        keep = self.keep.get(index)
        # A result sent back with the answer (``inline``) is held by the coordinator: no block.
        rows = [] if "inline" in result else result.get("partition_rows") or []
        sizes = result.get("partition_bytes") or []
        kind = self.stage.output.kind if self.stage.output is not None else None
        for p, n in enumerate(rows):
            partition = index if kind in ("materialize", None) else p
            if keep is not None and partition not in keep:
                continue
            if n:
                host = (host_of or {}).get(partition, worker)
                self.blocks.setdefault(partition, {})[index] = (host, attempt, sizes[p] if p < len(sizes) else 0, n)
            elif partition in self.blocks:  # only partitions holding rows have an entry: readers look
                self.blocks[partition].pop(index, None)  # over them for every task they start
            self.backups.get(partition, {}).pop(index, None)
        self.record_backups(index, worker, attempt, result.get("backups") or [])

    def record_backups(self, index: int, worker: int, attempt: int, partitions: list[int]) -> None:
        """The sender of an attempt's pushed blocks kept copies of these partitions' blocks."""
        for p in partitions:
            self.backups.setdefault(int(p), {})[index] = (worker, attempt)

    def fall_back_to_backups(self, lost: set[int]) -> int:
        """Blocks held on lost workers that a live sender kept a copy of are read there from
        now on; returns how many. Copies held on lost workers are forgotten."""
        moved = self.read_backups(self.blocks, lost, lost)
        for copies in self.backups.values():
            for task in [t for t, (host, _) in copies.items() if host in lost]:
                del copies[task]
        return moved

    def copy_holder(self, partition: int, task: int, attempt: int, avoid: set[int] | frozenset[int]) -> int | None:
        """The worker holding a copy of ``attempt``'s block of ``partition`` from ``task``, if
        one does and it is not in ``avoid``."""
        copy = self.backups.get(partition, {}).get(task)
        return copy[0] if copy is not None and copy[1] == attempt and copy[0] not in avoid else None

    def read_backups(self, partitions: Iterable[int], away: set[int], avoid: set[int]) -> int:
        """Blocks of ``partitions`` held on ``away`` workers whose sender, not in ``avoid``,
        kept a copy are read from that copy from now on; returns how many. (A slow worker's
        blocks stay where they are, unread, until the query's blocks are released.)"""
        moved = 0
        for partition in partitions:
            per_task = self.blocks.get(partition, {})
            copies = self.backups.get(partition, {})
            for task, (host, attempt, nbytes, rows) in list(per_task.items()):
                holder = self.copy_holder(partition, task, attempt, avoid) if host in away else None
                if holder is not None:
                    per_task[task] = (holder, attempt, nbytes, rows)
                    del copies[task]
                    moved += 1
        return moved

    def unaccounted_rows(self) -> int:
        """Rows the committed attempts produced that no recorded block holds (0 when every row
        is where readers will look for it): checked before readers may start. Rows sent back
        inline are in the committed answer itself."""
        made = sum(self.outputs[t].get("rows", 0) for t in self.completed if "inline" not in self.outputs[t])
        held = sum(entry[3] for per_task in self.blocks.values() for entry in per_task.values())
        return made - held

    def partition_sizes(self) -> list[int]:
        """Bytes per partition of a shuffle so far (kept up to date by ``StageStats.add_partition_bytes``)."""
        parts = self.stage.output.partitions if self.stage.output is not None else 1
        return (self.stats.partition_bytes + [0] * parts)[:parts]


@dataclass
class ReducerPlacement:
    """Where a consumer stage's reduce tasks run, decided ahead of time in prefetch mode."""

    groups: list[list[int]]
    hosts: list[int]
    addresses: InitVar[list[str]]
    # False when every map task had finished by the time the reducers were placed: a push would
    # then overlap nothing and only hold the reducers back, so they read the blocks where they are.
    push: bool
    _by_partition: dict[int, int] = field(init=False, repr=False)
    # partition → its reducer's host address, as finalize and push requests carry it
    destinations: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self, addresses: list[str]) -> None:
        self.update(addresses)

    def update(self, addresses: list[str]) -> None:
        """Derive the per-partition views from ``hosts`` (again, after reducers were moved)."""
        self._by_partition = {p: self.hosts[g] for g, members in enumerate(self.groups) for p in members}
        self.destinations = {str(p): addresses[h] for p, h in self._by_partition.items()}

    def host_of(self, partition: int) -> int:
        return self._by_partition[partition]


@dataclass
class QueryState:
    """One query's stages as they run, and the decisions taken about them so far."""

    query_id: str
    options: ExecutionOptions
    plan: StagePlan
    addresses: list[str]
    output_override: dict | None
    runs: list[StageRun] = field(default_factory=list)
    # shuffle (producer stage id) → the stage reading it
    consumer_of: dict[int, int] = field(default_factory=dict)
    # consumer stage id → its reducers' placement, decided ahead of time (prefetch)
    placements: dict[int, ReducerPlacement] = field(default_factory=dict)
    total_tasks: int = 0
    lost: set[int] = field(default_factory=set)  # workers lost while the query ran
    # live workers new work keeps away from (``runtime.slow_workers``), each with how many
    # times slower than typical it is; empty while speculation is off
    slow: dict[int, float] = field(default_factory=dict)
    # live workers slow by their running tasks too: LATE copies their tasks sooner and sends
    # them no copy (``runtime.speculation``); empty while speculation is off
    lagging: dict[int, float] = field(default_factory=dict)
    recovery: RecoveryStats = field(default_factory=RecoveryStats)
    sharing: SharingStats = field(default_factory=SharingStats)
    # SAMP's hosts for this query (``runtime.shares``): its reducers are placed there (SARP)
    preferred: set[int] = field(default_factory=set)

    def live_hosts(self) -> list[int]:
        return [w for w in range(len(self.addresses)) if w not in self.lost]

    def read_copies_off(self, run: StageRun, partitions: Iterable[int], away: set[int]) -> None:
        """Have readers of ``partitions`` of ``run`` read the blocks held on ``away`` workers
        (slow ones, or a reducer's old host) from a copy kept on a worker neither lost nor slow,
        where there is one; counted in the recovery statistics."""
        self.recovery.from_backups += run.read_backups(partitions, away, self.lost | self.slow.keys())

    def behind(self, worker: int) -> bool:
        """Slow, or lagging by its running tasks: LATE copies its tasks sooner and sends it none."""
        return worker in self.slow or worker in self.lagging

    def remote_input(self, run: StageRun, index: int, worker: int) -> list[tuple[str, str, int]]:
        """(sender, receiver, bytes) of the shuffled blocks task ``index`` of ``run`` reads from
        hosts other than ``worker``: what it fetches when it runs (``runtime.network_load``)."""
        moving = []
        for source in (self.runs[s] for s in run.shuffle_inputs):
            for p in run.partitions_of(index):
                for holder, _, nbytes, _ in source.blocks.get(p, {}).values():
                    if holder != worker:
                        moving.append((self.addresses[holder], self.addresses[worker], nbytes))
        return moving

    def placeable_hosts(self) -> list[int]:
        """The live workers reducers and single tasks are placed on: the slow ones are left
        out, unless every live worker is slow; those SAMP chose, when it chose some that are
        live and not slow (SARP: reducers where the map output is)."""
        live = self.live_hosts()
        fast = [w for w in live if w not in self.slow] or live
        return [w for w in fast if w in self.preferred] or fast

    @property
    def mode(self) -> str:
        return self.options.shuffle

    @property
    def workers(self) -> int:
        return len(self.addresses)

    def key(self, stage_id: int) -> str:
        return f"{self.query_id}/{stage_id}"

    def set_tasks(self, run: StageRun, tasks: int) -> None:
        """Change a stage's task count (coalesced reducers, a pruned scan) everywhere it is kept."""
        self.total_tasks += tasks - run.tasks
        run.tasks = run.stats.tasks = tasks
        if run.shuffle is not None:
            run.shuffle.map_tasks = tasks

    def coalescable(self, run: StageRun) -> bool:
        """Partition i must stay task i where data is read as materialized; a materialized
        output may have fewer partitions only if its readers read nothing else partitioned
        (their task count then follows it, see ``QueryRun._submit``)."""
        reads = run.stage.partitioned_reads
        if not reads or self.options.coalesce_bytes <= 0 or run.tasks <= 1:
            return False
        if any(r.kind not in SHUFFLE_KINDS for r in reads):
            return False
        if run.stage.output and run.stage.output.kind == "materialize":
            readers = [r.stage for r in self.runs if run.stage.id in r.stage.parents]
            return all(all(x.shuffle_id == run.stage.id for x in reader.partitioned_reads) for reader in readers)
        return True

    def groups(self, run: StageRun, sizes: list[float]) -> list[list[int]]:
        """The reduce partitions each of ``run``'s tasks reads, adjacent small ones coalesced."""
        if not self.coalescable(run):
            return [[p] for p in range(run.tasks)]
        run.stats.coalesce_bytes = int(coalesce_target(sizes, self.options.coalesce_bytes, self.workers))
        return coalesce(sizes, self.options.coalesce_bytes, self.workers)

    def apply_groups(self, run: StageRun, groups: list[list[int]]) -> None:
        run.groups = groups
        run.stats.partitions_read = sum(len(g) for g in groups)
        self.set_tasks(run, len(groups))


def release_blocks(cluster: Cluster, prefix: str, calls: Executor | None = None) -> int:
    """Free everything under ``prefix`` on every worker; returns the bytes they had spilled.

    With ``calls``, the workers are asked at once rather than one after another: a statement
    returns after its release, so a repeated small query waited a round trip per worker."""

    def one(address: str) -> int:
        with contextlib.suppress(Error):  # a dead worker holds nothing any more
            reply = cluster.pool.get(address).action("release", {"prefix": prefix}, timeout=10)
            return int((reply or {}).get("spilled", 0))
        return 0

    addresses = cluster.addresses
    if calls is None or len(addresses) < 2:
        return sum(one(a) for a in addresses)
    return sum(calls.map(one, addresses))
