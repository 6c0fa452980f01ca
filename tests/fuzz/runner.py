"""Run one SQL case on qengine (in each mode) and on DuckDB, and classify the outcome.

One qengine cluster per mode is started once and reused for every case; a mode's cluster is
restarted only after an OperationalError, which may mean a worker died. DuckDB runs in process
over the same Parquet files, registered as views under the same names.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass

import duckdb
import pyarrow as pa

import qengine
from tests.fuzz.compare import compare
from tests.fuzz.schema import Table

SPLIT_SIZE = "32KB"  # small enough that the fuzz tables scan as several tasks
# connection settings of each mode; every mode also gets SPLIT_SIZE and 2 workers
MODES: dict[str, dict[str, object]] = {"default": {}, "shuffle": {"broadcast_threshold": 0}}
# further modes a run may ask for by name (--modes): broadcasts from stages of their own, the pull exchange, spilling
EXTRA_MODES: dict[str, dict[str, object]] = {
    "broadcast": {"replicate_size": 0},
    "pull": {"broadcast_threshold": 0, "shuffle": "pull"},
    "spill": {"broadcast_threshold": 0, "shuffle_memory": 64 << 10},
}
ORACLE_TIMEOUT = 30.0  # seconds before a DuckDB query is interrupted (and the case skipped)
QUERY_TIMEOUT = 60.0  # seconds before a qengine query counts as hung (an error) and its cluster is restarted
# DuckDB is asked again this many times before a mismatch is reported: one of its answers that
# differs from another is no oracle (seen: a LIMIT under a UNION, joined, answered two ways)
ORACLE_RECHECKS = 5

PASSED, REFUSED, SKIPPED, MISMATCH, ERROR = "passed", "refused", "skipped", "mismatch", "error"
FAILURES = (MISMATCH, ERROR)


@dataclass
class Outcome:
    """What one case came to; ``mode`` is the qengine mode that failed or refused, if any."""

    kind: str
    mode: str | None = None
    message: str = ""
    expected: pa.Table | None = None
    got: pa.Table | None = None

    def signature(self) -> str:
        """The outcome's kind and message with numbers, names and values blanked, to group alike outcomes."""
        first = self.message.splitlines()[0] if self.message else ""
        if self.kind == MISMATCH:
            first = first.split(":")[0] if first.startswith("row ") else re.sub(r"e\.g\. .*", "", first)
        return f"{self.kind}: " + re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "N", first)[:120]


class Runner:
    """DuckDB and one qengine connection per mode, over the fuzz tables."""

    def __init__(self, tables: dict[str, Table], modes: dict[str, dict[str, object]] | None = None) -> None:
        self.tables = tables
        self.modes = dict(MODES if modes is None else modes)
        self.oracle = duckdb.connect()
        for t in tables.values():
            self.oracle.execute(f"CREATE VIEW {t.name} AS SELECT * FROM read_parquet('{t.path}/*.parquet')")
        self.engines: dict[str, qengine.Connection] = {}
        try:
            for mode in self.modes:
                self.engines[mode] = self._connect(mode)
        except BaseException:
            self.close()
            raise

    def _connect(self, mode: str) -> qengine.Connection:
        con = qengine.connect(workers=2, split_size=SPLIT_SIZE, **self.modes[mode])
        for t in self.tables.values():
            con.register_parquet(t.name, t.path)
        return con

    def close(self) -> None:
        for con in self.engines.values():
            con.close()
        self.engines.clear()
        self.oracle.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def expected(self, sql: str) -> pa.Table | str:
        """DuckDB's answer, or its error message (the query is then not a valid test)."""
        timer = threading.Timer(ORACLE_TIMEOUT, self.oracle.interrupt)
        timer.start()
        try:
            return self.oracle.execute(sql).to_arrow_table()
        except duckdb.Error as e:
            return f"{type(e).__name__}: {e}"
        finally:
            timer.cancel()

    def run(self, sql: str, modes: list[str] | None = None) -> Outcome:
        """The case's outcome: the first failure over the modes, else a refusal, else passed."""
        expected = self.expected(sql)
        if isinstance(expected, str):
            return Outcome(SKIPPED, message=expected)
        refused = None
        for mode in modes or list(self.modes):
            outcome = self.run_mode(sql, mode, expected)
            if outcome.kind == MISMATCH and not self._stable(sql, expected):
                return Outcome(SKIPPED, message="DuckDB's own answer to it varies from run to run")
            if outcome.kind in FAILURES:
                return outcome
            if outcome.kind == REFUSED and refused is None:
                refused = outcome
        return refused or Outcome(PASSED, expected=expected)

    def _stable(self, sql: str, expected: pa.Table) -> bool:
        """Whether DuckDB, asked again, keeps giving ``expected``."""
        for _ in range(ORACLE_RECHECKS):
            again = self.expected(sql)
            if isinstance(again, str) or compare(again, expected, sql) is not None:
                return False
        return True

    def run_mode(self, sql: str, mode: str, expected: pa.Table) -> Outcome:
        """Run ``sql`` on ``mode``'s cluster and check its answer against ``expected``."""
        try:
            got = self._execute(mode, sql)
        except TimeoutError as e:
            self._restart(mode)
            return Outcome(ERROR, mode, str(e), expected)
        except qengine.NotSupportedError as e:
            return Outcome(REFUSED, mode, str(e), expected)
        except qengine.Error as e:
            if isinstance(e, qengine.OperationalError):
                self._restart(mode)
            return Outcome(ERROR, mode, f"{type(e).__name__}: {e}", expected)
        except Exception as e:  # noqa: BLE001 - anything else escaping qengine is a bug to report, not a reason to stop
            return Outcome(ERROR, mode, f"{type(e).__name__} (not a qengine.Error): {e}", expected)
        difference = compare(got, expected, sql)
        if difference:
            return Outcome(MISMATCH, mode, difference, expected, got)
        return Outcome(PASSED, mode, expected=expected, got=got)

    def _execute(self, mode: str, sql: str) -> pa.Table:
        """qengine's answer; TimeoutError if none comes within QUERY_TIMEOUT, so that a hang fails one case, not the run.

        The query runs in a thread of its own because a local cluster has no way to cancel one.
        """
        answer: dict[str, object] = {}

        def work() -> None:
            try:
                answer["table"] = self.engines[mode].cursor().execute(sql).fetch_arrow_table()
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
                answer["error"] = e

        thread = threading.Thread(target=work, name=f"fuzz-{mode}", daemon=True)
        thread.start()
        thread.join(QUERY_TIMEOUT)
        if thread.is_alive():
            raise TimeoutError(f"Timeout: no answer in {QUERY_TIMEOUT:.0f} s")
        if "error" in answer:
            raise answer["error"]
        return answer["table"]

    def _restart(self, mode: str) -> None:
        """A fresh cluster for ``mode``: after an OperationalError its workers may be gone."""
        with contextlib.suppress(qengine.Error):
            self.engines[mode].close()
        self.engines[mode] = self._connect(mode)
