"""The exact coordinate update of a log-normal noise factor after a gradient fit (zoo.infer.noise)."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy.optimize import minimize

from zoo.experiments.registry import build
from zoo.infer.loop import fit, resume
from zoo.infer.noise import (
    expected_squared_error,
    lognormal_noise_factor,
    optimal_lognormal,
    refit_noise,
)

NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(80)  # E f(Z), Z ~ N(0, 1) = sum(W f(Z)) / sqrt(2 pi)
WEIGHTS = WEIGHTS / math.sqrt(2 * math.pi)


def _elbo_terms(kind: str, a0: float, b0: float, resid: np.ndarray, m: float, v: float) -> float:
    """E_q[log p(s) + sum_n log N(r_n | 0, s-variance)] + H[q] for q(s) = LogNormal(m, v), by Gauss-Hermite
    quadrature on torch's own densities (no algebra shared with the closed form)."""
    s = torch.tensor(np.exp(m + math.sqrt(v) * NODES), dtype=torch.float64)
    prior = dist.InverseGamma(a0, b0) if kind == "inverse_gamma" else dist.Gamma(a0, b0)
    var = s if kind == "inverse_gamma" else 1.0 / s
    r = torch.tensor(resid, dtype=torch.float64)
    loglik = dist.Normal(0.0, var.sqrt().unsqueeze(-1)).log_prob(r).sum(-1)
    entropy = dist.LogNormal(torch.tensor(m), torch.tensor(math.sqrt(v))).entropy()
    return float((torch.tensor(WEIGHTS) * (prior.log_prob(s) + loglik)).sum() + entropy)


@pytest.mark.parametrize("kind", ["inverse_gamma", "gamma"])
def test_closed_form_is_the_argmax_of_the_quadrature_elbo(kind):
    rng = np.random.default_rng(0)
    resid = 0.3 * rng.standard_normal(40)
    a0, b0 = 2.0, 0.5
    m, v = optimal_lognormal(kind, a0, b0, resid.size, float((resid**2).sum()))
    best = minimize(
        lambda p: -_elbo_terms(kind, a0, b0, resid, p[0], math.exp(p[1])),
        x0=[0.0, math.log(0.1)],
        method="Nelder-Mead",
        options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 4000},
    )
    assert best.x[0] == pytest.approx(m, abs=1e-4)
    assert math.exp(best.x[1]) == pytest.approx(v, rel=1e-3)
    # and the closed form's ELBO is not beaten by nearby points
    at = _elbo_terms(kind, a0, b0, resid, m, v)
    for dm, dv in ((0.05, 1.0), (-0.05, 1.0), (0.0, 1.5), (0.0, 0.7)):
        assert _elbo_terms(kind, a0, b0, resid, m + dm, v * dv) < at


def test_optimal_lognormal_rejects_bad_input():
    with pytest.raises(ValueError, match="kind"):
        optimal_lognormal("fixed", 1.0, 1.0, 10, 1.0)
    with pytest.raises(ValueError, match="sse"):
        optimal_lognormal("gamma", 1.0, 1.0, 10, float("nan"))
    with pytest.raises(ValueError, match="n_obs"):
        optimal_lognormal("gamma", 1.0, 1.0, 0, 1.0)


def _data(n: int = 60):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g)
    y = x[:, 0] - 0.5 * x[:, 1] ** 2 + 0.2 * torch.randn(n, generator=g)
    return x, y


def _mfvi(**kw):
    return build("mfvi-bnn", 3, 1, "regression", hidden=[8], seed=0, **kw)[:2]


def test_the_factor_is_found_where_there_is_one():
    m, g = _mfvi()
    g(*_data())  # AutoNormal builds its factors on the first call
    loc_mod, loc_name, scale_mod, scale_name = lognormal_noise_factor(g, m)
    assert (loc_name, scale_name) == ("sigma2", "sigma2")
    lb_m, lb_g, _ = build("lbbnn", 3, 1, "regression", hidden=[4], seed=0)
    assert lognormal_noise_factor(lb_g, lb_m)[1::2] == ("noise_loc", "noise_scale")
    # no log-normal noise factor: the horseshoe's conjugate q(gamma), a fixed noise, classification
    hs_m, hs_g, _ = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=0)
    assert lognormal_noise_factor(hs_g, hs_m) is None
    fx_m, fx_g, _ = build("lbbnn", 3, 1, "regression", hidden=[4], seed=0, noise="fixed")
    assert lognormal_noise_factor(fx_g, fx_m) is None
    cl_m, cl_g, _ = build("mfvi-bnn", 3, 2, "multiclass", hidden=[4], seed=0)
    assert lognormal_noise_factor(cl_g, cl_m) is None


def _sigma2_median(result) -> float:
    with result.activate():
        return float(result.guide.median()["sigma2"])


def test_fit_ends_at_the_coordinate_optimum_and_can_be_switched_off():
    x, y = _data()
    runs = {}
    for refit in (True, False):
        m, g = _mfvi()
        runs[refit] = fit(m, g, x, y, steps=300, seed=2, progress=False, noise_refit=refit)
    on, off = runs[True], runs[False]
    # the same training: every parameter but the noise factor agrees bit for bit
    with on.activate():
        p_on = {k: v.detach().clone() for k, v in pyro.get_param_store().named_parameters()}
    with off.activate():
        p_off = {k: v.detach().clone() for k, v in pyro.get_param_store().named_parameters()}
    noise = {k for k in p_on if "sigma2" in k}
    assert noise and all(torch.equal(p_on[k], p_off[k]) for k in p_on if k not in noise)
    assert not all(torch.equal(p_on[k], p_off[k]) for k in noise)
    # the refit median is B / A (up to exp(v/2 - v) = exp(1/(2A))) for an independent estimate of S: 400 draws
    with on.activate(), torch.no_grad():
        sse = torch.stack([expected_squared_error(on.guide, on.model, x, y, None) for _ in range(400)])
    a0, b0 = float(on.model.likelihood.concentration), float(on.model.likelihood.rate)
    a = a0 + 0.5 * y.numel()
    want = (b0 + 0.5 * float(sse.mean())) / a * math.exp(0.5 / a)
    # four standard errors of the difference of the two Monte Carlo estimates of S (32 and 400 draws)
    tol = 4 * 0.5 * float(sse.std()) * math.sqrt(1 / 32 + 1 / 400) / a * math.exp(0.5 / a)
    assert _sigma2_median(on) == pytest.approx(want, abs=tol)
    loc_key = next(k for k in noise if ".locs." in k)
    assert on.loop_state["noise_train"]["loc"] == float(p_off[loc_key])  # the training value, kept


def test_training_resumes_from_its_own_noise_factor():
    """k steps + resume k steps equals 2k steps: the refit after the first k does not leak into training."""
    x, y = _data()
    m1, g1 = _mfvi()
    whole = fit(m1, g1, x, y, steps=80, seed=4, progress=False, batch_size=16)
    m2, g2 = _mfvi()
    half = fit(m2, g2, x, y, steps=40, seed=4, progress=False, batch_size=16)
    refit_after_half = _sigma2_median(half)
    resume(half, x, y, 40, progress=False)
    assert half.elbo == whole.elbo
    assert _sigma2_median(half) == _sigma2_median(whole)
    assert refit_after_half != _sigma2_median(half)


def test_refit_without_targets_or_factor_is_a_no_op():
    m, g = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=0)[:2]
    x, y = _data()
    assert refit_noise(g, m, x, y) is None
    m, g = _mfvi()
    assert refit_noise(g, m, x, None) is None
