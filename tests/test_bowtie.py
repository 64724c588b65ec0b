"""Bow-tie BNN of Sheinkman & Wade (2025, arXiv:2411.11132): model, structured mean-field CAVI guide,
closed-form ELBO, prediction, pruning.

Ground truths: quadrature of the Pólya–Gamma / GIG densities, the exact coordinate-ascent property (the ELBO
may not decrease after *any* factor update: each update is the exact optimum of Eq. (11), §3.1, and "the
variational algorithm described in Section 3.1 increases the ELBO at each epoch", §3.6), a Monte Carlo
``Trace_ELBO`` of the Pyro model/guide pair (tolerance from the estimate's standard error), Monte Carlo draws
of the predictive (Eq. 25) against the closed forms (Eq. 26), and the ReLU limit ``T, eta -> 0`` (§2.1).
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

from guides.bowtie.cavi import BowtieCAVIGuide, ensemble_predictions
from zoo.data import make_bowtie_toy
from zoo.data.synthetic import bowtie_mean
from zoo.experiments.registry import build, get_entry
from zoo.experiments.reproduce import PROTOCOLS
from zoo.families.bowtie.model import BowtieModel, PolyaGamma1, pg_mean
from zoo.families.bowtie.prior import (
    BowtieNoisePrior,
    GaussianBowtiePrior,
    NGIGPrior,
    gig_mean,
    gig_mean_reciprocal,
)
from zoo.infer.loop import fit

F64 = torch.float64


def toy(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = make_bowtie_toy(n, seed=seed)
    return torch.tensor(x, dtype=F64), torch.tensor(y, dtype=F64)


def small_model(hidden, **kw) -> BowtieModel:
    """Moderate hyperparameters (T = 0.5, hidden noise IG(3, 0.2)) so Monte Carlo checks have small
    variance."""
    kw.setdefault("temperature", 0.5)
    kw.setdefault("prior", NGIGPrior(bias_scale=3.0))
    kw.setdefault("hidden_noise", BowtieNoisePrior(3.0, 0.2))
    kw.setdefault("noise_rate", 1.0)
    return BowtieModel(2, hidden, 1, **kw).double()


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


def test_fit_through_training_loop_and_predict(device):
    """zoo.infer.loop.fit drives the CAVI sweeps (closed_form_update each step); the recorded ELBO is
    monotone and
    the test-time local updates (§3.5) recover the toy function."""
    x, y = (t.float().to(device) for t in toy(150))
    m = BowtieModel(2, (20,), 1, noise_rate=None, auto_bias_scale=True, auto_delta_glob=True)
    g = BowtieCAVIGuide(m)
    res = fit(m, g, x, y, steps=40, tol=1e-6, progress=False, seed=0, device=device)
    e = np.array(res.elbo)
    assert np.all(np.diff(e) > -1e-7 * np.abs(e[1:]))
    xt = torch.rand(200, 2, dtype=torch.float32) * 3.6 - 1.8
    pred = res.predict(xt.to(device), num_samples=50)
    assert pred.mean.device.type == device.type
    truth = torch.tensor(bowtie_mean(xt[:, 0].double().numpy()))
    rmse = float(((pred.mean.cpu().double() - truth) ** 2).mean().sqrt())
    assert pred.mean.dtype == torch.float32 and pred.var.shape == (200,)
    assert rmse < 0.6, rmse  # noise sd is sqrt(0.5) = 0.71; the function spans about +-9
    assert float(pred.var.mean()) > 0.3  # includes E[eta^2_out] ~ 0.5
    post = Predictive(m, guide=g, num_samples=4)(xt[:5].to(device))  # globals from q, test locals: model
    assert post["obs"].shape == (4, 5)


def test_predictive_closed_form_matches_monte_carlo():
    """Closed-form mean (Eq. 26) and variance (§3.5, below Eq. 26) match the Monte Carlo draws of Eq. 25."""
    x, y = toy(60)
    m = small_model((4, 3))
    g = BowtieCAVIGuide(m)
    g.initialize(m, x, y)
    for _ in range(5):
        g.sweep(m, x, y)
    xt = torch.rand(5, 2, dtype=F64) * 4 - 2
    pred = g.predictive(m, xt, num_samples=40000)
    mc_mean, mc_var = pred.samples.mean(0), pred.samples.var(0)
    se = (pred.var / 40000).sqrt()
    assert torch.all((mc_mean - pred.mean).abs() < 5 * se)
    assert torch.allclose(mc_var, pred.var, rtol=0.05)


def test_relu_limit():
    """As T -> 0 and eta^2 -> 0 with sharp weights, the predictive mean is the ReLU network of the means
    (§2.1, Eqs. 1-4)."""
    m = BowtieModel(
        2, (5, 4), 1, temperature=1e-4, hidden_noise=BowtieNoisePrior(2.0, 1e-12), noise_rate=1.0
    ).double()
    g = BowtieCAVIGuide(m, init_cov=1e-12)
    x, y = toy(30)
    g.initialize(m, x, y)
    g.alpha0.fill_(1e6), g.alpha1.fill_(1e6)  # E[eta^2] ~ 1e-18
    xt = torch.rand(8, 2, dtype=F64) * 4 - 2
    h = xt
    for k in range(2):
        w = getattr(g, f"m{k}")
        h = torch.relu(h @ w[:, 1:].T + w[:, 0])
    w = g.m2
    relu = (h @ w[:, 1:].T + w[:, 0])[:, 0]
    assert torch.allclose(g.predictive(m, xt, num_samples=2).mean, relu, atol=1e-4)


# ------------------------------------------------------------------------------------------------ pruning
def test_bayesian_fdr_pruning():
    """§3.4: weights with a sign probability near 1 survive; a hidden node that loses its only outgoing edge
    loses its incoming edges too; nodes without incoming edges lose their outgoing ones."""
    m = small_model((3,))
    g = BowtieCAVIGuide(m)
    g.B0.copy_(torch.eye(3, dtype=F64).expand(3, 3, 3) * 1e-4)
    g.B1.copy_(torch.eye(4, dtype=F64).expand(1, 4, 4) * 1e-4)
    g.m0.copy_(torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]], dtype=F64))
    g.m1.copy_(torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=F64))  # unit 0 has no outgoing edge
    rep = g.sparsity_report(m, alpha=0.01)
    assert rep.masks["fc0.weight"].tolist() == [[False, False], [True, True], [False, False]]
    assert rep.masks["fc1.weight"].tolist() == [[False, True, False]]  # unit 2 has no incoming edge
    assert rep.extras["nodes_kept"] == [1]
    assert rep.density == pytest.approx(3 / 9)


def test_pruned_network_predicts():
    """§3.4: the FDR-pruned network predicts with the surviving weights' joint Gaussian.  Masking every
    weight leaves only the output bias (a constant prediction); the toy's pruned network predicts close to
    the full one (paper §4.1: "the predictions from the sparse and full posteriors nearly coincide")."""
    x, y = toy(150)
    torch.manual_seed(0)
    m = BowtieModel(2, (20,), 1, noise_rate=None, auto_bias_scale=True, auto_delta_glob=True).double()
    g = BowtieCAVIGuide(m)
    for _ in range(60):
        g.closed_form_update(m, x, y)
    xt, _ = toy(200, seed=5)
    rep = g.sparsity_report(m)
    full = g.predictive(m, xt, num_samples=20)
    sparse = g.predictive(m, xt, num_samples=20, mask=rep.masks)
    m_before = g.m0.clone()
    none = {k: torch.zeros_like(v) for k, v in rep.masks.items()}
    const = g.predictive(m, xt, num_samples=20, mask=none)
    assert torch.equal(g.m0, m_before)  # the guide is restored after the block
    assert torch.allclose(const.mean, const.mean[0].expand_as(const.mean), atol=1e-6)
    assert float(const.mean[0]) == pytest.approx(float(g.m1[0, 0]), abs=1e-6)
    gap = float(((sparse.mean - full.mean) ** 2).mean().sqrt())
    assert 0 < sum(rep.extras["edges_kept"]) < 60
    assert gap < 0.25 * float(full.mean.std()), (gap, rep.extras)
    with pytest.raises(ValueError, match="fc0.weight"):
        g.predictive(m, xt, mask={"fc0.weight": torch.ones(3, 3, dtype=torch.bool)})


# ------------------------------------------------------------------------------------------------ registry
def test_registry_entry_protocols_and_state_dict_round_trip():
    entry = get_entry("bowtie")
    assert entry.fit_defaults["standardize_y"] is False and entry.fit_defaults["tol"] == 1e-5
    assert entry.fit_defaults["batch_size"] is None
    assert {"bowtie-diabetes", "bowtie-uci"} <= set(PROTOCOLS)
    model, guide, spec = build("bowtie", 2, 1, "regression", hidden=[6])
    assert isinstance(guide, BowtieCAVIGuide) and spec["guide"] == "cavi"
    with pytest.raises(ValueError, match="task"):
        build("bowtie", 2, 1, "binary", hidden=[6])
    x, y = toy(40)
    model.double()
    guide.closed_form_update(model, x, y)
    guide.closed_form_update(model, x, y)
    model2, guide2, _ = build("bowtie", 2, 1, "regression", hidden=[6])
    model2.double().load_state_dict(model.state_dict())
    guide2.load_state_dict(guide.state_dict())
    assert guide2.elbo(model2, x, y) == pytest.approx(guide.elbo(model, x, y), rel=1e-12)


def test_svi_minibatch_fit_through_training_loop():
    """§3.3: minibatch SVI through zoo.infer.loop.fit (batch_size) improves the full-data ELBO over its
    initialization and predicts the toy function reasonably (SVI is less accurate than CAVI, App. D.6)."""
    x, y = toy(150)
    m = BowtieModel(2, (10,), 1, noise_rate=None).double()
    g = BowtieCAVIGuide(m)
    g.initialize(m, x, y)
    start = g.refresh_locals(m, x, y)  # exact full-data ELBO at the initial globals, locals optimized
    pyro.set_rng_seed(0)
    res = fit(m, g, x, y, steps=60, batch_size=30, progress=False, seed=0)
    assert int(g.svi_step) == 60 and len(res.elbo) == 60 and np.isfinite(res.elbo).all()
    end = g.refresh_locals(m, x, y)
    assert end > start + 50, (start, end)
    xt = torch.rand(100, 2, dtype=F64) * 3.6 - 1.8
    truth = torch.tensor(bowtie_mean(xt[:, 0].numpy()))
    rmse = float(((g.predictive(m, xt, num_samples=10).mean - truth) ** 2).mean().sqrt())
    assert rmse < 2.0, rmse


def test_svi_beta_rules_paper_harmonic_vs_textbook_linear():
    """§3.3: from the same state and minibatch, the paper's harmonic blend of ``beta`` and the textbook
    linear blend differ only in ``beta``, and harmonic <= arithmetic mean (AM-HM) elementwise."""
    x, y = toy(80)
    out = {}
    for rule in ("paper", "textbook"):
        torch.manual_seed(0)
        m = BowtieModel(2, (6,), 1, noise_rate=None).double()
        g = BowtieCAVIGuide(m, beta_rule=rule, forgetting_rate=1.0)
        g.initialize(m, x, y)
        beta0 = g.beta0.clone()
        g.svi_update(m, x, y, torch.arange(20))
        out[rule] = (beta0, g.beta0.clone(), g.m0.clone())
    (b0, bp, mp), (b0t, bt, mt) = out["paper"], out["textbook"]
    assert torch.equal(b0, b0t) and torch.allclose(mp, mt)  # same start, same weight update
    assert (bp <= bt * (1 + 1e-12)).all() and not torch.allclose(bp, bt)
    # step l_0 = 1/2 (forgetting rate 1): recover beta_hat from the linear blend, check the harmonic one
    beta_hat = 2 * bt - b0
    assert torch.allclose(bp, 1.0 / (0.5 / b0 + 0.5 / beta_hat))
    with pytest.raises(ValueError, match="beta_rule"):
        BowtieCAVIGuide(m, beta_rule="other")


def test_gaussian_prior_model_has_no_scale_sites_and_em_is_refused():
    m = BowtieModel(2, (4,), 1, prior=GaussianBowtiePrior(delta_glob=2.0, delta_loc=3.0))
    tr = poutine.trace(m).get_trace(torch.randn(5, 2), torch.randn(5))
    assert not any(k.endswith((".tau", ".psi")) for k in tr.nodes)
    # App. D.1 scaling: v_l = (delta_glob^2 / L)(delta_loc^2 / fan_in)
    assert float(m.prior.weight_variance(1, 2)) == pytest.approx(4.0 * 9.0 / 2)
    g = BowtieCAVIGuide(m)
    assert g.gaussian
    with pytest.raises(ValueError, match="em"):
        BowtieCAVIGuide(m, em=True)


def test_ensemble_weights_and_moments():
    """§3.6: w_k ∝ exp(zeta ELBO_k); mixture mean and variance by the law of total variance."""
    from zoo.infer.predict import Predictions

    p1 = Predictions("regression", mean=torch.tensor([0.0, 1.0]), var=torch.tensor([1.0, 2.0]))
    p2 = Predictions("regression", mean=torch.tensor([2.0, 1.0]), var=torch.tensor([1.0, 4.0]))
    ens = ensemble_predictions([p1, p2], [-100.0, -100.0 + 10 * math.log(3.0)], zeta=0.1)
    assert ens.extras["weights"] == pytest.approx([0.25, 0.75])
    assert torch.allclose(ens.mean, torch.tensor([1.5, 1.0]))
    # Var = sum w (var + mean^2) - mean^2 : [0.25*1 + 0.75*5 - 2.25, 0.25*3 + 0.75*5 - 1]
    assert torch.allclose(ens.var, torch.tensor([1.75, 3.5]))
    with pytest.raises(ValueError, match="members"):
        ensemble_predictions([p1], [1.0, 2.0])


# ------------------------------------------------------------------------------------------------ options
def test_builder_options_config_validates_and_matches_keywords():
    """BowtieOptions: the builder takes a config or the old keywords (same model); bad values are a
    ValueError naming the field, raised by the registry before anything is built."""
    from zoo.families.bowtie.entry import build_bowtie
    from zoo.families.bowtie.options import BowtieOptions

    assert get_entry("bowtie").options is BowtieOptions
    by_config = build_bowtie(2, 1, "regression", [3], options=BowtieOptions(temperature=0.5), nu_loc=-2.0)
    by_keywords = build_bowtie(2, 1, "regression", [3], temperature=0.5, nu_loc=-2.0)
    assert by_config.config() == by_keywords.config()
    assert isinstance(build_bowtie(2, 1, "regression", [3], gaussian_prior=True).prior, GaussianBowtiePrior)
    for bad, field in [
        ({"temperature": -1.0}, "temperature"),
        ({"nu_glob": 0.5}, "nu_glob"),
        ({"noise_rate": 0.0}, "noise_rate"),
        ({"unknown": 1}, "unknown"),
    ]:
        with pytest.raises(ValueError, match=field):
            build("bowtie", 2, 1, "regression", hidden=[3], **bad)
    with pytest.raises(TypeError, match="gaussian_prior"):
        BowtieOptions(gaussian_prior=1)


def test_guide_options_config_and_keywords():
    """BowtieGuideOptions: config and keywords combine; unknown keywords stay a TypeError (registry
    ``guide_options`` convention), bad values a ValueError naming the field."""
    from guides.bowtie.options import BowtieGuideOptions

    m = BowtieModel(2, (3,), 1)
    g = BowtieCAVIGuide(m, options=BowtieGuideOptions(em=True), init_cov=0.02)
    assert g.em and g.init_cov == 0.02 and g.options == BowtieGuideOptions(em=True, init_cov=0.02)
    with pytest.raises(TypeError, match="guide_options"):
        build("bowtie", 2, 1, "regression", hidden=[3], guide_options={"nope": 1})
    with pytest.raises(ValueError, match="forgetting_rate"):
        BowtieCAVIGuide(m, forgetting_rate=0.4)


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
