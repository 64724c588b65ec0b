"""Evaluation metrics shared by every model in the zoo.

All functions accept numpy arrays or torch tensors (on any device; they are detached and moved to the
CPU), compute in float64 and return plain Python floats (or dicts / tuples of floats).

Conventions
-----------
* **Logarithms are natural** (nats) everywhere.
* **NLL sign.** Every ``*_nll`` function returns a *negative* log-likelihood averaged over test points,
  ``-(1/N) sum_n log p(y_n | ...)``, so smaller is better and values are usually positive for continuous
  data.  Paper 000 (bow-tie BNN, App. D.2) prints its NLL formula without the minus sign, but its tables are
  positive, i.e. the convention used here.  Paper 004 (horseshoe BNN, App. D) reports the test
  *log*-likelihood ``(1/N) sum_n log (1/S) sum_s p(y_n | W^s)``, which is ``-nll_from_loglik(...)`` /
  ``-mixture_nll(...)``.
* **Averaging.** Point-wise losses (RMSE, NLL, pinball, coverage, accuracy) are averaged over all test
  points (and, for pinball, over quantile levels).  Split-level summaries (mean +- std, or min/mean/max over
  folds) are left to the caller.
* **Gaussian vs mixture predictive.** :func:`gaussian_nll` and :func:`coverage` use a Gaussian
  approximation ``N(E[y*], Var(y*))`` of the predictive, as paper 000 §4.1 does for NLL and the 95%
  empirical coverage "EC".  :func:`mixture_nll` / :func:`nll_from_loglik` use the Monte-Carlo mixture
  ``(1/S) sum_s p(y | theta_s)`` computed with log-sum-exp (paper 004 §6.1), and
  :func:`coverage_from_samples` uses empirical quantiles of predictive samples.
* **RMSE** is the RMSE of the predictive mean, ``sqrt((1/N) sum_n (y_n - E[y_n])^2)`` (papers 000 and
  003).  Paper 004 App. D averages a per-point RMS over samples instead; that is not what :func:`rmse`
  computes.
* **Classification.** ``probs`` is either ``(N, K)`` class probabilities (rows summing to one) or, for
  binary tasks, ``(N,)`` with ``P(y = 1)``; the latter is expanded to ``[1 - p, p]``.  Predicted labels are
  the argmax, ties going to the lower class index (so a binary ``p = 0.5`` predicts class 0, like
  ``torch.round`` in paper 003's code).
* **Confident subset** (paper 001 §3.2, "0.95 threshold Acc / Num.cl"): points whose maximal model-averaged
  class probability is ``>= threshold`` (the authors' code uses ``>=``).
* **ECE** (Guo et al. 2017, as in paper 003 §4.4): ``n_bins`` equal-width bins over the top-class
  confidence, bins ``(lo, hi]`` with a confidence of exactly 0 put into the first bin, and
  ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|``.
* **Pinball loss** (paper 003 §4.4, Table 10): ``rho_tau(u) = max(tau u, (tau - 1) u)`` with
  ``u = y - y_hat``, averaged over points and then over levels; this is exactly
  ``mean_tau sklearn.metrics.mean_pinball_loss(y, y_hat_tau, alpha=tau)``.  Paper 003 uses the 19 levels
  ``tau = 0.05, 0.10, ..., 0.95`` (:data:`PAPER003_PINBALL_LEVELS`) and, in its code, plugs in the
  *posterior predictive mean* as ``y_hat_tau`` for every level rather than predictive quantiles.  To
  reproduce its numbers pass the ``(N,)`` mean as ``quantile_preds`` (it is broadcast over levels); pass
  ``(Q, N)`` predictive quantiles for the principled version.
* **WAIC** (Gelman, Hwang & Vehtari 2014): ``lppd = sum_n log mean_s p(y_n | theta_s)``,
  ``p_waic1 = 2 sum_n (log mean_s p - mean_s log p)``, ``p_waic2 = sum_n var_s(log p)`` with the unbiased
  (``ddof=1``) variance, and ``waic_i = -2 (lppd - p_waic_i)`` (deviance scale).  Paper 003 (Tables 7, 8 and
  11) reports ``p_waic1`` / ``p_waic2`` on exactly this scale: **sums** over the points of the held-out fold
  (not per-point averages), with ``torch.var``'s default unbiased variance, as its reference code does.  So
  the defaults of :func:`waic` match paper 003 and no rescaling keyword is needed; ``ddof`` is exposed only
  for comparison with codes that use the biased variance.
* **Density** (papers 001 §3.2 and 003): the fraction of ``True`` entries over all masks pooled (a
  size-weighted average of the per-layer densities, not the mean of per-layer densities).
* **Selection rates** (paper 003 §4.1 variable-selection simulation): ``TPR = TP / (TP + FN)`` and
  ``FPR = FP / (FP + TN)``.

Input validation raises :class:`ValueError` naming the offending argument for mismatched shapes, NaN/inf
values, non-positive variances/scales, probabilities outside ``[0, 1]``, and levels outside ``(0, 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import torch
from scipy.special import logsumexp

__all__ = [
    "PAPER003_PINBALL_LEVELS",
    "rmse",
    "rmse_draws",
    "rmse_pointwise",
    "gaussian_nll",
    "mixture_nll",
    "nll_from_loglik",
    "categorical_nll",
    "coverage",
    "coverage_from_samples",
    "accuracy",
    "confident_accuracy",
    "ece",
    "predictive_entropy",
    "mutual_information",
    "pinball_loss",
    "waic",
    "density",
    "density_per_layer",
    "selection_rates",
]

#: The 19 quantile levels 0.05, 0.10, ..., 0.95 over which paper 003 averages the pinball loss (Table 10).
PAPER003_PINBALL_LEVELS: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 20))

#: Lower clamp applied to probabilities before taking logs in :func:`categorical_nll`.
PROB_CLAMP = 1e-12

_LOG_2PI = math.log(2.0 * math.pi)


# ----------------------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------------------


def _as_numpy(x: Any, name: str) -> np.ndarray:
    """Convert a numpy array / torch tensor / array-like to a numpy array (dtype kept where possible)."""
    if x is None:
        raise ValueError(f"`{name}` must not be None")
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.is_complex():
            raise ValueError(f"`{name}` must be real-valued, got dtype {t.dtype}")
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.to(torch.float64)  # also handles bfloat16 / float16, which numpy cannot take directly
        return t.numpy()
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists etc.
        raise ValueError(f"`{name}` could not be converted to an array: {exc}") from exc
    return arr


def _float(x: Any, name: str, *, min_ndim: int = 0) -> np.ndarray:
    """float64 array, finite, non-empty."""
    arr = _as_numpy(x, name)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"`{name}` must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim < min_ndim:
        raise ValueError(f"`{name}` must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` contains NaN or inf values")
    return arr


def _same_shape(arr: np.ndarray, name: str, shape: tuple[int, ...], ref: str) -> None:
    if arr.shape != tuple(shape):
        raise ValueError(f"`{name}` has shape {arr.shape}, expected {tuple(shape)} ({ref})")


def _broadcastable(arr: np.ndarray, name: str, shape: tuple[int, ...], ref: str) -> np.ndarray:
    """Broadcast ``arr`` to ``shape`` without enlarging ``shape`` (e.g. (N,1) against (N,) is an error)."""
    try:
        out_shape = np.broadcast_shapes(arr.shape, tuple(shape))
    except ValueError:
        out_shape = None
    if out_shape != tuple(shape):
        raise ValueError(
            f"`{name}` has shape {arr.shape}, which does not broadcast to {tuple(shape)} ({ref})"
        )
    return np.broadcast_to(arr, shape)


def _positive(arr: np.ndarray, name: str) -> None:
    if np.any(arr <= 0):
        raise ValueError(f"`{name}` must be strictly positive (got min {arr.min():g})")


def _level(level: float, name: str = "level") -> float:
    try:
        lv = float(level)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be a number in (0, 1), got {level!r}") from exc
    if not (0.0 < lv < 1.0):
        raise ValueError(f"`{name}` must lie in the open interval (0, 1), got {level!r}")
    return lv


def _labels(y: Any, name: str = "y") -> np.ndarray:
    """1-D integer labels; float inputs are accepted when integer-valued (e.g. BCE targets)."""
    arr = _as_numpy(y, name)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D array of integer labels, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty")
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"`{name}` contains NaN or inf values")
        if np.any(arr != np.round(arr)):
            raise ValueError(f"`{name}` must hold integer class labels, got non-integer values")
        return arr.astype(np.int64)
    raise ValueError(f"`{name}` must hold integer class labels, got dtype {arr.dtype}")


def _is_label_array(arr: np.ndarray) -> bool:
    return arr.ndim == 1 and arr.dtype.kind in "biu"


def _class_probs(probs: Any, n: int, name: str = "probs") -> np.ndarray:
    """Validate probabilities and return them as (N, K); binary (N,) P(y=1) becomes [1 - p, p]."""
    p = _float(probs, name, min_ndim=1)
    if p.ndim == 1:
        _same_shape(p, name, (n,), "binary P(y=1) for each of the N labels in `y`")
    elif p.ndim == 2:
        if p.shape[0] != n:
            raise ValueError(f"`{name}` has shape {p.shape}, expected ({n}, K) (one row per label in `y`)")
    else:
        raise ValueError(f"`{name}` must be (N,) binary or (N, K) class probabilities, got shape {p.shape}")
    if np.any(p < 0.0) or np.any(p > 1.0):
        raise ValueError(f"`{name}` must lie in [0, 1]")
    if p.ndim == 1:
        return np.stack([1.0 - p, p], axis=1)
    if not np.allclose(p.sum(axis=1), 1.0, rtol=0.0, atol=1e-4):
        raise ValueError(f"`{name}` rows must sum to 1 (max deviation {np.abs(p.sum(axis=1) - 1).max():.3g})")
    return p


def _check_label_range(y: np.ndarray, k: int, name: str = "y") -> None:
    if y.min() < 0 or y.max() >= k:
        raise ValueError(
            f"`{name}` labels must lie in [0, {k - 1}] for {k} classes, got [{y.min()}, {y.max()}]"
        )


def _bool_mask(x: Any, name: str) -> np.ndarray:
    """Boolean array; numeric 0/1 arrays (e.g. sampled Bernoulli gammas) are accepted too."""
    arr = _as_numpy(x, name)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind in "iuf":
        if not np.all(np.isin(arr, (0, 1))):
            raise ValueError(f"`{name}` must be boolean (or only 0/1 values)")
        return arr.astype(bool)
    raise ValueError(f"`{name}` must be boolean, got dtype {arr.dtype}")


# ----------------------------------------------------------------------------------------------------------
# regression
# ----------------------------------------------------------------------------------------------------------


def rmse(y: Any, mean: Any) -> float:
    """Root mean squared error of the predictive mean, ``sqrt(mean_n (y_n - mean_n)^2)``."""
    y_ = _float(y, "y", min_ndim=1)
    m = _float(mean, "mean")
    _same_shape(m, "mean", y_.shape, "the shape of `y`")
    return float(np.sqrt(np.mean((y_ - m) ** 2)))


def _draws(y: Any, loc: Any) -> tuple[np.ndarray, np.ndarray]:
    y_ = _float(y, "y", min_ndim=1)
    mu = _float(loc, "loc", min_ndim=1)
    if mu.shape[1:] != y_.shape:
        raise ValueError(
            f"`loc` has shape {mu.shape}, expected (S,) + {y_.shape} (S draws of the shape of `y`)"
        )
    return y_, mu


def rmse_draws(y: Any, loc: Any) -> float:
    """RMSE of each posterior draw's network output over the test set, averaged over draws:
    ``mean_s sqrt(mean_n (loc[s, n] - y_n)^2)`` (note 004 §6.1, the authors' code's convention).
    Never smaller than :func:`rmse` of the draws' mean (triangle inequality)."""
    y_, mu = _draws(y, loc)
    err = (mu - y_[None]).reshape(mu.shape[0], -1)
    return float(np.mean(np.sqrt(np.mean(err**2, axis=1))))


def rmse_pointwise(y: Any, loc: Any) -> float:
    """Paper 004 App. D: the per-point RMS error over draws averaged over points,
    ``mean_n sqrt(mean_s (loc[s, n] - y_n)^2)`` (note 004 §6.1)."""
    y_, mu = _draws(y, loc)
    return float(np.mean(np.sqrt(np.mean((mu - y_[None]) ** 2, axis=0))))


def gaussian_nll(y: Any, mean: Any, var: Any) -> float:
    """Mean over points of ``-log N(y | mean, var)`` (Gaussian approximation of the predictive, paper 000).

    ``mean`` must have the shape of ``y``; ``var`` may be anything broadcastable to it (e.g. a scalar for a
    fixed noise variance).
    """
    y_ = _float(y, "y", min_ndim=1)
    m = _float(mean, "mean")
    _same_shape(m, "mean", y_.shape, "the shape of `y`")
    v = _float(var, "var")
    _positive(v, "var")
    v = _broadcastable(v, "var", y_.shape, "the shape of `y`")
    nll = 0.5 * (_LOG_2PI + np.log(v) + (y_ - m) ** 2 / v)
    return float(np.mean(nll))


def _gaussian_logpdf(y: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    z = (y - loc) / scale
    return -0.5 * _LOG_2PI - np.log(scale) - 0.5 * z * z


def mixture_nll(y: Any, loc: Any, scale: Any) -> float:
    """NLL of the equally weighted Gaussian mixture predictive.

    ``-mean_n log( (1/S) sum_s N(y_n | loc[s, n], scale[s, n]^2) )`` with ``loc`` of shape ``(S,) + y.shape``
    and ``scale`` (a standard deviation) broadcastable to it, e.g. ``(S, 1)`` for one noise level per draw.
    Computed with log-sum-exp.
    """
    y_ = _float(y, "y", min_ndim=1)
    mu = _float(loc, "loc", min_ndim=1)
    if mu.shape[1:] != y_.shape:
        raise ValueError(
            f"`loc` has shape {mu.shape}, expected (S,) + {y_.shape} (S draws of the shape of `y`)"
        )
    sd = _float(scale, "scale")
    _positive(sd, "scale")
    sd = _broadcastable(sd, "scale", mu.shape, "the shape of `loc`")
    logp = _gaussian_logpdf(y_[None, ...], mu, sd)
    return nll_from_loglik(logp.reshape(mu.shape[0], -1))


def nll_from_loglik(loglik: Any) -> float:
    """``-mean_n log mean_s exp(loglik[s, n])`` for point-wise log-likelihoods of shape ``(S, N)``."""
    ll = _float(loglik, "loglik")
    if ll.ndim != 2:
        raise ValueError(f"`loglik` must have shape (S, N), got {ll.shape}")
    lppd_n = logsumexp(ll, axis=0) - math.log(ll.shape[0])
    return float(-np.mean(lppd_n))


def coverage(y: Any, mean: Any, var: Any, level: float = 0.95) -> float:
    """Fraction of ``y`` inside the central Gaussian interval ``mean +- z sqrt(var)``.

    ``z = Phi^-1((1 + level) / 2)``; interval end points count as inside.  At ``level=0.95`` this is
    paper 000's empirical coverage "EC".
    """
    lv = _level(level)
    y_ = _float(y, "y", min_ndim=1)
    m = _float(mean, "mean")
    _same_shape(m, "mean", y_.shape, "the shape of `y`")
    v = _float(var, "var")
    _positive(v, "var")
    v = _broadcastable(v, "var", y_.shape, "the shape of `y`")
    z = NormalDist().inv_cdf(0.5 * (1.0 + lv))
    half = z * np.sqrt(v)
    inside = (y_ >= m - half) & (y_ <= m + half)
    return float(np.mean(inside))


def coverage_from_samples(y: Any, samples: Any, level: float = 0.95) -> float:
    """Fraction of ``y`` inside the empirical central interval of predictive ``samples`` (``(S,) + y.shape``).

    The interval is ``[q_{(1-level)/2}, q_{(1+level)/2}]`` from ``numpy.quantile`` (linear interpolation)
    over the sample axis; end points count as inside.
    """
    lv = _level(level)
    y_ = _float(y, "y", min_ndim=1)
    s = _float(samples, "samples", min_ndim=1)
    if s.shape[1:] != y_.shape:
        raise ValueError(
            f"`samples` has shape {s.shape}, expected (S,) + {y_.shape} (S draws of the shape of `y`)"
        )
    lo, hi = np.quantile(s, [0.5 * (1.0 - lv), 0.5 * (1.0 + lv)], axis=0)
    inside = (y_ >= lo) & (y_ <= hi)
    return float(np.mean(inside))


def pinball_loss(y: Any, quantile_preds: Any, quantiles: Any = PAPER003_PINBALL_LEVELS) -> float:
    """Pinball (quantile) loss averaged over points and levels.

    ``mean_{q, n} max(tau_q (y_n - yhat_qn), (tau_q - 1)(y_n - yhat_qn))``, i.e. the mean over levels of
    ``sklearn.metrics.mean_pinball_loss(y, yhat_q, alpha=tau_q)``.

    ``quantile_preds`` is ``(Q,) + y.shape`` (one prediction per level in ``quantiles``, shape ``(Q,)``), or
    ``y.shape``: a single point prediction used for every level.  The latter is what paper 003 does (the
    posterior predictive mean, levels :data:`PAPER003_PINBALL_LEVELS`, the default here), so
    ``pinball_loss(y, pred_mean)`` reproduces its Table 10.
    """
    y_ = _float(y, "y", min_ndim=1)
    tau = _float(quantiles, "quantiles")
    if tau.ndim != 1:
        raise ValueError(f"`quantiles` must be 1-D, got shape {tau.shape}")
    if np.any(tau <= 0.0) or np.any(tau >= 1.0):
        raise ValueError("`quantiles` must lie in the open interval (0, 1)")
    pred = _float(quantile_preds, "quantile_preds")
    if pred.shape == y_.shape:
        pred = np.broadcast_to(pred, (tau.shape[0],) + y_.shape)
    elif pred.shape != (tau.shape[0],) + y_.shape:
        raise ValueError(
            f"`quantile_preds` has shape {pred.shape}, expected {(tau.shape[0],) + y_.shape} "
            f"(one row per level in `quantiles`) or {y_.shape} (the shape of `y`)"
        )
    tau_b = tau.reshape((-1,) + (1,) * y_.ndim)
    u = y_[None, ...] - pred
    loss = np.maximum(tau_b * u, (tau_b - 1.0) * u)
    return float(np.mean(loss))


# ----------------------------------------------------------------------------------------------------------
# classification
# ----------------------------------------------------------------------------------------------------------


def categorical_nll(y: Any, probs: Any) -> float:
    """``-mean_n log p(y_n)`` for integer labels ``y`` (N,) and ``probs`` (N, K), or binary (N,) ``P(y=1)``.

    The probability of the observed class is clamped below at :data:`PROB_CLAMP` (``1e-12``) before the
    log, so a confidently wrong prediction costs at most ``-log(1e-12) ~= 27.6`` nats.
    """
    y_ = _labels(y)
    p = _class_probs(probs, y_.shape[0])
    _check_label_range(y_, p.shape[1])
    p_obs = p[np.arange(y_.shape[0]), y_]
    return float(-np.mean(np.log(np.maximum(p_obs, PROB_CLAMP))))


def _predict(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(predicted labels, confidences) from (N, K) probabilities; ties go to the lowest index."""
    pred = np.argmax(probs, axis=1)
    conf = probs[np.arange(probs.shape[0]), pred]
    return pred, conf


def accuracy(y: Any, probs: Any) -> float:
    """Fraction of correct predictions.

    ``probs`` is (N, K) probabilities, binary (N,) ``P(y=1)`` (predicts 1 iff ``p > 0.5``), or, when it is a
    1-D integer/bool array, already-predicted labels.
    """
    y_ = _labels(y)
    raw = _as_numpy(probs, "probs")
    if _is_label_array(raw):
        _same_shape(raw, "probs", y_.shape, "predicted labels, the shape of `y`")
        return float(np.mean(raw.astype(np.int64) == y_))
    p = _class_probs(raw, y_.shape[0])
    _check_label_range(y_, p.shape[1])
    pred, _ = _predict(p)
    return float(np.mean(pred == y_))


def confident_accuracy(y: Any, probs: Any, threshold: float = 0.95) -> tuple[float, float]:
    """Accuracy on the points whose maximal class probability is ``>= threshold``, and that subset's fraction.

    Paper 001's "0.95 threshold Acc" and "Num.cl" (the latter as a fraction; multiply by N for the count).
    If no point reaches the threshold the accuracy is undefined and returned as ``nan`` (fraction ``0.0``).
    """
    try:
        thr = float(threshold)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`threshold` must be a number in (0, 1], got {threshold!r}") from exc
    if not (0.0 < thr <= 1.0):
        raise ValueError(f"`threshold` must lie in (0, 1], got {threshold!r}")
    y_ = _labels(y)
    p = _class_probs(probs, y_.shape[0])
    _check_label_range(y_, p.shape[1])
    pred, conf = _predict(p)
    keep = conf >= thr
    frac = float(np.mean(keep))
    if not np.any(keep):
        return float("nan"), frac
    return float(np.mean(pred[keep] == y_[keep])), frac


def predictive_entropy(probs: Any) -> np.ndarray:
    """Per-point entropy ``H[p(y | x, D)] = -sum_k p_k log p_k`` (nats) of model-averaged (N, K) or binary
    (N,) probabilities: the total predictive uncertainty, e.g. on out-of-domain inputs (paper 001 §4.2,
    MNIST-trained models on KMNIST)."""
    raw = _as_numpy(probs, "probs")
    p = _class_probs(raw, raw.shape[0] if raw.ndim >= 1 else 0)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)


def mutual_information(draw_probs: Any) -> np.ndarray:
    """Per-point epistemic uncertainty ``I[y; theta | x, D] = H[E_theta p] - E_theta H[p]`` (nats) from
    per-draw probabilities (S, N, K) (the BALD score); ``>= 0``, zero when all draws agree."""
    d = _float(draw_probs, "draw_probs", min_ndim=3)
    if d.ndim != 3:
        raise ValueError(f"`draw_probs` must be (S, N, K) per-draw class probabilities, got shape {d.shape}")
    per_draw = np.stack([predictive_entropy(d_s) for d_s in d])  # validates each draw
    return np.maximum(predictive_entropy(d.mean(axis=0)) - per_draw.mean(axis=0), 0.0)


def ece(y: Any, probs: Any, n_bins: int = 10) -> float:
    """Expected calibration error over the top-class confidence (Guo et al. 2017; paper 003).

    ``n_bins`` equal-width bins ``(lo, hi]`` on [0, 1] (a confidence of exactly 0 goes into the first bin);
    ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|``.  Binary (N,) ``P(y=1)`` is treated as two classes.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"`n_bins` must be a positive integer, got {n_bins!r}")
    y_ = _labels(y)
    p = _class_probs(probs, y_.shape[0])
    _check_label_range(y_, p.shape[1])
    pred, conf = _predict(p)
    correct = (pred == y_).astype(np.float64)
    edges = np.linspace(0.0, 1.0, int(n_bins) + 1)
    # searchsorted(side="left") gives i with edges[i-1] < c <= edges[i]  ->  bin i-1; c == 0 -> bin 0.
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, int(n_bins) - 1)
    acc_sum = np.bincount(idx, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
    # sum_m (|B_m|/N) |acc_m - conf_m| = (1/N) sum_m |sum_{B_m} correct - sum_{B_m} conf|
    return float(np.sum(np.abs(acc_sum - conf_sum)) / y_.shape[0])


# ----------------------------------------------------------------------------------------------------------
# information criteria
# ----------------------------------------------------------------------------------------------------------


def waic(loglik: Any, *, ddof: int = 1) -> dict[str, float]:
    """WAIC quantities (Gelman, Hwang & Vehtari 2014) from point-wise log-likelihoods ``loglik`` (S, N).

    Returns ``lppd = sum_n log mean_s p``, ``p_waic1 = 2 sum_n (log mean_s p - mean_s log p)``,
    ``p_waic2 = sum_n var_s(log p)`` (variance with ``ddof``, default 1 = unbiased) and
    ``waic1/2 = -2 (lppd - p_waic1/2)``.  All are **sums over points**; this is also the scale of paper 003's
    Tables 7, 8 and 11 (computed on the held-out fold, ``torch.var`` default i.e. ``ddof=1``).
    """
    if isinstance(ddof, bool) or not isinstance(ddof, int | np.integer) or ddof < 0:
        raise ValueError(f"`ddof` must be a non-negative integer, got {ddof!r}")
    ll = _float(loglik, "loglik")
    if ll.ndim != 2:
        raise ValueError(f"`loglik` must have shape (S, N), got {ll.shape}")
    s = ll.shape[0]
    if s <= ddof:
        raise ValueError(f"`loglik` needs more than ddof={ddof} draws (rows) for the variance, got S={s}")
    lppd_n = logsumexp(ll, axis=0) - math.log(s)
    lppd = float(np.sum(lppd_n))
    p1 = float(2.0 * np.sum(lppd_n - ll.mean(axis=0)))
    p2 = float(np.sum(ll.var(axis=0, ddof=ddof)))
    return {
        "lppd": lppd,
        "p_waic1": p1,
        "p_waic2": p2,
        "waic1": -2.0 * (lppd - p1),
        "waic2": -2.0 * (lppd - p2),
    }


# ----------------------------------------------------------------------------------------------------------
# sparsity and variable selection
# ----------------------------------------------------------------------------------------------------------


def _mask_items(masks: Any) -> list[tuple[Any, np.ndarray]]:
    if isinstance(masks, Mapping):
        items = [(k, _bool_mask(v, f"masks[{k!r}]")) for k, v in masks.items()]
    elif isinstance(masks, np.ndarray | torch.Tensor):
        items = [(0, _bool_mask(masks, "masks"))]
    elif isinstance(masks, Sequence) and not isinstance(masks, str | bytes):
        items = [(i, _bool_mask(v, f"masks[{i}]")) for i, v in enumerate(masks)]
    else:
        raise ValueError(
            f"`masks` must be a mapping or a sequence of boolean arrays, got {type(masks).__name__}"
        )
    if not items:
        raise ValueError("`masks` is empty")
    return items


def density(masks: Any) -> float:
    """Fraction of ``True`` entries over all masks pooled (mapping name -> mask, a sequence, or one array).

    Masks may be bool arrays/tensors or numeric arrays holding only 0/1.
    """
    items = _mask_items(masks)
    total = sum(m.size for _, m in items)
    if total == 0:
        raise ValueError("`masks` has no entries")
    return float(sum(int(np.count_nonzero(m)) for _, m in items) / total)


def density_per_layer(masks: Any) -> dict[Any, float]:
    """Per-mask density: ``{name: fraction True}`` (keys are the mapping's keys, or 0..L-1 for a sequence)."""
    out: dict[Any, float] = {}
    for k, m in _mask_items(masks):
        if m.size == 0:
            raise ValueError(f"`masks[{k!r}]` is empty")
        out[k] = float(np.count_nonzero(m) / m.size)
    return out


def selection_rates(selected: Any, truth: Any) -> tuple[float, float]:
    """``(TPR, FPR)`` of a variable selection: ``TP / (TP + FN)`` and ``FP / (FP + TN)``.

    Both arguments are boolean (or 0/1) arrays of equal shape.  The rates are undefined (0/0) when ``truth``
    has no positives or no negatives; that raises ``ValueError``.
    """
    sel = _bool_mask(selected, "selected")
    tru = _bool_mask(truth, "truth")
    _same_shape(sel, "selected", tru.shape, "the shape of `truth`")
    n_pos = int(np.count_nonzero(tru))
    n_neg = int(tru.size - n_pos)
    if n_pos == 0:
        raise ValueError("`truth` has no positives, so the TPR is 0/0")
    if n_neg == 0:
        raise ValueError("`truth` has no negatives, so the FPR is 0/0")
    tp = int(np.count_nonzero(sel & tru))
    fp = int(np.count_nonzero(sel & ~tru))
    return tp / n_pos, fp / n_neg
