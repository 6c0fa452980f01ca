"""The benchmarks' pictures: the TPC-DS chart of qengine ÷ DuckDB per query, and the task
timelines that bench/terasort.py and bench/shuffle.py draw, pull next to prefetch."""

from __future__ import annotations

import math
import os
import sys

import matplotlib
import pytest

from qengine.api.trace import slot_rows
from qengine.runtime.stats import QueryStats, StageStats, TaskSpan
from tests.conftest import REPO, engine_over
from tpcds.report import ROW_PIXELS, WIDTH_PIXELS, chart_rows, header_lines, plot_tpcds
from tpcds.run import QueryReport, RunReport

# bench/ holds scripts run from a checkout, importing each other as siblings; it is not a package.
sys.path.insert(0, os.path.join(REPO, "bench"))
from timeline import NOT_KEPT, draw_timeline, median_run, plot_timelines  # noqa: E402

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

JOIN = "SELECT c.city, count(*) AS n, sum(s.qty) AS q FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city"


def synthetic(n: int) -> RunReport:
    """``n`` queries with made-up times: q2 a wrong answer, q3 failed in qengine, q5 failed after
    qengine's run (so it has one time and no ratio)."""
    report = RunReport(config={})
    for q in range(1, n + 1):
        if q == 3:
            report.queries.append(QueryReport(q, ok=False, error="NotSupportedError: GROUPING SETS with ORDER BY"))
        elif q == 5:
            report.queries.append(QueryReport(q, ok=False, error="OperationalError: worker lost", qengine_seconds=1.5))
        else:
            qe, dd = 0.05 * (q % 7 + 1), 0.03 * (q % 5 + 1)
            report.queries.append(QueryReport(q, ok=q != 2, error="wrong answer: 3 rows differ" if q == 2 else None,
                                              qengine_seconds=qe, duckdb_seconds=dd))
    return report


def png_size(path: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    height, width = matplotlib.image.imread(path).shape[:2]
    return width, height


def test_ratio_numbers_are_computed_over_the_timed_queries() -> None:
    report = synthetic(30)
    timed = [q for q in report.queries if q.qengine_seconds is not None and q.duckdb_seconds is not None]
    assert len(timed) == 28  # q3 and q5 have no ratio; the wrong answer q2 was timed and counts
    expected_total = sum(q.qengine_seconds for q in timed) / sum(q.duckdb_seconds for q in timed)
    expected_geomean = math.prod(q.qengine_seconds / q.duckdb_seconds for q in timed) ** (1 / len(timed))
    ratios = report.ratios()
    assert ratios.timed == 28
    assert ratios.total == pytest.approx(expected_total, rel=1e-12)
    assert ratios.geomean == pytest.approx(expected_geomean, rel=1e-12)
    totals = report.totals()
    assert totals["ratio_qengine_over_duckdb"] == round(expected_total, 3)
    assert totals["geomean_ratio"] == round(expected_geomean, 3)
    # what the chart prints: both numbers, and every wrong and failed query by name
    header = "\n".join(header_lines(report, "title"))
    assert f"ratio {expected_total:.2f}×" in header and f"geometric mean of the ratios {expected_geomean:.2f}×" in header
    assert "wrong answers: q2;" in header and "failed: q3, q5" in header
    assert "27 correct, 1 wrong answers, 2 failed" in header


def test_chart_rows_put_failures_first_then_the_slowest() -> None:
    rows = chart_rows(synthetic(30))
    assert [q.query for q in rows[:2]] == [3, 5]
    ratios = [q.ratio for q in rows[2:]]
    assert len(ratios) == 28 and ratios == sorted(ratios, reverse=True)


def test_chart_is_one_legible_row_per_query(tmp_path) -> None:
    """At 99 queries the PNG is ROW_PIXELS taller per query than at 5: every label gets a row."""
    sizes = {}
    for n in (5, 99):
        path = str(tmp_path / f"tpcds-{n}.png")
        plot_tpcds(synthetic(n), path, f"{n} queries")
        sizes[n] = png_size(path)
    assert ROW_PIXELS >= 12
    assert sizes[5][0] == sizes[99][0] == WIDTH_PIXELS
    assert sizes[99][1] - sizes[5][1] == (99 - 5) * ROW_PIXELS


def test_no_query_timed_still_draws(tmp_path) -> None:
    report = RunReport(config={}, queries=[QueryReport(1, ok=False, error="ProgrammingError: no such table")])
    assert report.ratios().total is None and report.ratios().geomean is None
    assert "no query ran on both engines" in header_lines(report, "t")
    plot_tpcds(report, str(tmp_path / "none.png"), "nothing timed")
    assert png_size(str(tmp_path / "none.png"))[0] == WIDTH_PIXELS


def test_median_run_is_the_run_of_median_time() -> None:
    runs = [(float(s), QueryStats([], float(s))) for s in (3, 1, 4, 2)]
    assert median_run(runs).seconds == 2.0  # the faster of the two middle ones
    assert median_run(runs[:3]).seconds == 3.0


def test_timeline_marks_waits_lost_attempts_and_the_end_of_the_maps() -> None:
    """A map attempt lost with its worker and re-run, a reducer placed ahead of time that waits
    for its input: the lost attempt outlined red under its own legend entry, the wait hatched,
    the end of the maps at the re-run's end, and the reducer in a second slot beside the map."""
    stats = QueryStats([StageStats(0, "hash", 1), StageStats(1, "result", 1, parents=[0])], 3.0, spans=[
        TaskSpan(0, 0, 0, "w:1", 0.0, 1.0, "lost"),
        TaskSpan(0, 0, 1, "w:2", 1.0, 2.0, "done"),
        TaskSpan(1, 0, 0, "w:2", 1.5, 3.0, "done", read_seconds=0.6),
    ])
    fig, ax = plt.subplots()
    draw_timeline(ax, stats, "run")
    by_label = {c.get_label(): c.patches for c in ax.containers}
    [lost] = by_label[NOT_KEPT]
    assert lost.get_x() == 0.0 and lost.get_edgecolor()[:3] == (1.0, 0.0, 0.0)
    [wait] = [p for p in ax.patches if not p.get_fill()]
    assert wait.get_x() == 1.5 and wait.get_width() == pytest.approx(0.6) and wait.get_hatch() == "////"
    [line] = ax.get_lines()
    assert line.get_label() == "last map task ends" and line.get_xdata()[0] == 2.0
    assert [t.get_text() for t in ax.get_yticklabels()] == ["worker 1 slot 1", "worker 2 slot 1", "worker 2 slot 2"]
    plt.close(fig)


@pytest.fixture(scope="module")
def pull_engine(data_paths):
    con = engine_over(data_paths, broadcast_threshold=0, shuffle="pull")
    yield con
    con.close()


def test_timelines_of_a_real_query_in_both_modes(tmp_path, default_engine, pull_engine) -> None:
    runs = {}
    for mode, con in (("prefetch", default_engine), ("pull", pull_engine)):
        cur = con.execute(JOIN)
        cur.fetchall()
        runs[mode] = cur.stats
    for stats in runs.values():
        placed = slot_rows(stats.spans)
        assert sorted(id(s) for s, _ in placed) == sorted(id(s) for s in stats.spans)  # every attempt, once
        by_slot: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for span, slot in placed:
            by_slot.setdefault((span.worker, slot), []).append((span.start, span.end))
        for spans in by_slot.values():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # none overlap in a slot
        fig, ax = plt.subplots()
        draw_timeline(ax, stats, "run")
        bars = [p for p in ax.patches if p.get_fill()]
        assert len(bars) == len(stats.spans)  # a bar per task attempt, the input waits drawn over them unfilled
        assert len(ax.get_yticklabels()) == len(by_slot)
        workers = {span.worker for span in stats.spans}
        assert {t.get_text().split(" slot")[0] for t in ax.get_yticklabels()} == {f"worker {i + 1}" for i in range(len(workers))}
        # each task's bar in its stage's colour: the maps blue, the stages reading a shuffle orange
        colours = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers if c.patches[0].get_fill()}
        for stage in stats.stages:
            if any(span.stage == stage.stage and span.outcome == "done" for span in stats.spans):
                [(label, (r, _, b, _))] = [(k, v) for k, v in colours.items() if k.startswith(f"stage {stage.stage}: ")]
                assert ("map" in label and b > r) if not stage.parents else ("reads shuffle" in label and r > b), label
        plt.close(fig)
    path = str(tmp_path / "timelines.png")
    plot_timelines({"join": {"pull": runs["pull"], "prefetch": runs["prefetch"]}}, path, "join, pull vs prefetch")
    width, height = png_size(path)
    assert width > height > 100


def test_repeat_ratios_are_each_repeats_totals() -> None:
    report = RunReport(config={})
    report.queries.append(QueryReport(1, ok=True, qengine_seconds=2.0, duckdb_seconds=1.0, qengine_runs=[1.0, 2.0, 3.0], duckdb_runs=[1.0, 1.0, 1.0]))
    report.queries.append(QueryReport(2, ok=True, qengine_seconds=4.0, duckdb_seconds=2.0, qengine_runs=[3.0, 4.0, 9.0], duckdb_runs=[2.0, 2.0, 1.0]))
    # a failed query has no ratio and stays out of every repeat's totals
    report.queries.append(QueryReport(3, ok=False, error="OperationalError: worker lost", qengine_runs=[5.0]))
    assert report.repeat_ratios() == [4.0 / 3.0, 6.0 / 3.0, 12.0 / 2.0]
    assert report.totals()["ratio_range_over_repeats"] == [1.333, 6.0]
    assert "(repeats 1.33–6.00×)" in "\n".join(header_lines(report, "title"))
