"""Exact spike-and-slab enumeration (zoo.reference.enumeration) against brute force at p = 3: for every
one of the 8 models the evidence integrated by scipy quadrature over the noise (and slab) variance with
the dense Gaussian marginal likelihood, the model prior summed (or integrated over ψ) by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from zoo.reference import MAX_COLUMNS, SpikeSlabLinear, enumerate_spike_slab


def _data(n: int = 25, seed: int = 0):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, 3))
    x = np.column_stack([g[:, 0], 0.8 * g[:, 0] + 0.6 * g[:, 1], g[:, 2]])
    y = 1.0 * x[:, 0] + 0.4 * x[:, 2] + 0.3 + 0.7 * rng.normal(size=n)
    xt = rng.normal(size=(4, 3))
    return x, y, xt


def _design(x: np.ndarray) -> np.ndarray:
    return np.hstack([x, np.ones((x.shape[0], 1))])


def _conditional(xd, y, xtd, gamma, slab, bias_var, s2):
    """log N(y; 0, s2 I + X V Xᵀ) (dense Cholesky), and E/E² of f at the test rows given (γ, σ²_w, σ²)."""
    v = np.diag(np.r_[np.asarray(gamma, float) * slab, bias_var])
    cov = s2 * np.eye(len(y)) + xd @ v @ xd.T
    chol = np.linalg.cholesky(cov)
    alpha = np.linalg.solve(chol, y)
    logp = -0.5 * (alpha @ alpha) - np.log(np.diag(chol)).sum() - 0.5 * len(y) * math.log(2 * math.pi)
    k = np.linalg.solve(cov, xd @ v)  # Σ⁻¹ X V
    mean_b = k.T @ y
    cov_b = v - v @ xd.T @ k
    f = xtd @ mean_b
    f2 = np.einsum("tp,pq,tq->t", xtd, cov_b, xtd) + f**2
    return logp, f, f2


def _log_ig(s2: float, a: float, b: float) -> float:
    return a * math.log(b) - math.lgamma(a) - (a + 1) * math.log(s2) - b / s2


def _quad(g, lo: float, hi: float, rel: float = 1e-10) -> np.ndarray:
    return integrate.quad_vec(g, lo, hi, epsabs=0.0, epsrel=rel, limit=400)[0]


def _one_model(gamma, xd, y, xtd, prior: SpikeSlabLinear) -> np.ndarray:
    """``[Z, Z E f, Z E f²]`` of one model (``Z`` up to the returned ``shift``) by quadrature."""
    bias_var = prior.bias_scale**2
    a, b = prior.noise_concentration, prior.noise_rate
    fixed_noise = prior.noise == "fixed"

    def log_w(u, slab):  # log of [likelihood x noise prior x Jacobian] at σ² = e^u
        logp = _conditional(xd, y, xtd, gamma, slab, bias_var, math.exp(u))[0]
        return logp if fixed_noise else logp + _log_ig(math.exp(u), a, b) + u

    u0 = math.log(prior.noise_var)
    shift = max(log_w(u, prior.slab_var) for u in ([u0] if fixed_noise else np.linspace(-5, 3, 81)))

    def integrand(u, slab):
        _, f, f2 = _conditional(xd, y, xtd, gamma, slab, bias_var, math.exp(u))
        return math.exp(log_w(u, slab) - shift) * np.r_[1.0, f, f2]

    def over_noise(slab, rel=1e-10):
        return integrand(u0, slab) if fixed_noise else _quad(lambda u: integrand(u, slab), -6.0, 3.0, rel)

    if prior.slab_prior is None:
        return over_noise(prior.slab_var), shift
    sa, sb = prior.slab_prior

    def outer(w):
        return over_noise(math.exp(w), rel=1e-8) * math.exp(_log_ig(math.exp(w), sa, sb) + w)

    return _quad(outer, -9.0, 7.0, rel=1e-10 if fixed_noise else 1e-7), shift


def _log_model_prior(k: int, prior: SpikeSlabLinear) -> float:
    if prior.inclusion_prior is None:
        return k * math.log(prior.inclusion) + (3 - k) * math.log1p(-prior.inclusion)
    beta = stats.beta(*prior.inclusion_prior)
    return math.log(integrate.quad(lambda s: s**k * (1 - s) ** (3 - k) * beta.pdf(s), 0, 1)[0])


def _brute_force(x, y, xt, prior: SpikeSlabLinear) -> dict:
    """Per-model log evidence, model posterior, PIPs and predictive moments by scipy quadrature
    (``quad_vec`` in ``u = log σ²`` and, under a slab hyperprior, in ``w = log σ²_w``)."""
    xd, xtd = _design(x), _design(xt)
    gammas = list(itertools.product((0, 1), repeat=3))
    lpost, fm, f2 = [], [], []
    for gamma in gammas:
        tot, shift = _one_model(gamma, xd, y, xtd, prior)
        lpost.append(math.log(tot[0]) + shift + _log_model_prior(sum(gamma), prior))
        fm.append(tot[1:5] / tot[0])
        f2.append(tot[5:] / tot[0])
    log_ev = special.logsumexp(lpost)
    probs = np.exp(np.array(lpost) - log_ev)
    mean = probs @ np.array(fm)
    return {
        "gammas": gammas,
        "probs": probs,
        "log_ev": log_ev,
        "pip": probs @ np.array(gammas, dtype=float),
        "mean": mean,
        "var": probs @ np.array(f2) - mean**2,
    }


def _model_index(gamma) -> int:
    return sum(1 << j for j, g in enumerate(gamma) if g)


@pytest.mark.parametrize(
    "prior",
    [
        SpikeSlabLinear(inclusion=0.3, slab_var=1.5, bias_scale=2.0),
        SpikeSlabLinear(
            inclusion_prior=(1.0, 3.0), slab_prior=(2.0, 1.0), noise="fixed", noise_var=0.6, slab_nodes=81
        ),
        pytest.param(
            SpikeSlabLinear(inclusion_prior=(1.0, 3.0), slab_prior=(2.0, 1.0), slab_nodes=61),
            marks=pytest.mark.slow,  # a 2-D adaptive quadrature per model: minutes
        ),
    ],
    ids=["noise-integrated", "slab-and-inclusion-integrated", "both-integrated"],
)
def test_enumeration_equals_brute_force_quadrature(prior):
    x, y, xt = _data(n=15)
    got = enumerate_spike_slab(x, y, prior, x_test=xt)
    want = _brute_force(x, y, xt, prior)
    # the reported quadrature error (full grid vs every other node) bounds the actual one
    assert abs(got.log_evidence - want["log_ev"]) <= max(got.quadrature_error, 1e-8)
    assert got.log_evidence == pytest.approx(want["log_ev"], abs=2e-6)
    probs = np.array([got.model_probs[_model_index(g)] for g in want["gammas"]])
    np.testing.assert_allclose(probs, want["probs"], atol=1e-6)
    np.testing.assert_allclose(got.pip, want["pip"], atol=1e-6)
    np.testing.assert_allclose(got.pred_mean, want["mean"], atol=1e-6)
    np.testing.assert_allclose(got.pred_var_f, want["var"], rtol=1e-5)
    assert got.quadrature_error < 1e-4 and got.edge_mass < 1e-8
    assert got.model_probs.sum() == pytest.approx(1.0)
    assert got.top_models[0][1] == pytest.approx(probs.max())


def test_fixed_noise_is_the_closed_form_gaussian_evidence():
    x, y, xt = _data(seed=3)
    prior = SpikeSlabLinear(inclusion=0.5, slab_var=2.0, noise="fixed", noise_var=0.5)
    got = enumerate_spike_slab(x, y, prior, x_test=xt)
    xd, xtd = _design(x), _design(xt)
    logs, fs = [], []
    for gamma in itertools.product((0, 1), repeat=3):
        logp, f, f2 = _conditional(xd, y, xtd, gamma, 2.0, 1.0, 0.5)
        logs.append(logp + 3 * math.log(0.5))
        fs.append((f, f2))
    probs = np.exp(np.array(logs) - special.logsumexp(logs))
    assert got.log_evidence == pytest.approx(special.logsumexp(logs), abs=1e-9)
    mean = sum(p * f for p, (f, _) in zip(probs, fs))
    np.testing.assert_allclose(got.pred_mean, mean, atol=1e-10)
    np.testing.assert_allclose(got.pred_var_y, sum(p * f2 for p, (_, f2) in zip(probs, fs)) - mean**2 + 0.5)
    assert got.quadrature_error == 0.0


def test_from_lbbnn_options_maps_the_zoo_prior():
    from zoo.families.lbbnn.entry import LBBNNOptions

    fixed = SpikeSlabLinear.from_lbbnn_options(LBBNNOptions(hyper="fixed", inclusion=0.2, slab_var=3.0))
    assert fixed.inclusion == 0.2 and fixed.slab_var == 3.0 and fixed.inclusion_prior is None
    hier = SpikeSlabLinear.from_lbbnn_options(LBBNNOptions(hyper="hierarchical", noise="fixed").to_dict())
    assert hier.inclusion_prior == (1.0, 3.0) and hier.slab_prior == (2.0, 1.0) and hier.noise == "fixed"


def test_enumeration_rejects_bad_inputs():
    x, y, xt = _data()
    with pytest.raises(ValueError, match=f"p <= {MAX_COLUMNS}"):
        enumerate_spike_slab(np.zeros((5, MAX_COLUMNS + 1)), np.zeros(5))
    with pytest.raises(ValueError, match="`y` has 3 entries"):
        enumerate_spike_slab(x, y[:3])
    with pytest.raises(ValueError, match="`x_test`"):
        enumerate_spike_slab(x, y, x_test=np.zeros((2, 2)))
    with pytest.raises(TypeError, match="prior"):
        enumerate_spike_slab(x, y, prior={"inclusion": 0.2})
    with pytest.raises(ValueError, match="inclusion"):
        SpikeSlabLinear(inclusion=1.0)
    with pytest.raises(ValueError, match="slab_nodes"):
        SpikeSlabLinear(slab_nodes=10)
    with pytest.raises(ValueError, match="noise"):
        SpikeSlabLinear(noise="student")
    with pytest.raises(ValueError, match="slab_prior"):
        SpikeSlabLinear(slab_prior=(1.0,))
    with pytest.raises(ValueError, match="missing"):
        SpikeSlabLinear.from_lbbnn_options({"hyper": "fixed"})
