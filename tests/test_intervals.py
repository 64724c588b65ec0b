"""Tests for :mod:`zoo.eval.intervals`: Gaussian and sample coverage, the mixture PIT and split conformal's
scale, against hand cases, closed forms and Monte Carlo with tolerances from the sample size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zoo.eval import intervals as iv


def test_coverage_hand():
    y = [0.0, 1.5, 2.5, -1.9]
    # z_0.975 = 1.95996...: 0, 1.5, -1.9 inside, 2.5 outside
    assert iv.coverage(y, [0.0] * 4, [1.0] * 4) == 0.75
    # z_0.75 = 0.67449: only 0 inside
    assert iv.coverage(y, [0.0] * 4, 1.0, level=0.5) == 0.25
    # sd 2 -> half-width 3.92: all inside
    assert iv.coverage(y, [0.0] * 4, 4.0) == 1.0
    # the end point counts as inside
    z = 1.959963984540054
    assert iv.coverage([z], [0.0], [1.0 + 1e-12]) == 1.0


def test_coverage_from_samples_hand():
    # column values 0..4; level 0.5 -> numpy linear quantiles 0.25 and 0.75 = [1, 3]
    samples = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    assert iv.coverage_from_samples([2.0, 3.5], samples, level=0.5) == 0.5
    assert iv.coverage_from_samples([1.0, 3.0], samples, level=0.5) == 1.0  # end points inside
    assert iv.coverage_from_samples([0.5, 3.5], samples, level=0.5) == 0.0


def test_coverage_of_standard_normal_draws():
    n = 20000
    y = np.random.default_rng(1).standard_normal(n)
    tol = 4.0 * math.sqrt(0.95 * 0.05 / n)  # 4 binomial standard deviations
    assert abs(iv.coverage(y, np.zeros(n), np.ones(n), level=0.95) - 0.95) < tol
    tol80 = 4.0 * math.sqrt(0.8 * 0.2 / n)
    assert abs(iv.coverage(y, np.zeros(n), 1.0, level=0.8) - 0.8) < tol80


def test_coverage_from_samples_matches_gaussian_coverage():
    rng = np.random.default_rng(2)
    n, s = 2000, 2000
    mean = rng.normal(size=n)
    sd = rng.uniform(0.5, 2.0, size=n)
    y = mean + sd * rng.standard_normal(n)
    samples = mean + sd * rng.standard_normal((s, n))
    exact = iv.coverage(y, mean, sd**2, level=0.9)
    empirical = iv.coverage_from_samples(y, samples, level=0.9)
    assert abs(empirical - exact) < 0.01


def test_mixture_pit_hand_cases_and_calibration():
    # one draw, y at the mean -> 1/2; a two-component mixture averages the two normal CDFs
    assert iv.mixture_pit([1.0], [[1.0]], [2.0]) == pytest.approx([0.5])
    u = iv.mixture_pit([0.0], [[-1.0], [1.0]], [[1.0], [1.0]])
    assert u == pytest.approx([0.5 * (0.8413447460685429 + 0.15865525393145707)])
    # calibrated Monte Carlo: y ~ N(0, 1) under N(0, 1) -> interval coverage = level within 4 binomial sds
    n = 20000
    y = np.random.default_rng(0).standard_normal(n)
    cov = iv.interval_coverage(iv.mixture_pit(y, np.zeros((1, n)), np.ones(1)))
    for level, c in cov.items():
        assert abs(c - level) < 4 * math.sqrt(level * (1 - level) / n), (level, c)
    # a predictive twice too wide over-covers: P(|Z| <= 2 z_{0.75}) = 0.8227 at the nominal 0.5
    wide = iv.interval_coverage(iv.mixture_pit(y, np.zeros((1, n)), 2 * np.ones(1)), [0.5])[0.5]
    assert abs(wide - 0.8227) < 4 * math.sqrt(0.8227 * 0.1773 / n)
    # the Gaussian coverage and the one-component PIT coverage agree
    loc, sd = np.random.default_rng(1).normal(size=(1, 50)), np.full(1, 0.7)
    yy = loc[0] + np.random.default_rng(2).normal(size=50)
    assert iv.interval_coverage(iv.mixture_pit(yy, loc, sd), [0.95])[0.95] == iv.coverage(yy, loc[0], 0.49)


def test_mixture_pit_and_interval_coverage_refuse_bad_input():
    with pytest.raises(ValueError, match="loc"):
        iv.mixture_pit([0.0, 1.0], np.zeros((3, 4)), np.ones(3))
    with pytest.raises(ValueError, match="scale"):
        iv.mixture_pit([0.0], np.zeros((3, 1)), np.ones(2))
    with pytest.raises(ValueError, match="scale"):
        iv.mixture_pit([0.0], np.zeros((3, 1)), np.zeros(3))
    with pytest.raises(ValueError, match="pit"):
        iv.interval_coverage([1.5])
    with pytest.raises(ValueError, match="levels"):
        iv.interval_coverage([0.5], [1.2])


@pytest.mark.parametrize("n, expected", [(39, 38 / 40), (38, 38 / 39)])
def test_conformal_scale_covers_k_over_n_plus_one(n, expected):
    """Split conformal: a new exchangeable row falls inside ``mean +- q sd`` with probability exactly
    ``k / (n + 1)``, ``k = ceil((n + 1) 0.95)`` — here with heavy-tailed t(3) errors and a predictive sd that
    is wrong by a factor 2.  Monte Carlo over 2000 calibration sets, 50 new rows each; the tolerance is five
    standard errors (the per-set coverage is Beta(k, n + 1 - k))."""
    from zoo.eval.intervals import conformal_scale

    rng = np.random.default_rng(0)
    reps, m = 2000, 50
    k = math.ceil((n + 1) * 0.95)
    hits = []
    for _ in range(reps):
        e = 2.0 * rng.standard_t(3, size=n + m)
        q = conformal_scale(e[:n], np.zeros(n), np.ones(n))
        hits.append(np.mean(np.abs(e[n:]) <= q))
    beta_var = k * (n + 1 - k) / ((n + 1) ** 2 * (n + 2))
    se = math.sqrt(beta_var / reps + expected * (1 - expected) / (reps * m))
    assert abs(np.mean(hits) - expected) < 5 * se


def test_conformal_scale_of_a_calibrated_gaussian_is_the_normal_quantile():
    from zoo.eval.intervals import conformal_scale

    rng = np.random.default_rng(1)
    n = 200_000
    sd = rng.uniform(0.5, 3.0, size=n)
    mean = rng.normal(size=n)
    y = mean + sd * rng.normal(size=n)
    q = conformal_scale(y, mean, sd**2)
    # the sample quantile's sd: sqrt(p (1 - p) / n) / f(q), f = 2 phi(1.96) the density of |Z|
    se = math.sqrt(0.95 * 0.05 / n) / (2 * math.exp(-0.5 * 1.96**2) / math.sqrt(2 * math.pi))
    assert abs(q - 1.959964) < 5 * se
    assert conformal_scale(y, mean, 4 * sd**2) == pytest.approx(q / 2)  # a predictive twice too wide


def test_conformal_scale_refuses_what_bounds_no_interval():
    from zoo.eval.intervals import conformal_scale

    ok = np.linspace(-1, 1, 19)
    assert conformal_scale(ok, np.zeros(19), np.ones(19)) == 1.0  # k = 19: the largest score
    with pytest.raises(ValueError, match="at least 19"):
        conformal_scale(ok[:18], np.zeros(18), np.ones(18))
    with pytest.raises(ValueError, match="y"):
        conformal_scale(np.array([np.nan] * 20), np.zeros(20), np.ones(20))
    with pytest.raises(ValueError, match="var"):
        conformal_scale(np.zeros(20), np.zeros(20), np.zeros(20))
    with pytest.raises(ValueError, match="level"):
        conformal_scale(np.zeros(20), np.zeros(20), np.ones(20), level=1.0)
