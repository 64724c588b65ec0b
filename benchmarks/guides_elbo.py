"""Which guide of a registry entry is closer to the posterior on real data: the ELBO of each guide, on the
same data, split and seed, beside its test metrics.

For one model and one data set, ``ELBO(q) = log p(D) − KL(q ‖ p(· | D))`` with the same ``log p(D)`` for
every guide, so the difference of two guides' ELBOs is the difference of their KL divergences to the
posterior, whatever their families (Blei, Kucukelbir & McAuliffe 2017, arXiv:1601.00670, §2.2).  The
column ``elbo_full`` is that comparison: the mean of 32 draws of the entry's training objective on all
training rows (:func:`zoo.experiments.starts.fit_elbo`; ``elbo_full_se`` its standard error; the
exact value for a closed-form guide).  ``elbo`` is the loop's last minibatch estimate, kept for the
record.  Test RMSE (accuracy), NLL and 95 % coverage say whether the closer guide also predicts better;
they need not agree when the model itself is misspecified.

Each fit is the entry's default fit with ``--guide G`` (``zoo fit MODEL --guide G``) from one start, the
guides compared from the same seed.  ``--plugin PATH_OR_MODULE`` loads a plugin's entries first, so a new
guide (or model) is compared with the zoo's the same way.  The LBBNN's default guide was chosen this way
(``lcrt`` against ``mean-field``; ``benchmarks/lbbnn_guides_elbo.py`` runs that comparison).

Usage::

    ZOO_DATA_DIR=<data> python benchmarks/guides_elbo.py --model hs-bnn --guides factorized structured \\
        --datasets uci:yacht --splits 0 1 2 --out benchmarks/results/hs-bnn-guides-elbo.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from zoo.data.tensors import fit_tensors  # noqa: E402
from zoo.experiments.plugins import add_plugin_argument, load_cli_plugins  # noqa: E402
from zoo.experiments.registry import get_entry  # noqa: E402
from zoo.experiments.runs import fit_on_dataset  # noqa: E402
from zoo.experiments.starts import fit_elbo  # noqa: E402
from zoo.io import atomic_write_text  # noqa: E402

KEEP = ("elbo", "rmse", "accuracy", "nll", "coverage95", "density", "fit_seconds")


def fit_row(model: str, dataset: str, split: int, guide: str, **overrides: Any) -> dict:
    """One default fit of ``model --guide guide`` on ``dataset`` split ``split`` (seed = split, one start),
    with its full-data ELBO estimate; ``overrides``: further :func:`fit_on_dataset` settings (``steps``)."""
    run = fit_on_dataset(
        model,
        dataset,
        guide=guide,
        split=split,
        seed=split,
        progress=False,
        fit_options={"starts": [{}]},
        **overrides,
    )
    elbo, se = full_elbo(run.result, run.dataset, seed=split)
    row = {"model": model, "dataset": dataset, "split": split, "guide": guide}
    row.update({k: float(run.metrics[k]) for k in KEEP if k in run.metrics})
    row.update({"elbo_full": elbo, "elbo_full_se": se})
    return row


def full_elbo(result, dataset, seed: int = 0) -> tuple[float, float]:
    """``(mean, standard error)`` of 32 draws of a fit's training objective on all of ``dataset``'s training
    rows as the fit saw them (standardized targets when the fit recorded their scale), under ``seed``."""
    xtr, ytr, *_ = fit_tensors(dataset, result.device, standardize_y="y_std" in result.config)
    return fit_elbo(result, xtr, ytr, seed=seed)


def check_args(out: Path | None, overwrite: bool, guides: list[str], model: str | None = None) -> None:
    """Checked before any fit: at least two distinct ``--guides``, each a guide of ``model``'s registry
    entry (when given); ``--out`` names a ``.json`` file, and an existing one (or its ``.md``) is replaced
    only with ``--overwrite``."""
    if len(guides) < 2 or len(set(guides)) != len(guides):
        raise ValueError(f"--guides must name at least two different guides, got {guides}")
    if model is not None:
        known = list(get_entry(model).guides)  # an unknown model: ValueError naming it
        unknown = [g for g in guides if g not in known]
        if unknown:
            raise ValueError(f"--guides: {model} has no guide {unknown[0]!r}; its guides: {', '.join(known)}")
    if out is None:
        return
    if out.suffix != ".json":
        raise ValueError(f"--out must name a .json file, got {out}")
    existing = [p for p in (out, out.with_suffix(".md")) if p.exists()]
    if existing and not overwrite:
        raise ValueError(f"--out: {existing[0]} exists; pass --overwrite to replace it")


def render(rows: list[dict], guides: list[str]) -> str:
    """A markdown table: one line per data set and split with every guide's row, the guides side by side
    (ELBO ± standard error, RMSE or accuracy, NLL, coverage95); a line missing a guide is left out."""
    cols = ("ELBO", "RMSE / acc.", "NLL", "cov95")
    head = "| dataset | split | " + " | ".join(f"{c} {g}" for c in cols for g in guides) + " |"
    lines = [head, "|" + "---|" * (2 + len(cols) * len(guides))]
    keyed = {(r["dataset"], r["split"], r["guide"]): r for r in rows}
    for ds, split in dict.fromkeys((r["dataset"], r["split"]) for r in rows):
        rs = [keyed.get((ds, split, g)) for g in guides]
        if any(r is None for r in rs):
            continue
        fit = "rmse" if "rmse" in rs[0] else "accuracy"
        cells = [f"{r['elbo_full']:.1f} ± {r['elbo_full_se']:.1f}" for r in rs]
        cells += [f"{r[fit]:.4g}" for r in rs]
        cells += [f"{r['nll']:.3f}" for r in rs]
        cells += [f"{r['coverage95']:.3f}" if "coverage95" in r else "–" for r in rs]
        lines.append(f"| {ds} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="lbbnn", help="registry entry (default: lbbnn)")
    p.add_argument("--guides", nargs="+", default=["lcrt", "mean-field"], help="two or more of its guides")
    p.add_argument("--datasets", nargs="+", default=["uci:yacht", "uci:energy", "uci:bostonHousing"])
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the entry's)")
    p.add_argument("--out", type=Path, default=None, help="JSON file for the rows (and a .md beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    add_plugin_argument(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    a = p.parse_args(argv)
    load_cli_plugins(p, a.plugin)  # a broken plugin: exit 2 naming --plugin, before any fit
    check_args(a.out, a.overwrite, a.guides, a.model)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    steps = {} if a.steps is None else {"steps": a.steps}
    rows = []
    for ds in a.datasets:
        for split in a.splits:
            for guide in a.guides:
                rows.append(fit_row(a.model, ds, split, guide, **steps))
                logging.info(json.dumps(rows[-1]))
    table = render(rows, a.guides)
    sys.stdout.write(table)
    if a.out is not None:
        cmd = "python benchmarks/guides_elbo.py " + " ".join(argv)
        atomic_write_text(a.out, json.dumps({"command": cmd, "rows": rows}, indent=1))
        seconds = sum(r["fit_seconds"] for r in rows)
        head = f"# {a.model} guides: ELBO\n\nCommand: `{cmd}`  \n"
        head += f"{len(rows)} fits, {seconds:.0f} s of fitting, {torch.get_num_threads()} torch thread(s)\n\n"
        atomic_write_text(a.out.with_suffix(".md"), head + table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
