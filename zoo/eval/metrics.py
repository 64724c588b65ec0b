"""Evaluation metrics shared by every model in the zoo.

All functions accept numpy arrays or torch tensors (on any device; they are detached and moved to the
CPU), compute in float64 and return plain Python floats (or dicts / tuples of floats).  Regression
metrics and WAIC live here; the interval and calibration metrics (:mod:`zoo.eval.intervals`), the
classification metrics (:mod:`zoo.eval.classification`) and the sparsity / selection metrics
(:mod:`zoo.eval.selection`) are re-exported, so ``zoo.eval.metrics`` is the one import for all of them.

Conventions
-----------
* **Logarithms are natural** (nats) everywhere.
* **NLL sign.** Every ``*_nll`` function returns a *negative* log-likelihood averaged over test points,
  ``-(1/N) sum_n log p(y_n | ...)``, so smaller is better and values are usually positive for continuous
  data.  Sheinkman & Wade (2025, arXiv:2411.11132, App. D.2) print their NLL formula without the minus
  sign, but their tables are positive, i.e. the convention used here.  Ghosh, Yao & Doshi-Velez (2019,
  arXiv:1705.10388, App. D) report the test *log*-likelihood ``(1/N) sum_n log (1/S) sum_s p(y_n | W^s)``,
  which is ``-nll_from_loglik(...)`` / ``-mixture_nll(...)``.
* **Averaging.** Point-wise losses (RMSE, NLL, pinball, coverage, accuracy) are averaged over all test
  points (and, for pinball, over quantile levels).  Split-level summaries (mean +- std, or min/mean/max over
  folds) are left to the caller.
* **Gaussian vs mixture predictive.** :func:`gaussian_nll` and :func:`coverage` use a Gaussian
  approximation ``N(E[y*], Var(y*))`` of the predictive, as Sheinkman & Wade (2025, §4.1) do for the NLL
  and the 95% empirical coverage "EC".  :func:`mixture_nll` / :func:`nll_from_loglik` use the Monte-Carlo
  mixture ``(1/S) sum_s p(y | theta_s)`` computed with log-sum-exp (Ghosh et al. 2019, §6.1), and
  :func:`coverage_from_samples` uses empirical quantiles of predictive samples.
* **RMSE** is the RMSE of the predictive mean, ``sqrt((1/N) sum_n (y_n - E[y_n])^2)`` (Sheinkman & Wade
  2025; Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395).  Ghosh et al. (2019, App. D) average a
  per-point RMS over draws instead (:func:`rmse_pointwise`); their code averages per-draw RMSEs
  (:func:`rmse_draws`).
* **Pinball loss** (Skaaret-Lund et al. 2023, App. C): ``rho_tau(u) = max(tau u, (tau - 1) u)`` with
  ``u = y - y_hat``, averaged over points and then over levels: the mean over levels of
  :func:`sklearn.metrics.mean_pinball_loss`.  That paper uses the 19 levels ``tau = 0.05, 0.10, ..., 0.95``
  (:data:`PAPER003_PINBALL_LEVELS`) and, in its code, plugs in the *posterior predictive mean* as
  ``y_hat_tau`` for every level rather than predictive quantiles.  To reproduce its numbers pass the
  ``(N,)`` mean as ``quantile_preds`` (it is broadcast over levels); pass ``(Q, N)`` predictive quantiles
  for the principled version.
* **WAIC** (Gelman, Hwang & Vehtari 2014, arXiv:1307.5928, §3.4; Vehtari, Gelman & Gabry 2017,
  arXiv:1507.04544, Eqs. 3-6): ``lppd = sum_n log mean_s p(y_n | theta_s)``,
  ``p_waic1 = 2 sum_n (log mean_s p - mean_s log p)``, ``p_waic2 = sum_n var_s(log p)`` with the unbiased
  (``ddof=1``) variance, and ``waic_i = -2 (lppd - p_waic_i)`` (deviance scale).  ``lppd`` and
  ``p_waic2`` come from :func:`pyro.ops.stats.waic`; ``p_waic1`` is added on top.  Skaaret-Lund et al.
  (2023, Tables 7, 8 and 11) report ``p_waic1`` / ``p_waic2`` on exactly this scale: **sums** over the
  points of the held-out fold (not per-point averages), with ``torch.var``'s default unbiased variance,
  as their code does.  So the defaults of :func:`waic` match that paper; ``ddof`` is exposed only for
  comparison with codes that use the biased variance.

Input validation (:mod:`zoo.core.validation`'s array checks) raises :class:`ValueError` naming the
offending argument for mismatched shapes, NaN/inf values, non-positive variances/scales, probabilities
outside ``[0, 1]``, and levels outside ``(0, 1)``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch
from pyro.ops.stats import waic as pyro_waic
from scipy.special import logsumexp
from sklearn.metrics import mean_pinball_loss

from zoo.core.validation import (
    check_count,
    check_draws,
    check_float_array,
)
from zoo.eval._checks import check_df, positive_broadcast, target_and_mean
from zoo.eval.classification import (
    PROB_CLAMP,
    accuracy,
    categorical_nll,
    confident_accuracy,
    ece,
    mutual_information,
    predictive_entropy,
)
from zoo.eval.intervals import (
    conformal_scale,
    coverage,
    coverage_from_samples,
    interval_coverage,
    interval_width_ratio,
    mixture_pit,
)
from zoo.eval.selection import density, density_per_layer, selection_rates

logger = logging.getLogger(__name__)

__all__ = [
    "PAPER003_PINBALL_LEVELS",
    "PROB_CLAMP",
    "rmse",
    "rmse_draws",
    "rmse_pointwise",
    "gaussian_nll",
    "mixture_nll",
    "heldout_noise_scale",
    "nll_from_loglik",
    "categorical_nll",
    "conformal_scale",
    "coverage",
    "coverage_from_samples",
    "interval_width_ratio",
    "mixture_pit",
    "interval_coverage",
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

#: The 19 quantile levels 0.05, 0.10, ..., 0.95 over which Skaaret-Lund et al. (2023, arXiv:2305.03395,
#: Table 10) average the pinball loss.
PAPER003_PINBALL_LEVELS: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 20))

_LOG_2PI = math.log(2.0 * math.pi)


# ----------------------------------------------------------------------------------------------------------
# shared validation
# ----------------------------------------------------------------------------------------------------------


def _loglik(loglik: Any) -> np.ndarray:
    """Validated point-wise log-likelihoods of shape ``(S, N)``."""
    ll = check_float_array("loglik", loglik)
    if ll.ndim != 2:
        raise ValueError(f"`loglik` must have shape (S, N), got {ll.shape}")
    return ll


# ----------------------------------------------------------------------------------------------------------
# regression
# ----------------------------------------------------------------------------------------------------------


def rmse(y: Any, mean: Any) -> float:
    """Root mean squared error of the predictive mean, ``sqrt(mean_n (y_n - mean_n)^2)``."""
    y_, m = target_and_mean(y, mean)
    return float(np.sqrt(np.mean((y_ - m) ** 2)))


def rmse_draws(y: Any, loc: Any) -> float:
    """RMSE of each posterior draw's network output over the test set, averaged over draws:
    ``mean_s sqrt(mean_n (loc[s, n] - y_n)^2)`` (the convention of the code of Ghosh, Yao & Doshi-Velez
    2019, arXiv:1705.10388).  Never smaller than :func:`rmse` of the draws' mean (triangle inequality)."""
    y_ = check_float_array("y", y, min_ndim=1)
    mu = check_draws("loc", loc, y_.shape)
    err = (mu - y_[None]).reshape(mu.shape[0], -1)
    return float(np.mean(np.sqrt(np.mean(err**2, axis=1))))


def rmse_pointwise(y: Any, loc: Any) -> float:
    """The per-point RMS error over draws averaged over points, ``mean_n sqrt(mean_s (loc[s, n] - y_n)^2)``
    (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, App. D)."""
    y_ = check_float_array("y", y, min_ndim=1)
    mu = check_draws("loc", loc, y_.shape)
    return float(np.mean(np.sqrt(np.mean((mu - y_[None]) ** 2, axis=0))))


def gaussian_nll(y: Any, mean: Any, var: Any) -> float:
    """Mean over points of ``-log N(y | mean, var)`` (Gaussian approximation of the predictive).

    ``mean`` must have the shape of ``y``; ``var`` may be anything broadcastable to it (e.g. a scalar for a
    fixed noise variance).
    """
    y_, m = target_and_mean(y, mean)
    v = positive_broadcast("var", var, y_.shape, "the shape of `y`")
    return float(np.mean(0.5 * (_LOG_2PI + np.log(v) + (y_ - m) ** 2 / v)))


def mixture_nll(y: Any, loc: Any, scale: Any, df: float | None = None) -> float:
    """NLL of the equally weighted Gaussian mixture predictive.

    ``-mean_n log( (1/S) sum_s N(y_n | loc[s, n], scale[s, n]^2) )`` with ``loc`` of shape ``(S,) + y.shape``
    and ``scale`` (a standard deviation) broadcastable to it, e.g. ``(S, 1)`` for one noise level per draw.
    With ``df``, each component is the Student-t of ``df`` degrees of freedom, location ``loc`` and scale
    ``scale`` (a Student-t likelihood's predictive, :attr:`zoo.infer.predict.Predictions.df`).  Computed
    with log-sum-exp.
    """
    from scipy.stats import t as student_t

    nu = check_df(df)
    y_ = check_float_array("y", y, min_ndim=1)
    mu = check_draws("loc", loc, y_.shape)
    sd = positive_broadcast("scale", scale, mu.shape, "the shape of `loc`")
    z = (y_[None, ...] - mu) / sd
    logp = (-0.5 * _LOG_2PI - 0.5 * z * z if nu is None else student_t.logpdf(z, nu)) - np.log(sd)
    return nll_from_loglik(logp.reshape(mu.shape[0], -1))


def heldout_noise_scale(y: Any, loc: Any, scale: Any, log_bounds: tuple[float, float] = (-4.0, 2.0)) -> float:
    """The factor ``c`` on the noise scale that maximizes the held-out log-likelihood of the Gaussian-mixture
    predictive ``(1/S) sum_s N(y_n | loc[s, n], (c scale[s, n])^2)`` (shapes as in :func:`mixture_nll`).

    Rows held out of the fit make this a cross-validated (predictive) estimate of the noise scale
    (Geisser & Eddy 1979; cf. the "sigma scaling" of Laves et al. 2020, arXiv:2006.13707, which scales the
    whole predictive), which — unlike the
    ELBO's noise optimum on the training rows — can see whether the spread of ``q(W)`` at the data is
    backed by errors on new rows.  With one draw (``S = 1``) the optimum is the closed form
    ``c^2 = mean_n z_n^2``, ``z_n = (y_n - loc_n) / scale_n``.  The search is Brent's bounded method on
    ``log c`` in ``log_bounds``; an optimum on a bound is returned with a warning.
    """
    from scipy.optimize import minimize_scalar

    y_ = check_float_array("y", y, min_ndim=1)
    mu = check_draws("loc", loc, y_.shape)
    sd = positive_broadcast("scale", scale, mu.shape, "the shape of `loc`")
    lo, hi = (float(b) for b in log_bounds)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"log_bounds must be two finite numbers, low < high, got {log_bounds!r}")

    def nll(u: float) -> float:
        return mixture_nll(y_, mu, math.exp(u) * sd)

    u = float(minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-7}).x)
    if min(u - lo, hi - u) < 1e-4:
        logger.warning("heldout_noise_scale: the optimum log c = %.4f is on a bound of %s", u, (lo, hi))
    return math.exp(u)


def nll_from_loglik(loglik: Any) -> float:
    """``-mean_n log mean_s exp(loglik[s, n])`` for point-wise log-likelihoods of shape ``(S, N)``."""
    ll = _loglik(loglik)
    lppd_n = logsumexp(ll, axis=0) - math.log(ll.shape[0])
    return float(-np.mean(lppd_n))


def _quantile_levels(quantiles: Any) -> np.ndarray:
    tau = check_float_array("quantiles", quantiles)
    if tau.ndim != 1:
        raise ValueError(f"`quantiles` must be 1-D, got shape {tau.shape}")
    if np.any(tau <= 0.0) or np.any(tau >= 1.0):
        raise ValueError("`quantiles` must lie in the open interval (0, 1)")
    return tau


def pinball_loss(y: Any, quantile_preds: Any, quantiles: Any = PAPER003_PINBALL_LEVELS) -> float:
    """Pinball (quantile) loss averaged over points and levels.

    ``mean_{q, n} max(tau_q (y_n - yhat_qn), (tau_q - 1)(y_n - yhat_qn))``: the mean over levels of
    ``sklearn.metrics.mean_pinball_loss(y, yhat_q, alpha=tau_q)``.

    ``quantile_preds`` is ``(Q,) + y.shape`` (one prediction per level in ``quantiles``, shape ``(Q,)``), or
    ``y.shape``: a single point prediction used for every level.  The latter is what Skaaret-Lund et al.
    (2023, arXiv:2305.03395, Table 10) do (the posterior predictive mean, levels
    :data:`PAPER003_PINBALL_LEVELS`, the default here), so ``pinball_loss(y, pred_mean)`` reproduces it.
    """
    y_ = check_float_array("y", y, min_ndim=1)
    tau = _quantile_levels(quantiles)
    pred = check_float_array("quantile_preds", quantile_preds)
    shape = (tau.shape[0],) + y_.shape
    if pred.shape == y_.shape:
        pred = np.broadcast_to(pred, shape)
    elif pred.shape != shape:
        raise ValueError(
            f"`quantile_preds` has shape {pred.shape}, expected {shape} "
            f"(one row per level in `quantiles`) or {y_.shape} (the shape of `y`)"
        )
    y_flat = y_.reshape(-1)
    losses = [mean_pinball_loss(y_flat, p.reshape(-1), alpha=float(t)) for t, p in zip(tau, pred)]
    return float(np.mean(losses))


# ----------------------------------------------------------------------------------------------------------
# information criteria
# ----------------------------------------------------------------------------------------------------------


def waic(loglik: Any, *, ddof: int = 1) -> dict[str, float]:
    """WAIC quantities (Gelman, Hwang & Vehtari 2014, arXiv:1307.5928, §3.4) from point-wise log-likelihoods
    ``loglik`` (S, N).

    Returns ``lppd = sum_n log mean_s p``, ``p_waic1 = 2 sum_n (log mean_s p - mean_s log p)``,
    ``p_waic2 = sum_n var_s(log p)`` (variance with ``ddof``, default 1 = unbiased) and
    ``waic1/2 = -2 (lppd - p_waic1/2)``.  All are **sums over points**; this is also the scale of
    Skaaret-Lund et al. (2023, arXiv:2305.03395, Tables 7, 8 and 11; held-out fold, ``torch.var`` default
    i.e. ``ddof=1``).  ``lppd`` and the unbiased ``p_waic2`` are :func:`pyro.ops.stats.waic`'s
    (Vehtari, Gelman & Gabry 2017, arXiv:1507.04544, Eqs. 3-6); ``p_waic1`` is added on top.
    """
    ddof = check_count("ddof", ddof)
    ll = _loglik(loglik)
    s = ll.shape[0]
    if s <= ddof:
        raise ValueError(f"`loglik` needs more than ddof={ddof} draws (rows) for the variance, got S={s}")
    if s == 1:  # one draw (ddof=0): no spread, and Pyro's unbiased variance would be 0/0
        lppd_n, p2 = ll[0], 0.0
    else:
        waic_n, p2_n = pyro_waic(torch.tensor(ll), pointwise=True)
        lppd_n = (p2_n - 0.5 * waic_n).numpy()  # Pyro's waic_n = -2 (lppd_n - p2_n), Eq. 4 inverted
        p2 = float(p2_n.sum()) * (s - 1) / (s - ddof)
    lppd = float(np.sum(lppd_n))
    p1 = float(2.0 * np.sum(lppd_n - ll.mean(axis=0)))
    return {
        "lppd": lppd,
        "p_waic1": p1,
        "p_waic2": p2,
        "waic1": -2.0 * (lppd - p1),
        "waic2": -2.0 * (lppd - p2),
    }
