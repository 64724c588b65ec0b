"""Collapsed variational bounds (Tomczak, Swaroop, Foong & Turner 2021, NeurIPS; issue 7) in Pyro: the two
formulations, the collapsed bound (``CollapsedBoundGuide``) and the hierarchical model with closed-form
optimal hyper-posteriors (``HierarchicalCollapsedGuide``), agree in value and gradient; the closed-form update
sets the optimal factors; learned hyper-parameters are the bound's optimum; both fit, predict, checkpoint and
export to ArviZ; the hierarchical form builds as a plain model with layer-prefixed hyper sites; and its prior
marginals are the collapsed ones. Ground truths: the loss traced by hand (data term + exact penalty), common
random numbers between the two forms (by the envelope theorem their difference has mean 0 in value and
gradient), Eqs. 19, 36 and 50 of the paper, ``optimal_alpha_reg`` / ``optimal_delta``, a save/load round trip,
and KS tests of hierarchical prior draws against the marginal CDF.
"""

from __future__ import annotations

import math
import warnings

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from scipy import stats

from guides.collapsed.bound import PENALTY_SITE, CollapsedBoundGuide, HierarchicalCollapsedGuide
from zoo.eval.diagnostics import to_inference_data
from zoo.families.collapsed.entry import build_collapsed
from zoo.families.collapsed.prior import CollapsedPrior, hyper_site, optimal_alpha_reg, optimal_delta
from zoo.infer.checkpoint import load, save
from zoo.infer.loop import fit

D64 = torch.float64

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
