"""The reliability diagram of ``benchmarks/calibration.py`` (issue 17): coverage against nominal level."""

from __future__ import annotations

from pathlib import Path

from _calibration_target import default_labels


def reliability_figure(summary: list[dict], path: Path, levels: tuple) -> None:
    """Coverage against nominal level, one panel per default model (:func:`default_labels`; all models if
    there are none), one line per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.io import atomic_save_figure

    models = default_labels(summary) or sorted(dict.fromkeys(e["model"] for e in summary))
    summary = [e for e in summary if e["model"] in models]
    ncols = min(4, len(models))
    nrows = -(-len(models) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(models) :]:
        ax.set_visible(False)
    datasets = list(dict.fromkeys(e["dataset"] for e in summary))  # one color per dataset in every panel
    colors = {d: plt.get_cmap("tab10")(i % 10) for i, d in enumerate(datasets)}
    for ax, model in zip(axes.flat, models):
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
        for e in (e for e in summary if e["model"] == model):
            cov = [e["coverage"][str(lv)] for lv in levels]
            ax.plot(levels, cov, marker="o", ms=3, label=e["dataset"], color=colors[e["dataset"]])
        ax.set_xlim(0.45, 1.0)
        ax.set_ylim(0.45, 1.01)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("nominal level")
    for row in axes:
        row[0].set_ylabel("empirical coverage")
    widest = max(range(len(models)), key=lambda i: sum(e["model"] == models[i] for e in summary))
    axes.flat[widest].legend(fontsize=7)
    fig.tight_layout()
    atomic_save_figure(fig, path)
