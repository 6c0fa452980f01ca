"""A query's run as a Chrome trace: ``EXPLAIN (ANALYZE, FORMAT trace)`` and ``qengine sql
--trace FILE``. Every event is checked against the trace-event format, and the trace against
the run it describes (its tasks, their workers, the stages that feed each other)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import qengine
from tests.conftest import subprocess_env

JOIN = "SELECT c.city, count(*) AS n FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city"


def check_format(trace: dict) -> list[dict]:
    """The slices of a trace-event document, after checking every event has what its phase needs."""
    events = trace["traceEvents"]
    assert events
    for e in events:
        assert {"ph", "pid", "tid"} <= e.keys(), e
        if e["ph"] == "X":
            assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0 and e["name"], e
        elif e["ph"] in ("s", "f"):
            assert isinstance(e["ts"], int) and "id" in e, e
        else:
            assert e["ph"] == "M" and e["name"] in ("process_name", "thread_name"), e
    return [e for e in events if e["ph"] == "X"]


def test_explain_format_trace_describes_the_run(default_engine) -> None:
    [(text,)] = default_engine.execute(f"EXPLAIN (ANALYZE, FORMAT trace) {JOIN}").fetchall()
    cur = default_engine.execute(JOIN)
    cur.fetchall()
    stats = cur.stats
    trace = json.loads(text)
    slices = [e for e in check_format(trace) if e["cat"] != "read"]
    tasks = {(e["args"]["stage"], e["args"]["task"]) for e in slices if e["args"]["outcome"] == "done"}
    assert len(tasks) == stats.tasks  # every task of the run, once done
    processes = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(processes) == 2 and all(p["args"]["name"].startswith("worker 127.0.0.1:") for p in processes)
    # no two slices overlap on one slot
    by_slot: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in slices:
        by_slot.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_slot.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    flows = [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]
    assert flows and len([f for f in flows if f["ph"] == "s"]) == len([f for f in flows if f["ph"] == "f"])


def test_explain_options_are_checked(default_engine) -> None:
    with pytest.raises(qengine.ProgrammingError, match="needs ANALYZE"):
        default_engine.execute(f"EXPLAIN (FORMAT trace) {JOIN}")
    with pytest.raises(qengine.ProgrammingError, match="unknown EXPLAIN option"):
        default_engine.execute(f"EXPLAIN (ANALYZE, FORMAT svg) {JOIN}")
    [(plan,)] = default_engine.execute(f"EXPLAIN (ANALYZE) {JOIN}").fetchall()[:1]
    assert plan.startswith("Stage")


def test_cli_writes_a_trace_file(tmp_path, data_paths) -> None:
    out = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-m", "qengine.cli", "sql", "-d", data_paths["sales"].rsplit("/", 1)[0], "--no-progress",
         # a statement before it, that runs no query: the trace is the last one's
         "--trace", str(out), "-c", "CREATE VIEW per_store AS SELECT store_id FROM sales; SELECT store_id, count(*) FROM per_store GROUP BY store_id"],
        capture_output=True, text=True, env=subprocess_env(), timeout=120, cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    slices = check_format(json.loads(out.read_text()))
    tasks = [e for e in slices if e["cat"] != "read"]
    assert tasks and all(e["args"]["outcome"] == "done" for e in tasks)
