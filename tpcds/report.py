"""Reports of harness runs: JSON, and a PNG of a TPC-DS run comparing qengine with DuckDB per query."""

from __future__ import annotations

import json
import os
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpcds.run import QueryReport, RunReport

# The TPC-DS chart is laid out in pixels, so that at 99 queries every label stays legible: one
# row per query, ROW_PIXELS high, under a header of the totals and above the axis.
DPI = 100
ROW_PIXELS = 16
HEADER_PIXELS = 120
FOOTER_PIXELS = 60
WIDTH_PIXELS = 1100
LIST_CHARS = 150  # the header's lists of wrong and failed queries are cut to one line of this many

CORRECT, WRONG, FAILED = "tab:blue", "tab:red", "black"


def write_json(report: dict, path: str) -> None:
    """Indented JSON, creating the directory; values JSON has no type for are written with ``str``,
    so a benchmark's report never fails at the end of a long run. Shared by every harness."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)


def chart_rows(report: RunReport) -> list[QueryReport]:
    """The chart's rows from the top: failed queries (no ratio to draw), then the timed ones
    slowest-relative-to-DuckDB first, so what needs looking at comes first."""
    failed = [q for q in report.queries if q.ratio is None]
    return failed + sorted(report.timed(), key=lambda q: q.ratio, reverse=True)


def plot_tpcds(report: RunReport, path: str, title: str) -> None:
    """Horizontal bars of qengine's time over DuckDB's per query on a log axis, from the 1× line
    to the ratio; wrong answers red with a cross, failed queries a black cross at 1×; the totals
    and the geometric mean of the ratios in the header."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator

    rows = chart_rows(report)
    height = HEADER_PIXELS + FOOTER_PIXELS + ROW_PIXELS * max(1, len(rows))
    fig = plt.figure(figsize=(WIDTH_PIXELS / DPI, height / DPI), dpi=DPI)
    ax = fig.add_axes((70 / WIDTH_PIXELS, FOOTER_PIXELS / height, 1 - 90 / WIDTH_PIXELS, 1 - (HEADER_PIXELS + FOOTER_PIXELS) / height))
    ratios = [q.ratio for q in rows if q.ratio is not None]
    lo, hi = min([1.0, *ratios]) / 1.5, max([1.0, *ratios]) * 6  # room right of each bar for its numbers
    for y, q in enumerate(rows):
        if q.ratio is None:
            ax.plot(1, y, marker="X", color=FAILED, markersize=7)
            ax.text(1.08, y, f"failed: {(q.error or 'no time').split(':')[0]}", va="center", fontsize=7, color=FAILED)
            continue
        wrong = not q.ok
        color = WRONG if wrong else CORRECT
        ax.barh(y, q.ratio - 1, left=1, height=0.7, color=color)
        if wrong:
            ax.plot(q.ratio, y, marker="X", color=WRONG, markersize=7)
        ax.text(max(q.ratio, 1) * 1.08, y, f"{q.ratio:.2f}×  ({q.qengine_seconds:.3g} s ÷ {q.duckdb_seconds:.3g} s)"
                + ("  wrong answer" if wrong else ""), va="center", fontsize=7, color=color)
    summary = report.ratios()
    ax.axvline(1, color="grey", linewidth=1)
    if summary.geomean is not None:
        ax.axvline(summary.geomean, color="tab:green", linestyle="--", linewidth=1, zorder=0.5)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("qengine time ÷ DuckDB time (log scale; left of 1× qengine is faster)", fontsize=9)
    ax.set_yticks(range(len(rows)), [f"q{q.query}" for q in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
    ax.grid(axis="x", which="major", color="0.9")
    ax.set_axisbelow(True)
    header = header_lines(report, title)
    fig.text(10 / WIDTH_PIXELS, 1 - 10 / height, header[0], va="top", fontsize=12, weight="bold")
    fig.text(10 / WIDTH_PIXELS, 1 - 34 / height, "\n".join(header[1:]), va="top", fontsize=9, linespacing=1.5)
    handles = [Patch(color=CORRECT, label="correct"), Patch(color=WRONG, label="wrong answer"),
               Line2D([], [], marker="X", color=FAILED, linestyle="", label="failed"),
               Line2D([], [], color="tab:green", linestyle="--", label="geometric mean")]
    fig.legend(handles=handles, loc="upper right", fontsize=8, ncols=2, bbox_to_anchor=(1 - 10 / WIDTH_PIXELS, 1 - 8 / height))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def header_lines(report: RunReport, title: str) -> list[str]:
    """The title, then the counts, the totals and the lists of wrong and failed queries."""
    s = report.ratios()
    wrong = [q for q in report.timed() if not q.ok]
    failed = [q for q in report.queries if q.ratio is None]
    lines = [title, f"qengine ÷ DuckDB per query, {len(report.queries)} queries: "
                    f"{report.correct} correct, {len(wrong)} wrong answers, {len(failed)} failed"]
    repeats = report.repeat_ratios()
    spread = f" (repeats {min(repeats):.2f}–{max(repeats):.2f}×)" if len(repeats) > 1 else ""
    if s.total is None or s.geomean is None:
        lines.append("no query ran on both engines")
    else:
        lines.append(f"total over the {s.timed} timed queries: qengine {s.qengine_seconds:.2f} s, DuckDB {s.duckdb_seconds:.2f} s, "
                     f"ratio {s.total:.2f}×{spread};  geometric mean of the ratios {s.geomean:.2f}×")
    listed = "; ".join(f"{what}: {', '.join(f'q{q.query}' for q in queries)}"
                       for what, queries in (("wrong answers", wrong), ("failed", failed)) if queries)
    lines.append(textwrap.shorten(listed, LIST_CHARS, placeholder=" …") if listed else "every answer matched DuckDB's")
    return lines
