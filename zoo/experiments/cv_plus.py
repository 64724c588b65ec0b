"""CV+ prediction intervals for a run: ``zoo fit MODEL --dataset D --conformal-folds K``.

Split conformal (:mod:`zoo.experiments.conformal`) fits on part of the training rows and calibrates on the
rest.  CV+ (Barber, Candès, Ramdas & Tibshirani 2021, "Predictive inference with the jackknife+", Ann.
Statist. 49(1), §3, Eq. 9, Thm. 4) uses every row for both: the training rows are cut into ``K`` seeded
folds; for each fold ``k`` the model is fitted on the other folds (``mu_-k``, ``sd_-k``: its predictive
mean and sd), and each row ``i`` of fold ``k(i)`` gets the normalized residual
``R_i = |y_i - mu_-k(i)(x_i)| / sd_-k(i)(x_i)``.  At a new input ``x`` the interval at level ``1 - a`` is

    [ the floor(a (n + 1))-th smallest of  mu_-k(i)(x) - R_i sd_-k(i)(x),
      the ceil((1 - a)(n + 1))-th smallest of  mu_-k(i)(x) + R_i sd_-k(i)(x) ],   i = 1..n.

On exchangeable rows it covers a new row with probability at least ``1 - 2a - min(2 (1 - 1/K) / (n/K + 1),
(1 - K/n) / (K + 1))`` whatever the model (Thm. 4; the proof only compares scores, so it holds for the
normalized score as for the absolute residual), and close to ``1 - a`` in practice (§6 there).  The
run's own fit, metrics and files are those of the usual fit on all training rows; ``K`` more fits make the
intervals.

The row gains ``conformal_folds`` (K), ``conformal_level``, ``conformal_rows`` (n), and on the test rows
``coverage_cv_plus``, ``width_cv_plus`` (the mean interval width, target units) and ``width_gaussian``
(that of the full fit's own central Gaussian interval at the level, for comparison); ``cv_plus_seconds``
is the folds' fitting time.  A target with several columns counts every scalar target as a row.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import numpy as np

from zoo.data import Dataset
from zoo.experiments.conformal import predict_rows

__all__ = ["check_cv_plus", "cv_plus_bounds", "cv_plus_fields", "fold_ids", "gaussian_width"]


def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    """The fold (``0 .. folds - 1``) of each of ``n`` rows: a seeded permutation cut into ``folds`` parts
    whose sizes differ by at most one."""
    perm = np.random.default_rng(seed).permutation(n)
    out = np.empty(n, dtype=np.int64)
    for k, part in enumerate(np.array_split(perm, folds)):
        out[part] = k
    return out


def _ranks(n: int, level: float) -> tuple[int, int]:
    a = 1.0 - level
    return math.floor(a * (n + 1) + 1e-9), math.ceil((1.0 - a) * (n + 1) - 1e-9)


def check_cv_plus(ds: Dataset, folds: object, level: float) -> None:
    """Before any fit: a regression dataset, ``2 <= folds <= n`` training rows, and enough rows that both
    ends of the interval are finite at ``level`` (``floor((1 - level)(n + 1)) >= 1``: 19 rows at 0.95).  A
    ``ValueError`` naming ``conformal_folds``."""
    if ds.task != "regression":
        raise ValueError(
            f"conformal_folds: CV+ intervals are for regression; {ds.name} is a {ds.task} dataset"
        )
    n = ds.n_train
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= n:
        raise ValueError(f"conformal_folds must be an integer in [2, {n}] (the training rows), got {folds!r}")
    if _ranks(n * int(np.prod(ds.y_train.shape[1:], dtype=int)), level)[0] < 1:
        raise ValueError(
            f"conformal_folds: {n} training rows bound no interval at level {level}; at least "
            f"{math.ceil(1.0 / (1.0 - level) - 1.0 - 1e-9)} are needed"
        )


def cv_plus_bounds(
    mean: np.ndarray, sd: np.ndarray, scores: np.ndarray, fold: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)`` of the CV+ interval (module docstring) at ``m`` test points: ``mean`` and ``sd``
    are the fold models' predictive at them, shape ``(K, m)``; ``scores`` the ``n`` normalized residuals
    ``R_i`` and ``fold`` their folds ``k(i)``."""
    n = scores.shape[0]
    lo_rank, hi_rank = _ranks(n, level)
    if lo_rank < 1 or hi_rank > n:
        raise ValueError(f"scores: {n} residuals bound no interval at level {level}")
    low = mean[fold] - scores[:, None] * sd[fold]  # (n, m): one candidate per calibration row
    high = mean[fold] + scores[:, None] * sd[fold]
    lower = np.partition(low, lo_rank - 1, axis=0)[lo_rank - 1]
    upper = np.partition(high, hi_rank - 1, axis=0)[hi_rank - 1]
    return lower, upper


def _flat(pred: Any) -> tuple[np.ndarray, np.ndarray]:
    return pred.mean.double().cpu().numpy().reshape(-1), pred.std.double().cpu().numpy().reshape(-1)


def cv_plus_fields(ds: Dataset, folds: int, level: float, cfg: Any, fit: Callable[[Dataset], Any]) -> dict:
    """Fit ``fit(dataset)`` (a run, e.g. :func:`zoo.experiments.runs.fit_on_dataset` of one model) once per
    fold on the other folds (:func:`fold_ids`, seeded by ``cfg.seed``), and return the CV+ fields of the
    row (module docstring) but ``width_gaussian``, which needs the full fit."""
    check_cv_plus(ds, folds, level)
    t0 = time.perf_counter()
    fold = fold_ids(ds.n_train, folds, cfg.seed)
    width = int(np.prod(ds.y_train.shape[1:], dtype=int))
    scores, fold_of, means, sds = [], [], [], []
    for k in range(folds):
        out = fold == k
        run = fit(dataclasses.replace(ds, x_train=ds.x_train[~out], y_train=ds.y_train[~out]))
        held = dataclasses.replace(run.dataset, x_test=ds.x_train[out], y_test=ds.y_train[out])
        _, _, x_k, _ = held.tensors(device=run.result.device)
        mu_k, sd_k = _flat(predict_rows(run, x_k, cfg))
        scores.append(np.abs(ds.y_train[out].reshape(-1) - mu_k) / sd_k)
        fold_of.append(np.full(mu_k.shape[0], k))
        mu_t, sd_t = _flat(run.predictions)
        means.append(mu_t)
        sds.append(sd_t)
    lower, upper = cv_plus_bounds(
        np.stack(means), np.stack(sds), np.concatenate(scores), np.concatenate(fold_of), level
    )
    y = ds.y_test.reshape(-1)
    return {
        "conformal_folds": folds,
        "conformal_level": float(level),
        "conformal_rows": ds.n_train * width,
        "coverage_cv_plus": float(np.mean((y >= lower) & (y <= upper))),
        "width_cv_plus": float(np.mean(upper - lower)),
        "cv_plus_seconds": round(time.perf_counter() - t0, 3),
    }


def gaussian_width(pred: Any, level: float) -> float:
    """The mean width of a predictive's central Gaussian interval at ``level``, ``2 z sd``."""
    return float(2.0 * NormalDist().inv_cdf(0.5 * (1.0 + level)) * np.mean(_flat(pred)[1]))
