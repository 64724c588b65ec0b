"""The LBBNN's default guide: the final ELBO and test metrics of the ``lcrt`` and ``mean-field`` guides on
the same data, split and seed (issue 17).

Both guides hold the same variational family, q(β, γ) = α N(κ, τ²) + (1 − α) δ₀ per weight (Hubin & Storvik
2019, arXiv:1903.07594, Eqs. 4.5-4.7), and optimize the same ELBO; they differ in the gradient estimator
(binary-Concrete inclusions with a straight-through indicator, against the local reparameterization of
Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §4).  The guide that reaches the higher ELBO is the
better optimizer of the objective, which is how the registry's default was chosen.  Each fit uses the
entry's defaults (``zoo fit lbbnn --guide G``: 3000 Adam steps at lr 1e-2, batch 128, one hidden layer of
50 units, eb-point hyperparameters); ``elbo`` is the loop's final estimate.

Usage::

    ZOO_DATA_DIR=<data> python benchmarks/lbbnn_guides_elbo.py --datasets uci:yacht uci:energy \\
        --splits 0 --out benchmarks/results/lbbnn-guides-elbo.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from zoo.experiments.runs import fit_on_dataset  # noqa: E402
from zoo.io import atomic_write_text  # noqa: E402

GUIDES = ("lcrt", "mean-field")
KEEP = ("elbo", "rmse", "nll", "coverage95", "accuracy", "density", "fit_seconds")


def fit_row(dataset: str, split: int, guide: str) -> dict:
    """One default fit of ``lbbnn --guide guide`` on ``dataset`` split ``split`` (seed = split)."""
    # one start each: the two gradient estimators compared from the same initialization
    run = fit_on_dataset(
        "lbbnn", dataset, guide=guide, split=split, seed=split, progress=False, fit_options={"starts": [{}]}
    )
    row = {"dataset": dataset, "split": split, "guide": guide}
    row.update({k: float(run.metrics[k]) for k in KEEP if k in run.metrics})
    return row


def check_out(out: Path | None, overwrite: bool) -> None:
    """``--out`` must name a ``.json`` file, and an existing one (or its ``.md``) is replaced only with
    ``--overwrite``; checked before any fit."""
    if out is None:
        return
    if out.suffix != ".json":
        raise ValueError(f"--out must name a .json file, got {out}")
    existing = [p for p in (out, out.with_suffix(".md")) if p.exists()]
    if existing and not overwrite:
        raise ValueError(f"--out: {existing[0]} exists; pass --overwrite to replace it")


def render(rows: list[dict]) -> str:
    """A markdown table: one line per data set and split, both guides side by side."""
    lines = [
        "| dataset | split | ELBO lcrt | ELBO mean-field | RMSE / acc. lcrt | RMSE / acc. mean-field "
        "| NLL lcrt | NLL mean-field | density lcrt | density mean-field |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keyed = {(r["dataset"], r["split"], r["guide"]): r for r in rows}
    for ds, split in dict.fromkeys((r["dataset"], r["split"]) for r in rows):
        a, b = keyed.get((ds, split, "lcrt")), keyed.get((ds, split, "mean-field"))
        if a is None or b is None:
            continue
        fit = "rmse" if "rmse" in a else "accuracy"
        lines.append(
            f"| {ds} | {split} | {a['elbo']:.1f} | {b['elbo']:.1f} | {a[fit]:.4g} | {b[fit]:.4g} "
            f"| {a['nll']:.3f} | {b['nll']:.3f} | {a.get('density', float('nan')):.3f} "
            f"| {b.get('density', float('nan')):.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["uci:yacht", "uci:energy", "uci:bostonHousing"])
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    p.add_argument("--out", type=Path, default=None, help="JSON file for the rows (and a .md beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    a = p.parse_args(argv)
    check_out(a.out, a.overwrite)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = []
    for ds in a.datasets:
        for split in a.splits:
            for guide in GUIDES:
                rows.append(fit_row(ds, split, guide))
                logging.info(json.dumps(rows[-1]))
    table = render(rows)
    sys.stdout.write(table)
    if a.out is not None:
        cmd = "python benchmarks/lbbnn_guides_elbo.py " + " ".join(argv if argv is not None else sys.argv[1:])
        atomic_write_text(a.out, json.dumps({"command": cmd, "rows": rows}, indent=1))
        seconds = sum(r["fit_seconds"] for r in rows)
        head = f"# lbbnn guides: ELBO\n\nCommand: `{cmd}`  \n{len(rows)} fits, {seconds:.0f} s of fitting, "
        head += f"{torch.get_num_threads()} torch thread(s)\n\n"
        atomic_write_text(a.out.with_suffix(".md"), head + table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
