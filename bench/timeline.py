"""Task timelines of benchmark runs, pull next to prefetch: every task attempt a bar in its
worker's slot over time, coloured by stage, map stages in blues and the stages reading a
shuffle in oranges, its wait for input blocks hatched (from its start, as the Chrome trace draws
it), an attempt whose output was not kept outlined in red. A prefetch run's reducers placed ahead
of time start while the maps still run; a pull run's start after them. That overlap is the
exchange's case (SCache's figures 11 and 12), so the benchmarks draw it from their own runs.

Slots are laid out as ``EXPLAIN (ANALYZE, FORMAT trace)`` lays them out (``slot_rows``).
"""

from __future__ import annotations

import os
import statistics
from typing import TYPE_CHECKING

from qengine.api.trace import slot_rows
from qengine.runtime.stats import QueryStats

if TYPE_CHECKING:
    from matplotlib.axes import Axes

BAR = 0.8  # of a slot row's height
NOT_KEPT = "attempt not kept (failed, lost, outrun, cancelled)"


def median_run(runs: list[tuple[float, QueryStats]]) -> QueryStats:
    """The stats of the run of median time (the faster of the two middle ones): the run a
    timeline shows as representative."""
    middle = statistics.median_low(seconds for seconds, _ in runs)
    return next(stats for seconds, stats in runs if seconds == middle)


def stage_colours(stats: QueryStats) -> dict[int, tuple[str, tuple[float, float, float, float]]]:
    """Stage → (legend label, colour): stages that read no other stage (the maps) in shades of
    blue, stages that read a shuffle in shades of orange."""
    import matplotlib

    maps = [s for s in stats.stages if not s.parents]
    reads = [s for s in stats.stages if s.parents]
    colours = {}
    for stages, cmap, role in ((maps, "Blues", "map"), (reads, "Oranges", "reads shuffle")):
        for i, stage in enumerate(stages):
            shade = 0.6 if len(stages) == 1 else 0.75 - 0.4 * i / (len(stages) - 1)  # dark enough to see, light enough to tell apart
            colours[stage.stage] = (f"stage {stage.stage}: {role} → {stage.kind}", matplotlib.colormaps[cmap](shade))
    return colours


def draw_timeline(ax: Axes, stats: QueryStats, title: str) -> None:
    """One run's timeline on ``ax``: a row per worker slot, the workers numbered in address order."""
    placed = slot_rows(stats.spans)
    workers = {w: i + 1 for i, w in enumerate(sorted({span.worker for span, _ in placed}))}
    rows = sorted({(workers[span.worker], slot) for span, slot in placed})
    row_of = {key: i for i, key in enumerate(rows)}
    colours = stage_colours(stats)
    for span, slot in placed:
        y = row_of[(workers[span.worker], slot)]
        label, colour = colours.get(span.stage, (f"stage {span.stage}", "grey"))
        kept = span.outcome == "done"
        ax.barh(y, span.end - span.start, left=span.start, height=BAR, color=colour, label=label if kept else NOT_KEPT,
                edgecolor="black" if kept else "red", linewidth=0.3 if kept else 1.0, alpha=1.0 if kept else 0.5)
        if span.read_seconds > 0:
            ax.barh(y, min(span.read_seconds, span.end - span.start), left=span.start, height=BAR, fill=False,
                    hatch="////", edgecolor="white", linewidth=0)
    maps = [s.stage for s in stats.stages if not s.parents]
    maps_done = max((span.end for span in stats.spans if span.stage in maps and span.outcome == "done"), default=None)
    if maps_done is not None:
        ax.axvline(maps_done, color="black", linestyle=":", linewidth=1, label="last map task ends")
    ax.set_yticks(range(len(rows)), [f"worker {w} slot {s}" for w, s in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_title(f"{title}: {stats.seconds:.2f} s, {stats.tasks} tasks", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="0.9")
    ax.set_axisbelow(True)


def plot_timelines(runs: dict[str, dict[str, QueryStats]], path: str, title: str) -> None:
    """A PNG of timelines: a row of panels per job (``runs`` job → mode → stats), the modes side
    by side on one time axis so their lengths compare."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    waiting = {"waiting for input": Patch(facecolor="0.55", hatch="////", edgecolor="white", linewidth=0)}
    jobs = list(runs)
    modes = list(dict.fromkeys(mode for by_mode in runs.values() for mode in by_mode))
    slots = [max((len({(span.worker, slot) for span, slot in slot_rows(s.spans)}) for s in runs[job].values()), default=1)
             for job in jobs]
    heights = [1.4 + 0.22 * n for n in slots]  # the slots, and the axis under them
    fig, axes = plt.subplots(len(jobs), len(modes), figsize=(6.5 * len(modes) + 2.2, sum(heights) + 0.5), squeeze=False,
                             gridspec_kw={"height_ratios": heights}, layout="constrained")
    for r, job in enumerate(jobs):
        end = max(t for stats in runs[job].values() for t in (stats.seconds, *(span.end for span in stats.spans)))
        legend: dict = {}  # one legend a row, right of it: the modes of a job run the same stages
        for c, mode in enumerate(modes):
            ax = axes[r][c]
            if mode not in runs[job]:
                ax.set_axis_off()
                continue
            draw_timeline(ax, runs[job][mode], f"{job}, {mode}" if len(jobs) > 1 else mode)
            ax.set_xlim(0, end * 1.02)
            ax.set_xlabel("seconds since the query started", fontsize=8)
            handles, labels = ax.get_legend_handles_labels()
            legend.update(zip(labels, handles, strict=True))
        legend.update(waiting)
        axes[r][-1].legend(legend.values(), legend.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(title, fontsize=11)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
