"""Calibration of the registry entries' regression predictive on the UCI sets (issue 17, item 2).

Every fit is the entry's own protocol fit (:func:`zoo.experiments.runs.fit_on_dataset` with one hidden layer
of 50 units and the entry's defaults, or the guide named after a colon, ``hs-bnn:factorized``), scored by:

* the coverage of the central predictive intervals at levels 0.5, 0.8, 0.9, 0.95 and 0.99, from the
  probability integral transform of the Gaussian-mixture predictive over the posterior draws
  (:func:`zoo.eval.metrics.mixture_pit`, Gneiting, Balabdaoui & Raftery 2007) — the reliability diagram;
* ``coverage95``, the protocols' Gaussian moment-matched 95 % coverage, and test RMSE / NLL;
* the **cause** of a too wide (or narrow) interval, split into its two parts: ``noise_ratio`` = the posterior
  mean of the noise variance over the training MSE of the predictive mean (> 1: the noise is over-estimated,
  e.g. by a prior that acts as pseudo-observations of variance 1 on standardized targets, or by a guide
  that under-fits), and ``epistemic_share`` = the spread of the network output over draws as a fraction of
  the predictive variance (large: the weight posterior, not the noise, makes the interval);
* where the noise ratio comes from: ``train_spread`` = the spread of the network output over draws at the
  *training* inputs over the training MSE, and ``mse_ratio`` = test MSE over training MSE of the predictive
  mean.  The noise update that is optimal given ``q(W)`` sets ``E[sigma2]`` to about training MSE + output
  spread at the training inputs (the expected squared error under ``q``), so the noise ratio is about
  ``1 + train_spread``.  For the exact posterior of a linear-Gaussian model with ``p`` effective parameters
  that spread is the degrees-of-freedom correction, ``train_spread = t = p / (n - p)``, and on new inputs
  drawn like the training ones the test MSE is about ``(1 + t)^2`` times the training MSE (a Gaussian
  design: ``(1 + p/(n-p-1)) / (1 - p/n)``; 1.50 against 1.49 in simulation at n = 277, p = 50).  A
  ``train_spread`` far above ``sqrt(mse_ratio) - 1`` is spread the predictive mean's errors do not show:
  it is counted once in the noise and again in the predictive variance.

The target table (:mod:`_calibration_target`) compares each default's mean ``coverage95`` over splits 0-9 with
issue 17's target and gives the half-width of its 95 % Student-t interval over the splits, so that a cell
outside the target by less than the draw of the splits moves it is told apart from one outside beyond it.
Rows of the standard splits 10-19 (``--splits 10 ... 19``) do not enter that table: they are listed after
it as a replication, and enter the per-label table below it.

``--holdout SHARE`` (rows labelled ``+holdout``) asks whether held-out rows can tell that spread apart.  A
first fit sees all training rows but a seeded ``SHARE`` of them (:func:`holdout_dataset`); the factor ``c``
on the noise scale that maximizes those rows' predictive log-likelihood under it
(:func:`zoo.eval.metrics.heldout_noise_scale`, :func:`heldout_factors`) then multiplies the noise scale of
every posterior draw of the usual fit on all training rows (:func:`scale_noise`), which scores the test
rows.  The row also keeps ``noise_scale`` (``c``), that fit's unscaled ``coverage95_unscaled`` and
``nll_unscaled``, and the same with the whole moment-matched predictive's scale times ``s`` chosen on the
held-out rows (``predictive_scale``, ``coverage95_predictive``, ``nll_predictive``: sigma scaling, which
also shrinks the weight posterior's spread).  Two fits per row; a study of the protocol, not an option of
the registry entries.

``--verify`` re-fits the committed rows that ``--models``/``--datasets``/``--splits`` select (defaults, and
labelled rows from the ``recipe`` they record) and compares them with the rows (:mod:`_calibration_verify`):
a fit is deterministic on one host and thread count, so a row today's code on the row's own ``host`` does not
give back was made by other code.  It writes nothing and exits with status 1 when a field differs by more
than ``--tolerance`` (relative).

Every finished fit is journaled to ``OUT/calibration.partial.jsonl`` so an interrupted run resumes; the
summary goes to ``OUT/calibration.{json,md,png}`` (:mod:`_calibration_report`), over the rows already
committed there (rows a run redoes are replaced, the others kept).

Usage::

    ZOO_DATA_DIR=/work/shared/data python benchmarks/calibration.py \\
        [--models mfvi-bnn hs-bnn:factorized cm-bnn] [--datasets yacht energy] [--splits 0 1] \\
        [--out benchmarks/results] [--holdout 0.2] [--render-only] [--verify [--tolerance 1e-6]]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from _calibration_figure import reliability_figure
from _calibration_holdout import (
    conformal_fields,
    heldout_factors,
    holdout_dataset,
    holdout_table,  # noqa: F401 (read from this script, as before the report moved to _calibration_report)
    noise_factor,
    scale_noise,
)
from _calibration_report import (
    LEVELS,
    OPTIONAL,  # noqa: F401 (defined here until the report moved to _calibration_report)
    journal_rows,
    markdown,
    merged_rows,
    summarize,
)
from _calibration_target import DATASETS, TARGET_SPLITS
from _calibration_verify import committed_rows, refit_arguments, verify

MODELS = ("mfvi-bnn", "hs-bnn:factorized", "cm-bnn")
#: the held-out rows of split ``k`` are drawn with seed ``HOLDOUT_SEED + k`` (``--holdout``)
HOLDOUT_SEED = 1000


def fit_row(
    spec: str,
    dataset: str,
    split: int,
    options: dict | None = None,
    label: str = "",
    guide_options: dict | None = None,
    steps: int | None = None,
    holdout: float = 0.0,
    likelihoods: list | None = None,
    train_noise: bool = False,
) -> dict:
    """One fit of ``spec`` (``model[:guide]``, builder ``options``, ``guide_options``, ``steps`` if not the
    entry's default) on ``uci:dataset`` split ``split`` and its calibration row (named ``spec+label`` when a
    label is given).  ``holdout > 0``: the held-out noise scale (:func:`heldout_factors`,
    :func:`scale_noise`).  ``likelihoods``: fit under each and keep the highest ELBO
    (:mod:`zoo.experiments.starts`).  ``train_noise``: the noise factor that the training rows' own
    mixture predictive chooses (:func:`noise_factor` on them), applied as the held-out one is."""
    import torch

    from zoo.data.registry import load_dataset
    from zoo.eval.metrics import interval_coverage, mixture_pit
    from zoo.experiments.host import host
    from zoo.experiments.runs import RunConfig, fit_on_dataset

    model, _, guide = spec.partition(":")
    cfg = RunConfig(
        split=split,
        seed=split,
        hidden=(50,),
        guide=guide or None,
        progress=False,
        options=options or {},
        guide_options=guide_options or {},
        steps=steps,
        fit_options={"likelihoods": likelihoods} if likelihoods else {},
    )
    cfg = RunConfig.from_dict({**cfg.to_dict(), "train_metrics": True})
    t0 = time.perf_counter()
    data = f"uci:{dataset}"
    if holdout:
        held, n_val = holdout_dataset(load_dataset(data, split), holdout, HOLDOUT_SEED + split)
        factors = heldout_factors(model, held, n_val, cfg)
    run = fit_on_dataset(model, data, cfg)
    pred, train = run.predictions, run.train_predictions
    _, ytr, _, yte = run.dataset.tensors(device=torch.device("cpu"))
    y, ytr = yte.reshape(-1).double().numpy(), ytr.reshape(-1).double().numpy()
    extra: dict = {}
    if holdout:
        raw, (pred, extra) = pred, scale_noise(run.dataset, pred, y, factors["noise"], factors["predictive"])
        extra |= conformal_fields(raw, y, factors)
    elif train_noise:
        pred, extra = scale_noise(run.dataset, pred, y, noise_factor(train, ytr, ytr.size))
        extra["noise_scale_rows"] = "training"
    loc, scale = pred.loc.double().cpu().numpy(), pred.scale.double().cpu().numpy()
    cov = interval_coverage(mixture_pit(y, loc, scale, df=pred.df), LEVELS)
    train_mse = float(np.mean((ytr - train.mean.reshape(-1).double().cpu().numpy()) ** 2))
    test_mse = float(np.mean((y - loc.mean(axis=0)) ** 2))
    # a Student-t likelihood's draws carry its scale: the noise variance is scale^2 df / (df - 2)
    noise_var = float(np.mean(scale**2)) * (1.0 if pred.df is None else pred.df / (pred.df - 2.0))
    epistemic = float(np.mean(np.var(loc, axis=0)))
    train_spread = float(np.mean(np.var(train.loc.double().cpu().numpy(), axis=0)))
    scores = extra.pop("scores", run.metrics)
    return {
        "model": f"{spec}+{label}" if label else spec,
        "dataset": dataset,
        "split": split,
        "rmse": scores["rmse"],
        "nll": scores["nll"],
        # the NLL of the mixture over draws (for a Student-t likelihood the same as nll)
        "nll_mixture": scores["nll_mixture"],
        "coverage95": scores["coverage95"],
        "coverage": {str(k): v for k, v in cov.items()},
        "noise_ratio": noise_var / train_mse,
        "epistemic_share": epistemic / (epistemic + noise_var),
        "train_spread": train_spread / train_mse,
        "mse_ratio": test_mse / train_mse,
        "fit_seconds": round(time.perf_counter() - t0, 2),
        # a Student-t likelihood's degrees of freedom (the fitted value when learned); None: Gaussian
        "df": pred.df,
        # best of several starts or likelihoods (zoo.experiments.starts): the one kept and every ELBO
        **{k: v for k, v in run.metrics.items() if k.startswith(("start", "likelihood"))},
        **extra,
        # what --verify needs to fit the row again (_calibration_verify.refit_arguments), and the CPU
        # kernels its digits depend on (zoo.experiments.host)
        "recipe": {
            "options": options or {},
            "guide_options": guide_options or {},
            "steps": steps,
            "holdout": holdout,
            "likelihoods": likelihoods,
            "train_noise": train_noise,
        },
        "host": host(),
    }


def _verify(a: argparse.Namespace, p: argparse.ArgumentParser, summary_line) -> list[dict]:
    """``--verify``: re-fit the committed rows in ``OUT/calibration.json`` that the filters select (defaults,
    and labelled rows with a recipe: :mod:`_calibration_verify`); print the comparison, write nothing, exit 1
    if one is beyond tolerance."""
    record = Path(a.out) / "calibration.json"
    if not record.exists():
        p.error(f"--verify: no committed rows at {record}")
    try:
        rows = committed_rows(json.loads(record.read_text())["rows"], a.models, a.datasets, a.splits)
        lines, counts = verify(rows, lambda r: fit_row(**refit_arguments(r)), a.tolerance)
    except ValueError as e:
        p.error(str(e))
    print("\n".join(lines))
    print(summary_line(counts, a.tolerance))
    if counts["beyond"]:
        raise SystemExit(1)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--datasets", nargs="+", default=list(DATASETS))
    p.add_argument("--splits", type=int, nargs="+", default=[0, 1])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--options", type=json.loads, default=None, help="builder options (JSON) of every model")
    p.add_argument("--guide-options", type=json.loads, default=None, help="guide options (JSON)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the entry's)")
    p.add_argument(
        "--likelihoods",
        nargs="+",
        default=None,
        help="fit under each likelihood (e.g. gaussian t4) and keep the highest ELBO (needs --label)",
    )
    p.add_argument("--label", default="", help="suffix of the model names when options are given")
    p.add_argument(
        "--holdout",
        type=float,
        default=0.0,
        help="fit on the other training rows, scale the noise on this share of them (label: holdout)",
    )
    p.add_argument(
        "--train-noise",
        action="store_true",
        help="scale the noise by the factor the training rows' own predictive chooses (label: train-noise)",
    )
    p.add_argument("--render-only", action="store_true", help="rebuild json/md/png from the journal")
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-fit the selected committed rows and compare (writes nothing)",
    )
    p.add_argument(
        "--tolerance", type=float, default=1e-6, help="largest relative difference --verify passes"
    )
    a = p.parse_args(argv)
    if a.holdout and a.train_noise:
        p.error("--holdout and --train-noise choose the noise factor on different rows: one of them")
    if (a.holdout or a.train_noise) and not a.label:
        a.label = "holdout" if a.holdout else "train-noise"
    given = (a.options, a.guide_options, a.steps, a.likelihoods)
    if any(v is not None for v in given) and not a.label:
        p.error(
            "--options/--guide-options/--steps/--likelihoods need --label (the rows must not mix with the "
            "defaults')"
        )
    if (a.holdout or a.train_noise) and ((a.options or {}).get("student_t_df") is not None or a.likelihoods):
        p.error(
            "--holdout/--train-noise scale a Gaussian noise; not with a Student-t (student_t_df) or "
            "--likelihoods"
        )
    if a.likelihoods:
        from zoo.experiments.starts import resolve_likelihoods

        try:
            resolve_likelihoods({"likelihoods": a.likelihoods})
        except (TypeError, ValueError) as e:
            p.error(f"--likelihoods: {e}")
    if not a.render_only and not os.environ.get("ZOO_DATA_DIR"):
        p.error("needs ZOO_DATA_DIR (e.g. /work/shared/data)")
    if a.verify and (
        any(v is not None for v in given) or a.label or a.holdout or a.train_noise or a.render_only
    ):
        p.error(
            "--verify re-fits committed rows from their recipe: not with options, a label, --holdout, "
            "--train-noise or --render-only"
        )
    logging.basicConfig(level=logging.WARNING)
    import torch

    from zoo.io import append_line, atomic_write_many

    torch.set_num_threads(1)
    if a.verify:
        from zoo.experiments.verify import summary_line

        return _verify(a, p, summary_line)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "calibration.partial.jsonl"
    if not a.render_only:
        done = {(r["model"], r["dataset"], r["split"]) for r in journal_rows(journal)}
        suffix = f"+{a.label}" if a.label else ""
        with open(journal, "a") as fh:
            for spec in a.models:
                for ds in a.datasets:
                    for k in a.splits:
                        if (spec + suffix, ds, k) not in done:
                            row = fit_row(
                                spec,
                                ds,
                                k,
                                a.options,
                                a.label,
                                a.guide_options,
                                a.steps,
                                a.holdout,
                                a.likelihoods,
                                a.train_noise,
                            )
                            append_line(fh, json.dumps(row))
                            print(json.dumps(row), flush=True)
    command = "python benchmarks/calibration.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    record = out / "calibration.json"
    rows = merged_rows(journal, record)
    summary = summarize(rows)
    target = summarize([r for r in rows if r["split"] in TARGET_SPLITS])
    earlier = json.loads(record.read_text()).get("commands", []) if record.exists() else []
    commands = earlier if a.render_only else list(dict.fromkeys([*earlier, command.strip()]))
    text = markdown(summary, commands, target)
    print(text)
    if summary:
        payload = {"commands": commands, "levels": LEVELS, "summary": summary, "target": target, "rows": rows}
        atomic_write_many(
            {record: json.dumps(payload, indent=1).encode(), out / "calibration.md": text.encode()}
        )
        reliability_figure(target or summary, out / "calibration.png", LEVELS)
    return summary


if __name__ == "__main__":
    main()
