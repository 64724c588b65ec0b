"""Bow-tie BNN of Sheinkman & Wade (2025, arXiv:2411.11132): its distributions, the Pyro model, and the
structured mean-field CAVI guide with its closed-form ELBO.

Ground truths: quadrature of the Pólya–Gamma / GIG densities, the exact coordinate-ascent property (the ELBO
may not decrease after *any* factor update: each update is the exact optimum of Eq. (11), §3.1, and "the
variational algorithm described in Section 3.1 increases the ELBO at each epoch", §3.6), a Monte Carlo
``Trace_ELBO`` / ``TraceMeanField_ELBO`` of the Pyro model/guide pair (tolerance from the estimate's standard
error), Monte Carlo KL divergences, textbook mean-field VB linear regression (the ``L = 0`` case), and the
materialized moment arrays behind the sweep's shared-covariance shortcuts.
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive, Trace_ELBO
from scipy import integrate, stats

from guides.bowtie.cavi import BowtieCAVIGuide
from zoo.data import make_bowtie_toy
from zoo.experiments.registry import build
from zoo.families.bowtie.model import BowtieModel, PolyaGamma1, pg_mean
from zoo.families.bowtie.prior import (
    GaussianBowtiePrior,
    NGIGPrior,
    gig_mean,
    gig_mean_reciprocal,
)

from .helpers import bowtie_small_model as small_model
from .helpers import bowtie_toy as toy

F64 = torch.float64


# ------------------------------------------------------------------------------------------------
# distributions
@pytest.mark.parametrize("c", [0.0, 0.7, 3.0])
def test_polya_gamma_density_and_mean(c):
    """PG(1, c) density integrates to 1 and its mean is tanh(c/2)/(2c) (Eq. 9); the sampler agrees."""
    d = PolyaGamma1(torch.tensor(c, dtype=F64))
    dens = lambda w: float(d.log_prob(torch.tensor([w], dtype=F64)).exp())  # noqa: E731
    mass = integrate.quad(dens, 1e-6, 40, limit=200)[0]
    mean = integrate.quad(lambda w: w * dens(w), 1e-6, 40, limit=200)[0]
    assert mass == pytest.approx(1.0, abs=1e-6)
    assert mean == pytest.approx(float(pg_mean(torch.tensor(c))), abs=1e-6)
    draws = PolyaGamma1(torch.full((20000,), c, dtype=F64)).sample()
    se = float(draws.std()) / math.sqrt(len(draws))
    assert abs(float(draws.mean()) - mean) < 4 * se


def test_pg_mean_series_continuous_at_zero():
    c = torch.tensor([0.0, 1e-4, 9.99e-4, 1.001e-3, 1e-2], dtype=F64)
    exact = torch.tensor([0.25] + [math.tanh(v / 2) / (2 * v) for v in c[1:].tolist()], dtype=F64)
    assert torch.allclose(pg_mean(c), exact, rtol=1e-12, atol=1e-14)


def test_gig_moments_against_quadrature():
    """E[1/x] and E[x] of the IG limit (closed form) and of a full GIG (Bessel ratios) vs scipy (App. E.1)."""
    nu, delta = torch.tensor(-2.5, dtype=F64), torch.tensor(1.3, dtype=F64)
    ig = stats.invgamma(2.5, scale=1.3**2 / 2)
    zero = torch.tensor(0.0, dtype=F64)
    assert float(gig_mean_reciprocal(nu, delta, zero)) == pytest.approx(ig.expect(lambda x: 1 / x), rel=1e-8)
    assert float(gig_mean(nu, delta, zero)) == pytest.approx(ig.mean(), rel=1e-10)
    nu, delta, lam = -3.0, 0.8, 1.7
    ref = stats.geninvgauss(p=nu, b=lam * delta, scale=delta / lam)
    t = [torch.tensor(v, dtype=F64) for v in (nu, delta, lam)]
    assert float(gig_mean_reciprocal(*t)) == pytest.approx(ref.expect(lambda x: 1 / x), rel=1e-7)


# ------------------------------------------------------------------------------------------------ model
def test_model_prior_predictive_shapes_and_relu_gate():
    """Predictive of the Pyro model (sequential and vectorized) has every site of §2.4 with the right
    shapes."""
    m = small_model((3, 4))
    x = torch.randn(7, 2, dtype=F64)
    for parallel in (False, True):
        p = Predictive(m, num_samples=5, parallel=parallel)(x)
        assert p["fc0.psi"].shape == (5, 1, 3, 2) and p["fc2.weight"].shape == (5, 1, 1, 4)
        assert p["fc1.a"].shape == (5, 7, 4) and p["fc1.gamma"].shape == (5, 7, 4)
        assert p["obs"].shape == (5, 7) and p["fc0.eta2"].shape == (5, 1, 3)
        assert set(p["fc0.gamma"].unique().tolist()) <= {0.0, 1.0}


def test_model_validates_arguments():
    with pytest.raises(ValueError, match="temperature"):
        BowtieModel(2, (3,), 1, temperature=0.0)
    with pytest.raises(ValueError, match="nu_glob"):
        NGIGPrior(nu_glob=0.5)
    with pytest.raises(TypeError, match="BowtieModel"):
        BowtieCAVIGuide(object())


# ------------------------------------------------------------------------------------------------ CAVI
@pytest.mark.parametrize("em,gaussian", [(False, False), (True, False), (False, True)])
def test_elbo_never_decreases_after_any_factor_update(em, gaussian):
    """Each update (13)-(19), the EM step included, is an exact coordinate optimum: the closed-form ELBO of
    App. B.1 is non-decreasing after every single factor update (float64, toy data, L = 1, 20 units); also
    under the Gaussian weight prior of the GVBNN ablation."""
    x, y = toy(100)
    prior = GaussianBowtiePrior(delta_glob=2.0) if gaussian else None
    m = BowtieModel(2, (20,), 1, noise_rate=None, prior=prior).double()
    g = BowtieCAVIGuide(m, em=em)
    g.initialize(m, x, y)
    history = [g.elbo(m, x, y)]
    names = []

    def check(name):
        history.append(g.elbo(m, x, y))
        names.append(name)

    for _ in range(12):
        g.sweep(m, x, y, callback=check)
    steps = np.diff(history)
    worst = int(np.argmin(steps))
    assert steps.min() > -1e-9 * abs(history[-1]), (names[worst], steps.min())
    assert history[-1] > history[0] + 10.0


@pytest.mark.parametrize("hidden,gaussian", [((3,), False), ((3, 2), False), ((3,), True), ((), False)])
def test_closed_form_elbo_matches_trace_elbo(hidden, gaussian):
    """The closed-form ELBO equals a Monte Carlo Trace_ELBO of the Pyro model/guide pair within 4 standard
    errors:
    model (augmented joint §2.4) and guide (family Eqs. 12-19) match the math."""
    x, y = toy(10, seed=1)
    pyro.set_rng_seed(3)
    m = small_model(hidden, **({"prior": GaussianBowtiePrior(bias_scale=3.0)} if gaussian else {}))
    g = BowtieCAVIGuide(m)
    g.initialize(m, x, y)
    for _ in range(4):
        g.sweep(m, x, y)
    exact = g.elbo(m, x, y)
    est = Trace_ELBO(num_particles=1500, vectorize_particles=True, max_plate_nesting=1)
    vals = np.array([-est.loss(m, g, x, y) for _ in range(6)])
    se = vals.std(ddof=1) / math.sqrt(len(vals))
    assert se < 0.2
    assert abs(vals.mean() - exact) < 4 * se + 1e-6, (vals.mean(), exact, se)


def _textbook_vb_linear_regression(x, y, prior_var, a0, b0, iters=500):
    """Mean-field ``q(beta) q(sigma2)`` for ``y ~ N(X~ beta, sigma2)``, ``beta ~ N(0, diag(prior_var))``,
    ``sigma2 ~ IG(a0, b0)`` (``X~ = [1, x]``), iterated to its fixed point (Bishop 2006, §10.3, with the
    noise precision random): returns ``(m, S, a_n, b_n)``."""
    xt = torch.cat([torch.ones_like(x[:, :1]), x], 1)
    n = x.shape[0]
    a_n, b_n = a0 + n / 2, b0
    for _ in range(iters):
        e = a_n / b_n
        cov = torch.linalg.inv(e * xt.T @ xt + torch.diag(1 / prior_var))
        m = e * cov @ xt.T @ y
        b_n = b0 + 0.5 * (((y - xt @ m) ** 2).sum() + torch.trace(xt.T @ xt @ cov))
    return m, cov, a_n, b_n


def test_linear_bowtie_cavi_is_textbook_vb_linear_regression():
    """Without hidden layers (``L = 0``) the bow-tie is a linear regression, and under the Gaussian weight
    prior its CAVI fixed point (Eqs. 15-16) is the textbook mean-field ``q(beta) q(sigma2)`` of Bayesian
    linear regression, computed here independently; the closed-form predictive (Eq. 26) is then
    ``x~^T m`` with variance ``x~^T S x~ + E[sigma2]``, and the N-GIG version's ELBO never decreases."""
    x, y = toy(60, seed=2)
    prior = GaussianBowtiePrior(delta_glob=1.5, bias_scale=2.0)
    m = BowtieModel(2, (), 1, prior=prior, noise_rate=0.7, noise_concentration=3.0).double()
    g = BowtieCAVIGuide(m)
    g.initialize(m, x, y)
    for _ in range(200):
        g.sweep(m, x, y)
    prior_var = torch.tensor([4.0, *[float(prior.weight_variance(0, 2))] * 2], dtype=F64)
    assert prior_var[1] == pytest.approx(1.5**2 / 2)
    m_ref, s_ref, a_n, b_n = _textbook_vb_linear_regression(x, y.squeeze(-1), prior_var, 3.0, 0.7)
    q = g.q
    torch.testing.assert_close(q.m[0][0], m_ref, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(q.B[0][0], s_ref, rtol=1e-8, atol=1e-12)
    assert float(q.alpha[-1]) == pytest.approx(a_n, rel=1e-10)
    assert float(q.beta[-1]) == pytest.approx(float(b_n), rel=1e-8)
    xs = torch.randn(5, 2, dtype=F64)
    pred = g.predictive(m, xs, num_samples=4000)
    xt = torch.cat([torch.ones(5, 1, dtype=F64), xs], 1)
    torch.testing.assert_close(pred.mean.to(F64), xt @ m_ref, rtol=1e-6, atol=1e-8)
    var = torch.einsum("ni,ij,nj->n", xt, s_ref, xt) + b_n / (a_n - 1)
    torch.testing.assert_close(pred.var.to(F64), var, rtol=1e-6, atol=1e-8)
    # the Monte Carlo draws of Eq. (25) have the closed-form mean (tolerance: 5 standard errors)
    se = (var / 4000).sqrt()
    assert ((pred.samples.to(F64).mean(0) - xt @ m_ref).abs() < 5 * se).all()

    ngig = BowtieModel(2, (), 1, noise_rate=None).double()
    g = BowtieCAVIGuide(ngig)
    g.initialize(ngig, x, y)
    history = [g.elbo(ngig, x, y)]
    for _ in range(10):
        g.sweep(ngig, x, y, callback=lambda name: history.append(g.elbo(ngig, x, y)))
    assert np.diff(history).min() > -1e-9 * abs(history[-1])


def _fitted(hidden, prior=None, n=10):
    x, y = toy(n, seed=1)
    pyro.set_rng_seed(3)
    m = small_model(hidden, **({} if prior is None else {"prior": prior}))
    g = BowtieCAVIGuide(m)
    g.initialize(m, x, y)
    for _ in range(4):
        g.sweep(m, x, y)
    return m, g, x, y


# (estimator, subsample rows, prior): plain Trace_ELBO (the estimator the plate fixes), its minibatch form,
# and TraceMeanField_ELBO, with the default IG scales and with proper GIG local scales (lam_loc > 0)
_PLAIN = [
    ("Trace_ELBO", None, None),
    ("Trace_ELBO", [1, 4, 7], None),
    ("TraceMeanField_ELBO", None, None),
    ("TraceMeanField_ELBO", [0, 2, 3, 9], NGIGPrior(lam_loc=1.0, bias_scale=3.0)),
]


@pytest.mark.parametrize("estimator,rows,prior", _PLAIN)
def test_plain_pyro_elbos_match_the_closed_form(estimator, rows, prior):
    """The guide is a proper Pyro guide: its local latents sit in the model's ``plate("data", N,
    subsample)``, so plain (non-vectorized) ``Trace_ELBO`` and ``TraceMeanField_ELBO`` run, and their mean
    over ``S`` single-particle estimates equals the closed-form ELBO (App. B) within 5 standard errors.  On
    a minibatch ``B`` the expectation is the global part plus ``N/|B|`` times the local terms of ``B``."""
    from pyro.infer import TraceMeanField_ELBO

    from guides.bowtie.elbo import global_elbo, local_elbo
    from guides.bowtie.moments import forward_moments
    from guides.bowtie.state import Hyper, as_float64

    m, g, x, y = _fitted((3,), prior)
    sub = None if rows is None else torch.tensor(rows)
    hyp, loc = Hyper.from_model(m), g.train_locals
    xd, yd = as_float64(x, y)
    local = local_elbo(hyp, g.q, loc, forward_moments(xd, loc), yd)
    local = local.sum() if sub is None else len(x) / len(sub) * local[sub].sum()
    exact = float(global_elbo(hyp, g.q) + local)
    if sub is None:
        assert exact == pytest.approx(g.elbo(m, x, y), rel=1e-12)
    g_tr = poutine.trace(g).get_trace(x, y, sub)
    for site in ("fc0.gamma", "fc0.omega", "fc0.a"):
        frames = g_tr.nodes[site]["cond_indep_stack"]
        assert [(f.name, f.dim, f.size) for f in frames] == [("data", -1, len(x if sub is None else sub))]
        assert g_tr.nodes[site]["scale"] == (1.0 if sub is None else len(x) / len(sub))
    est = Trace_ELBO() if estimator == "Trace_ELBO" else TraceMeanField_ELBO()
    # Pyro refuses non-reparameterized guide sites (the gates) under validation for TraceMeanField_ELBO
    with pyro.validation_enabled(estimator == "Trace_ELBO"):
        vals = np.array([-est.loss(m, g, x, y, sub) for _ in range(100)])
    se = vals.std(ddof=1) / math.sqrt(len(vals))
    assert se < 1.0
    assert abs(vals.mean() - exact) < 5 * se, (vals.mean(), exact, se)


def test_kl_of_the_non_reparameterized_factors_against_monte_carlo():
    """``KL(q || p)`` of :mod:`guides.bowtie.kl` (what TraceMeanField_ELBO uses at the PG and GIG sites)
    equals the Monte Carlo mean of ``log q(x) - log p(x)`` over draws of ``q`` within 5 standard errors;
    unequal Pólya–Gamma shapes have no closed form and are refused."""
    from torch.distributions import kl_divergence

    from zoo.distributions import GeneralizedInverseGaussian as GIG

    def t(*v):
        return [torch.tensor(a, dtype=F64) for a in v]

    torch.manual_seed(0)
    pairs = [
        (PolyaGamma1(*t(3.0)), PolyaGamma1(*t(-1.0)), 4000),
        (GIG(*t(-0.8, 1.2, 0.7)), GIG(*t(0.5, 0.6, 1.5)), 20000),  # proper GIG
        (GIG(*t(-2.0, 1.2, 0.0)), GIG(*t(-1.5, 0.6, 0.0)), 20000),  # inverse-gamma limit (lam = 0)
    ]
    for q, p, n in pairs:
        draws = q.sample((n,))
        diff = q.log_prob(draws) - p.log_prob(draws)
        se = float(diff.std()) / math.sqrt(n)
        assert abs(float(kl_divergence(q, p)) - float(diff.mean())) < 5 * se, (type(q).__name__, se)
    assert float(kl_divergence(PolyaGamma1(*t(0.7)), PolyaGamma1(*t(0.7)))) == 0.0
    from zoo.distributions import PolyaGamma

    with pytest.raises(NotImplementedError, match="shapes b"):
        kl_divergence(PolyaGamma(*t(2.0, 1.0)), PolyaGamma(*t(1.0, 1.0)))


# ------------------------------------------------------------------------------------------------ moments
def test_shared_covariance_and_rank_one_moments_equal_the_materialized_ones():
    """One hidden layer: the sweep keeps its ``S`` as one matrix for every row and the data input as rank one
    (:class:`guides.bowtie.moments.Moments`); every moment a sweep reads equals the one computed from the
    materialized (N, D, D) arrays, to rounding."""
    from guides.bowtie.activations import _shared_times_gain
    from guides.bowtie.moments import forward_moments, layer_pre_moments
    from guides.bowtie.noise import expected_squares, noise_precision
    from guides.bowtie.state import Hyper, as_float64
    from guides.bowtie.weights import weight_natural

    x, y = make_bowtie_toy(n=40, seed=2)
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    model, guide, _ = build("bowtie", 2, 1, "regression", hidden=(4,), seed=0)
    with torch.no_grad():
        for _ in range(5):
            guide.closed_form_update(model, x, y)
    xd, yd = as_float64(x, y)
    hyp, g, loc = Hyper.from_model(model), guide.q, guide.train_locals
    assert loc.S[0].stride(0) == 0  # the sweep left one matrix for every row
    gain = (noise_precision(g, 0) * loc.rho[0]).unsqueeze(-1) * g.m[0][:, 1:]  # K = diag(w) m^W, per row
    s1 = loc.S[0][0]  # M = S K as one matrix product
    torch.testing.assert_close(_shared_times_gain(s1, g, loc, 0), s1 @ gain, rtol=1e-12, atol=1e-14)
    fast = forward_moments(xd, loc)
    loc.S[0] = loc.S[0].clone()  # the same numbers, materialized: the general path
    slow = forward_moments(xd, loc)
    assert fast.low_rank(1) and not slow.low_rank(1)
    for k in (0, 1):
        for a, b in zip(layer_pre_moments(g, fast, k), layer_pre_moments(g, slow, k)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        for a, b in zip(weight_natural(hyp, g, loc, fast, yd, k), weight_natural(hyp, g, loc, slow, yd, k)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(
            expected_squares(g, loc, fast, yd, k),
            expected_squares(g, loc, slow, yd, k),
            rtol=1e-12,
            atol=1e-12,
        )
    ez, _ = layer_pre_moments(g, fast, 0)
    torch.testing.assert_close(
        fast.cross_dot(0, g.m[0], ez), (fast.cross(0) * g.m[0]).sum(-1), rtol=1e-12, atol=0
    )
    w = torch.rand(40, 4, dtype=torch.float64)
    torch.testing.assert_close(
        fast.cross_sum(0, w), torch.einsum("nd,ndi->di", w, slow.cross(0)), rtol=1e-12, atol=0
    )
    torch.testing.assert_close(
        fast.second_diag(0), slow.second(0).diagonal(dim1=-2, dim2=-1), rtol=1e-12, atol=0
    )
    torch.testing.assert_close(fast.aa(1), slow.aa(1), rtol=1e-12, atol=1e-12)
