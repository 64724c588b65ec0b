"""Scores of a guide against a reference posterior (zoo.eval.scores): hand-computed cases, Monte Carlo
checks with tolerances derived from the sample size, and inputs the scores must reject."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from zoo.eval.scores import (
    classification_scores,
    inclusion_scores,
    regression_scores,
    shrinkage_factors,
    shrinkage_scores,
    wasserstein_1d,
)

# ------------------------------------------------------------------------------------------------ W1 / W2


def test_wasserstein_equal_sizes_by_hand():
    # quantile functions: {0, 1} is 0 on [0, 1/2) and 1 on [1/2, 1); {1/2} is 1/2 everywhere
    a, r = np.array([[0.0], [1.0]]), np.array([[0.5], [0.5]])
    assert wasserstein_1d(a, r, p=1) == pytest.approx([0.5])
    assert wasserstein_1d(a, r, p=2) == pytest.approx([0.5])
    # sorted pairing: {3, 0, 1} vs {1, 5, 2} -> |0-1| + |1-2| + |3-5| = 4 over 3 atoms; squares 1 + 1 + 4
    a, r = np.array([3.0, 0.0, 1.0]), np.array([1.0, 5.0, 2.0])
    assert wasserstein_1d(a, r, p=1) == pytest.approx([4 / 3])
    assert wasserstein_1d(a, r, p=2) == pytest.approx([math.sqrt(2.0)])


def test_wasserstein_unequal_sizes_by_hand():
    # {0, 1, 2} (1/3 each) vs {0, 3} (1/2 each): pieces [0,1/3): 0-0, [1/3,1/2): 1-0, [1/2,2/3): 1-3,
    # [2/3,1): 2-3  ->  W1 = 1/6 + 2/6 + 1/3 = 5/6,  W2^2 = 1/6 + 4/6 + 1/3 = 7/6
    a, r = np.array([2.0, 0.0, 1.0]), np.array([3.0, 0.0])
    assert wasserstein_1d(a, r, p=1) == pytest.approx([5 / 6])
    assert wasserstein_1d(a, r, p=2) == pytest.approx([math.sqrt(7 / 6)])
    assert wasserstein_1d(r, a, p=1) == pytest.approx([5 / 6])  # symmetric


def test_wasserstein_matches_scipy_and_translation():
    rng = np.random.default_rng(0)
    a, r = rng.normal(size=(37, 4)), rng.gamma(2.0, size=(23, 4))
    w1 = wasserstein_1d(a, r, p=1)
    want = [stats.wasserstein_distance(a[:, j], r[:, j]) for j in range(4)]
    np.testing.assert_allclose(w1, want, rtol=1e-12)
    # a translate by c of the same atoms is exactly c away in every W_p
    for p in (1, 2):
        np.testing.assert_allclose(wasserstein_1d(a + 0.7, a, p=p), 0.7, rtol=1e-12)
    assert np.all(wasserstein_1d(a, r, p=2) >= w1 - 1e-12)  # W2 >= W1 (Jensen)
    # torch tensors work as well
    np.testing.assert_allclose(wasserstein_1d(torch.as_tensor(a), torch.as_tensor(r)), w1)


def test_wasserstein_rejects_bad_inputs():
    with pytest.raises(ValueError, match="`p`"):
        wasserstein_1d(np.zeros(3), np.zeros(3), p=3)
    with pytest.raises(ValueError, match="test points"):
        wasserstein_1d(np.zeros((5, 2)), np.zeros((5, 3)))
    with pytest.raises(ValueError, match="`approx`.*NaN"):
        wasserstein_1d(np.array([np.nan, 1.0]), np.zeros(2))
    with pytest.raises(ValueError, match="`reference`.*shape"):
        wasserstein_1d(np.zeros((2, 2)), np.zeros((2, 2, 2)))


# ------------------------------------------------------------------------ reference against itself / shift


def _w1_bound(n: int) -> float:
    """Upper bound on ``E W1`` between two independent ``n``-draw empirical N(0, 1) distributions:
    ``E W1(F_n, F) <= ∫ sqrt(F(1-F)/n) dx`` (Bobkov & Ledoux 2019, Mem. AMS 261, Thm 3.5), twice."""
    j = integrate.quad(lambda x: math.sqrt(stats.norm.cdf(x) * stats.norm.sf(x)), -40, 40)[0]
    return 2.0 * j / math.sqrt(n)


def test_reference_against_itself_scores_zero_and_a_shift_is_detected():
    rng = np.random.default_rng(1)
    s, n_points, shift = 2000, 30, 0.25
    mu = rng.normal(size=n_points)
    ref = mu + rng.normal(size=(s, n_points))
    same = mu + rng.normal(size=(s, n_points))
    y = mu  # noise-free targets: the gaps of a shifted guide are known exactly (below)
    bound = _w1_bound(s)  # ~0.036 at s = 2000; Markov: P(mean W1 > 3 bound) <= 1/3, and the mean over
    out = regression_scores(same, ref, y=y)  # 30 points concentrates far below that
    assert out["w1"] < bound
    assert out["w2"] < 3 * bound
    # a perfect guide puts `level` of its draws in the reference's central interval (binomial SE)
    assert abs(out["draw_coverage"] - 0.95) < 4 * math.sqrt(0.95 * 0.05 / (s * n_points)) + 2 / s
    # NLL / RMSE gaps: the moment estimates differ only by MC error ~ 1/sqrt(s)
    assert abs(out["nll_gap"]) < 5 / math.sqrt(s)
    assert abs(out["rmse_gap"]) < 5 / math.sqrt(s)
    # triangle inequality: |W_p(A + c, B) - c| <= W_p(A, B), so a shift by c is measured as c
    shifted = regression_scores(same + shift, ref, y=y)
    assert abs(shifted["w1"] - shift) <= out["w1"] + 1e-12
    assert abs(shifted["w2"] - shift) <= out["w2"] + 1e-12
    assert shifted["w1"] > out["w1"] + 5 * out["w1_se"]
    # a shift of c = 0.25 moves draw coverage to P(|Z + c| < 1.96) = 0.9357
    want = stats.norm.cdf(1.96 - shift) - stats.norm.cdf(-1.96 - shift)
    assert abs(shifted["draw_coverage"] - want) < 0.01
    # with y = the true mean: RMSE gap -> c, NLL gap -> c²/2 (unit predictive variance), up to MC error
    assert abs(shifted["rmse_gap"] - shift) < 5 / math.sqrt(s)
    assert abs(shifted["nll_gap"] - shift**2 / 2) < 5 / math.sqrt(s)


def test_regression_scores_keys_and_rejections():
    a, r = np.random.default_rng(2).normal(size=(2, 50, 4))
    out = regression_scores(a, r)
    assert {"w1", "w1_se", "w2", "w2_se", "draw_coverage", "num_points"} <= set(out)
    assert "nll_gap" not in out and out["num_points"] == 4
    with pytest.raises(ValueError, match="`y`"):
        regression_scores(a, r, y=np.zeros(5))
    with pytest.raises(ValueError, match="`level`"):
        regression_scores(a, r, level=1.5)
    with pytest.raises(ValueError, match="zero variance"):
        regression_scores(np.ones((5, 4)), r, y=np.zeros(4))


# --------------------------------------------------------------------------------- classification


def test_agreement_and_total_variation_by_hand():
    pa = np.array([[0.7, 0.3], [0.4, 0.6], [0.2, 0.8]])
    pr = np.array([[0.6, 0.4], [0.5, 0.5], [0.1, 0.9]])
    out = classification_scores(pa, pr)
    # top classes 0, 1, 1 vs 0, 0 (tie -> lower index), 1: agreement 2/3; TV = (0.1 + 0.1 + 0.1) / 3
    assert out["agreement"] == pytest.approx(2 / 3)
    assert out["total_variation"] == pytest.approx(0.1)
    assert out["total_variation_se"] == pytest.approx(0.0, abs=1e-12)
    # binary P(y = 1) vectors give the same numbers
    out_bin = classification_scores(pa[:, 1], pr[:, 1])
    assert out_bin["agreement"] == pytest.approx(2 / 3) and out_bin["total_variation"] == pytest.approx(0.1)
    same = classification_scores(pr, pr)
    assert same["agreement"] == 1.0 and same["total_variation"] == 0.0


def test_classification_scores_reject():
    with pytest.raises(ValueError, match="`approx`"):
        classification_scores(np.ones((2, 3)) / 3, np.ones((3, 3)) / 3)
    with pytest.raises(ValueError, match="sum to 1"):
        classification_scores(np.full((2, 2), 0.7), np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="\\[0, 1\\]"):
        classification_scores(np.array([1.2, 0.1]), np.array([0.5, 0.5]))


# --------------------------------------------------------------------------------- inclusion


def test_inclusion_mae_and_auroc_by_hand():
    ref = np.array([0.9, 0.8, 0.1, 0.2])  # median probability model: weights 0 and 1
    approx = np.array([0.7, 0.3, 0.4, 0.1])
    out = inclusion_scores(approx, ref)
    assert out["mae"] == pytest.approx((0.2 + 0.5 + 0.3 + 0.1) / 4)
    # positive-negative pairs ranked correctly: 0.7 > 0.4, 0.7 > 0.1, 0.3 < 0.4, 0.3 > 0.1 -> 3/4
    assert out["auroc"] == pytest.approx(0.75)
    assert out["num_included"] == 2 and out["num_weights"] == 4
    # a tie between a positive and a negative counts one half
    assert inclusion_scores([0.5, 0.9, 0.5, 0.1], ref)["auroc"] == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    assert inclusion_scores(ref, ref)["mae"] == 0.0 and inclusion_scores(ref, ref)["auroc"] == 1.0


def test_inclusion_scores_undefined_auroc_and_rejections(caplog):
    out = inclusion_scores([0.2, 0.3], [0.9, 0.8])
    assert math.isnan(out["auroc"]) and "AUROC is undefined" in caplog.text
    with pytest.raises(ValueError, match="`approx`.*\\[0, 1\\]"):
        inclusion_scores([1.2, 0.3], [0.9, 0.1])
    with pytest.raises(ValueError, match="`approx`"):
        inclusion_scores([0.2, 0.3, 0.1], [0.9, 0.1])
    with pytest.raises(ValueError, match="`threshold`"):
        inclusion_scores([0.2, 0.3], [0.9, 0.1], threshold=0.0)


# --------------------------------------------------------------------------------- shrinkage κ


def test_shrinkage_factors_by_hand():
    tau2 = np.array([[1.0, 3.0]])
    np.testing.assert_allclose(shrinkage_factors(tau2, [1.0]), [[0.5, 0.25]])
    np.testing.assert_allclose(shrinkage_factors(tau2, [1.0], info=2.0), [[1 / 3, 1 / 7]])
    # regularized: τ̃² = c² τ² / (c² + τ² v²) = 1·1/(1+1) = 1/2 and 1·3/(1+3) = 3/4
    np.testing.assert_allclose(shrinkage_factors(tau2, [1.0], c2=[1.0]), [[1 / 1.5, 1 / 1.75]])
    # a huge slab leaves the plain horseshoe
    np.testing.assert_allclose(shrinkage_factors(tau2, [2.0], c2=[1e12]), shrinkage_factors(tau2, [2.0]))


def test_shrinkage_scores_sorted_and_permutation_invariant():
    rng = np.random.default_rng(3)
    kappa = rng.uniform(size=(100, 6))
    perm = kappa[:, rng.permutation(6)]
    out = shrinkage_scores(perm, kappa)
    assert out["kappa_mae"] == pytest.approx(0.0, abs=1e-15) and out["num_units"] == 6
    means = np.array([0.1, 0.5, 0.9])
    out = shrinkage_scores(np.array([0.95, 0.2, 0.5]), means)  # sorted: .2 .5 .95 vs .1 .5 .9
    assert out["kappa_mae"] == pytest.approx((0.1 + 0.0 + 0.05) / 3)
    assert out["kappa_max_error"] == pytest.approx(0.1)


def test_shrinkage_rejects():
    with pytest.raises(ValueError, match="`tau2`"):
        shrinkage_factors(np.array([[1.0, -1.0]]), [1.0])
    with pytest.raises(ValueError, match="`v2`"):
        shrinkage_factors(np.ones((2, 3)), np.ones(3))
    with pytest.raises(ValueError, match="`c2`"):
        shrinkage_factors(np.ones((2, 3)), np.ones(2), c2=np.zeros(2))
    with pytest.raises(ValueError, match="`approx`.*\\[0, 1\\]"):
        shrinkage_scores(np.array([1.5, 0.2]), np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="`approx`"):
        shrinkage_scores(np.array([0.5, 0.2, 0.1]), np.array([0.1, 0.2]))


def test_scores_are_exported_by_zoo_metrics():
    import zoo.metrics

    for name in ("wasserstein_1d", "regression_scores", "classification_scores", "inclusion_scores"):
        assert getattr(zoo.metrics, name) is globals()[name] and name in zoo.metrics.__all__
    assert "rmse" in zoo.metrics.__all__  # the metrics stay exported
