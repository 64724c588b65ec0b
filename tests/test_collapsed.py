"""Collapsed variational bounds (Tomczak, Swaroop, Foong & Turner 2021, NeurIPS; issue 7): penalties vs
quadrature, limits, q*, the two Pyro formulations (collapsed bound vs hierarchical model + closed-form optimal
hyper-posteriors), hyper-parameter learning, the builder options and the registry entries / protocol."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from scipy import integrate, special, stats

from guides.collapsed.bound import PENALTY_SITE, CollapsedBoundGuide, HierarchicalCollapsedGuide
from zoo.eval.diagnostics import to_inference_data
from zoo.families.collapsed.entry import build_collapsed
from zoo.families.collapsed.prior import (
    CollapsedPrior,
    hyper_site,
    optimal_alpha_reg,
    optimal_delta,
    optimal_q_tau,
    penalty_cm,
    penalty_cmv,
    penalty_cv,
)
from zoo.infer.checkpoint import load, save
from zoo.infer.loop import fit

D64 = torch.float64


def _t(v):
    return torch.tensor(v, dtype=D64)


# ------------------------------------------------------------------------------------------------
# Ground truth by quadrature: R = log ∫ p(theta) exp(E_q log p(w|theta)) dtheta + H[q]
# (the maximum over q(theta) of App. B, Eq. 17)
# ------------------------------------------------------------------------------------------------


def _entropy(var):
    return 0.5 * math.log(2 * math.pi * math.e * var)


def _quad_cm(mu, var, gamma, alpha_reg):
    alpha = gamma * (1 - alpha_reg) / alpha_reg
    c = alpha / (alpha + gamma) * mu
    sd = math.sqrt(alpha * gamma / (alpha + gamma))

    def f(m):
        e_log = -0.5 * math.log(2 * math.pi * gamma) - ((mu - m) ** 2 + var) / (2 * gamma)
        return math.exp(stats.norm.logpdf(m, 0.0, math.sqrt(alpha)) + e_log)

    val, _ = integrate.quad(f, c - 30 * sd, c + 30 * sd, epsabs=0, epsrel=1e-12, limit=200)
    return math.log(val) + _entropy(var)


def _log_gamma_pdf(tau, a, b):
    return a * math.log(b) - special.gammaln(a) + (a - 1) * math.log(tau) - b * tau


def _quad_cv(mu, var, a, b):
    def f(u):  # tau = exp(u)
        tau = math.exp(u)
        e_log = 0.5 * math.log(tau / (2 * math.pi)) - 0.5 * tau * (mu**2 + var)
        return math.exp(_log_gamma_pdf(tau, a, b) + u + e_log)

    val, _ = integrate.quad(f, -60, 30, epsabs=0, epsrel=1e-12, limit=400)
    return math.log(val) + _entropy(var)


def _quad_cmv(mu, var, a, b, delta):
    """2-D quadrature: adaptive over u = log tau, a 2001-point trapezoid rule (spectrally accurate for this
    Gaussian integrand) over mu_p within ±14 sd of its conditional optimum."""
    t = delta / (1 - delta)
    z = np.linspace(-14.0, 14.0, 2001)

    def inner(tau):
        c, sd = mu / (1 + t), 1 / math.sqrt((1 + t) * tau)
        m = c + sd * z
        e_log = 0.5 * math.log(tau / (2 * math.pi)) - 0.5 * tau * ((mu - m) ** 2 + var)
        return integrate.trapezoid(np.exp(stats.norm.logpdf(m, 0.0, 1 / math.sqrt(t * tau)) + e_log), m)

    def f(u):
        tau = math.exp(u)
        return math.exp(_log_gamma_pdf(tau, a, b) + u) * inner(tau)

    val, _ = integrate.quad(f, -40, 25, epsabs=0, epsrel=1e-11, limit=200)
    return math.log(val) + _entropy(var)


CASES = [(0.3, 0.02, 0.5, 0.01, 0.1), (-1.2, 0.4, 2.0, 0.7, 0.5), (0.05, 1e-3, 0.5, 0.01, 0.9)]


@pytest.mark.parametrize("mu,var,gamma,alpha_reg", [(0.3, 0.02, 0.05, 0.05), (-1.5, 0.3, 0.5, 0.4)])
def test_cm_penalty_matches_quadrature(mu, var, gamma, alpha_reg):
    p = penalty_cm(_t(mu), _t(var), gamma, alpha_reg)
    assert float(-p) == pytest.approx(_quad_cm(mu, var, gamma, alpha_reg), abs=1e-8)


@pytest.mark.parametrize("mu,var,a,b,delta", CASES)
def test_cv_and_cmv_penalties_match_quadrature(mu, var, a, b, delta):
    assert float(-penalty_cv(_t(mu), _t(var), a, b)) == pytest.approx(_quad_cv(mu, var, a, b), abs=1e-7)
    exact = _quad_cmv(mu, var, a, b, delta)
    r = -float(penalty_cmv(_t(mu), _t(var), a, b, delta))
    assert r == pytest.approx(exact, abs=1e-6)
    # Eq. 74 as printed carries log(delta) instead of ½ log(delta) + ½: off by a constant only.
    printed = r - (0.5 * math.log(delta) + 0.5) + math.log(delta)
    assert abs(printed - exact) > 1e-3
    assert printed - exact == pytest.approx(0.5 * math.log(delta) - 0.5, abs=1e-6)


def test_penalty_identities_and_cmv_to_cm_limit():
    g = torch.Generator().manual_seed(3)
    mu = torch.randn(50, generator=g, dtype=D64)
    var = torch.rand(50, generator=g, dtype=D64) * 0.5 + 1e-3
    gamma = 0.2
    kl = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, var.sqrt()), torch.distributions.Normal(_t(0.0), _t(gamma).sqrt())
    )
    torch.testing.assert_close(penalty_cm(mu, var, gamma, 1.0), kl, rtol=0, atol=1e-12)
    # P_CM = KL(q || N(0, alpha + gamma)) + ½ var (1/gamma − 1/(alpha+gamma))  (Eq. 29 rearranged)
    a_reg = 0.1
    big = gamma / a_reg
    kl_big = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, var.sqrt()), torch.distributions.Normal(_t(0.0), _t(big).sqrt())
    )
    torch.testing.assert_close(
        penalty_cm(mu, var, gamma, a_reg), kl_big + 0.5 * var * (1 / gamma - 1 / big), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(penalty_cv(mu, var, 0.5, 0.01), penalty_cmv(mu, var, 0.5, 0.01, 1.0))
    # CMV -> CM: alpha, beta -> inf with beta/alpha = gamma, delta = alpha_reg (Eq. 74 vs Eq. 29)
    errs = []
    for alpha in (1e2, 1e4, 1e6):
        d = penalty_cmv(mu, var, alpha, gamma * alpha, a_reg) - penalty_cm(mu, var, gamma, a_reg)
        errs.append(float(d.abs().max()))
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-5 and errs[0] > 1e-3


def test_penalty_gradients_and_no_data_optima():
    mu, var = _t(0.7).requires_grad_(), _t(0.05).requires_grad_()
    a, b, delta = 0.5, 0.01, 0.1
    gm, gv = torch.autograd.grad(penalty_cmv(mu, var, a, b, delta), (mu, var))
    mu, var = mu.detach(), var.detach()
    e_tau = (a + 0.5) / (b + 0.5 * (delta * mu**2 + var))
    assert float(gm) == pytest.approx(float(delta * mu * e_tau), rel=1e-12)
    assert float(gv) == pytest.approx(float(0.5 * e_tau - 0.5 / var), rel=1e-12)
    # no-data optimum of the variance: CMV var = (beta + delta mu²/2)/alpha; CM var = gamma (Eqs. 74, 29)
    v_star = _t((b + delta * 0.7**2 / 2) / a).requires_grad_()
    (gv,) = torch.autograd.grad(penalty_cmv(_t(0.7), v_star, a, b, delta), v_star)
    assert abs(float(gv)) < 1e-10
    m0, v0 = _t(0.0).requires_grad_(), _t(0.3).requires_grad_()
    assert all(abs(float(x)) < 1e-12 for x in torch.autograd.grad(penalty_cm(m0, v0, 0.3, 0.05), (m0, v0)))


def test_optimal_hyperparameters_maximize_the_bound():
    g = torch.Generator().manual_seed(0)
    mu = 0.4 * torch.randn(200, generator=g, dtype=D64)
    var = 0.01 + 0.02 * torch.rand(200, generator=g, dtype=D64)
    gamma = 0.02
    grid = torch.linspace(0.01, 1.0, 20000, dtype=D64)
    tot = penalty_cm(mu, var, gamma, grid[:, None]).sum(1)
    a_star = float(optimal_alpha_reg(mu, gamma))
    assert a_star == pytest.approx(float(grid[tot.argmin()]), abs=1e-4)
    assert float(optimal_alpha_reg(1e-3 * mu, gamma)) == 1.0  # clipped: Σmu² < gamma D
    tot_d = penalty_cmv(mu, var, 0.5, 0.01, grid[:-1, None]).sum(1)
    d_star = float(optimal_delta(mu, var, 0.5, 0.01))
    assert d_star == pytest.approx(float(grid[tot_d.argmin()]), abs=1e-4)
    assert 0.01 < d_star < 0.99


# ------------------------------------------------------------------------------------------------
# The two Pyro formulations
# ------------------------------------------------------------------------------------------------


def _small_problem(kind, guide_cls, learn=False):
    model = build_collapsed(kind, 2, 1, "regression", (3,), gamma_scale=0.5, learn_hyper=learn).double()
    return model, guide_cls(model)


def _data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20, 2, generator=g, dtype=D64)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(20, generator=g, dtype=D64)
    return x, y


def _call(guide, x, y):
    with warnings.catch_warnings():  # a direct guide call: "observe a value outside of inference"
        warnings.simplefilter("ignore", RuntimeWarning)
        guide(x, y)


def _perturb(guide):
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for s in guide.specs:
            k = s.name.replace(".", "_")
            pyro.param(f"{k}_loc").unconstrained().copy_(0.5 * torch.randn(s.shape, generator=g, dtype=D64))
            lv = torch.log(0.01 + 0.2 * torch.rand(s.shape, generator=g, dtype=D64))
            pyro.param(f"{k}_logvar").unconstrained().copy_(lv)


def test_collapsed_loss_is_data_term_plus_exact_penalty():
    model, guide = _small_problem("cmv", CollapsedBoundGuide)
    x, y = _data()
    _call(guide, x, y)
    _perturb(guide)
    pyro.set_rng_seed(11)
    loss = Trace_ELBO().loss(model, guide, x, y)
    pyro.set_rng_seed(11)
    with warnings.catch_warnings():  # "observe a value outside of inference": tracing the factor by hand
        warnings.simplefilter("ignore", RuntimeWarning)
        gtr = poutine.trace(guide).get_trace(x, y)
    mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x, y)
    mtr.compute_log_prob()
    gtr.compute_log_prob()
    data = mtr.nodes["obs"]["log_prob_sum"]
    weights = {sp.name for sp in guide.specs} | {PENALTY_SITE}
    q_noise = sum(  # AutoNormal's sigma2 factor: the unconstrained draw and its Jacobian (Delta) site
        site["log_prob_sum"]
        for name, site in gtr.nodes.items()
        if site["type"] == "sample" and name not in weights
    )
    noise = mtr.nodes["sigma2"]["log_prob_sum"] - q_noise
    expected = -(data + noise) + guide.collapsed_penalty(model)
    assert loss == pytest.approx(float(expected.detach()), abs=1e-9)
    assert PENALTY_SITE in gtr.nodes and gtr.nodes[PENALTY_SITE]["is_observed"]


def _loss_and_grads(model, guide, x, y, seed, particles):
    pyro.set_rng_seed(seed)
    elbo = Trace_ELBO(num_particles=particles, vectorize_particles=True, max_plate_nesting=1)
    loss = elbo.differentiable_loss(model, guide, x, y)
    names = [f"{s.name.replace('.', '_')}_{p}" for s in guide.specs for p in ("loc", "logvar")]
    params = [pyro.param(n).unconstrained() for n in names]
    grads = torch.autograd.grad(loss, params)
    return float(loss.detach()), torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.parametrize("kind", ["cm", "cv", "cmv"])
def test_hierarchical_and_collapsed_agree_in_value_and_gradient(kind):
    """Same weight draws in both (common random numbers): the data term cancels and the difference is
    the Monte Carlo error of the hierarchical prior terms, whose mean is 0 (value) and, by the envelope
    theorem (q* maximizes Eq. 17), 0 for the gradients too."""
    x, y = _data()
    m_c, g_c = _small_problem(kind, CollapsedBoundGuide)
    m_h, g_h = _small_problem(kind, HierarchicalCollapsedGuide)
    _call(g_c, x, y)  # create the shared params (same names, same param store), then move them off the init
    _perturb(g_c)
    with torch.no_grad():
        g_h.closed_form_update(m_h, x, y)
    pen = float(g_c.collapsed_penalty(m_c).detach())
    dv, dg, gc_all = [], [], []
    for k in range(10):
        lc, gc = _loss_and_grads(m_c, g_c, x, y, 100 + k, 3000)
        lh, gh = _loss_and_grads(m_h, g_h, x, y, 100 + k, 3000)
        dv.append(lh - lc)
        dg.append(gh - gc)
        gc_all.append(gc)
    dv_t, dg_t = torch.tensor(dv, dtype=D64), torch.stack(dg)
    se = dv_t.std() / math.sqrt(len(dv))
    assert abs(float(dv_t.mean())) < 5 * float(se) + 1e-9
    assert float(se) < 0.05 * abs(pen)  # the comparison is tight relative to the penalty itself
    g_se = dg_t.std(0) / math.sqrt(len(dg))
    assert bool(((dg_t.mean(0)).abs() <= 5 * g_se + 1e-8).all())
    g_mean = torch.stack(gc_all).mean(0)
    assert float(g_se.max()) < 0.1 * float(g_mean.abs().max())


@pytest.mark.parametrize("kind", ["cm", "cv", "cmv"])
def test_closed_form_update_sets_optimal_factors(kind):
    x, y = _data()
    model, guide = _small_problem(kind, HierarchicalCollapsedGuide)
    assert model.prior.hierarchical
    _call(guide, x, y)
    _perturb(guide)
    guide.closed_form_update(model, x, y)
    s = guide.specs[0]
    loc, var = guide.loc_var(s)
    p = model.prior
    if kind == "cm":
        gamma, a_reg = 0.5 / s.fan_in, 0.05
        alpha = gamma * (1 - a_reg) / a_reg  # Eq. 19: N(alpha mu/(alpha+gamma), alpha gamma/(alpha+gamma))
        torch.testing.assert_close(guide.fc0_weight_mu_loc, alpha / (alpha + gamma) * loc.detach())
        assert float(guide.fc0_weight_mu_var[0, 0]) == pytest.approx(alpha * gamma / (alpha + gamma))
    else:
        delta = 1.0 if kind == "cv" else 0.1
        rate = 0.01 + 0.5 * (var + delta * loc**2)  # Eq. 50
        torch.testing.assert_close(guide.fc0_weight_tau_rate, rate.detach())
        assert float(guide.fc0_weight_tau_conc[0, 0]) == pytest.approx(1.0)
        if kind == "cmv":
            torch.testing.assert_close(guide.fc0_weight_mu_loc, loc.detach() / (1 + 1 / 9))  # Eq. 36, t = 1/9
    assert p.config()["hierarchical"]


@pytest.mark.parametrize("kind", ["cm", "cmv"])
def test_learned_hyperparameters_are_the_bound_optimum(kind):
    x, y = _data()
    model, guide = _small_problem(kind, CollapsedBoundGuide, learn=True)
    res = fit(model, guide, x, y, steps=15, lr=5e-2, progress=False)
    with res.activate():
        for layer in (0, 1):
            group = [s for s in guide.specs if s.layer == layer]
            mu = torch.cat([guide.loc_var(s)[0].reshape(-1) for s in group]).detach()
            var = torch.cat([guide.loc_var(s)[1].reshape(-1) for s in group]).detach()
            if kind == "cm":
                want = optimal_alpha_reg(mu, model.prior.gamma_for(group[0]))
                got = model.prior.alpha_reg[layer]
            else:
                want = optimal_delta(mu, var, model.prior.alpha, model.prior.beta, upper=1 - 1e-6)
                got = model.prior.delta[layer]
            assert float(got) == pytest.approx(float(want), rel=1e-9)
    fixed = model.prior.alpha_reg if kind == "cm" else model.prior.delta
    assert not torch.allclose(fixed, torch.full_like(fixed, 0.05 if kind == "cm" else 0.1))


@pytest.mark.parametrize("guide_cls", [CollapsedBoundGuide, HierarchicalCollapsedGuide])
def test_fit_predict_checkpoint_arviz(tmp_path, guide_cls, device):
    from zoo.experiments.registry import build

    x, y = (t.float().to(device) for t in _data())
    name = "hierarchical" if guide_cls is HierarchicalCollapsedGuide else "collapsed"
    model, guide, spec = build("cmv-bnn", 2, 1, "regression", hidden=(4,), guide=name)
    assert isinstance(guide, guide_cls)
    res = fit(model, guide, x, y, steps=30, lr=1e-2, progress=False, spec=spec, device=device)
    assert all(math.isfinite(e) for e in res.elbo)
    p1 = res.predict(x[:5], num_samples=20, seed=3)
    save(res, tmp_path / "c.pt")
    res2 = load(tmp_path / "c.pt")
    assert res2.model.prior.hierarchical == (name == "hierarchical")
    torch.testing.assert_close(res2.predict(x[:5], num_samples=20, seed=3).mean, p1.mean)
    if name == "hierarchical":
        torch.testing.assert_close(res2.guide.fc0_weight_tau_rate, res.guide.fc0_weight_tau_rate)
    idata = to_inference_data(res, x[:5], y[:5], num_samples=10)
    post = set(idata.posterior.data_vars)
    assert {"fc0.weight", "fc1.bias", "sigma2"} <= post and PENALTY_SITE not in post
    assert ("fc0.weight_tau_p" in post) == (name == "hierarchical")


@pytest.mark.parametrize("kind", ["cm", "cv", "cmv"])
def test_hierarchical_form_builds_directly_with_layer_prefixed_hyper_sites(kind):
    """The hierarchical form names its hyper-latents ``<spec>_mu_p`` / ``<spec>_tau_p`` (never
    ``<spec>.mu_p``, which breaks AutoNormal): it builds as a plain model, and an AutoNormal fits it."""
    from pyro.infer.autoguide import AutoNormal

    from zoo.core.architectures import MLP
    from zoo.core.likelihoods import GaussianLikelihood
    from zoo.core.model import BayesianModel

    arch = MLP(2, (3,), 1)
    model = BayesianModel(arch, CollapsedPrior(kind, hierarchical=True), GaussianLikelihood())
    x, y = _data()
    x, y = x.float(), y.float()
    tr = poutine.trace(model).get_trace(x, y)
    latents = {n for n, site in tr.nodes.items() if site["type"] == "sample" and not site["is_observed"]}
    hyper = {"cm": ("mu_p",), "cv": ("tau_p",), "cmv": ("tau_p", "mu_p")}[kind]
    specs = [s.name for s in arch.param_specs()]
    assert latents - {"data", "sigma2", "precision"} == {
        *specs,
        *(f"{n}_{h}" for n in specs for h in hyper),
    }
    order = [n for n in tr.nodes if n in latents]
    assert all(order.index(hyper_site(n, h)) < order.index(n) for n in specs for h in hyper)
    guide = AutoNormal(model)
    loss = Trace_ELBO().loss(model, guide, x, y)  # the old "fc0.weight.mu_p" names failed right here
    assert math.isfinite(loss)
    assert hyper_site("fc1.bias", "tau_p") == "fc1.bias_tau_p"
    with pytest.raises(ValueError, match="latent"):
        hyper_site("fc0.weight", "tau")
    with pytest.raises(TypeError, match="spec"):
        hyper_site(3, "mu_p")


def test_prior_marginals_match_hierarchy_by_monte_carlo():
    """The marginal parameterization (collapsed guide) and the hierarchical one are the same prior."""
    from zoo.core.architectures import MLP

    spec = MLP(4, (), 1).param_specs()[0]
    n = 40000
    for kind in ("cm", "cmv"):
        prior = CollapsedPrior(kind, alpha=3.0, beta=0.5, delta=0.3, alpha_reg=0.2).double()
        with pyro.plate("s", n, dim=-1):
            prior.hierarchical = True
            h = prior.sample_params([spec])["fc0.weight"].reshape(n, -1)[:, 0]
        m = prior.marginal(spec)
        # KS test of the hierarchical draws against the marginal cdf (alpha = 1e-4 critical value)
        base = m.base_dist
        if kind == "cm":
            cdf = stats.norm(0, float(base.scale.reshape(-1)[0])).cdf
        else:
            cdf = stats.t(float(base.df.reshape(-1)[0]), 0, float(base.scale.reshape(-1)[0])).cdf
        assert stats.kstest(h.numpy(), cdf).pvalue > 1e-4


def test_argument_validation():
    with pytest.raises(ValueError, match="kind"):
        CollapsedPrior("cmx")
    with pytest.raises(ValueError, match="alpha_reg"):
        CollapsedPrior("cm", alpha_reg=1.5)
    with pytest.raises(ValueError, match="delta"):
        CollapsedPrior("cmv", delta=1.0)
    with pytest.raises(ValueError, match="learn_hyper"):
        CollapsedPrior("cv", learn_hyper=True, num_layers=2)
    with pytest.raises(ValueError, match="num_layers"):
        CollapsedPrior("cm", learn_hyper=True)
    from zoo.families.baselines.entry import _mfvi_build

    with pytest.raises(TypeError, match="CollapsedPrior"):
        CollapsedBoundGuide(_mfvi_build(2, 1, "regression", (3,)))


def test_q_tau_matches_conjugate_update_by_brute_force():
    """q*(tau) ∝ p(tau) exp(E_q log N(w|0,1/tau)): compare the Gamma(conc, rate) density with the normalized
    unnormalized posterior on a grid (CV = CMV with delta = 1)."""
    mu, var, a, b = 0.4, 0.03, 0.5, 0.01
    conc, rate = optimal_q_tau(_t(mu), _t(var), a, b, 1.0)
    taus = np.linspace(0.05, 60, 4000)
    log_un = (a - 1) * np.log(taus) - b * taus + 0.5 * np.log(taus) - 0.5 * taus * (mu**2 + var)
    dens = np.exp(log_un - log_un.max())
    dens /= integrate.trapezoid(dens, taus)
    ref = stats.gamma(float(conc), scale=1 / float(rate)).pdf(taus)
    ref /= integrate.trapezoid(ref, taus)
    assert np.max(np.abs(dens - ref)) < 1e-3 * ref.max()


def test_registry_and_protocol():
    from zoo.experiments.registry import get_entry
    from zoo.experiments.reproduce import PROTOCOLS, available_protocols

    for name in ("cm-bnn", "cv-bnn", "cmv-bnn"):
        e = get_entry(name)
        assert e.default_guide == "collapsed" and "hierarchical" in e.guides
    assert "collapsed-uci" in available_protocols()
    runs = PROTOCOLS["collapsed-uci"].runs(None)
    assert len(runs) == 4 * 8 * 10
    assert {r.variant for r in runs} == {"mfvi-bnn", "cm-bnn", "cv-bnn", "cmv-bnn"}
    assert all(r.kwargs["hidden"] == [50] and r.kwargs["train_metrics"] for r in runs)


def test_zoo_fit_on_boston_smoke(data_dir, tmp_path):
    from zoo.experiments.runs import fit_on_dataset, write_run

    run = fit_on_dataset(
        "cmv-bnn",
        "uci:boston",
        split=0,
        steps=40,
        progress=False,
        data_dir=data_dir,
        num_samples=20,
        train_metrics=True,
    )
    paths = write_run(run, tmp_path, num_samples=20)
    assert all(p.exists() for p in paths.values())
    m = run.metrics
    assert math.isfinite(m["rmse"]) and m["rmse"] < 15 and math.isfinite(m["train_rmse"])
    assert m["nll_gap"] == pytest.approx(m["nll"] - m["train_nll"])


def test_collapsed_options_defaults_validation_and_builder():
    from zoo.experiments.registry import build, get_entry
    from zoo.families.collapsed.options import CollapsedOptions

    for name in ("cm-bnn", "cv-bnn", "cmv-bnn"):
        assert get_entry(name).options is CollapsedOptions
    assert CollapsedOptions().to_dict() == {
        "gamma_scale": 1.0,
        "alpha_reg": 0.05,
        "alpha": 0.5,
        "beta": 0.01,
        "delta": 0.1,
        "fan_in_scaling": True,
        "learn_hyper": False,
        "noise_concentration": 1.0,  # zoo.core.likelihoods.WEAK_NOISE_PRIOR
        "noise_rate": 0.01,
        "activation": "relu",
        "heteroscedastic": False,
        "student_t_df": None,
        "student_t_learn_df": False,
    }
    for field, value, err in [
        ("activation", "swish", ValueError),
        ("gamma_scale", 0.0, ValueError),
        ("alpha_reg", 1.5, ValueError),
        ("alpha_reg", 0.0, ValueError),
        ("delta", 1.0, ValueError),
        ("alpha", -1.0, ValueError),
        ("beta", float("nan"), ValueError),
        ("noise_rate", 0.0, ValueError),
        ("learn_hyper", "yes", TypeError),
        ("heteroscedastic", 1, TypeError),
        ("fan_in_scaling", None, TypeError),
    ]:
        with pytest.raises(err, match=field):
            CollapsedOptions(**{field: value})
    assert CollapsedOptions(alpha_reg=1.0).alpha_reg == 1.0  # alpha = 0: plain MF-VI with prior N(0, gamma)
    # keyword form, options object and mapping build the same prior
    configs = [
        build_collapsed("cmv", 2, 1, "regression", (3,), gamma_scale=0.5, delta=0.3).prior.config(),
        build_collapsed(
            "cmv", 2, 1, "regression", (3,), CollapsedOptions(gamma_scale=0.5, delta=0.3)
        ).prior.config(),
        build_collapsed("cmv", 2, 1, "regression", (3,), {"gamma_scale": 0.5}, delta=0.3).prior.config(),
    ]
    assert configs[0] == configs[1] == configs[2] and configs[0]["delta"] == pytest.approx([0.3, 0.3])
    with pytest.raises(ValueError, match="delta"):
        build("cmv-bnn", 2, 1, "regression", hidden=(3,), delta=2.0)
    with pytest.raises(ValueError, match="weight_scale"):
        build("cm-bnn", 2, 1, "regression", hidden=(3,), weight_scale=1.0)
    model, _, spec = build("cm-bnn", 2, 1, "regression", hidden=(3,), gamma_scale=20.0)
    assert spec["options"] == {"gamma_scale": 20.0} and float(model.prior.gamma_scale) == 20.0
    # tanh hidden units (the reference instances' networks): the architecture applies them
    tanh = build_collapsed("cm", 1, 1, "regression", (3,), activation="tanh")
    x = torch.linspace(-2, 2, 7).unsqueeze(-1)
    w0, b0, w1, b1 = torch.randn(3, 1), torch.randn(3), torch.randn(1, 3), torch.randn(1)
    params = {"fc0.weight": w0, "fc0.bias": b0, "fc1.weight": w1, "fc1.bias": b1}
    want = (torch.tanh(x @ w0.T + b0) @ w1.T + b1).squeeze(-1)
    torch.testing.assert_close(tanh.architecture.forward(x, params).squeeze(-1), want)
