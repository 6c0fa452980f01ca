"""``qengine tpcds run``: every selected query on a local cluster, checked and timed against DuckDB."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import duckdb

import qengine
from qengine.errors import Error, ProgrammingError
from tpcds.compare import compare
from tpcds.extension import queries as all_queries


@dataclass
class QueryReport:
    query: int
    ok: bool
    error: str | None = None
    qengine_seconds: float | None = None
    duckdb_seconds: float | None = None
    stages: int | None = None
    tasks: int | None = None
    shuffle_bytes: int | None = None
    remote_bytes: int | None = None
    spilled_bytes: int | None = None
    recovery: dict | None = None  # tasks retried, recomputed and speculated; workers lost
    reducer_wait_seconds: float | None = None
    rows: int | None = None

    @property
    def ratio(self) -> float | None:
        """qengine's time over DuckDB's, when both engines ran it (a wrong answer was timed too);
        None for a query that failed before both times were taken."""
        if not self.qengine_seconds or not self.duckdb_seconds:
            return None
        return self.qengine_seconds / self.duckdb_seconds


SMALL_SECONDS = 0.1


@dataclass(frozen=True)
class Ratios:
    """qengine against DuckDB over the timed queries: the JSON report's totals and the chart print these."""

    timed: int  # queries both engines ran
    qengine_seconds: float
    duckdb_seconds: float
    total: float | None  # total time over total time: the long queries dominate it
    geomean: float | None  # geometric mean of the per-query ratios: every query weighs alike


@dataclass
class RunReport:
    config: dict
    queries: list[QueryReport] = field(default_factory=list)

    @property
    def correct(self) -> int:
        return sum(q.ok for q in self.queries)

    def timed(self) -> list[QueryReport]:
        return [q for q in self.queries if q.ratio is not None]

    def ratios(self) -> Ratios:
        timed = self.timed()
        qe = sum(q.qengine_seconds for q in timed)
        dd = sum(q.duckdb_seconds for q in timed)
        return Ratios(len(timed), qe, dd, qe / dd if timed else None,
                      statistics.geometric_mean(q.ratio for q in timed) if timed else None)

    def totals(self) -> dict:
        ratios = self.ratios()
        small = [q for q in self.timed() if q.duckdb_seconds < SMALL_SECONDS]
        return {
            "queries": len(self.queries),
            "correct": self.correct,
            "qengine_seconds": round(ratios.qengine_seconds, 3),
            "duckdb_seconds": round(ratios.duckdb_seconds, 3),
            "ratio_qengine_over_duckdb": None if ratios.total is None else round(ratios.total, 3),
            "geomean_ratio": None if ratios.geomean is None else round(ratios.geomean, 3),
            "shuffle_bytes": sum(q.shuffle_bytes or 0 for q in self.queries),
            # The queries DuckDB answers in under SMALL_SECONDS, and qengine's median time over
            # DuckDB's on them: the fixed cost of a query, which small ones show.
            "small_queries": len(small),
            "small_overhead_ms": round(statistics.median(q.qengine_seconds - q.duckdb_seconds for q in small) * 1000, 1) if small else None,
        }

    def as_dict(self) -> dict:
        return {"config": self.config, "totals": self.totals(), "queries": [asdict(q) for q in self.queries]}


def parse_selection(text: str | None) -> list[int]:
    """'1-10,42' → [1..10, 42]; None → all 99."""
    if not text:
        return list(range(1, 100))
    chosen: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                chosen.extend(range(lo, hi + 1))
            else:
                chosen.append(int(part))
        except ValueError:
            raise ProgrammingError(f"bad query selection {part!r}: use numbers and ranges like 1-10,42") from None
    bad = [n for n in chosen if not 1 <= n <= 99]
    if bad:
        raise ProgrammingError(f"TPC-DS has queries 1 to 99, not {bad[0]}")
    return list(dict.fromkeys(chosen))


def table_directories(data: str) -> dict[str, str]:
    """Table name → its Parquet directory, as ``qengine tpcds gen`` lays them out."""
    return {t: os.path.join(data, t) for t in sorted(os.listdir(data)) if os.path.isdir(os.path.join(data, t))}


def reference(data: str) -> duckdb.DuckDBPyConnection:
    """DuckDB over the same Parquet files: the oracle and the time to beat."""
    con = duckdb.connect()
    for table, path in table_directories(data).items():
        quoted = path.replace("'", "''")
        con.execute(f"CREATE VIEW \"{table}\" AS SELECT * FROM read_parquet('{quoted}/*.parquet')")
    return con


def run(
    data: str,
    selection: list[int],
    connect_options: dict,
    progress: Callable[[int, QueryReport], None] | None = None,
) -> RunReport:
    if not os.path.isdir(data):
        raise ProgrammingError(f"no TPC-DS data at {data}: run `qengine tpcds gen --out {data}` first")
    texts = all_queries()
    report = RunReport(config={"data": os.path.abspath(data), **connect_options})
    ref = reference(data)
    from qengine.cli.common import announce_ui, register_directory

    with qengine.connect(**connect_options) as con:
        announce_ui(con)  # --ui: watch the queries run
        register_directory(con, data)
        for i, number in enumerate(selection):
            sql = texts[number]
            entry = QueryReport(number, ok=False)
            try:
                t0 = time.perf_counter()
                cur = con.execute(sql)
                got = cur.fetch_arrow_table()
                entry.qengine_seconds = round(time.perf_counter() - t0, 4)
                stats = cur.stats
                entry.stages, entry.tasks, entry.shuffle_bytes = len(stats.stages), stats.tasks, stats.shuffle_bytes
                entry.remote_bytes = sum(s.remote_bytes for s in stats.shuffles)
                entry.spilled_bytes = stats.spilled_bytes
                entry.recovery = asdict(stats.recovery)
                entry.reducer_wait_seconds = round(sum(s.read_wait_seconds for s in stats.shuffles), 4)
                entry.rows = got.num_rows
                t1 = time.perf_counter()
                expected = ref.execute(sql).to_arrow_table()
                entry.duckdb_seconds = round(time.perf_counter() - t1, 4)
                verdict = compare(got, expected, sql)
                entry.ok = verdict.ok
                entry.error = None if verdict.ok else f"wrong answer: {verdict.message}"
            except Error as e:
                entry.error = f"{type(e).__name__}: {e}"
            report.queries.append(entry)
            if progress:
                progress(i + 1, entry)
    ref.close()
    return report
