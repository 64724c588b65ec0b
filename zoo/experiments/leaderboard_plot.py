"""The leaderboard figure of ``zoo bench`` (:mod:`zoo.experiments.leaderboard`): one row of panels per
metric; per dataset every row's mean with its standard-error bar, the bench row in red with a dashed line
through its mean; a last panel of the paired differences (bench minus each zoo row, all datasets, ± SE) with
the zero line, so a reader sees at once where the benched model is better, worse, or indistinguishable.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

__all__ = ["leaderboard_png"]

BENCH_COLOR = "#d62728"
ZOO_COLOR = "#4c4c4c"


def _point(ax, y: float, e: Mapping | None, bench: bool) -> None:
    if not e:
        return
    color = BENCH_COLOR if bench else ZOO_COLOR
    ax.errorbar(
        e["mean"],
        y,
        xerr=e.get("se") or 0.0,
        fmt="o",
        color=color,
        ms=7 if bench else 4,
        capsize=2,
        zorder=3 if bench else 2,
    )


def _panel(ax, lb: Mapping, order: list[Mapping], dataset: str, metric: str) -> None:
    if not any(row["datasets"].get(dataset, {}).get(metric) for row in order):
        ax.set_axis_off()  # a metric of another task (e.g. accuracy on a regression set)
        return
    ax.set_title(f"{dataset}: {metric}", fontsize=9)
    for y, row in enumerate(order):
        e = row["datasets"].get(dataset, {}).get(metric)
        _point(ax, y, e, row["bench"])
        if row["bench"] and e:
            ax.axvline(e["mean"], color=BENCH_COLOR, ls="--", lw=0.8, zorder=1)
    ax.grid(axis="x", alpha=0.3)


def _paired_panel(ax, lb: Mapping, order: list[Mapping], metric: str) -> None:
    for y, row in enumerate(order):
        e = lb["paired"].get(row["label"], {}).get(metric, {}).get("all")
        _point(ax, y, e, False)
    ax.axvline(0.0, color=BENCH_COLOR, lw=0.8)
    ax.set_title("bench − row (mean over datasets)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def leaderboard_png(lb: Mapping) -> bytes:
    """The figure as PNG bytes (matplotlib's object API: the caller's pyplot backend is left alone)."""
    from matplotlib.figure import Figure

    metrics, datasets = list(lb["metrics"]), list(lb["datasets"])
    first = metrics[0]
    # worst first: the best row ends on top (matplotlib's y grows upwards); unranked rows at the bottom
    order = sorted(lb["rows"], key=lambda e: (e["rank"][first] is not None, -(e["rank"][first] or 0.0)))
    from matplotlib.ticker import MaxNLocator

    ncols = len(datasets) + (1 if lb["paired"] else 0)
    fig = Figure(
        figsize=(2.8 * ncols + 2.6, len(metrics) * max(1.8, 0.25 * len(order) + 0.9) + 0.6),
        layout="constrained",
    )
    axes = fig.subplots(len(metrics), ncols, squeeze=False, sharey=True)
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(4))
    for i, m in enumerate(metrics):
        for j, d in enumerate(datasets):
            _panel(axes[i][j], lb, order, d, m)
        if lb["paired"]:
            _paired_panel(axes[i][-1], lb, order, m)
            axes[i][-1].set_xlabel(f"Δ {m}", fontsize=8)
    axes[0][0].set_yticks(range(len(order)))
    for row in axes:
        row[0].set_yticklabels([r["label"] for r in order], fontsize=8)
        for lab in row[0].get_yticklabels():
            if lab.get_text() == lb["bench"]:
                lab.set_color(BENCH_COLOR)
                lab.set_fontweight("bold")
    fig.suptitle(lb["title"], fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()
