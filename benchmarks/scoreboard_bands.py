"""Predictive bands of every guide over the reference posterior's, on the stored 1-D reference instances.

For each stored instance with one input (the cubic toy), every guide of the instance's models is fitted once
(seed 0, the model's default steps, :func:`zoo.reference.score.score_spec`'s fit) and its 95 % predictive
band of ``y`` at the reference's test inputs is drawn over the reference's band (NUTS draws), one panel per
guide, into ``benchmarks/results/scoreboard-bands.png``.  The scores themselves are the scoreboard's
(``benchmarks/scoreboard.py``); this figure is for looking.

Usage::

    python benchmarks/scoreboard_bands.py [--instances gauss-cubic] [--draws 500] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

import numpy as np


def band(draws: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2.5 %, 50 % and 97.5 % quantiles over draws ``(S, N)``, columns in ``order``."""
    q = np.quantile(draws[:, order], [0.025, 0.5, 0.975], axis=0)
    return q[0], q[1], q[2]


def guide_draws(instance, arrays: dict, model: str, guide: str, draws: int, steps: int | None) -> np.ndarray:
    """Predictive draws of ``y`` ``(draws, N)`` at the reference's test inputs from one fit (seed 0)."""
    import torch

    from zoo.experiments.config import RunConfig
    from zoo.experiments.runs import fit_on_dataset
    from zoo.reference.quantities import predictive_draws
    from zoo.reference.score import reference_data

    ds = reference_data(instance, arrays)
    options = instance.options if model == instance.model else {}
    cfg = RunConfig(hidden=instance.hidden, guide=guide, steps=steps, seed=0, progress=False, options=options)
    run = fit_on_dataset(model, ds, cfg)
    x = torch.as_tensor(arrays["x_test"], dtype=torch.float32, device=run.result.device)
    return np.asarray(predictive_draws(run.result, x, draws, seed=0)["y"])


def figure(panels: dict[str, np.ndarray], arrays: dict, title: str, path: Path) -> None:
    """One panel per guide: its band (blue) over the reference's (grey), test points as dots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.io import atomic_save_figure

    x = np.asarray(arrays["x_test"])[:, 0]
    order = np.argsort(x)
    lo, mid, hi = band(np.asarray(arrays["y"]), order)
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    size = (4 * cols, 3 * rows)
    fig, axes = plt.subplots(rows, cols, figsize=size, sharex=True, sharey=True, squeeze=False)
    for ax, (name, draws) in zip(axes.flat, panels.items()):
        ax.fill_between(x[order], lo, hi, color="0.75", label="reference 95 %")
        ax.plot(x[order], mid, color="0.4", lw=1)
        g_lo, g_mid, g_hi = band(draws, order)
        ax.plot(x[order], g_lo, color="C0", lw=1, label=f"{name} 95 %")
        ax.plot(x[order], g_hi, color="C0", lw=1)
        ax.plot(x[order], g_mid, color="C0", lw=1, ls="--")
        ax.scatter(x, np.asarray(arrays["y_test"]).reshape(-1), s=4, color="k")
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    atomic_save_figure(fig, path)


def main(argv: list[str] | None = None) -> list[Path]:
    from zoo.experiments.registry import get_entry
    from zoo.reference.instances import INSTANCES
    from zoo.reference.store import default_root, load_reference, stored_names

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", default=None, help="comma-separated subset (default: every stored 1-D one)")
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--steps", type=int, default=None, help="training steps (default: each model's)")
    p.add_argument("--root", default=str(default_root()))
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = p.parse_args(argv)
    if a.draws < 40:
        p.error("--draws must be >= 40 (a 95 % band needs draws in both tails)")
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    names = [n for n in INSTANCES if n in set(stored_names(a.root))]
    if a.instances:
        names = [n for n in names if n in a.instances.split(",")]
    written = []
    for name in names:
        inst = INSTANCES[name]
        arrays, _ = load_reference(a.root, name)
        if "y" not in arrays or np.asarray(arrays["x_test"]).shape[1] != 1:
            continue
        panels = {
            f"{m}:{g}": guide_draws(inst, arrays, m, g, a.draws, a.steps)
            for m in inst.scored
            for g in get_entry(m).guides
        }
        path = Path(a.out) / f"scoreboard-bands-{name}.png"
        figure(panels, arrays, f"{name}: guides' 95 % predictive bands over the reference's (grey)", path)
        written.append(path)
        print(path, flush=True)
    return written


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
