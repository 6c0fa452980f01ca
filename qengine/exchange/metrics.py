"""Per-shuffle measurements: prediction error, locality, balance, spill, reducer wait, hits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qengine.exchange.placement import imbalance


@dataclass
class ShuffleStats:
    stage: int
    kind: str
    mode: str
    map_tasks: int
    partitions: int
    predicted: list[float] | None = None
    actual: list[int] = field(default_factory=list)
    placement: str = "round-robin"
    remote_bytes: int = 0
    local_bytes: int = 0
    host_loads: list[float] = field(default_factory=list)
    naive_host_loads: list[float] = field(default_factory=list)
    read_wait_seconds: float = 0.0
    push_tail_seconds: float = 0.0
    blocks_local: int = 0
    blocks_total: int = 0
    # range map tasks that started after the bounds were chosen, so partitioned their own output
    # instead of staging it for a finalize request
    self_partitioned_tasks: int = 0
    # map tasks whose blocks were pushed to their reducers' hosts (prefetch); none when every
    # map task had finished before the reducers were placed
    pushed_tasks: int = 0
    push_decision: str = ""  # pushed or fetched, and why (``exchange.push_decision``); prefetch only
    hosts: list[str] = field(default_factory=list)  # the query's worker addresses, which ``host_loads`` index

    def prediction_errors(self) -> tuple[float | None, float | None]:
        """(max, mean) relative error of predicted vs actual reducer sizes, over non-empty reducers."""
        if self.predicted is None:
            return None, None
        errors = [abs(p - a) / a for p, a in zip(self.predicted, self.actual, strict=False) if a > 0]
        if not errors:
            return None, None
        return max(errors), sum(errors) / len(errors)

    imbalance = staticmethod(imbalance)

    def as_dict(self) -> dict[str, Any]:
        worst, mean = self.prediction_errors()
        return {
            "stage": self.stage,
            "kind": self.kind,
            "mode": self.mode,
            "map_tasks": self.map_tasks,
            "partitions": self.partitions,
            "placement": self.placement,
            "prediction_max_error": None if worst is None else round(worst, 4),
            "prediction_mean_error": None if mean is None else round(mean, 4),
            "predicted_bytes": [round(p) for p in self.predicted] if self.predicted is not None else None,
            "actual_bytes": self.actual,
            "remote_bytes": self.remote_bytes,
            "local_bytes": self.local_bytes,
            "host_load_max_over_mean": _round(self.imbalance(self.host_loads)),
            "round_robin_load_max_over_mean": _round(self.imbalance(self.naive_host_loads)),
            "reducer_read_wait_seconds": round(self.read_wait_seconds, 4),
            "push_tail_seconds": round(self.push_tail_seconds, 4),
            "prefetch_hits": self.blocks_local,
            "blocks": self.blocks_total,
            "self_partitioned_map_tasks": self.self_partitioned_tasks,
            "pushed_map_tasks": self.pushed_tasks,
            "push_decision": self.push_decision,
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
