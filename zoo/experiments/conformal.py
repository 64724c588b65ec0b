"""Split-conformal prediction intervals for a run: ``zoo fit MODEL --dataset D --conformal SHARE``.

A seeded ``SHARE`` of the training rows is held out as calibration rows; the model is fitted on the rest
as usual; the normalized residuals ``|y_n - mean_n| / sd_n`` of the calibration rows under the fit's
predictive give the factor ``q`` (:func:`zoo.eval.metrics.conformal_scale`), and ``mean +- q sd`` is the
conformal interval at ``level`` on any new row.  If the calibration rows and a new row are exchangeable
(the rows of a random split are), that interval covers the new row with probability at least ``level``
and below ``level + 1 / (n_cal + 1)``, whatever the model and however good or bad its fit (Lei, G'Sell,
Rinaldo, Tibshirani & Wasserman 2018, "Distribution-free predictive inference for regression", JASA 113,
§2.2, Thm. 2.2; the normalized score of Papadopoulos, Proedrou, Vovk & Gammerman 2002, §4; Vovk,
Gammerman & Shafer 2005).  The price is the fit's rows (CV+, :mod:`zoo.experiments.cv_plus`, keeps them,
for ``K`` more fits): the model sees ``1 - SHARE`` of them, and the row's
``n_train``, RMSE and NLL are those of that fit.

The row gains ``conformal_share``, ``conformal_level``, ``conformal_rows`` (n_cal), ``conformal_quantile``
(q), ``conformal_factor`` (``q / Phi^-1((1 + level) / 2)``: the factor the fit's own Gaussian interval at
that level needed on the calibration rows; below 1, it was too wide), and on the test rows
``coverage_conformal`` (of ``mean +- q sd``) and ``nll_conformal`` (the Gaussian NLL with the predictive
sd times ``conformal_factor``).  A regression target with several columns counts every scalar target as a
row.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import Any

import numpy as np
import torch

from zoo.data import Dataset
from zoo.eval import metrics
from zoo.infer.predict import Predictions

__all__ = [
    "add_conformal_fields",
    "calibration_split",
    "conformal_fields",
    "hold_out_rows",
    "min_calibration_rows",
    "predict_rows",
]


def min_calibration_rows(level: float) -> int:
    """The fewest calibration rows that bound the conformal interval at ``level``: ``ceil(level / (1 -
    level))`` (19 at 0.95; with fewer, ``ceil((n + 1) level) > n`` and the interval is the whole line)."""
    return math.ceil(level / (1.0 - level) - 1e-9)


def hold_out_rows(ds: Dataset, share: float, seed: int) -> tuple[Dataset, Dataset]:
    """``(fit, held)``: ``ds`` without a seeded ``share`` of its training rows (``round(share n)``, at least
    one, leaving at least two; the first rows of ``numpy.random.default_rng(seed).permutation(n)``), and a
    dataset whose test rows are those held-out rows (its training rows are ``fit``'s).  Inputs keep
    ``ds``'s standardization (that of all training rows: one fixed map of every row's inputs); a fit
    standardizes its targets on its own rows.  A ``ValueError`` for a share outside ``(0, 1)``."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share < 1.0:
        raise ValueError(f"conformal: the held-out share must be a number in (0, 1), got {share!r}")
    n = ds.x_train.shape[0]
    n_out = min(max(1, round(share * n)), n - 2)
    perm = np.random.default_rng(seed).permutation(n)
    out, keep = perm[:n_out], perm[n_out:]
    fit = dataclasses.replace(ds, x_train=ds.x_train[keep], y_train=ds.y_train[keep])
    return fit, dataclasses.replace(fit, x_test=ds.x_train[out], y_test=ds.y_train[out])


def calibration_split(ds: Dataset, share: float, seed: int, level: float = 0.95) -> tuple[Dataset, Dataset]:
    """``(fit, calibration)`` of :func:`hold_out_rows` for a split-conformal run: the calibration rows are
    ``calibration``'s test rows.  The rows stay exchangeable: the held-out ones are a uniformly random
    subset, and the input map is the same for all.

    A ``ValueError`` naming ``conformal`` for a classification dataset, a share outside ``(0, 1)``, or fewer
    held-out rows than :func:`min_calibration_rows` asks for at ``level``."""
    if ds.task != "regression":
        raise ValueError(
            f"conformal: split-conformal intervals are for regression; {ds.name} is a {ds.task} dataset"
        )
    fit, cal = hold_out_rows(ds, share, seed)
    need = min_calibration_rows(level)
    if cal.n_test < need:
        raise ValueError(
            f"conformal: a share of {share} holds out {cal.n_test} of {ds.name}'s {ds.n_train} training "
            f"rows; an interval at level {level} needs at least {need} (raise the share or lower "
            "conformal_level)"
        )
    return fit, cal


def _moments(pred: Predictions) -> tuple[np.ndarray, np.ndarray]:
    return pred.mean.double().cpu().numpy(), pred.var.double().cpu().numpy()


def conformal_fields(
    cal_pred: Predictions, y_cal: Any, test_pred: Predictions, y_test: Any, share: float, level: float
) -> dict[str, Any]:
    """The row's conformal fields (module docstring) from the fit's predictive on the calibration rows
    (``cal_pred``, targets ``y_cal``) and on the test rows, all on the original target scale."""
    y_c = y_cal.detach().cpu().double().numpy() if torch.is_tensor(y_cal) else np.asarray(y_cal, float)
    y_t = y_test.detach().cpu().double().numpy() if torch.is_tensor(y_test) else np.asarray(y_test, float)
    mean_c, var_c = _moments(cal_pred)
    q = metrics.conformal_scale(y_c, mean_c, var_c, level)
    factor = q / NormalDist().inv_cdf(0.5 * (1.0 + level))
    mean_t, var_t = _moments(test_pred)
    return {
        "conformal_share": float(share),
        "conformal_level": float(level),
        "conformal_rows": int(y_c.size),
        "conformal_quantile": q,
        "conformal_factor": factor,
        "coverage_conformal": float(np.mean(np.abs(y_t - mean_t) <= q * np.sqrt(var_t))),
        "nll_conformal": metrics.gaussian_nll(y_t, mean_t, factor * factor * var_t),
    }


def predict_rows(run: Any, x: torch.Tensor, cfg: Any) -> Predictions:
    """The run's predictive at ``x``, drawn as its test predictive was (a NUTS run: all its draws)."""
    if run.metrics.get("inference") == "nuts":
        from zoo.infer.mcmc_export import all_draws_predict

        return all_draws_predict(run.result, x, seed=cfg.seed)
    from zoo.infer.predict import predict

    return predict(run.result, x, num_samples=cfg.num_samples, seed=cfg.seed)


def add_conformal_fields(run: Any, calibration: Dataset, cfg: Any) -> None:
    """Add the conformal fields (:func:`conformal_fields`) of a run fitted without the rows of
    ``calibration`` (:func:`calibration_split`) to its row, at ``cfg.conformal_level``; the calibration
    rows' predictive is drawn as the run's test predictive was (``cfg.num_samples`` draws, ``cfg.seed``; a
    NUTS run: all its draws)."""
    _, _, x_cal, y_cal = calibration.tensors(device=run.result.device)
    _, _, _, y_test = run.dataset.tensors()
    cal_pred = predict_rows(run, x_cal, cfg)
    run.metrics.update(
        conformal_fields(cal_pred, y_cal, run.predictions, y_test, cfg.conformal, cfg.conformal_level)
    )
