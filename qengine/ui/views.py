"""The web UI's JSON: the statements a cluster ran and runs (``runtime.query_history``), each
with its stage DAG, task spans laid out in worker slots and shuffle metrics, and the cluster's
workers. The pages draw only what these views give, so what the API serves and what a person
sees are the same figures.

A running statement is read from its live ``QueryRun`` while the scheduler thread changes it:
its containers are copied before they are walked, and a copy that raced a change is taken again.
A figure nobody measured is None ("unknown" on the pages), never a made-up 0.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from qengine.api.trace import slot_rows
from qengine.exchange.metrics import ShuffleStats
from qengine.planner.explain import exchange_target, operator_lines
from qengine.planner.stages import StagePlan
from qengine.planner.user_names import UserNames
from qengine.runtime.query_history import QueryRecord
from qengine.runtime.query_state import SHUFFLE_KINDS
from qengine.runtime.stats import QueryStats, StageStats, TaskSpan

PING_TIMEOUT = 1.0  # seconds a worker has to answer the workers page's ping
COPY_TRIES = 5  # attempts at copying a live run's state that the scheduler changed meanwhile
FAILED_OUTCOMES = ("failed", "lost")


class Snapshot:
    """A statement's figures at one moment: from its live run, or from its final statistics."""

    def __init__(self, record: QueryRecord) -> None:
        self.plan: StagePlan | None = record.plan
        run = record.run
        self.stats: list[StageStats] = []
        self.shuffles: list[ShuffleStats] = []
        self.spans: list[TaskSpan] = []
        self.pushes: list[TaskSpan] = []
        self.done: dict[int, int] = {}  # tasks done, per stage
        self.running_tasks: dict[int, int] = {}
        self.elapsed: float | None = None
        self.spilled: int | None = None
        self.recovery: str | None = None
        if run is not None:
            self._from_run(run)
        elif record.stats is not None:
            self._from_stats(record.stats)

    def _from_stats(self, stats: QueryStats) -> None:
        self.stats, self.shuffles, self.spans, self.pushes = stats.stages, stats.shuffles, list(stats.spans), list(stats.pushes)
        done = {(span.stage, span.task) for span in stats.spans if span.outcome == "done"}
        self.done = dict(Counter(stage for stage, _ in done))  # a failed run's stages may not all be done
        self.elapsed, self.spilled, self.recovery = stats.seconds, stats.spilled_bytes, stats.recovery.summary()

    def _from_run(self, run: Any) -> None:
        for attempt in range(COPY_TRIES):
            try:
                now = time.monotonic()
                runs = list(run.state.runs)
                spans = list(run.spans)
                addresses = list(run.state.addresses)
                for r in runs:
                    for task, attempts in list(r.running.items()):
                        for number, (worker, started, speculative) in list(attempts.items()):
                            spans.append(TaskSpan(r.stage.id, task, number, addresses[worker], started - run.began, now - run.began,
                                                  "running", speculative))
                pushes = list(run.pushes) + [dataclasses.replace(p, end=now - run.began) for p in list(run.pushing.values())]
                self.done = {r.stage.id: len(r.completed) for r in runs}
                self.running_tasks = {r.stage.id: len(r.running) for r in runs}
                self.stats = [r.stats for r in runs]
                self.shuffles = [r.shuffle for r in runs if r.shuffle is not None]
                self.spans, self.pushes, self.elapsed = spans, pushes, now - run.began
                return
            except RuntimeError:  # a dict the scheduler changed while it was copied
                if attempt == COPY_TRIES - 1:
                    raise


def query_summary(record: QueryRecord, queued: dict[str, dict] | None = None) -> dict[str, Any]:
    """One statement as the queries page lists it."""
    return _summary(record, Snapshot(record), (queued or {}).get(record.id))


def query_detail(record: QueryRecord, queued: dict[str, dict] | None = None) -> dict[str, Any]:
    """One statement with its stage DAG, task spans by worker slot and shuffles."""
    snap = Snapshot(record)
    view = _summary(record, snap, (queued or {}).get(record.id))
    view["stages"] = _stages(snap, view["stages"])
    view["edges"] = _edges(view["stages"])
    view["spans"] = [
        {"stage": s.stage, "task": s.task, "attempt": s.attempt, "worker": s.worker, "slot": slot, "start": round(s.start, 6),
         "end": round(s.end, 6), "read_seconds": round(s.read_seconds, 6), "outcome": s.outcome, "speculative": s.speculative}
        for s, slot in slot_rows(snap.spans)
    ]
    view["pushes"] = [
        {"stage": p.stage, "task": p.task, "attempt": p.attempt, "worker": p.worker, "start": round(p.start, 6), "end": round(p.end, 6),
         "outcome": p.outcome}
        for p in snap.pushes
    ]
    by_stage = {s.stage: s for s in snap.stats}
    view["shuffles"] = [_shuffle(s, by_stage.get(s.stage)) for s in snap.shuffles]
    view["recovery"] = snap.recovery
    return view


def queued_statement(entry: dict) -> dict[str, Any]:
    """A statement waiting for its user's turn on a standalone coordinator: not started, so
    nothing of it is known but its id, user and place in the queue."""
    return {
        "id": entry["query"], "sql": None, "user": entry["user"], "status": "queued", "submitted": None, "seconds": None,
        "rows": None, "error": None, "stages": [], "tasks": None, "shuffle_bytes": None, "spilled_bytes": None,
        "queue": _queue(entry),
    }


def _summary(record: QueryRecord, snap: Snapshot, queued: dict | None) -> dict[str, Any]:
    status = "queued" if queued is not None and record.status == "running" else record.status
    stages = [_stage_figures(s, snap) for s in snap.stats]
    return {
        "id": record.id,
        "sql": record.sql,
        "user": record.user,
        "status": status,
        "submitted": record.submitted,
        "seconds": round(record.seconds, 4),
        "rows": record.rows,
        "error": record.error,
        "stages": stages,
        "tasks": sum(s["tasks"] for s in stages) if stages else None,
        "shuffle_bytes": sum(s["shuffle_bytes"] for s in stages) if stages else None,
        "spilled_bytes": snap.spilled,
        "elapsed": None if snap.elapsed is None else round(snap.elapsed, 4),
        "queue": None if queued is None else _queue(queued),
    }


def _queue(entry: dict) -> dict[str, Any]:
    """Where a waiting statement stands: what it waits for, its place, the memory it needs."""
    return {k: entry[k] for k in ("waits_for", "position", "needs_bytes") if k in entry}


def _stage_figures(stats: StageStats, snap: Snapshot) -> dict[str, Any]:
    return stats.as_dict() | {
        "parents": list(stats.parents),
        "tasks_done": snap.done.get(stats.stage, 0),
        "tasks_running": snap.running_tasks.get(stats.stage, 0),
    }


def _stages(snap: Snapshot, figures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each stage's ``figures`` (the summary's) with what the plan says of it: its operators,
    its exchange, and whether it reduces a shuffle's partitions or maps tables."""
    plan = snap.plan
    if plan is None:  # a record's plan is set before its run or statistics: nothing is known yet
        return []
    by_id = {s["stage"]: s for s in figures}
    names = UserNames(plan)
    shuffled = {s.id for s in plan.stages if s.output is not None and s.output.kind in SHUFFLE_KINDS}
    return [
        by_id.get(stage.id, {"stage": stage.id}) | {
            "parents": list(stage.parents),
            "exchange": None if stage.output is None else {
                "kind": stage.output.kind, "partitions": stage.output.partitions, "keys": list(stage.output.keys), "once": stage.output.once,
            },
            "target": exchange_target(stage, names),
            "operators": operator_lines(stage.root, names),
            "role": "reduce" if shuffled & set(stage.parents) else "map",
        }
        for stage in plan.stages
    ]


def _edges(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An edge from each stage to each stage reading it, with its exchange and bytes sent."""
    by_id = {s["stage"]: s for s in stages}
    edges = []
    for stage in stages:
        for parent in stage.get("parents", []):
            source = by_id.get(parent, {})
            exchange = source.get("exchange") or {}
            edges.append({"from": parent, "to": stage["stage"], "kind": exchange.get("kind"), "partitions": exchange.get("partitions"),
                          "bytes": source.get("shuffle_bytes") or source.get("bytes")})
    return edges


def _shuffle(shuffle: ShuffleStats, stage: StageStats | None) -> dict[str, Any]:
    """A shuffle's metrics and its load per host by address. Until its reducers are placed
    (when it is measured), its reducer sizes are the bytes its map tasks made so far."""
    view = shuffle.as_dict()
    if not shuffle.actual and stage is not None:
        view["actual_bytes"] = (list(stage.partition_bytes) + [0] * shuffle.partitions)[:shuffle.partitions]
    view["hosts"] = [{"address": a, "bytes": round(load), "round_robin_bytes": round(naive)}
                     for a, load, naive in zip(shuffle.hosts, shuffle.host_loads, shuffle.naive_host_loads, strict=False)]
    return view


def worker_views(cluster: Any, records: list[QueryRecord]) -> list[dict[str, Any]]:
    """The cluster's workers with what each answers to a ping (memory, shuffle memory, spilled
    bytes, tasks run), the tasks of this cluster's queries running on each now, and the task
    attempts of the recorded statements that failed on each."""
    states = cluster.worker_states()
    failed: Counter[str] = Counter()
    for record in records:  # a finished one's spans are its statistics'; a running one's, copied
        spans = record.stats.spans if record.run is None and record.stats is not None else Snapshot(record).spans
        for span in spans:
            if span.outcome in FAILED_OUTCOMES:
                failed[span.worker] += 1
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(states)))) as pool:
        pings = list(pool.map(lambda s: _ping(cluster, s["address"]) if s["alive"] else None, states))
    views = []
    for state, ping in zip(states, pings, strict=True):
        views.append({
            "id": state["id"],
            "address": state["address"],
            "alive": state["alive"],
            "heartbeat_age": round(state["heartbeat_age"], 3),
            "slots_busy": cluster.load.order(state["address"])[0],
            "memory_bytes": None if ping is None else ping.get("rss"),
            "shuffle_bytes": None if ping is None else ping.get("bytes"),
            "memory_budget": state["memory_budget"] if ping is None else ping.get("budget"),
            "spilled_bytes": None if ping is None else ping.get("spilled"),
            "tasks_run": None if ping is None else ping.get("tasks_run"),
            "tasks_failed": failed[state["address"]],
        })
    return views


def _ping(cluster: Any, address: str) -> dict | None:
    try:
        return cluster.pool.get(address).action("ping", timeout=PING_TIMEOUT)
    except Exception:  # noqa: BLE001 - a worker that does not answer has its figures unknown
        return None
