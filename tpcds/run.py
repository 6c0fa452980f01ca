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
    # Every timed run, in the order run; the seconds above are their medians.
    qengine_runs: list[float] = field(default_factory=list)
    duckdb_runs: list[float] = field(default_factory=list)

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

    def repeat_ratios(self) -> list[float]:
        """Per repeat, qengine's total over DuckDB's across the queries timed in every repeat: the
        spread of the total ratio from one repeat to the next."""
        timed = [q for q in self.timed() if q.qengine_runs and len(q.qengine_runs) == len(q.duckdb_runs)]
        repeats = min((len(q.qengine_runs) for q in timed), default=0)
        return [sum(q.qengine_runs[r] for q in timed) / sum(q.duckdb_runs[r] for q in timed) for r in range(repeats)]

    def ratios(self) -> Ratios:
        timed = self.timed()
        qe = sum(q.qengine_seconds for q in timed)
        dd = sum(q.duckdb_seconds for q in timed)
        return Ratios(len(timed), qe, dd, qe / dd if timed else None,
                      statistics.geometric_mean(q.ratio for q in timed) if timed else None)

    def totals(self) -> dict:
        ratios = self.ratios()
        spread = self.repeat_ratios()
        small = [q for q in self.timed() if q.duckdb_seconds < SMALL_SECONDS]
        return {
            "queries": len(self.queries),
            "correct": self.correct,
            "qengine_seconds": round(ratios.qengine_seconds, 3),
            "duckdb_seconds": round(ratios.duckdb_seconds, 3),
            "ratio_qengine_over_duckdb": None if ratios.total is None else round(ratios.total, 3),
            "ratio_range_over_repeats": [round(min(spread), 3), round(max(spread), 3)] if spread else None,
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
    *,
    repeat: int,
) -> RunReport:
    """Each selected query, one after another: first once untimed in each engine (qengine's
    answer checked against DuckDB's; both warm: files cached, workers' code paths loaded), then
    ``repeat`` timed runs of each engine, the order of the two alternating from one repeat to
    the next so that neither always runs on a host the other has just warmed or tired. Every
    timed answer is checked too; a query's seconds are the medians of its runs."""
    if not os.path.isdir(data):
        raise ProgrammingError(f"no TPC-DS data at {data}: run `qengine tpcds gen --out {data}` first")
    if repeat < 1:
        raise ProgrammingError(f"--repeat must be at least 1, not {repeat}")
    texts = all_queries()
    report = RunReport(config={"data": os.path.abspath(data), "repeat": repeat, **connect_options})
    ref = reference(data)
    from qengine.cli.common import announce_ui, register_directory

    with qengine.connect(**connect_options) as con:
        announce_ui(con)  # --ui: watch the queries run
        register_directory(con, data)
        for i, number in enumerate(selection):
            report.queries.append(_measure(con, ref, number, texts[number], repeat))
            if progress:
                progress(i + 1, report.queries[-1])
    ref.close()
    return report


def _measure(con: qengine.Connection, ref: duckdb.DuckDBPyConnection, number: int, sql: str, repeat: int) -> QueryReport:
    """One query's warm-ups and timed runs (see :func:`run`). A wrong answer is timed like a
    right one; a failure ends the query's measurement with its error."""
    entry = QueryReport(number, ok=False)

    def duck() -> tuple[float, object]:
        t0 = time.perf_counter()
        table = ref.execute(sql).to_arrow_table()
        return time.perf_counter() - t0, table

    def engine() -> float:
        t0 = time.perf_counter()
        cur = con.execute(sql)
        got = cur.fetch_arrow_table()
        seconds = time.perf_counter() - t0
        stats = cur.stats
        entry.stages, entry.tasks, entry.shuffle_bytes = len(stats.stages), stats.tasks, stats.shuffle_bytes
        entry.remote_bytes = sum(s.remote_bytes for s in stats.shuffles)
        entry.spilled_bytes = stats.spilled_bytes
        entry.recovery = asdict(stats.recovery)
        entry.reducer_wait_seconds = round(sum(s.read_wait_seconds for s in stats.shuffles), 4)
        entry.rows = got.num_rows
        verdict = compare(got, expected, sql)
        if not verdict.ok and entry.error is None:
            entry.error = f"wrong answer: {verdict.message}"  # still timed, as a right one would be
        return seconds

    try:
        _, expected = duck()
        engine()
        timed = [(entry.qengine_runs, engine), (entry.duckdb_runs, lambda: duck()[0])]
        for r in range(repeat):
            for runs, measure in timed[::-1] if r % 2 else timed:
                runs.append(round(measure(), 4))
        entry.ok = entry.error is None
    except Error as e:
        entry.error = f"{type(e).__name__}: {e}"
    if entry.qengine_runs:
        entry.qengine_seconds = round(statistics.median(entry.qengine_runs), 4)
    if entry.duckdb_runs:
        entry.duckdb_seconds = round(statistics.median(entry.duckdb_runs), 4)
    return entry
