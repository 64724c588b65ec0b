"""Predictive intervals and their calibration: coverage of Gaussian, sample and mixture intervals, the PIT
of a mixture predictive and the reliability read from it, and the split-conformal factor.

Re-exported by :mod:`zoo.eval.metrics` (the one import for every metric); inputs are validated as there
(a ``ValueError`` naming the argument), and levels lie in ``(0, 1)``.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from zoo.core.validation import check_draws, check_float_array, check_level, check_positive_array
from zoo.eval._checks import check_df, positive_broadcast, target_and_mean

__all__ = [
    "conformal_scale",
    "coverage",
    "coverage_from_samples",
    "interval_coverage",
    "interval_width_ratio",
    "mixture_pit",
]


def coverage(y: Any, mean: Any, var: Any, level: float = 0.95) -> float:
    """Fraction of ``y`` inside the central Gaussian interval ``mean +- z sqrt(var)``.

    ``z = Phi^-1((1 + level) / 2)``; interval end points count as inside.  At ``level=0.95`` this is the
    empirical coverage "EC" of Sheinkman & Wade (2025, arXiv:2411.11132, §4.1).
    """
    lv = check_level("level", level)
    y_, m = target_and_mean(y, mean)
    v = positive_broadcast("var", var, y_.shape, "the shape of `y`")
    half = NormalDist().inv_cdf(0.5 * (1.0 + lv)) * np.sqrt(v)
    return float(np.mean((y_ >= m - half) & (y_ <= m + half)))


def conformal_scale(y: Any, mean: Any, var: Any, level: float = 0.95) -> float:
    """The split-conformal factor ``q`` on the predictive standard deviation: with calibration rows
    ``(y, mean, var)`` that the fit did not see, the ``ceil((n + 1) level)``-th smallest normalized residual
    ``|y_n - mean_n| / sqrt(var_n)``.

    On a new row exchangeable with the calibration rows, ``mean +- q sqrt(var)`` covers it with probability
    at least ``level`` and below ``level + 1 / (n + 1)`` (no ties), whatever the model (Lei, G'Sell,
    Rinaldo, Tibshirani & Wasserman 2018, "Distribution-free predictive inference for regression", JASA
    113, §2.2 and Thm. 2.2; the normalized score of Papadopoulos, Proedrou, Vovk & Gammerman 2002, §4).
    ``q / Phi^-1((1 + level) / 2)`` is then how many times too wide the Gaussian interval was.  A
    ``ValueError`` when ``n < level / (1 - level)``, where the interval would be unbounded.
    """
    lv = check_level("level", level)
    y_, m = target_and_mean(y, mean)
    v = positive_broadcast("var", var, y_.shape, "the shape of `y`")
    scores = np.sort((np.abs(y_ - m) / np.sqrt(v)).reshape(-1))
    k = math.ceil((scores.size + 1) * lv)
    if k > scores.size:
        raise ValueError(
            f"y: {scores.size} calibration rows bound no interval at level {lv}; at least "
            f"{math.ceil(lv / (1.0 - lv))} are needed"
        )
    return float(scores[k - 1])


def coverage_from_samples(y: Any, samples: Any, level: float = 0.95) -> float:
    """Fraction of ``y`` inside the empirical central interval of predictive ``samples`` (``(S,) + y.shape``).

    The interval is ``[q_{(1-level)/2}, q_{(1+level)/2}]`` from ``numpy.quantile`` (linear interpolation)
    over the sample axis; end points count as inside.
    """
    lv = check_level("level", level)
    y_ = check_float_array("y", y, min_ndim=1)
    s = check_draws("samples", samples, y_.shape)
    lo, hi = np.quantile(s, [0.5 * (1.0 - lv), 0.5 * (1.0 + lv)], axis=0)
    return float(np.mean((y_ >= lo) & (y_ <= hi)))


def mixture_pit(y: Any, loc: Any, scale: Any, df: float | None = None) -> np.ndarray:
    """Probability integral transform of ``y`` under the Gaussian mixture ``(1/S) sum_s N(loc_s, scale_s^2)``:
    ``u_n = (1/S) sum_s Phi((y_n - loc_sn) / scale_sn)``, shape ``(N,)`` (with ``df``: the Student-t
    mixture, ``Phi`` replaced by the t's distribution function, as in :func:`mixture_nll`).

    For a calibrated predictive the ``u_n`` are uniform on (0, 1) (Dawid 1984; Gneiting, Balabdaoui &
    Raftery 2007, JRSS-B 69, §2.1); ``loc`` is ``(S, N)``, ``scale`` ``(S, N)`` or ``(S,)``.
    """
    from scipy.special import ndtr, stdtr

    nu = check_df(df)

    y_ = check_float_array("y", y, min_ndim=1).reshape(-1)
    m = check_draws("loc", loc, y_.shape)
    sd = check_float_array("scale", scale, min_ndim=1)
    if sd.ndim == 1 and sd.shape[0] == m.shape[0]:
        sd = sd[:, None]
    if sd.shape not in (m.shape, (m.shape[0], 1)):
        raise ValueError(f"`scale` has shape {sd.shape}, expected {m.shape} or ({m.shape[0]},)")
    check_positive_array("scale", sd)
    z = (y_[None, :] - m) / sd
    return np.mean(ndtr(z) if nu is None else stdtr(nu, z), axis=0)


def interval_coverage(pit: Any, levels: Any = (0.5, 0.8, 0.9, 0.95, 0.99)) -> dict[float, float]:
    """Coverage of the central predictive intervals at ``levels`` from PIT values: the fraction of points
    with ``|u - 1/2| <= level / 2`` (a reliability diagram plots it against ``level``)."""
    u = check_float_array("pit", pit, min_ndim=1).reshape(-1)
    if np.any(u < 0) or np.any(u > 1):
        raise ValueError("`pit` values must lie in [0, 1]")
    out = {}
    for lv in np.atleast_1d(np.asarray(levels, dtype=float)):
        level = check_level("levels", float(lv))
        out[level] = float(np.mean(np.abs(u - 0.5) <= 0.5 * level + 1e-12))
    return out


def interval_width_ratio(level: float, coverage: float) -> float | None:
    """How many times too wide the central level-``level`` intervals are, read from their ``coverage`` as
    if the residuals had the predictive's shape: ``c = Phi^-1((1 + coverage) / 2) / Phi^-1((1 + level) / 2)``.

    Say the predictive is ``N(mu, s^2)`` and the residual is ``N(0, (s / c)^2)``; the interval
    ``mu +- z s`` then covers with probability ``2 Phi(c z) - 1``, which this inverts.  The same ``c`` at
    every level is a miss of scale.  A ``c`` that falls with the level means residuals more peaked and
    heavier-tailed than the predictive, which no single scale fixes; a ``c`` that rises means lighter tails
    (the probit reading of a reliability diagram; Gneiting, Balabdaoui & Raftery 2007, JRSS-B 69, §3).
    ``None`` when ``coverage`` is 1: every point inside gives only a lower bound."""
    from scipy.stats import norm

    level = check_level("level", level)
    cov = check_level("coverage", coverage, allow_one=True) if coverage != 0 else 0.0
    if cov >= 1.0:
        return None
    return float(norm.ppf((1.0 + cov) / 2.0) / norm.ppf((1.0 + level) / 2.0))
