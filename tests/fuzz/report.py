"""Tally a fuzz run and write each failure as a runnable reproducer."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from tests.fuzz.runner import ERROR, FAILURES, MISMATCH, PASSED, REFUSED, SKIPPED, SPLIT_SIZE, Outcome
from tests.fuzz.schema import Table

SHOWN_ROWS = 10


@dataclass
class Summary:
    """Counts of each outcome, the commonest refusal and skip messages, and the failures' signatures."""

    counts: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    skips: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)

    def add(self, outcome: Outcome) -> None:
        self.counts[outcome.kind] += 1
        if outcome.kind == REFUSED:
            self.refusals[outcome.signature()] += 1
        elif outcome.kind == SKIPPED:
            self.skips[outcome.signature()[:100]] += 1
        elif outcome.kind in FAILURES:
            self.failures[outcome.signature()] += 1

    @property
    def cases(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        """One progress line."""
        n = max(1, self.cases)
        c = self.counts
        return (f"{self.cases} cases: {c[PASSED]} passed, {c[REFUSED]} refused ({100 * c[REFUSED] / n:.1f}%), "
                f"{c[SKIPPED]} skipped, {c[MISMATCH]} mismatches, {c[ERROR]} errors")

    def render(self, top: int = 10) -> str:
        """The final summary: the counts, then the commonest refusals, skips and failure kinds."""
        out = [self.line()]
        for title, counter in (("refusals", self.refusals), ("skipped (DuckDB rejected)", self.skips), ("failures", self.failures)):
            if counter:
                out.append(f"top {title}:")
                out += [f"  {n:5d}  {msg}" for msg, n in counter.most_common(top)]
        return "\n".join(out)


def _preview(table: pa.Table | None) -> str:
    if table is None:
        return "(none)"
    if table.num_rows == 0:
        return "(no rows)"
    try:
        text = "\n".join(str(tuple(r.values())) for r in table.slice(0, SHOWN_ROWS).to_pylist())
    except (ValueError, OverflowError):  # e.g. dates outside Python's range
        text = str(table.slice(0, SHOWN_ROWS))
    return text + (f"\n... {table.num_rows} rows in all" if table.num_rows > SHOWN_ROWS else "")


def write_repro(out_dir: str, name: str, sql: str, original: str, outcome: Outcome, options: dict[str, object], tables: dict[str, Table]) -> str:
    """Write ``name``.py under ``out_dir``: the shrunk SQL, the tables it reads and both answers; returns its path.

    The file runs the query on DuckDB and on a qengine cluster in the failing mode, so the failure
    can be replayed with ``python FILE`` (the tables are built by ``python -m tests.fuzz --cases 0``).
    """
    os.makedirs(out_dir, exist_ok=True)
    used = {t.name: t.path for t in tables.values() if re.search(rf"\b{t.name}\b", sql)}
    settings = {"split_size": SPLIT_SIZE, **options}
    got = _preview(outcome.got) if outcome.kind == MISMATCH else outcome.message
    header = "\n".join([
        f"qengine fuzz {outcome.kind} in mode {outcome.mode} {settings}",
        "", outcome.message, "", "SQL:", sql, "", "shrunk from:", original, "", "DuckDB's answer:", _preview(outcome.expected),
        "", "qengine's answer:", got,
    ])
    body = f'''{_comment(header)}

import duckdb

import qengine

TABLES = {used!r}
SETTINGS = {settings!r}
SQL = {sql!r}

if __name__ == "__main__":
    oracle = duckdb.connect()
    for name, path in TABLES.items():
        oracle.execute(f"CREATE VIEW {{name}} AS SELECT * FROM read_parquet('{{path}}/*.parquet')")
    print("DuckDB: ", oracle.execute(SQL).fetchall())
    with qengine.connect(workers=2, **SETTINGS) as con:
        for name, path in TABLES.items():
            con.register_parquet(name, path)
        print("qengine:", con.execute(SQL).fetchall())
'''
    path = os.path.join(out_dir, f"{name}.py")
    with open(path, "w") as f:
        f.write(body)
    return path


def _comment(text: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in text.splitlines())
