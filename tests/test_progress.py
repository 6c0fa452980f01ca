"""A task attempt's progress score, as a worker reports it for LATE (``runtime.progress``)."""

from __future__ import annotations

import threading

import duckdb
import pytest

from qengine.runtime.progress import LOAD_SHARE, ProgressBoard
from qengine.sandbox.connection import safe_connection


def test_scores_follow_the_phases_of_a_task() -> None:
    board = ProgressBoard()
    with board.track("q1/2/0/0", inputs=2) as progress, board.track("q2/0/0/0", inputs=0):
        assert board.scores("q1") == {"q1/2/0/0": 0.0}
        progress.input_loaded()
        assert board.scores("q1")["q1/2/0/0"] == pytest.approx(LOAD_SHARE / 2)
        progress.input_loaded()
        con = safe_connection(1, (), False)
        progress.running(con)  # no query running: DuckDB cannot tell, and the load share stands
        assert board.scores("q1")["q1/2/0/0"] == pytest.approx(LOAD_SHARE)
        progress.finish()
        assert board.scores("q1")["q1/2/0/0"] == 1.0
        assert set(board.scores("q2")) == {"q2/0/0/0"}
    assert board.scores("q1") == {}


def test_a_running_fragment_reports_duckdb_s_progress(tmp_path) -> None:
    """Pooled connections track progress from the start: a scan partly done scores between the
    load share and 1."""
    path = tmp_path / "t.parquet"
    duckdb.execute(f"COPY (SELECT range AS a FROM range(20000000)) TO '{path}' (ROW_GROUP_SIZE 100000)")
    con = safe_connection(1, (str(path),), False)
    board = ProgressBoard()
    seen: list[float] = []
    with board.track("q1/0/0/0", inputs=0) as progress:
        progress.running(con)
        query = threading.Thread(target=lambda: con.execute(f"SELECT a % 7, sum(a) FROM '{path}' GROUP BY 1").fetchall())
        query.start()
        while query.is_alive():
            seen.append(board.scores("q1")["q1/0/0/0"])
        query.join()
    assert all(LOAD_SHARE <= s <= 1.0 for s in seen), seen
    assert any(LOAD_SHARE < s < 1.0 for s in seen), f"no progress seen during the scan: {sorted(set(seen))}"
