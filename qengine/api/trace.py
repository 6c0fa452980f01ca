"""A query's run as a Chrome trace (the trace-event JSON format that chrome://tracing and
Perfetto open): one process per worker, one thread per slot the worker's tasks overlapped in,
each task attempt a slice (its wait for input blocks a nested slice), and flows from the tasks of
a stage to those of the stages that read its output.

Slots are not reported by the workers: a worker's spans are laid out greedily in as few rows as
keep them from overlapping, which is how many of its slots were busy at once.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from qengine.runtime.stats import QueryStats, TaskSpan

MAX_FLOWS_PER_EDGE = 256  # arrows drawn between two stages; beyond, one per consumer task


def chrome_trace(stats: QueryStats) -> dict[str, Any]:
    """The trace-event document of a run's task spans."""
    workers = sorted({span.worker for span in stats.spans})
    pid = {worker: i + 1 for i, worker in enumerate(workers)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid[w], "tid": 0, "args": {"name": f"worker {w}"}} for w in workers
    ]
    placed = slot_rows(stats.spans)
    named: set[tuple[str, int]] = set()
    for span, slot in placed:
        if (span.worker, slot) not in named:
            named.add((span.worker, slot))
            events.append({"ph": "M", "name": "thread_name", "pid": pid[span.worker], "tid": slot, "args": {"name": f"slot {slot}"}})
        events.append(_slice(span, pid[span.worker], slot))
        if span.read_seconds > 0:
            events.append({
                "ph": "X", "name": "read input", "cat": "read", "pid": pid[span.worker], "tid": slot,
                "ts": _us(span.start), "dur": _us(min(span.read_seconds, span.end - span.start)), "args": {},
            })
    events += _flows(stats, placed, pid)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"seconds": stats.seconds, "tasks": stats.tasks}}


def slot_rows(spans: list[TaskSpan]) -> list[tuple[TaskSpan, int]]:
    """Each span with its row (1, 2, ...) among its worker's: laid out greedily, earliest first,
    in as few rows as keep a worker's spans from overlapping (see the module docstring)."""
    lanes: dict[str, list[float]] = defaultdict(list)  # per worker: when each row is free again
    placed: list[tuple[TaskSpan, int]] = []
    for span in sorted(spans, key=lambda s: (s.start, s.end)):
        rows = lanes[span.worker]
        lane = next((i for i, free in enumerate(rows) if free <= span.start), len(rows))
        if lane == len(rows):
            rows.append(span.end)
        rows[lane] = span.end
        placed.append((span, lane + 1))
    return placed


def _us(seconds: float) -> int:
    return max(0, round(seconds * 1_000_000))


def _slice(span: TaskSpan, pid: int, tid: int) -> dict[str, Any]:
    name = f"stage {span.stage} task {span.task}" + (f" attempt {span.attempt}" if span.attempt else "")
    return {
        "ph": "X", "name": name, "cat": f"stage {span.stage}", "pid": pid, "tid": tid,
        "ts": _us(span.start), "dur": _us(span.end - span.start),
        "args": {"stage": span.stage, "task": span.task, "attempt": span.attempt, "outcome": span.outcome,
                 "speculative": span.speculative, "read_seconds": round(span.read_seconds, 6)},
    }


def _flows(stats: QueryStats, placed: list[tuple[TaskSpan, int]], pid: dict[str, int]) -> list[dict[str, Any]]:
    """Arrows from each finished task of a stage to the finished tasks of the stages reading it."""
    done: dict[int, list[tuple[TaskSpan, int]]] = defaultdict(list)
    for span, tid in placed:
        if span.outcome == "done":
            done[span.stage].append((span, tid))
    events: list[dict[str, Any]] = []
    flow_id = 0
    for stage in stats.stages:
        consumers = done.get(stage.stage, [])
        for parent in stage.parents:
            producers = done.get(parent, [])
            if not producers or not consumers:
                continue
            every = len(producers) * len(consumers) <= MAX_FLOWS_PER_EDGE
            for i, (consumer, ctid) in enumerate(consumers):
                for producer, ptid in producers if every else [producers[i % len(producers)]]:
                    flow_id += 1
                    common = {"name": "blocks", "cat": "shuffle", "id": flow_id}
                    # Each end inside its slice: a reducer placed ahead of time starts before its maps end.
                    sent = max(_us(producer.start), _us(producer.end) - 1)
                    received = min(max(_us(consumer.start), sent), _us(consumer.end))
                    events.append({**common, "ph": "s", "pid": pid[producer.worker], "tid": ptid, "ts": sent})
                    events.append({**common, "ph": "f", "bp": "e", "pid": pid[consumer.worker], "tid": ctid, "ts": received})
    return events
