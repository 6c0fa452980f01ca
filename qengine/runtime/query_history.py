"""The statements a cluster ran and runs, for whoever watches it (the web UI): each one's SQL,
user, state and times, its plan, and its run as it goes (stage statistics and task spans as the
scheduler records them), then its final statistics.

A session records its statements here; the coordinator attaches each query it runs to the
statement the calling thread runs (a statement may run several: a retried result, a CREATE
TABLE AS). Only the last :data:`KEPT` finished statements are kept.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from qengine.runtime.stats import QueryStats

KEPT = 200  # finished statements kept


@dataclass
class QueryRecord:
    """One statement; ``run`` is the query running for it now (a ``QueryRun``), ``plan`` and
    ``stats`` those of its last query."""

    id: str
    sql: str
    user: str
    submitted: float = field(default_factory=time.time)
    status: str = "running"  # running, finished, failed
    ended: float | None = None
    rows: int | None = None
    error: str | None = None
    plan: Any = None
    run: Any = None
    stats: QueryStats | None = None

    @property
    def seconds(self) -> float:
        return (self.ended or time.time()) - self.submitted


class QueryHistory:
    """The records of one cluster's statements, running and finished; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, QueryRecord] = {}
        self._finished: collections.deque[QueryRecord] = collections.deque(maxlen=KEPT)
        self._mine = threading.local()

    @contextlib.contextmanager
    def statement(self, statement_id: str, sql: str, user: str) -> Iterator[QueryRecord]:
        """Record a statement while the block runs it (in the calling thread)."""
        record = QueryRecord(statement_id, sql, user)
        with self._lock:
            self._running[statement_id] = record
        outer = getattr(self._mine, "record", None)
        self._mine.record = record
        try:
            yield record
            record.status = "finished"
        except BaseException as e:
            record.status, record.error = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            self._mine.record = outer
            record.ended = time.time()  # the coordinator lets go of its run
            with self._lock:
                self._running.pop(statement_id, None)
                self._finished.append(record)

    def current(self) -> QueryRecord | None:
        """The statement the calling thread runs, if it is recorded."""
        return getattr(self._mine, "record", None)

    def records(self) -> list[QueryRecord]:
        """Running statements first, then finished ones, newest first."""
        with self._lock:
            return sorted(self._running.values(), key=lambda r: -r.submitted) + list(reversed(self._finished))

    def get(self, statement_id: str) -> QueryRecord | None:
        with self._lock:
            return self._running.get(statement_id) or next((r for r in self._finished if r.id == statement_id), None)
