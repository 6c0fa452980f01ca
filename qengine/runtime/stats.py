"""What a query's run measured, per stage and per shuffle: what EXPLAIN ANALYZE, the JSON
reports and a standalone coordinator's client are shown."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from qengine.exchange.metrics import ShuffleStats

# Outputs that leave the query (rows to the client, a session table, files): nothing is shuffled.
FINAL_KINDS = ("result", "table", "files")


@dataclass
class StageStats:
    """What EXPLAIN ANALYZE and the harness reports show per stage."""

    stage: int
    kind: str
    tasks: int
    rows: int = 0
    bytes: int = 0
    rows_in: int = 0
    partition_bytes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    task_seconds: float = 0.0
    stolen: int = 0  # tasks taken back from a busy worker's queue for an idle one (work stealing)
    parents: list[int] = field(default_factory=list)  # the stages it reads from
    # the files of its hive-partitioned scans, and of those how many their partition filters skipped
    files: int = 0
    files_skipped: int = 0
    # Why it ran as many tasks as it did, for EXPLAIN ANALYZE's planned and actual counts: what
    # the plan gave it (``StagePlan.scan_tasks``), and what changed that at run time.
    planned_tasks: int = 0
    split_by: str = ""  # a scan's tasks: one per split of its "row groups", "files", "byte ranges" or "partitions"
    row_groups: int = 0  # of a Parquet scan's planned splits
    row_groups_pruned: int = 0  # of those, skipped by a join's key ranges before the scan was re-split
    partitions_read: int = 0  # reduce partitions its tasks read, adjacent small ones coalesced into a task
    coalesce_bytes: int = 0  # how much coalescing put in a task at most
    follows: int | None = None  # the shared (materialized) stage whose partitions it reads, one a task

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "output": self.kind,
            "tasks": self.tasks,
            "planned_tasks": self.planned_tasks,
            "rows": self.rows,
            "bytes": self.bytes,
            "shuffle_bytes": sum(self.partition_bytes) if self.kind not in FINAL_KINDS else 0,
            "seconds": round(self.seconds, 4),
            "task_seconds": round(self.task_seconds, 4),
            "stolen": self.stolen,
            "files": self.files,
            "files_skipped": self.files_skipped,
        }

    def add_partition_bytes(self, sizes: list[int]) -> None:
        """Add one map task's bytes per output partition to the stage's totals."""
        if not sizes:
            return
        if len(self.partition_bytes) < len(sizes):
            self.partition_bytes += [0] * (len(sizes) - len(self.partition_bytes))
        for p, b in enumerate(sizes):
            self.partition_bytes[p] += b


@dataclass
class RecoveryStats:
    """What a query's run did about lost and slow workers: EXPLAIN ANALYZE, the JSON reports
    and the CLI show it, so a run that survived a failure says so."""

    retried: int = 0  # task attempts re-run because their worker was lost
    recomputed: int = 0  # finished tasks re-run because their output was on a lost worker
    speculated: int = 0  # speculative copies launched (LATE)
    speculation_wins: int = 0  # of those, copies that finished first
    from_backups: int = 0  # blocks read from a copy (their sender's, or a second worker's), their holder lost or slow
    copied: int = 0  # blocks of small map output a second worker kept a copy of (``runtime.block_copies``)
    lost_workers: list[str] = field(default_factory=list)
    # workers new work was kept off (``runtime.slow_workers``), by address: how many times
    # slower than typical they were at worst
    slow_workers: dict[str, float] = field(default_factory=dict)

    def any(self) -> bool:
        return bool(self.retried or self.recomputed or self.speculated or self.lost_workers or self.slow_workers)

    def summary(self) -> str:
        """One line for EXPLAIN ANALYZE and the CLI."""
        lost = ", ".join(self.lost_workers) or "none"
        return (
            f"Recovery: {self.retried} tasks retried, {self.recomputed} recomputed, {self.speculated} speculated "
            f"({self.speculation_wins} won), {self.from_backups} blocks read from backups ({self.copied} copied ahead); "
            f"workers lost: {lost}"
            + "".join(f"; {address} slow ({times:.1f}× typical), kept off new work" for address, times in self.slow_workers.items())
        )


@dataclass
class SharingStats:
    """What ShuffleWatcher did to a query that shared the cluster (``runtime.shares``,
    ``runtime.network_load``): EXPLAIN ANALYZE says so when it did anything."""

    samp_hosts: list[str] = field(default_factory=list)  # the hosts SAMP kept its map tasks and reducers to
    nass_delays: int = 0  # reducers held back while the network was saturated (NASS)

    def any(self) -> bool:
        return bool(self.samp_hosts or self.nass_delays)

    def summary(self) -> str:
        """One line for EXPLAIN ANALYZE."""
        hosts = ", ".join(self.samp_hosts) if self.samp_hosts else "every host"
        return f"Sharing: map tasks and reducers on {hosts} (SAMP); {self.nass_delays} reducers delayed while the network was saturated (NASS)"


@dataclass
class TaskSpan:
    """One task attempt as it ran: where, from when to when (seconds from the query's start),
    and how it ended. A query's spans draw its timeline (a Chrome trace, the web UI)."""

    stage: int
    task: int
    attempt: int
    worker: str
    start: float
    end: float
    # "done", "outrun" (a copy finished first), "failed", "lost" (its worker was), "cancelled";
    # a push's: "pushed" (ended), "pushing" (under way)
    outcome: str
    speculative: bool = False
    read_seconds: float = 0.0  # of its time, waiting for its input blocks


@dataclass
class QueryStats:
    stages: list[StageStats]
    seconds: float
    shuffles: list[ShuffleStats] = field(default_factory=list)
    spilled_bytes: int = 0
    recovery: RecoveryStats = field(default_factory=RecoveryStats)
    sharing: SharingStats = field(default_factory=SharingStats)
    spans: list[TaskSpan] = field(default_factory=list)
    pushes: list[TaskSpan] = field(default_factory=list)  # map tasks' pushes to reducers' hosts, on their senders

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def shuffle_bytes(self) -> int:
        return sum(s.as_dict()["shuffle_bytes"] for s in self.stages)

    def to_json(self) -> dict[str, Any]:
        """Plain data, for a standalone coordinator to send its client."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueryStats:
        return cls(
            [StageStats(**s) for s in data["stages"]],
            data["seconds"],
            [ShuffleStats(**s) for s in data["shuffles"]],
            data["spilled_bytes"],
            RecoveryStats(**data.get("recovery", {})),
            SharingStats(**data.get("sharing", {})),
            [TaskSpan(**t) for t in data.get("spans", [])],
            [TaskSpan(**t) for t in data.get("pushes", [])],
        )
