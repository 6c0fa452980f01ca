"""``python -m tests.fuzz --cases N [--seed S] [--out DIR]``: a differential fuzz run against DuckDB.

Each case is a generated query run on DuckDB and on a qengine cluster per mode (started once for
the whole run). Every mismatch or error is shrunk and written to ``--out`` as a runnable file; the
run ends with a summary, and exits non-zero if anything failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

from qengine.cli.common import cache_dir
from tests.fuzz.generator import generate
from tests.fuzz.minimize import shrink
from tests.fuzz.report import Summary, write_repro
from tests.fuzz.runner import ERROR, EXTRA_MODES, FAILURES, MISMATCH, MODES, Outcome, Runner
from tests.fuzz.schema import build


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="run seed: the same seed gives the same queries (default 0)")
    p.add_argument("--first", type=int, default=0, help="number of the first case, to replay part of a run (default 0)")
    p.add_argument("--out", help="where failures are written (default <cache>/fuzz/failures)")
    p.add_argument("--modes", default=",".join(MODES), help=f"qengine modes to run (default %(default)s), of {', '.join({**MODES, **EXTRA_MODES})}")
    p.add_argument("--shrink-budget", type=int, default=150, help="candidate queries tried when shrinking one failure (0: no shrinking)")
    p.add_argument("--shrink-per-kind", type=int, default=3,
                   help="failures of one signature that are shrunk; later ones are written as generated (default 3)")
    p.add_argument("--show", action="store_true", help="print every case's SQL and outcome")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    known = {**MODES, **EXTRA_MODES}
    unknown = [m for m in args.modes.split(",") if m not in known]
    if unknown:
        _parser().error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    modes = {m: known[m] for m in args.modes.split(",")}
    out = args.out or os.path.join(cache_dir(), "fuzz", "failures")
    tables = build()
    summary = Summary()
    shrunk: Counter = Counter()
    started = last = time.monotonic()
    with Runner(tables, modes) as runner:
        for case in range(args.first, args.first + args.cases):
            sql = generate(tables, args.seed, case)
            outcome = runner.run(sql)
            summary.add(outcome)
            if args.show:
                print(f"[{case}] {outcome.kind} {outcome.message.splitlines()[0] if outcome.message else ''}\n  {sql}", flush=True)
            if outcome.kind in FAILURES:
                signature = outcome.signature()
                budget = args.shrink_budget if shrunk[signature] < args.shrink_per_kind else 0
                shrunk[signature] += 1
                small, final = _shrink(runner, sql, outcome, budget)
                path = write_repro(out, f"{outcome.kind}-s{args.seed}-c{case}", small, sql, final, modes[outcome.mode], tables)
                print(f"case {case}: {outcome.kind} in mode {outcome.mode}: {outcome.message.splitlines()[0][:200]}\n  -> {path}", flush=True)
            now = time.monotonic()
            if now - last >= 15:
                last = now
                print(f"[{now - started:.0f} s] {summary.line()}", flush=True)
    elapsed = time.monotonic() - started
    print(f"\nseed {args.seed}, cases {args.first}..{args.first + args.cases - 1}, {elapsed:.0f} s "
          f"({args.cases / max(elapsed, 1e-9):.1f} cases/s); failures in {out}")
    print(summary.render())
    return 1 if any(summary.counts[k] for k in FAILURES) else 0


def _shrink(runner: Runner, sql: str, outcome: Outcome, budget: int) -> tuple[str, Outcome]:
    """The shrunk query and its outcome: it must fail in the same mode, a mismatch as a mismatch, an error with the same message."""

    def fails(candidate: str) -> bool:
        again = runner.run(candidate, [outcome.mode])
        if outcome.kind == MISMATCH:
            return again.kind == MISMATCH
        return again.kind == ERROR and again.signature() == outcome.signature()

    small = shrink(sql, fails, budget) if budget > 0 else sql
    final = runner.run(small, [outcome.mode]) if small != sql else outcome
    return (small, final) if final.kind in FAILURES else (sql, outcome)


if __name__ == "__main__":
    sys.exit(main())
