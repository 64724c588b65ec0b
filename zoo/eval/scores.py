"""Scores of an approximate posterior against a reference ("gold-standard") posterior.

Following Izmailov, Vikram, Hoffman & Wilson (2021, "What Are Bayesian Neural Network Posteriors Really
Like?", ICML, arXiv:2104.14421, §9) and the NeurIPS 2021 "Approximate Inference in Bayesian Deep
Learning" competition built on their HMC samples (agreement and total variation for classification, W2 for
regression): a guide is scored by how close its *predictive* distribution is to the reference's, which is
invariant to the network's symmetries.

* **Regression** (:func:`regression_scores`): for each test input the predictive draws of the guide and of
  the reference are two empirical 1-D distributions; the score is the mean over test points of their
  Wasserstein-1 and Wasserstein-2 distances (the competition scores regression by W2).  Both are computed
  exactly from the quantile functions, ``W_p^p = ∫_0^1 |F^-1(t) - G^-1(t)|^p dt``, which are step functions,
  so the integral is a finite sum over the union of their break points ``i/S_a`` and ``j/S_r``
  (:func:`wasserstein_1d`); sample sizes may differ.  Given targets ``y`` it adds the NLL and RMSE gaps
  (guide minus reference; NLL of the moment-matched Gaussian predictive ``N(mean, var)`` of the draws, the
  convention of :func:`zoo.eval.metrics.gaussian_nll`) and coverage: the fraction of the guide's draws
  inside the reference's central ``level`` interval (a perfect guide gives ``level``) and the fraction of
  ``y`` inside each one's central interval.
* **Classification** (:func:`classification_scores`): top-1 agreement ``mean_n 1[argmax p_a = argmax p_r]``
  and total variation ``mean_n ½ Σ_k |p_a - p_r|`` of the predictive class probabilities.
* **Spike-and-slab** (:func:`inclusion_scores`): mean absolute error of posterior inclusion probabilities
  (PIPs) against the exact ones and the AUROC of the guide's PIPs for the reference's *median probability
  model* (Barbieri & Berger 2004, Ann. Statist. 32(3)): the labels are ``reference PIP > 0.5``
  (``threshold``), so AUROC = 1 means the guide ranks every weight the exact posterior includes above every
  weight it excludes.  It is undefined (``nan``, logged) when the reference includes all or none.
* **Horseshoe** (:func:`shrinkage_scores`): the shrinkage factor of unit ``k`` (Carvalho, Polson & Scott
  2010, Biometrika 97(2), §2; Piironen & Vehtari 2017, arXiv:1707.01694, §2.2, Eq. 2.5)
  ``κ_k = 1 / (1 + c τ_k² v²)`` (:func:`shrinkage_factors`; ``τ_k`` the node-wise scale, ``v`` the layer
  scale, ``τ_k`` replaced by the regularized ``τ̃_k`` for the regularized horseshoe; ``c = n s² / σ²`` is the
  data-information factor of Piironen & Vehtari's Eq. 2.5, 1 by default as in Carvalho et al.).  The score
  is the mean absolute difference of the per-unit posterior means of κ after sorting them, so it does not
  depend on how the units are permuted.

Every score that is a mean over test points (units, weights) comes with ``*_se``, its standard error over
those points (``std(ddof=1)/sqrt(N)``; ``nan`` for a single point), which measures how much the score would
move on another test set of the same size.  Inputs are numpy arrays or torch tensors; outputs are dicts of
floats.  Bad inputs raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from zoo.core.validation import (
    check_class_probs,
    check_float_array,
    check_level,
    check_positive,
    check_shape,
)

__all__ = [
    "wasserstein_1d",
    "regression_scores",
    "classification_scores",
    "inclusion_scores",
    "shrinkage_factors",
    "shrinkage_scores",
]

log = logging.getLogger(__name__)
_LOG_2PI = math.log(2.0 * math.pi)


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    """Mean of per-point values and its standard error over points (``nan`` for one point)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    se = float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(np.mean(v)), se


def _samples(name: str, value: Any) -> np.ndarray:
    """Predictive draws as ``(S, N)``: ``S >= 1`` draws at ``N`` test points (a 1-D input is ``N = 1``)."""
    arr = check_float_array(name, value, min_ndim=1)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"`{name}` must have shape (S, N) (S draws at N test points), got {arr.shape}")
    return arr


def _paired_samples(approx: Any, reference: Any) -> tuple[np.ndarray, np.ndarray]:
    a = _samples("approx", approx)
    r = _samples("reference", reference)
    if a.shape[1] != r.shape[1]:
        raise ValueError(
            f"`approx` has {a.shape[1]} test points but `reference` has {r.shape[1]} (shapes (S, N))"
        )
    return a, r


# ----------------------------------------------------------------------------------------------------------
# regression
# ----------------------------------------------------------------------------------------------------------


def _quantile_pieces(sa: int, sr: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For empirical quantile functions with ``sa`` and ``sr`` atoms: on each piece of the union of their
    break points, the order-statistic index of each and the piece's length (exact integer arithmetic on the
    common denominator ``lcm(sa, sr)``)."""
    den = math.lcm(sa, sr)
    cuts = np.union1d(np.arange(sa + 1, dtype=np.int64) * (den // sa), np.arange(sr + 1) * (den // sr))
    left, right = cuts[:-1], cuts[1:]
    return (left * sa) // den, (left * sr) // den, (right - left) / den


def wasserstein_1d(approx: Any, reference: Any, p: int = 1) -> np.ndarray:
    """Exact ``W_p`` between the empirical distributions of ``approx`` (``(S_a, N)``) and ``reference``
    (``(S_r, N)``) at each of the ``N`` test points, shape ``(N,)``.

    ``W_p = (∫_0^1 |F_a^-1(t) - F_r^-1(t)|^p dt)^(1/p)`` with the (left-continuous) empirical quantile
    functions; both are constant between consecutive points of ``{i/S_a} ∪ {j/S_r}``, so the integral is a
    sum over at most ``S_a + S_r`` pieces.  For ``p = 1`` this equals ``scipy.stats.wasserstein_distance``.
    """
    if p not in (1, 2):
        raise ValueError(f"`p` must be 1 or 2, got {p!r}")
    a, r = _paired_samples(approx, reference)
    ia, ir, width = _quantile_pieces(a.shape[0], r.shape[0])
    diff = np.abs(np.sort(a, axis=0)[ia] - np.sort(r, axis=0)[ir])
    return width @ diff if p == 1 else np.sqrt(width @ diff**2)


def _gaussian_nll_points(y: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Per-point ``-log N(y | mean, var)`` of the moment-matched Gaussian predictive of ``draws``."""
    var = draws.var(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros(draws.shape[1])
    if np.any(var <= 0):
        raise ValueError("the predictive draws have zero variance at some test point; cannot score an NLL")
    return 0.5 * (_LOG_2PI + np.log(var) + (y - draws.mean(axis=0)) ** 2 / var)


def _rmse_gap(y: np.ndarray, a: np.ndarray, r: np.ndarray) -> tuple[float, float]:
    """RMSE of the guide's predictive mean minus the reference's, with a delta-method standard error over
    points (the per-point linearization ``e_a²/(2 RMSE_a) - e_r²/(2 RMSE_r)``)."""
    ea2, er2 = (y - a.mean(axis=0)) ** 2, (y - r.mean(axis=0)) ** 2
    ra, rr = math.sqrt(ea2.mean()), math.sqrt(er2.mean())
    lin = ea2 / (2 * ra) if ra > 0 else np.zeros_like(ea2)
    lin = lin - (er2 / (2 * rr) if rr > 0 else 0.0)
    return ra - rr, _mean_se(lin)[1]


def _interval(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.quantile(draws, [0.5 * (1.0 - level), 0.5 * (1.0 + level)], axis=0)
    return lo, hi


def regression_scores(approx: Any, reference: Any, y: Any | None = None, level: float = 0.95) -> dict:
    """Scores of a guide's predictive draws ``approx`` (``(S_a, N)``) against the reference's
    ``reference`` (``(S_r, N)``) at the same ``N`` test inputs (module docstring).

    Keys: ``w1``, ``w2`` (means over points of the 1-D Wasserstein distances), ``draw_coverage`` (mean
    fraction of the guide's draws inside the reference's central ``level`` interval; ``level`` for a
    perfect guide) and, with targets ``y`` (``(N,)``), ``nll_gap``, ``rmse_gap`` (guide minus reference;
    negative means the guide predicts better than the posterior), ``y_coverage`` and
    ``y_coverage_reference`` (fraction of ``y`` inside the guide's / reference's interval); each with
    ``*_se``, and ``num_points``.
    """
    lv = check_level("level", level)
    a, r = _paired_samples(approx, reference)
    n = a.shape[1]
    out: dict[str, float] = {"num_points": float(n)}
    for key, p in (("w1", 1), ("w2", 2)):
        out[key], out[f"{key}_se"] = _mean_se(wasserstein_1d(a, r, p=p))
    lo, hi = _interval(r, lv)
    out["draw_coverage"], out["draw_coverage_se"] = _mean_se(((a >= lo) & (a <= hi)).mean(axis=0))
    if y is None:
        return out
    y_ = check_shape("y", check_float_array("y", y, min_ndim=1).reshape(-1), (n,), "one target per point")
    nll_diff = _gaussian_nll_points(y_, a) - _gaussian_nll_points(y_, r)
    out["nll_gap"], out["nll_gap_se"] = _mean_se(nll_diff)
    out["rmse_gap"], out["rmse_gap_se"] = _rmse_gap(y_, a, r)
    alo, ahi = _interval(a, lv)
    out["y_coverage"], out["y_coverage_se"] = _mean_se((y_ >= alo) & (y_ <= ahi))
    out["y_coverage_reference"], out["y_coverage_reference_se"] = _mean_se((y_ >= lo) & (y_ <= hi))
    return out


# ----------------------------------------------------------------------------------------------------------
# classification
# ----------------------------------------------------------------------------------------------------------


def _class_probs(name: str, value: Any) -> np.ndarray:
    arr = check_float_array(name, value, min_ndim=1)
    return check_class_probs(name, arr, arr.shape[0])


def classification_scores(approx: Any, reference: Any) -> dict:
    """Top-1 agreement and total variation of predictive class probabilities ``(N, K)`` (or binary ``(N,)``
    ``P(y = 1)``) of a guide against the reference (Izmailov et al. 2021, §9).

    Keys: ``agreement`` (fraction of points with the same top class, ties to the lower index),
    ``total_variation`` (mean ``½ Σ_k |p_a - p_r|``), each with ``*_se``, and ``num_points``.
    """
    pa, pr = _class_probs("approx", approx), _class_probs("reference", reference)
    check_shape("approx", pa, pr.shape, "the shape of `reference`")
    agree = np.argmax(pa, axis=1) == np.argmax(pr, axis=1)
    out: dict[str, float] = {"num_points": float(pa.shape[0])}
    out["agreement"], out["agreement_se"] = _mean_se(agree)
    out["total_variation"], out["total_variation_se"] = _mean_se(0.5 * np.abs(pa - pr).sum(axis=1))
    return out


# ----------------------------------------------------------------------------------------------------------
# spike-and-slab inclusion probabilities
# ----------------------------------------------------------------------------------------------------------


def _pips(name: str, value: Any) -> np.ndarray:
    arr = check_float_array(name, value).reshape(-1)
    if np.any(arr < 0.0) or np.any(arr > 1.0):
        raise ValueError(f"`{name}` inclusion probabilities must lie in [0, 1]")
    return arr


def inclusion_scores(approx: Any, reference: Any, threshold: float = 0.5) -> dict:
    """Posterior inclusion probabilities of a guide against the exact ones (same shape, flattened).

    Keys: ``mae`` (mean ``|PIP_a - PIP_r|`` over weights) with ``mae_se``, ``auroc`` (sklearn's
    ``roc_auc_score`` of ``PIP_a`` for the labels ``PIP_r > threshold``, the reference's median probability
    model at 0.5; ``nan`` when those labels are all equal), ``num_included`` (size of that model) and
    ``num_weights``.
    """
    thr = check_level("threshold", threshold)
    pa, pr = _pips("approx", approx), _pips("reference", reference)
    check_shape("approx", pa, pr.shape, "the number of weights of `reference`")
    labels = pr > thr
    out: dict[str, float] = {"num_weights": float(pa.size), "num_included": float(labels.sum())}
    out["mae"], out["mae_se"] = _mean_se(np.abs(pa - pr))
    if labels.all() or not labels.any():
        log.warning(
            "inclusion_scores: the reference includes %s weights; AUROC is undefined",
            "all" if labels.all() else "no",
        )
        out["auroc"] = float("nan")
    else:
        out["auroc"] = float(roc_auc_score(labels, pa))
    return out


# ----------------------------------------------------------------------------------------------------------
# horseshoe shrinkage factors
# ----------------------------------------------------------------------------------------------------------


def shrinkage_factors(tau2: Any, v2: Any, c2: Any | None = None, info: float = 1.0) -> np.ndarray:
    """Node-wise shrinkage factors ``κ = 1 / (1 + info · τ̃² v²)`` (module docstring).

    ``tau2``: draws of the unit scales ``τ_k²``, shape ``(S, K)``; ``v2``: draws of the layer scale ``v²``,
    shape ``(S,)`` or ``(S, 1)``; ``c2``: draws of the regularized horseshoe's slab ``c²`` (same shapes as
    ``v2``), which replace ``τ²`` by ``τ̃² = c² τ² / (c² + τ² v²)``; ``info`` the data-information factor.
    Returns ``(S, K)``.
    """
    t2 = check_float_array("tau2", tau2, min_ndim=2)
    if t2.ndim != 2:
        raise ValueError(f"`tau2` must have shape (S, K), got {t2.shape}")
    if np.any(t2 <= 0):
        raise ValueError("`tau2` must be strictly positive")
    scales = {}
    for name, val in (("v2", v2), ("c2", c2)):
        if val is None:
            if name == "v2":
                raise ValueError("`v2` must not be None")
            continue
        arr = check_float_array(name, val, min_ndim=1)
        if arr.shape not in ((t2.shape[0],), (t2.shape[0], 1)):
            raise ValueError(
                f"`{name}` has shape {arr.shape}, expected ({t2.shape[0]},) or ({t2.shape[0]}, 1)"
            )
        if np.any(arr <= 0):
            raise ValueError(f"`{name}` must be strictly positive")
        scales[name] = arr.reshape(-1, 1)
    check_positive("info", info)
    var = t2 * scales["v2"]
    if "c2" in scales:
        var = scales["c2"] * var / (scales["c2"] + var)
    return 1.0 / (1.0 + info * var)


def shrinkage_scores(approx: Any, reference: Any) -> dict:
    """Error of the per-unit posterior mean shrinkage factors of a guide against the reference.

    ``approx`` and ``reference`` are draws of κ (:func:`shrinkage_factors`), ``(S_a, K)`` and ``(S_r, K)``
    (or the ``(K,)`` posterior means).  The per-unit means are **sorted** before comparing, so relabeling
    the units (a symmetry of the network) does not change the score.  Keys: ``kappa_mae`` (mean absolute
    difference of the sorted means) with ``kappa_mae_se`` (over units), ``kappa_max_error`` and
    ``num_units``.
    """
    means = []
    for name, val in (("approx", approx), ("reference", reference)):
        arr = check_float_array(name, val, min_ndim=1)
        if arr.ndim > 2:
            raise ValueError(f"`{name}` must be (S, K) draws or (K,) means of κ, got shape {arr.shape}")
        if np.any(arr < 0.0) or np.any(arr > 1.0):
            raise ValueError(f"`{name}` shrinkage factors must lie in [0, 1]")
        means.append(np.sort(arr if arr.ndim == 1 else arr.mean(axis=0)))
    check_shape("approx", means[0], means[1].shape, "one mean κ per unit of `reference`")
    err = np.abs(means[0] - means[1])
    out: dict[str, float] = {"num_units": float(err.size), "kappa_max_error": float(err.max())}
    out["kappa_mae"], out["kappa_mae_se"] = _mean_se(err)
    return out
