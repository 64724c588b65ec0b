"""Tests for :mod:`zoo.eval.metrics`: hand-computed cases, statistical sanity checks and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoo.eval import metrics as M

LOG2PI = math.log(2.0 * math.pi)


def _t(x, device, dtype=torch.float64):
    return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)


# ----------------------------------------------------------------------------------------------------------
# hand-computed cases
# ----------------------------------------------------------------------------------------------------------


def test_rmse_hand():
    # errors 0, 1, 2 -> sqrt((0 + 1 + 4) / 3)
    assert M.rmse([1.0, 2.0, 3.0], [1.0, 3.0, 5.0]) == pytest.approx(math.sqrt(5.0 / 3.0), rel=1e-14)


def test_rmse_conventions_hand():
    # two draws of three points; y = 0.  draw errors (1, 1, 1) and (3, 3, -1)
    y, loc = [0.0, 0.0, 0.0], [[1.0, 1.0, 1.0], [3.0, 3.0, -1.0]]
    assert M.rmse_draws(y, loc) == pytest.approx(0.5 * (1.0 + math.sqrt(19.0 / 3.0)), rel=1e-14)
    # per point: sqrt((1 + 9)/2), sqrt((1 + 9)/2), sqrt((1 + 1)/2)
    assert M.rmse_pointwise(y, loc) == pytest.approx((2 * math.sqrt(5.0) + 1.0) / 3.0, rel=1e-14)
    # the per-draw convention bounds the RMSE of the draws' mean (2, 2, 0) from above (triangle inequality)
    assert M.rmse(y, [2.0, 2.0, 0.0]) < M.rmse_draws(y, loc)
    with pytest.raises(ValueError, match="loc"):
        M.rmse_draws(y, [[1.0, 2.0]])


def test_gaussian_nll_hand():
    y, mean, var = [0.0, 1.0, -1.0], [0.0, 0.0, 1.0], [1.0, 4.0, 0.5]
    terms = [
        0.5 * math.log(2 * math.pi) + 0.5 * math.log(1.0) + 0.0,
        0.5 * math.log(2 * math.pi) + 0.5 * math.log(4.0) + 0.5 * 1.0 / 4.0,
        0.5 * math.log(2 * math.pi) + 0.5 * math.log(0.5) + 0.5 * 4.0 / 0.5,
    ]
    assert M.gaussian_nll(y, mean, var) == pytest.approx(sum(terms) / 3, rel=1e-14)
    # a scalar variance broadcasts (Skaaret-Lund et al. 2023, arXiv:2305.03395, use a fixed variance of 1)
    expected = 0.5 * math.log(2 * math.pi) + 0.5 * (0.0 + 1.0 + 4.0) / 3
    assert M.gaussian_nll(y, mean, 1.0) == pytest.approx(expected, rel=1e-14)


def test_mixture_nll_hand():
    # one point y = 0, two components N(0, 1) and N(1, 1): p = (phi(0) + phi(1)) / 2
    p = 0.5 * (1.0 + math.exp(-0.5)) / math.sqrt(2 * math.pi)
    assert M.mixture_nll([0.0], [[0.0], [1.0]], [[1.0], [1.0]]) == pytest.approx(-math.log(p), rel=1e-14)
    # scale of shape (S, 1): component 2 has sd 2 for both points
    y = [0.0, 2.0]
    loc = [[0.0, 0.0], [0.0, 2.0]]
    scale = [[1.0], [2.0]]

    def phi(x, mu, sd):
        return math.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))

    p0 = 0.5 * (phi(0, 0, 1) + phi(0, 0, 2))
    p1 = 0.5 * (phi(2, 0, 1) + phi(2, 2, 2))
    expected = -0.5 * (math.log(p0) + math.log(p1))
    assert M.mixture_nll(y, loc, scale) == pytest.approx(expected, rel=1e-13)


def test_mixture_nll_identical_components_equals_gaussian_nll():
    rng = np.random.default_rng(0)
    n, s = 50, 7
    y = rng.normal(size=n)
    mean = rng.normal(size=n)
    sd = rng.uniform(0.3, 2.0, size=n)
    loc = np.tile(mean, (s, 1))
    scale = np.tile(sd, (s, 1))
    assert M.mixture_nll(y, loc, scale) == pytest.approx(M.gaussian_nll(y, mean, sd**2), rel=1e-12)
    # scale broadcasting from (N,) gives the same
    assert M.mixture_nll(y, loc, sd) == pytest.approx(M.gaussian_nll(y, mean, sd**2), rel=1e-12)


def test_mixture_nll_is_stable_far_in_the_tails():
    # naive exp() would underflow to log(0); logsumexp gives the exact Gaussian value
    y = np.array([60.0])
    loc = np.zeros((3, 1))
    expected = 0.5 * LOG2PI + 0.5 * 60.0**2
    assert M.mixture_nll(y, loc, 1.0) == pytest.approx(expected, rel=1e-12)


def test_nll_from_loglik_hand():
    ll = np.log([[0.2, 0.5], [0.4, 0.1]])  # means over s: 0.3 and 0.3
    assert M.nll_from_loglik(ll) == pytest.approx(-math.log(0.3), rel=1e-14)


def test_categorical_nll_hand():
    y = [0, 2, 1]
    probs = [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]
    expected = -(math.log(0.7) + math.log(0.8) + math.log(0.3)) / 3
    assert M.categorical_nll(y, probs) == pytest.approx(expected, rel=1e-14)
    # binary: probs = P(y = 1)
    assert M.categorical_nll([1, 0], [0.9, 0.2]) == pytest.approx(
        -(math.log(0.9) + math.log(0.8)) / 2, rel=1e-14
    )
    # float labels that are integer-valued (BCE-style targets) are accepted
    assert M.categorical_nll([1.0, 0.0], [0.9, 0.2]) == pytest.approx(
        -(math.log(0.9) + math.log(0.8)) / 2, rel=1e-14
    )


def test_categorical_nll_clamps_at_1e_12():
    assert M.categorical_nll([1], [0.0]) == pytest.approx(-math.log(1e-12), rel=1e-14)
    assert M.categorical_nll([0, 1], [[1.0, 0.0], [1.0, 0.0]]) == pytest.approx(
        -(0.0 + math.log(1e-12)) / 2, rel=1e-14
    )


def test_accuracy_hand():
    y = [0, 1, 2, 1]
    probs = [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.5, 0.1, 0.4], [0.1, 0.8, 0.1]]
    assert M.accuracy(y, probs) == 0.75
    # binary P(y = 1); p = 0.5 predicts class 0
    assert M.accuracy([1, 0, 0, 1], [0.9, 0.4, 0.5, 0.2]) == 0.75
    # already-predicted labels
    assert M.accuracy([0, 1, 2, 1], np.array([0, 1, 1, 1])) == 0.75
    # ties go to the lower class index
    assert M.accuracy([0, 1], [[0.5, 0.5], [0.5, 0.5]]) == 0.5


def test_confident_accuracy_hand():
    y = [0, 1, 0, 1, 0]
    probs = [
        [0.97, 0.03],  # confident, correct
        [0.96, 0.04],  # confident, wrong
        [0.50, 0.50],  # not confident
        [0.02, 0.98],  # confident, correct
        [0.95, 0.05],  # exactly at the threshold: included (>=, as in Hubin & Storvik's code)
    ]
    acc, frac = M.confident_accuracy(y, probs, threshold=0.95)
    assert acc == 0.75
    assert frac == 0.8
    # binary form gives the same
    acc_b, frac_b = M.confident_accuracy(y, [0.03, 0.04, 0.5, 0.98, 0.05], threshold=0.95)
    assert (acc_b, frac_b) == (0.75, 0.8)
    # empty confident subset: accuracy undefined -> nan, fraction 0
    acc0, frac0 = M.confident_accuracy(y, probs, threshold=0.99)
    assert math.isnan(acc0) and frac0 == 0.0


def test_ece_hand_binary():
    # two-class confidences: 0.92 (pred 1, right), 0.81 (pred 1, wrong), 0.67 (pred 0, right),
    # 0.55 (pred 1, right), 0.96 (pred 0, right)
    # bins: (0.9,1]: {0.92, 0.96} acc 1, conf 0.94 | (0.8,0.9]: {0.81} acc 0 | (0.6,0.7]: {0.67} acc 1
    #       | (0.5,0.6]: {0.55} acc 1
    y = [1, 0, 0, 1, 0]
    p = [0.92, 0.81, 0.33, 0.55, 0.04]
    expected = (2 / 5) * abs(1 - 0.94) + (1 / 5) * 0.81 + (1 / 5) * (1 - 0.67) + (1 / 5) * (1 - 0.55)
    assert expected == pytest.approx(0.342, abs=1e-12)
    assert M.ece(y, p) == pytest.approx(expected, abs=1e-12)


def test_ece_bins_are_left_open_right_closed():
    # confidence 0.5 lies in (0.4, 0.5], confidence 0.6 in (0.5, 0.6]: separate bins
    y = [0, 1]
    probs = [[0.5, 0.3, 0.2], [0.6, 0.4, 0.0]]
    expected = 0.5 * abs(1 - 0.5) + 0.5 * abs(0 - 0.6)
    assert M.ece(y, probs) == pytest.approx(expected, abs=1e-12)
    # with 2 bins, (0, 0.5] and (0.5, 1], they are still separate
    assert M.ece(y, probs, n_bins=2) == pytest.approx(expected, abs=1e-12)
    # with 1 bin they pool: acc 0.5, conf 0.55
    assert M.ece(y, probs, n_bins=1) == pytest.approx(0.05, abs=1e-12)


def _ece_reference(y, p2, n_bins=10):
    """Loop transcription of the definition of Guo et al. 2017 (arXiv:1706.04599, Eq. 3)."""
    pred = np.argmax(p2, axis=1)
    conf = p2[np.arange(len(y)), pred]
    total = 0.0
    for m in range(n_bins):
        lo, hi = m / n_bins, (m + 1) / n_bins
        sel = (conf > lo) & (conf <= hi)
        if sel.any():
            total += sel.sum() / len(y) * abs(np.mean(pred[sel] == y[sel]) - np.mean(conf[sel]))
    return total


def test_ece_matches_loop_reference():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(500, 4)) * 2
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = rng.integers(0, 4, size=500)
    assert M.ece(y, p) == pytest.approx(_ece_reference(y, p), abs=1e-12)
    assert M.ece(y, p, n_bins=15) == pytest.approx(_ece_reference(y, p, 15), abs=1e-12)


def test_pinball_hand():
    y = [1.0, 2.0]
    taus = [0.1, 0.9]
    preds = [[0.5, 3.0], [2.0, 2.0]]
    # tau 0.1: u = (0.5, -1) -> (0.05, 0.9), mean 0.475; tau 0.9: u = (-1, 0) -> (0.1, 0), mean 0.05
    assert M.pinball_loss(y, preds, taus) == pytest.approx((0.475 + 0.05) / 2, abs=1e-14)


def test_pinball_point_prediction_paper003_convention():
    # the same point prediction for every level: |u| * (tau + (1 - tau)) / 2 averaged = MAE / 2 here
    y = [1.0, 2.0]
    assert M.pinball_loss(y, [0.0, 3.0], M.PAPER003_PINBALL_LEVELS) == pytest.approx(0.5, abs=1e-14)
    assert M.pinball_loss(y, [0.0, 3.0]) == pytest.approx(0.5, abs=1e-14)  # default = paper-003 levels
    assert len(M.PAPER003_PINBALL_LEVELS) == 19
    assert M.PAPER003_PINBALL_LEVELS[0] == 0.05 and M.PAPER003_PINBALL_LEVELS[-1] == 0.95
    # a one-sided error: y above yhat by 1 -> mean over tau of tau = 0.5
    assert M.pinball_loss([1.0], [0.0]) == pytest.approx(0.5, abs=1e-14)


def test_pinball_matches_sklearn_as_used_by_paper003():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(4)
    y = rng.normal(size=200)
    yhat = y + rng.normal(size=200)
    taus = np.arange(0.05, 1.0, 0.05)  # the paper's grid, as its code builds it
    ref = np.mean([sk.mean_pinball_loss(y, yhat, alpha=a) for a in taus])
    assert M.pinball_loss(y, yhat, taus) == pytest.approx(ref, rel=1e-12)
    qpred = y + rng.normal(size=(len(taus), 200))
    ref_q = np.mean([sk.mean_pinball_loss(y, qpred[i], alpha=a) for i, a in enumerate(taus)])
    assert M.pinball_loss(y, qpred, taus) == pytest.approx(ref_q, rel=1e-12)


def test_waic_hand():
    p = np.array([[0.2, 0.5, 0.1], [0.4, 0.5, 0.3]])
    out = M.waic(np.log(p))
    lppd = math.log(0.3) + math.log(0.5) + math.log(0.2)
    p1 = 2 * (
        (math.log(0.3) - 0.5 * (math.log(0.2) + math.log(0.4)))
        + 0.0
        + (math.log(0.2) - 0.5 * (math.log(0.1) + math.log(0.3)))
    )
    # unbiased variance of two values a, b is (a - b)^2 / 2
    p2 = 0.5 * math.log(2.0) ** 2 + 0.0 + 0.5 * math.log(3.0) ** 2
    assert set(out) == {"lppd", "p_waic1", "p_waic2", "waic1", "waic2"}
    assert out["lppd"] == pytest.approx(lppd, rel=1e-14)
    assert out["p_waic1"] == pytest.approx(p1, rel=1e-13)
    assert out["p_waic2"] == pytest.approx(p2, rel=1e-13)
    assert out["waic1"] == pytest.approx(-2 * (lppd - p1), rel=1e-13)
    assert out["waic2"] == pytest.approx(-2 * (lppd - p2), rel=1e-13)
    assert all(isinstance(v, float) for v in out.values())
    # biased variance on request: (a - b)^2 / 4
    assert M.waic(np.log(p), ddof=0)["p_waic2"] == pytest.approx(p2 / 2, rel=1e-13)


def test_waic_matches_paper003_code_formula():
    # Skaaret-Lund et al.'s code: 2 * sum(log(exp(ll).mean(0)) - ll.mean(0)) and ll.var(0).sum() in torch
    rng = np.random.default_rng(5)
    ll = torch.as_tensor(rng.normal(-1.0, 0.3, size=(1000, 40)), dtype=torch.float64)
    p1 = 2 * torch.sum(torch.log(torch.exp(ll).mean(0)) - ll.mean(0))
    p2 = ll.var(0).sum()
    out = M.waic(ll)
    assert out["p_waic1"] == pytest.approx(p1.item(), rel=1e-10)
    assert out["p_waic2"] == pytest.approx(p2.item(), rel=1e-10)
    # a single model (MPM with deterministic weights) has no spread: both penalties are 0
    zero = M.waic(np.tile(ll[:1].numpy(), (5, 1)))
    assert zero["p_waic1"] == pytest.approx(0.0, abs=1e-12)
    assert zero["p_waic2"] == pytest.approx(0.0, abs=1e-24)


def test_density_hand():
    masks = {"a": np.array([[True, False], [False, False]]), "b": torch.tensor([True, True, True, False])}
    assert M.density(masks) == 0.5  # 4 of 8 (size-weighted, not the mean of 0.25 and 0.75)
    assert M.density_per_layer(masks) == {"a": 0.25, "b": 0.75}
    seq = [np.array([True, False, False]), np.array([True])]
    assert M.density(seq) == 0.5
    assert M.density_per_layer(seq) == {0: 1 / 3, 1: 1.0}
    # 0/1 numeric masks (e.g. Bernoulli gamma samples) and a single array
    assert M.density(torch.tensor([1.0, 0.0, 0.0, 0.0])) == 0.25


def test_selection_rates_hand():
    truth = [True, True, True, False, False]
    selected = [True, False, True, True, False]
    tpr, fpr = M.selection_rates(selected, truth)
    assert tpr == pytest.approx(2 / 3, rel=1e-15)
    assert fpr == 0.5


def test_inclusion_frequencies_and_the_per_covariate_table():
    from zoo.eval.selection import inclusion_frequencies
    from zoo.experiments.selection_table import inclusion_lines

    fits = [[1, 0, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]
    np.testing.assert_allclose(inclusion_frequencies(fits), [0.75, 0.25, 0.5, 0.0])
    for bad in ([1, 0, 1], [[0.5, 1.0]], np.zeros((0, 3))):
        with pytest.raises(ValueError, match="selections"):
            inclusion_frequencies(bad)
    truth = [1, 0, 1, 0]
    rows = [{"variant": "a", "dataset": "d", "selected": f, "truth": truth} for f in fits]
    rows += [{"variant": "b", "dataset": "d", "selected": [0, 1, 1, 1], "truth": truth}, {"variant": "c"}]
    lines = inclusion_lines(rows)
    assert "| variant | fits | **1** | 2 | **3** | 4 |" in lines
    assert "| a | 4 | 0.75 | 0.25 | 0.5 | 0 |" in lines and "| b | 1 | 0 | 1 | 1 | 1 |" in lines
    assert not any(line.startswith("| c ") for line in lines)  # rows without a selection are left out
    assert inclusion_lines([{"variant": "c", "dataset": "d", "rmse": 1.0}]) == []
    with pytest.raises(ValueError, match="disagree on the true covariates"):
        inclusion_lines(rows + [{"variant": "a", "dataset": "d", "selected": fits[0], "truth": [0, 1, 1, 0]}])


def test_return_types_are_python_floats():
    y = np.array([0.0, 1.0])
    assert type(M.rmse(y, y)) is float
    assert type(M.gaussian_nll(y, y, 1.0)) is float
    assert type(M.coverage(y, y, 1.0)) is float
    assert type(M.ece([0, 1], [0.2, 0.7])) is float
    assert type(M.density([np.array([True])])) is float
    acc, frac = M.confident_accuracy([0, 1], [0.2, 0.7])
    assert type(acc) is float and type(frac) is float
    tpr, fpr = M.selection_rates([True, False], [True, False])
    assert type(tpr) is float and type(fpr) is float


def test_all_is_complete():
    public = {
        "rmse",
        "gaussian_nll",
        "mixture_nll",
        "nll_from_loglik",
        "categorical_nll",
        "coverage",
        "coverage_from_samples",
        "accuracy",
        "confident_accuracy",
        "ece",
        "pinball_loss",
        "waic",
        "density",
        "density_per_layer",
        "selection_rates",
    }
    assert public <= set(M.__all__)
    for name in M.__all__:
        assert hasattr(M, name)


# ----------------------------------------------------------------------------------------------------------
# torch and numpy inputs agree
# ----------------------------------------------------------------------------------------------------------


def test_torch_and_numpy_inputs_agree(device):
    rng = np.random.default_rng(6)
    n, s, k = 30, 8, 3
    y = rng.normal(size=n)
    mean = rng.normal(size=n)
    var = rng.uniform(0.5, 2.0, size=n)
    loc = rng.normal(size=(s, n))
    scale = rng.uniform(0.5, 2.0, size=(s, 1))
    ll = rng.normal(-1.0, 0.5, size=(s, n))
    labels = rng.integers(0, k, size=n)
    logits = rng.normal(size=(n, k))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    pbin = rng.uniform(size=n)
    qpred = rng.normal(size=(3, n))
    taus = np.array([0.1, 0.5, 0.9])
    masks = {"w1": rng.uniform(size=(4, 5)) < 0.3, "w2": rng.uniform(size=7) < 0.6}
    truth = np.array([True, False] * 5)
    sel = rng.uniform(size=10) < 0.5

    def t(x):
        return _t(x, device)

    def tl(x):
        return torch.as_tensor(x, device=device)

    pairs = [
        (M.rmse(y, mean), M.rmse(t(y), t(mean))),
        (M.gaussian_nll(y, mean, var), M.gaussian_nll(t(y), t(mean), t(var))),
        (M.mixture_nll(y, loc, scale), M.mixture_nll(t(y), t(loc), t(scale))),
        (M.nll_from_loglik(ll), M.nll_from_loglik(t(ll))),
        (M.categorical_nll(labels, probs), M.categorical_nll(tl(labels), t(probs))),
        (M.categorical_nll(labels % 2, pbin), M.categorical_nll(tl(labels % 2), t(pbin))),
        (M.coverage(y, mean, var, 0.8), M.coverage(t(y), t(mean), t(var), 0.8)),
        (M.coverage_from_samples(y, loc, 0.5), M.coverage_from_samples(t(y), t(loc), 0.5)),
        (M.accuracy(labels, probs), M.accuracy(tl(labels), t(probs))),
        (M.accuracy(labels, probs.argmax(1)), M.accuracy(tl(labels), tl(probs.argmax(1)))),
        (M.confident_accuracy(labels, probs, 0.5), M.confident_accuracy(tl(labels), t(probs), 0.5)),
        (M.ece(labels, probs), M.ece(tl(labels), t(probs))),
        (M.pinball_loss(y, qpred, taus), M.pinball_loss(t(y), t(qpred), t(taus))),
        (M.waic(ll), M.waic(t(ll))),
        (M.density(masks), M.density({k_: tl(v) for k_, v in masks.items()})),
        (M.density_per_layer(masks), M.density_per_layer({k_: tl(v) for k_, v in masks.items()})),
        (M.selection_rates(sel, truth), M.selection_rates(tl(sel), tl(truth))),
    ]
    for a, b in pairs:
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            for key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-12, nan_ok=True)
        else:
            assert b == pytest.approx(a, rel=1e-12, nan_ok=True)


def test_float32_inputs_are_computed_in_float64(device):
    # float32 tensors are upcast before any arithmetic: same as numpy on the float32 values cast to float64
    rng = np.random.default_rng(7)
    y = rng.normal(size=100).astype(np.float32)
    mean = rng.normal(size=100).astype(np.float32)
    ll = (rng.normal(size=(50, 100)) - 100.0).astype(np.float32)
    got = M.gaussian_nll(torch.as_tensor(y, device=device), torch.as_tensor(mean, device=device), 0.3)
    assert got == pytest.approx(M.gaussian_nll(y.astype(np.float64), mean.astype(np.float64), 0.3), rel=1e-14)
    got_w = M.waic(torch.as_tensor(ll, device=device))["p_waic2"]
    assert got_w == pytest.approx(M.waic(ll.astype(np.float64))["p_waic2"], rel=1e-12)
    # bfloat16 (which numpy cannot represent) is accepted too
    assert M.rmse(torch.ones(3, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.bfloat16)) == 1.0


# ----------------------------------------------------------------------------------------------------------
# validation: every bad-input branch names the argument
# ----------------------------------------------------------------------------------------------------------

_Y = np.array([0.0, 1.0, 2.0])
_M3 = np.array([0.0, 0.5, 1.0])
_V3 = np.array([1.0, 1.0, 1.0])
_NAN = np.array([0.0, np.nan, 1.0])
_INF = np.array([0.0, np.inf, 1.0])
_LAB = np.array([0, 1, 1])
_P3 = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
_LL = np.log(np.array([[0.2, 0.5, 0.1], [0.4, 0.5, 0.3]]))

BAD_INPUTS = [
    # rmse
    ("rmse-mean-shape", lambda: M.rmse(_Y, _M3[:2]), "mean"),
    ("rmse-mean-column", lambda: M.rmse(_Y, _M3[:, None]), "mean"),
    ("rmse-y-nan", lambda: M.rmse(_NAN, _M3), "y"),
    ("rmse-mean-inf", lambda: M.rmse(_Y, _INF), "mean"),
    ("rmse-y-empty", lambda: M.rmse([], []), "y"),
    ("rmse-y-scalar", lambda: M.rmse(1.0, 1.0), "y"),
    ("rmse-y-nonnumeric", lambda: M.rmse(np.array(["a", "b", "c"]), _M3), "y"),
    # gaussian_nll
    ("gnll-var-zero", lambda: M.gaussian_nll(_Y, _M3, [1.0, 0.0, 1.0]), "var"),
    ("gnll-var-negative", lambda: M.gaussian_nll(_Y, _M3, -1.0), "var"),
    ("gnll-var-nan", lambda: M.gaussian_nll(_Y, _M3, _NAN), "var"),
    ("gnll-var-inf", lambda: M.gaussian_nll(_Y, _M3, _INF + 1), "var"),
    ("gnll-var-shape", lambda: M.gaussian_nll(_Y, _M3, _V3[:, None]), "var"),
    ("gnll-mean-shape", lambda: M.gaussian_nll(_Y, _M3[:2], _V3), "mean"),
    ("gnll-y-inf", lambda: M.gaussian_nll(_INF, _M3, _V3), "y"),
    # mixture_nll
    ("mix-loc-shape", lambda: M.mixture_nll(_Y, np.zeros((2, 4)), 1.0), "loc"),
    ("mix-loc-1d", lambda: M.mixture_nll(_Y, _M3, 1.0), "loc"),
    ("mix-scale-zero", lambda: M.mixture_nll(_Y, np.zeros((2, 3)), [[1.0], [0.0]]), "scale"),
    ("mix-scale-shape", lambda: M.mixture_nll(_Y, np.zeros((2, 3)), np.ones((3, 1))), "scale"),
    ("mix-scale-nan", lambda: M.mixture_nll(_Y, np.zeros((2, 3)), np.nan), "scale"),
    ("mix-loc-nan", lambda: M.mixture_nll(_Y, np.stack([_NAN, _M3]), 1.0), "loc"),
    ("mix-y-nan", lambda: M.mixture_nll(_NAN, np.zeros((2, 3)), 1.0), "y"),
    # nll_from_loglik
    ("nll-loglik-1d", lambda: M.nll_from_loglik(_Y), "loglik"),
    ("nll-loglik-nan", lambda: M.nll_from_loglik(np.stack([_NAN, _Y])), "loglik"),
    ("nll-loglik-minus-inf", lambda: M.nll_from_loglik(np.stack([-_INF, _Y])), "loglik"),
    # categorical_nll
    ("cnll-probs-rows", lambda: M.categorical_nll(_LAB, _P3[:2]), "probs"),
    ("cnll-probs-binary-len", lambda: M.categorical_nll(_LAB, [0.1, 0.2]), "probs"),
    ("cnll-probs-3d", lambda: M.categorical_nll(_LAB, np.ones((3, 2, 1)) / 2), "probs"),
    ("cnll-probs-range", lambda: M.categorical_nll(_LAB, [0.1, 1.2, 0.5]), "probs"),
    ("cnll-probs-negative", lambda: M.categorical_nll(_LAB, [0.1, -0.2, 0.5]), "probs"),
    ("cnll-probs-sum", lambda: M.categorical_nll(_LAB, [[0.9, 0.2], [0.2, 0.8], [0.5, 0.5]]), "probs"),
    ("cnll-probs-nan", lambda: M.categorical_nll(_LAB, _NAN / 2), "probs"),
    ("cnll-y-range", lambda: M.categorical_nll([0, 1, 2], _P3), "y"),
    ("cnll-y-negative", lambda: M.categorical_nll([0, -1, 1], _P3), "y"),
    ("cnll-y-binary-range", lambda: M.categorical_nll([0, 1, 2], [0.1, 0.2, 0.3]), "y"),
    ("cnll-y-noninteger", lambda: M.categorical_nll([0.0, 0.5, 1.0], _P3), "y"),
    ("cnll-y-nan", lambda: M.categorical_nll(_NAN, _P3), "y"),
    ("cnll-y-2d", lambda: M.categorical_nll(_LAB[:, None], _P3), "y"),
    # coverage
    ("cov-level-zero", lambda: M.coverage(_Y, _M3, _V3, level=0.0), "level"),
    ("cov-level-one", lambda: M.coverage(_Y, _M3, _V3, level=1.0), "level"),
    ("cov-level-percent", lambda: M.coverage(_Y, _M3, _V3, level=95), "level"),
    ("cov-level-nan", lambda: M.coverage(_Y, _M3, _V3, level=float("nan")), "level"),
    ("cov-var-zero", lambda: M.coverage(_Y, _M3, 0.0), "var"),
    ("cov-var-inf", lambda: M.coverage(_Y, _M3, _INF + 1), "var"),
    ("cov-var-shape", lambda: M.coverage(_Y, _M3, np.ones(2)), "var"),
    ("cov-mean-shape", lambda: M.coverage(_Y, _M3[:2], _V3), "mean"),
    ("cov-mean-nan", lambda: M.coverage(_Y, _NAN, _V3), "mean"),
    ("cov-y-nan", lambda: M.coverage(_NAN, _M3, _V3), "y"),
    # coverage_from_samples
    ("covs-level", lambda: M.coverage_from_samples(_Y, np.zeros((4, 3)), level=1.5), "level"),
    ("covs-samples-shape", lambda: M.coverage_from_samples(_Y, np.zeros((4, 2)), 0.9), "samples"),
    ("covs-samples-transposed", lambda: M.coverage_from_samples(_Y, np.zeros((3, 4)), 0.9), "samples"),
    ("covs-samples-nan", lambda: M.coverage_from_samples(_Y, np.stack([_NAN, _Y]), 0.9), "samples"),
    ("covs-y-inf", lambda: M.coverage_from_samples(_INF, np.zeros((4, 3)), 0.9), "y"),
    # accuracy
    ("acc-probs-shape", lambda: M.accuracy(_LAB, _P3[:2]), "probs"),
    ("acc-labels-shape", lambda: M.accuracy(_LAB, np.array([0, 1])), "probs"),
    ("acc-probs-nan", lambda: M.accuracy(_LAB, _NAN / 2), "probs"),
    ("acc-y-2d", lambda: M.accuracy(np.zeros((3, 2), dtype=int), _P3), "y"),
    # confident_accuracy
    ("cacc-threshold-zero", lambda: M.confident_accuracy(_LAB, _P3, threshold=0.0), "threshold"),
    ("cacc-threshold-big", lambda: M.confident_accuracy(_LAB, _P3, threshold=1.5), "threshold"),
    ("cacc-probs-shape", lambda: M.confident_accuracy(_LAB, _P3[:2]), "probs"),
    ("cacc-y-noninteger", lambda: M.confident_accuracy([0.2, 1.0, 0.0], _P3), "y"),
    # ece
    ("ece-n-bins-zero", lambda: M.ece(_LAB, _P3, n_bins=0), "n_bins"),
    ("ece-n-bins-float", lambda: M.ece(_LAB, _P3, n_bins=2.5), "n_bins"),
    ("ece-probs-inf", lambda: M.ece(_LAB, _INF), "probs"),
    ("ece-probs-shape", lambda: M.ece(_LAB, _P3[:2]), "probs"),
    ("ece-y-range", lambda: M.ece([0, 1, 5], _P3), "y"),
    ("acc-y-range", lambda: M.accuracy([0, 1, 2], _P3), "y"),
    ("cacc-y-range", lambda: M.confident_accuracy([0, 1, 2], [0.1, 0.2, 0.9]), "y"),
    # pinball_loss
    ("pin-quantiles-zero", lambda: M.pinball_loss(_Y, _M3, [0.0, 0.5]), "quantiles"),
    ("pin-quantiles-one", lambda: M.pinball_loss(_Y, _M3, [0.5, 1.0]), "quantiles"),
    ("pin-quantiles-nan", lambda: M.pinball_loss(_Y, _M3, [np.nan]), "quantiles"),
    ("pin-quantiles-2d", lambda: M.pinball_loss(_Y, _M3, [[0.5]]), "quantiles"),
    ("pin-preds-shape", lambda: M.pinball_loss(_Y, np.zeros((3, 3)), [0.1, 0.9]), "quantile_preds"),
    ("pin-preds-len", lambda: M.pinball_loss(_Y, _M3[:2], [0.1, 0.9]), "quantile_preds"),
    ("pin-preds-inf", lambda: M.pinball_loss(_Y, _INF, [0.1, 0.9]), "quantile_preds"),
    ("pin-y-nan", lambda: M.pinball_loss(_NAN, _M3, [0.1, 0.9]), "y"),
    # waic
    ("waic-loglik-1d", lambda: M.waic(_Y), "loglik"),
    ("waic-loglik-one-draw", lambda: M.waic(_LL[:1]), "loglik"),
    ("waic-loglik-nan", lambda: M.waic(np.stack([_NAN, _Y])), "loglik"),
    ("waic-loglik-inf", lambda: M.waic(np.stack([_INF, _Y])), "loglik"),
    ("waic-ddof", lambda: M.waic(_LL, ddof=-1), "ddof"),
    # density
    ("dens-nonbinary", lambda: M.density({"w": np.array([0.0, 0.5])}), "masks"),
    ("dens-empty-mapping", lambda: M.density({}), "masks"),
    ("dens-empty-seq", lambda: M.density([]), "masks"),
    ("dens-no-entries", lambda: M.density([np.zeros(0, dtype=bool)]), "masks"),
    ("dens-wrong-type", lambda: M.density(3), "masks"),
    ("dens-nan", lambda: M.density([np.array([1.0, np.nan])]), "masks"),
    ("densl-nonbinary", lambda: M.density_per_layer([np.array([2, 0])]), "masks"),
    ("densl-empty-layer", lambda: M.density_per_layer({"w": np.zeros(0, dtype=bool)}), "masks"),
    # selection_rates
    ("sel-shape", lambda: M.selection_rates([True, False], [True, False, True]), "selected"),
    ("sel-nonbinary", lambda: M.selection_rates([0.5, 1.0], [True, False]), "selected"),
    ("sel-truth-nonbinary", lambda: M.selection_rates([True, False], [2, 0]), "truth"),
    ("sel-no-positives", lambda: M.selection_rates([True, False], [False, False]), "truth"),
    ("sel-no-negatives", lambda: M.selection_rates([True, False], [True, True]), "truth"),
]


@pytest.mark.parametrize("call, name", [(c, n) for _, c, n in BAD_INPUTS], ids=[i for i, _, _ in BAD_INPUTS])
def test_bad_input_raises_naming_the_argument(call, name):
    # messages start with the offending argument's name in backticks (masks[...] for one mask)
    pattern = rf"^`{name}`" if name != "masks" else r"^`masks"
    with pytest.raises(ValueError, match=pattern):
        call()


def test_bad_torch_inputs_raise_too(device):
    y = torch.tensor([0.0, 1.0], device=device)
    with pytest.raises(ValueError, match="^`var`"):
        M.gaussian_nll(y, y, torch.tensor([1.0, -1.0], device=device))
    with pytest.raises(ValueError, match="^`mean`"):
        M.rmse(y, torch.tensor([0.0, float("nan")], device=device))
    with pytest.raises(ValueError, match="^`mean`"):
        M.rmse(y, y[:, None])


# ------------------------------------------------------------------ predictive entropy / mutual information
def test_predictive_entropy_and_mutual_information_closed_forms():
    from zoo.eval.metrics import mutual_information, predictive_entropy

    p = np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    assert predictive_entropy(p) == pytest.approx([np.log(4), 0.0, np.log(2)])
    assert predictive_entropy(np.array([0.5, 1.0])) == pytest.approx([np.log(2), 0.0])  # binary P(y=1)
    # two confident draws that disagree: mean is uniform (H = log 2), each draw has H = 0 -> MI = log 2
    draws = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    assert mutual_information(draws) == pytest.approx([np.log(2)])
    same = np.repeat(np.array([[[0.3, 0.7]]]), 5, axis=0)
    assert mutual_information(same) == pytest.approx([0.0], abs=1e-12)
    with pytest.raises(ValueError, match="draw_probs"):
        mutual_information(np.ones((2, 2)))
    with pytest.raises(ValueError, match="probs"):
        predictive_entropy(np.array([[0.5, 0.6]]))


# ----------------------------------------------------------------------------------------------------------
# library calls (pyro.ops.stats.waic, sklearn mean_pinball_loss / log_loss) give the values of the zoo's
# former closed-form code, transcribed below, on real data
# ----------------------------------------------------------------------------------------------------------


def _former_waic(ll: np.ndarray, ddof: int = 1) -> dict[str, float]:
    from scipy.special import logsumexp

    lppd_n = logsumexp(ll, axis=0) - math.log(ll.shape[0])
    lppd = float(np.sum(lppd_n))
    p1 = float(2.0 * np.sum(lppd_n - ll.mean(axis=0)))
    p2 = float(np.sum(ll.var(axis=0, ddof=ddof)))
    return {"lppd": lppd, "p_waic1": p1, "p_waic2": p2, "waic1": -2 * (lppd - p1), "waic2": -2 * (lppd - p2)}


def _former_pinball(y: np.ndarray, pred: np.ndarray, taus: np.ndarray) -> float:
    pred = np.broadcast_to(pred, (len(taus),) + y.shape)
    tau_b = taus.reshape((-1,) + (1,) * y.ndim)
    u = y[None] - pred
    return float(np.mean(np.maximum(tau_b * u, (tau_b - 1.0) * u)))


def _former_categorical_nll(y: np.ndarray, p: np.ndarray) -> float:
    p2 = np.stack([1 - p, p], axis=1) if p.ndim == 1 else p
    return float(-np.mean(np.log(np.maximum(p2[np.arange(len(y)), y], 1e-12))))


@pytest.fixture(scope="module")
def diabetes_posterior():
    """Point-wise log-likelihoods (S, N) of the diabetes data (sklearn's copy) under 400 draws of the exact
    conjugate posterior of a Bayesian linear regression with known noise, and the posterior predictive
    mean and 19 predictive quantiles."""
    from scipy import stats
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    x = np.column_stack([np.ones(len(y)), x])
    y = (y - y.mean()) / y.std()
    s2 = 0.5
    cov = np.linalg.inv(x.T @ x / s2 + np.eye(x.shape[1]))
    mean = cov @ x.T @ y / s2
    w = np.random.default_rng(0).multivariate_normal(mean, cov, size=400)
    loc = w @ x.T
    ll = stats.norm.logpdf(y[None], loc, math.sqrt(s2))
    samples = loc + math.sqrt(s2) * np.random.default_rng(1).standard_normal(loc.shape)
    taus = np.asarray(M.PAPER003_PINBALL_LEVELS)
    return y, ll, loc.mean(0), np.quantile(samples, taus, axis=0), taus


@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_waic_via_pyro_matches_the_former_formula(diabetes_posterior, ddof):
    _, ll, _, _, _ = diabetes_posterior
    new, old = M.waic(ll, ddof=ddof), _former_waic(ll, ddof)
    assert new.keys() == old.keys()
    for key in old:
        assert new[key] == pytest.approx(old[key], rel=1e-12), key
    # one draw, biased variance: no spread, both penalties exactly 0 (Pyro's unbiased variance is 0/0 there)
    one = M.waic(ll[:1], ddof=0)
    assert one["p_waic1"] == 0.0 and one["p_waic2"] == 0.0
    assert one["lppd"] == pytest.approx(float(ll[0].sum()), rel=1e-14)


def test_waic_p_waic2_is_pyros(diabetes_posterior):
    from pyro.ops.stats import waic as pyro_waic

    _, ll, _, _, _ = diabetes_posterior
    waic_total, p_total = pyro_waic(torch.tensor(ll))
    out = M.waic(ll)
    assert out["p_waic2"] == pytest.approx(float(p_total), rel=1e-13)
    assert out["waic2"] == pytest.approx(float(waic_total), rel=1e-13)


def test_pinball_via_sklearn_matches_the_former_formula(diabetes_posterior):
    y, _, pred_mean, quantiles, taus = diabetes_posterior
    assert M.pinball_loss(y, quantiles, taus) == pytest.approx(_former_pinball(y, quantiles, taus), rel=1e-13)
    assert M.pinball_loss(y, pred_mean) == pytest.approx(_former_pinball(y, pred_mean, taus), rel=1e-13)
    # a 2-D target (N, D) is averaged over every entry, as before
    y2, q2 = np.stack([y, -y], 1), np.stack([quantiles, -quantiles], 2)
    assert M.pinball_loss(y2, q2, taus) == pytest.approx(_former_pinball(y2, q2, taus), rel=1e-13)


def test_categorical_nll_via_sklearn_matches_the_former_formula():
    import warnings

    from sklearn.datasets import load_breast_cancer, load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    p = LogisticRegression(C=100.0, max_iter=2000).fit(x, y).predict_proba(x)
    p32 = torch.softmax(torch.as_tensor(np.log(p), dtype=torch.float32), -1)  # rows sum to 1 +- 1e-7
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "do not sum to one" warning leaks out of sklearn
        assert M.categorical_nll(y, p) == pytest.approx(_former_categorical_nll(y, p), rel=1e-13)
        got32 = M.categorical_nll(y, p32)
    assert got32 == pytest.approx(_former_categorical_nll(y, p32.double().numpy()), rel=1e-13)
    xb, yb = load_breast_cancer(return_X_y=True)
    pb = LogisticRegression(max_iter=5000).fit(xb[:, :5], yb).predict_proba(xb[:, :5])[:, 1]
    pb[:3] = [0.0, 1.0, 0.5]  # exact 0 and 1: the 1e-12 clamp and log(1) = 0 (up to sklearn's 1 - eps)
    assert M.categorical_nll(yb, pb) == pytest.approx(_former_categorical_nll(yb, pb), rel=1e-13)
    assert M.categorical_nll([0, 0], [[1.0], [1.0]]) == 0.0  # a single class, as before
