"""Reports of harness runs: JSON, and a PNG comparing qengine with DuckDB per query."""

from __future__ import annotations

import json
import os


def write_json(report: dict, path: str) -> None:
    """Indented JSON, creating the directory; values JSON has no type for are written with ``str``,
    so a benchmark's report never fails at the end of a long run. Shared by every harness."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)


def plot_queries(labels: list[str], series: dict[str, list[float | None]], path: str, title: str) -> None:
    """Grouped bars per query (log scale), with the totals as a final group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    totals = {name: sum(v for v in values if v is not None) for name, values in series.items()}
    names = list(series)
    x = np.arange(len(labels) + 1)
    width = 0.8 / max(1, len(names))
    fig, (ax, ax_total) = plt.subplots(1, 2, figsize=(max(10, len(labels) * 0.18 + 4), 4.5),
                                       gridspec_kw={"width_ratios": [max(4, len(labels) // 6), 1]})
    for i, name in enumerate(names):
        values = [v if v is not None else 0 for v in series[name]]
        ax.bar(x[:-1] + i * width, values, width, label=name)
        ax_total.bar(i, totals[name], 0.6, label=name)
        ax_total.text(i, totals[name], f"{totals[name]:.1f}s", ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(x[:-1] + width * (len(names) - 1) / 2)
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("seconds (log)")
    ax.set_title(title)
    ax.legend()
    ax_total.set_xticks(range(len(names)))
    ax_total.set_xticklabels(names, fontsize=8)
    ax_total.set_title("total")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
