"""Predictive bands of every guide over the reference's on the 1-D reference instances: one panel per guide,
the reference's mean of ``f`` and central 95 % interval of ``y`` in grey, the guide's (its first seed) in
colour, the test targets as dots.  Drawn by ``benchmarks/scoreboard.py`` from the bands its fits keep
(:func:`zoo.reference.score.bands`) into ``benchmarks/results/scoreboard-bands.png`` — the same fits the
scores come from, so the figure needs no fit of its own.

Usage (re-draw from the committed scoreboard)::

    python benchmarks/scoreboard_bands.py [--out benchmarks/results] [--root benchmarks/reference]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FIGURE = "scoreboard-bands.png"
COLUMNS = 3  # panels per row


def guide_bands(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """``{instance: {"model:guide": bands}}`` of the lowest seed of every fit that kept bands."""
    out: dict[str, dict[str, dict]] = {}
    for r in sorted(rows, key=lambda r: r["seed"]):
        if r.get("bands"):
            out.setdefault(r["instance"], {}).setdefault(f"{r['model']}:{r['guide']}", r["bands"])
    return out


def plot_bands(rows: list[dict], refs: dict, path: Path) -> list[str]:
    """Draw the bands of ``rows`` (scoreboard fits) over the references ``refs`` (``{name: (arrays,
    meta)}``) into ``path``; returns the instances drawn (none: no file is written)."""
    from zoo.io import atomic_save_figure
    from zoo.reference.score import bands

    found = {n: b for n, b in guide_bands(rows).items() if n in refs}
    if not found:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(name, spec, b) for name, specs in found.items() for spec, b in specs.items()]
    ncol = min(COLUMNS, len(panels))
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.0 * ncol, 2.5 * nrow), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (name, spec, b) in zip(axes.flat, panels):
        arrays = refs[name][0]
        ref = bands(arrays["x_test"], arrays["f"], arrays["y"])
        order = np.argsort(arrays["x_test"][:, 0])
        ax.fill_between(ref["x"], ref["y_lo"], ref["y_hi"], color="0.8", label="reference 95 %")
        ax.plot(ref["x"], ref["f_mean"], color="0.3", lw=1)
        ax.fill_between(b["x"], b["y_lo"], b["y_hi"], color="C0", alpha=0.35, label="guide 95 %")
        ax.plot(b["x"], b["f_mean"], color="C0", lw=1)
        ax.plot(arrays["x_test"][order, 0], arrays["y_test"][order], "k.", ms=2)
        ax.set_title(f"{name}: {spec}", fontsize=7)
        ax.tick_params(labelsize=6)
    axes.flat[0].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    atomic_save_figure(fig, path, dpi=110)  # a reader never sees half a figure
    return list(found)


def main(argv: list[str] | None = None) -> int:
    from zoo.reference.store import default_root, load_reference

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--root", default=str(default_root()))
    args = p.parse_args(argv)
    record = json.loads((Path(args.out) / "scoreboard.json").read_text())
    rows = record.get("rows", [])
    names = sorted({r["instance"] for r in rows if r.get("bands")})
    refs = {n: load_reference(args.root, n) for n in names}
    drawn = plot_bands(rows, refs, Path(args.out) / FIGURE)
    print(f"{len(drawn)} instance(s) drawn: {', '.join(drawn) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
