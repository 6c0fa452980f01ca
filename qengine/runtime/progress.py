"""How far each running task attempt on a worker has got, for LATE's progress rates
(``runtime.speculation``).

A task's progress score runs from 0 to 1, as in Hadoop's and the LATE paper's: ``LOAD_SHARE`` of
it for loading its shuffle inputs (by inputs loaded), the rest for running its fragment (DuckDB's
own estimate of its query's progress, which follows the rows it has scanned), and 1 once the
output is being written. The coordinator polls the scores of a query's tasks (the ``progress``
action) and divides by the time each attempt has run to get its progress rate.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import duckdb

LOAD_SHARE = 0.3


class TaskProgress:
    """One attempt's progress, updated by the thread running it and read by others."""

    def __init__(self, inputs: int) -> None:
        self.inputs = inputs
        self.loaded = 0
        self.con: duckdb.DuckDBPyConnection | None = None
        self.finished = False

    def input_loaded(self) -> None:
        self.loaded += 1

    def running(self, con: duckdb.DuckDBPyConnection) -> None:
        """Its inputs are loaded and its fragment runs on ``con``."""
        self.con = con

    def finish(self) -> None:
        """Its fragment has run; what is left is storing or sending its output."""
        self.finished = True
        self.con = None

    def score(self) -> float:
        if self.finished:
            return 1.0
        con = self.con
        if con is None:
            return LOAD_SHARE * self.loaded / self.inputs if self.inputs else 0.0
        try:
            done = con.query_progress()  # a percentage; -1 when DuckDB cannot tell yet
        except duckdb.Error:  # the connection went back to the pool, or was closed
            done = -1.0
        return LOAD_SHARE + (1 - LOAD_SHARE) * max(0.0, min(done, 100.0)) / 100


class ProgressBoard:
    """The attempts running on this worker, by task key (``<query>/<stage>/<task>/<attempt>``)."""

    def __init__(self) -> None:
        self._running: dict[str, TaskProgress] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def track(self, key: str, inputs: int) -> Iterator[TaskProgress]:
        progress = TaskProgress(inputs)
        with self._lock:
            self._running[key] = progress
        try:
            yield progress
        finally:
            with self._lock:
                self._running.pop(key, None)

    def scores(self, query: str) -> dict[str, float]:
        """The progress score of each of ``query``'s attempts running here."""
        with self._lock:
            mine = [(k, p) for k, p in self._running.items() if k.startswith(f"{query}/")]
        return {k: p.score() for k, p in mine}
