"""Connection settings: checked once, in one place, for local clusters and remote sessions alike."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qengine.catalog.sources import DEFAULT_SPLIT_BYTES
from qengine.errors import ProgrammingError
from qengine.exchange.sampling import DEFAULT_SAMPLES_PER_PARTITION


def parse_size(value: int | str | None, what: str) -> int | None:
    """Bytes from 1048576, "256MB", "4GiB"…; names ``what`` in the error."""
    if value is None or isinstance(value, int):
        if isinstance(value, int) and value < 0:
            raise ProgrammingError(f"{what} must not be negative")
        return value
    text = str(value).strip().upper().replace(" ", "")
    units = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
             "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    try:
        size = float(number) * units[unit]
    except (ValueError, KeyError):
        raise ProgrammingError(f"{what}: cannot read {value!r} as a size (e.g. 268435456, '256MB', '4GB')") from None
    if not math.isfinite(size) or size < 0:  # "-1MB" was taken, and "inf" failed inside
        raise ProgrammingError(f"{what} must be a size of zero or more bytes, not {value!r}")
    return int(size)


DEFAULT_WORKERS = 2


def default_partitions(workers: int) -> int:
    """Reduce partitions per shuffle when none are set: two per worker, so each worker has a
    reducer to run while the other waits on its inputs."""
    return 2 * max(1, workers)


@dataclass(frozen=True)
class SessionSettings:
    """What one connection asks of the planner and the scheduler (see ``qengine.connect``)."""

    dialect: str = "duckdb"
    broadcast_threshold: int | str = 10 << 20
    replicate_size: int | str = 8 << 20
    partitions: int | None = None
    slots: int = 2
    split_size: int | str = DEFAULT_SPLIT_BYTES
    shuffle: str = "prefetch"
    prefetch_fraction: float = 0.5
    samples_per_partition: int = DEFAULT_SAMPLES_PER_PARTITION
    coalesce_size: int | str = 32 << 20
    speculation: bool = True

    def validated(self) -> SessionSettings:
        """Raise ProgrammingError naming the first bad setting; returns self."""
        from sqlglot.dialects.dialect import Dialect

        if self.partitions is not None and not _positive_int(self.partitions):
            raise ProgrammingError(f"partitions must be a positive integer, not {self.partitions!r}")
        if not _positive_int(self.slots):
            raise ProgrammingError(f"slots must be a positive integer, not {self.slots!r}")
        if not isinstance(self.dialect, str) or not self.dialect:
            raise ProgrammingError(f"dialect must name a SQL dialect, not {self.dialect!r}")
        try:
            Dialect.get_or_raise(self.dialect)
        except ValueError as e:
            raise ProgrammingError(f"unknown SQL dialect {self.dialect!r}") from e
        if self.shuffle not in ("prefetch", "pull"):
            raise ProgrammingError(f"shuffle must be 'prefetch' or 'pull', not {self.shuffle!r}")
        if not isinstance(self.speculation, bool):
            raise ProgrammingError(f"speculation must be True or False, not {self.speculation!r}")
        if not 0 < self.prefetch_fraction <= 1:
            raise ProgrammingError(f"prefetch_fraction must be in (0, 1], not {self.prefetch_fraction!r}")
        if not _positive_int(self.samples_per_partition):
            raise ProgrammingError(f"samples_per_partition must be a positive integer, not {self.samples_per_partition!r}")
        parse_size(self.broadcast_threshold, "broadcast_threshold")
        parse_size(self.replicate_size, "replicate_size")
        parse_size(self.coalesce_size, "coalesce_size")
        if not parse_size(self.split_size, "split_size"):
            raise ProgrammingError("split_size must be positive")
        return self

    def plan_options(self, workers: int) -> Any:
        from qengine.planner import PlanOptions

        return PlanOptions(
            dialect=self.dialect,
            partitions=self.partitions or default_partitions(workers),
            broadcast_threshold=parse_size(self.broadcast_threshold, "broadcast_threshold"),
            replicate_bytes=parse_size(self.replicate_size, "replicate_size"),
            split_bytes=parse_size(self.split_size, "split_size"),
        )

    def execution_options(self) -> Any:
        from qengine.runtime.query_state import ExecutionOptions

        return ExecutionOptions(
            slots=self.slots,
            split_bytes=parse_size(self.split_size, "split_size"),
            shuffle=self.shuffle,
            prefetch_fraction=self.prefetch_fraction,
            samples_per_partition=self.samples_per_partition,
            coalesce_bytes=parse_size(self.coalesce_size, "coalesce_size") or 0,
            speculation=self.speculation,
        )


def _positive_int(value: object) -> bool:
    """An integer of at least 1; True is not one (SET partitions = true)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
