"""Latent-binary BNN (paper 001): spike-and-slab prior, mean-field and MVN-logit inclusion guides."""

from __future__ import annotations

import itertools
import math

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO

from guides.lbbnn.distributions import InclusionConcrete
from guides.lbbnn.meanfield import MeanFieldLBBNNGuide
from guides.lbbnn.mvn import MVNLBBNNGuide, expected_sigmoid
from guides.lbbnn.training import fit_lbbnn, param_group
from zoo.core.architectures import MLP
from zoo.core.likelihoods import GaussianLikelihood, make_likelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import build
from zoo.families.lbbnn.prior import SpikeSlabPrior, gaussian_kl, spike_slab_kl
from zoo.infer.checkpoint import load
from zoo.infer.loop import fit

D = torch.float64


def _model(d=4, hidden=(5,), k=3, task="multiclass", **prior_kw):
    arch = MLP(d, hidden, 1 if task == "binary" else k)
    lik = make_likelihood(task, k if task == "multiclass" else 1)
    return BayesianModel(arch, SpikeSlabPrior.for_architecture(arch, **prior_kw), lik)


def _elbo_terms(model, guide, x, y, num):
    """Per-particle ``log p - log q`` over all sites (vectorized particles), shape (num,)."""
    with pyro.plate("_p", num, dim=-2):
        gtr = poutine.trace(guide).get_trace(x, y)
        mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x, y)
    tot = 0.0
    for tr, sign in ((mtr, 1.0), (gtr, -1.0)):
        tr.compute_log_prob()
        for site in tr.nodes.values():
            if site["type"] == "sample" and not (y is None and site["name"] == "obs"):
                lp = site["log_prob"]
                tot = tot + sign * lp.reshape(num, -1).sum(-1) if lp.dim() else tot + sign * lp
    return tot


# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hyper", ["fixed", "eb-point", "hierarchical"])
def test_sites_shapes_and_device(hyper, device):
    model = _model(hyper=hyper).to(device)
    x = torch.randn(7, 4, device=device)
    y = torch.randint(0, 3, (7,), device=device)
    for guide in (
        MeanFieldLBBNNGuide(model),
        MVNLBBNNGuide(model),
        MVNLBBNNGuide(model, covariance="lowrank"),
    ):
        guide.to(device)
        gtr = poutine.trace(guide).get_trace(x, y)
        mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x, y)
        assert gtr.nodes["fc0.weight.gamma"]["value"].shape == (5, 4)
        assert gtr.nodes["fc1.weight.slab"]["value"].shape == (3, 5)
        g = gtr.nodes["fc0.weight.gamma"]["value"]
        assert set(g.unique().tolist()) <= {0.0, 1.0}  # straight-through: hard forward values
        assert mtr.nodes["f"]["value"].shape == (7, 3)
        assert mtr.nodes["f"]["value"].device.type == device.type
        if hyper == "hierarchical":
            assert "fc0.psi" in gtr.nodes and "fc1.sigma2" in gtr.nodes
        loss = Trace_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=1).differentiable_loss(
            model, guide, x, y
        )
        assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="hyper"):
        SpikeSlabPrior(2, hyper="beta")
    with pytest.raises(ValueError, match="inclusion"):
        SpikeSlabPrior(2, inclusion=1.0)
    with pytest.raises(TypeError, match="SpikeSlabPrior"):
        MeanFieldLBBNNGuide(build("mfvi-bnn", 4, 3, "multiclass")[0])


def test_concrete_sampler_mean_and_gradient():
    torch.manual_seed(0)
    alpha = torch.tensor([0.05, 0.3, 0.5, 0.9])
    logits = torch.logit(alpha).requires_grad_()
    n = 200_000
    st = InclusionConcrete(logits.expand(n, 4), 0.5, straight_through=True).rsample()
    # hard forward value is exactly Bernoulli(α): mean within 5 standard errors
    se = (alpha * (1 - alpha) / n).sqrt()
    assert torch.all((st.detach().mean(0) - alpha).abs() < 5 * se)
    assert set(st.detach().unique().tolist()) == {0.0, 1.0}
    st.sum().backward()
    assert torch.all(torch.isfinite(logits.grad)) and torch.all(logits.grad > 0)
    # relaxed (paper) values approach Bernoulli(α) as δ -> 0; at δ = 0.5 they are genuinely soft
    soft = InclusionConcrete(logits.detach().expand(n, 4), 0.01, straight_through=False).rsample()
    assert torch.all((soft.mean(0) - alpha).abs() < 5 * se + 0.01)
    mid = InclusionConcrete(logits.detach().expand(n, 4), 0.5, straight_through=False).rsample()
    assert ((mid > 0.05) & (mid < 0.95)).float().mean() > 0.3


def test_mc_kl_matches_closed_form():
    """E_q[log q - log p] by MC (hard γ, δ₀ cancellation) equals the closed form (Eqs. 4.5-4.7 of
    arXiv:1903.07594)."""
    torch.manual_seed(1)
    model = _model(d=3, hidden=(4,), k=2, inclusion=0.3, slab_var=0.7).to(D)
    guide = MeanFieldLBBNNGuide(model, kl="mc", init_rho=(-1.5, -0.5)).to(D)
    with torch.no_grad():
        for s in model.specs:
            if s.role == "weight":
                getattr(guide, s.name.replace(".", "_") + "_omega").uniform_(-2, 2)
    x = torch.randn(5, 3, dtype=D)
    n = 20000
    with pyro.plate("_p", n, dim=-2), torch.no_grad():
        gtr = poutine.trace(guide).get_trace(x, None)
        mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x, None)
    gtr.compute_log_prob()
    mtr.compute_log_prob()
    sites = [k for k, v in gtr.nodes.items() if v["type"] == "sample"]
    mc = sum((gtr.nodes[k]["log_prob"] - mtr.nodes[k]["log_prob"]).reshape(n) for k in sites)
    with torch.no_grad():
        exact = 0.0
        for s in model.specs:
            loc, scale = guide.slab_params(s)
            if s.role == "weight":
                om = getattr(guide, s.name.replace(".", "_") + "_omega")
                exact += float(
                    spike_slab_kl(
                        om, loc, scale, torch.tensor(0.3, dtype=D), torch.tensor(0.7, dtype=D)
                    ).sum()
                )
            else:
                exact += float(gaussian_kl(loc, scale, torch.tensor(1.0, dtype=D)).sum())
    se = float(mc.detach().std()) / math.sqrt(n)
    assert abs(float(mc.detach().mean()) - exact) < 4 * se, (float(mc.detach().mean()), exact, se)
    # the closed-form guide reports exactly -KL when the likelihood is absent
    guide_cf = MeanFieldLBBNNGuide(model, kl="closed-form").to(D)
    guide_cf.load_state_dict(guide.state_dict())
    with pyro.get_param_store().scope():
        guide_cf.load_state_dict(guide.state_dict())
        terms = _elbo_terms(model, guide_cf, x, None, 4)
    assert torch.allclose(terms, torch.full_like(terms, -exact), atol=1e-8)


# ------------------------------------------------------------------------------------- bound check


def _tiny_regression():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(12, 3, generator=g, dtype=D)
    y = x @ torch.tensor([1.2, 0.0, -0.8], dtype=D) + 0.5 * torch.randn(12, generator=g, dtype=D)
    psi, s2, noise = 0.4, 1.5, 0.5
    arch = MLP(3, (), 1, bias=False)
    model = BayesianModel(
        arch,
        SpikeSlabPrior.for_architecture(arch, inclusion=psi, slab_var=s2),
        GaussianLikelihood("fixed", scale=noise),
    ).to(D)
    # exact log p(D): sum over the 8 inclusion patterns of the conjugate Gaussian marginal likelihood
    terms = []
    for pat in itertools.product([0, 1], repeat=3):
        m = torch.tensor(pat, dtype=D)
        cov = noise**2 * torch.eye(12, dtype=D) + s2 * (x * m) @ (x * m).T
        lp = torch.distributions.MultivariateNormal(torch.zeros(12, dtype=D), cov).log_prob(y)
        terms.append(lp + m.sum() * math.log(psi) + (3 - m.sum()) * math.log(1 - psi))
    return model, x, y, float(torch.logsumexp(torch.stack(terms), 0)), (psi, s2, noise)


def _exact_mf_elbo(guide, model, x, y, hyp, alpha=None):
    """Exact mean-field ELBO of the linear-Gaussian case (E||y - Xw||² has a closed form)."""
    psi, s2, noise = hyp
    spec = model.specs[0]
    loc, scale = guide.slab_params(spec)
    logit = torch.logit(alpha) if alpha is not None else guide.fc0_weight_omega
    a = torch.sigmoid(logit)
    m = (a * loc).reshape(-1)
    v = (a * (scale**2 + loc**2) - (a * loc) ** 2).reshape(-1)
    ess = ((y - x @ m) ** 2).sum() + ((x**2) * v).sum()
    ll = -0.5 * len(y) * math.log(2 * math.pi * noise**2) - 0.5 * ess / noise**2
    kl = spike_slab_kl(logit, loc, scale, torch.tensor(psi, dtype=D), torch.tensor(s2, dtype=D)).sum()
    return ll - kl


def test_bound_is_valid_lower_bound_by_enumeration():
    model, x, y, logpd, hyp = _tiny_regression()
    torch.manual_seed(0)
    # mean-field: MC estimate of the ELBO agrees with the exact value, which lies below log p(D)
    mf = MeanFieldLBBNNGuide(model, init_rho=(-1.0, -0.5)).to(D)
    res = fit(model, mf, x, y, steps=400, lr=5e-2, progress=False, seed=0)
    with res.activate(), torch.no_grad():
        exact = float(_exact_mf_elbo(mf, model, x, y, hyp))
        mc = _elbo_terms(model, mf, x, y, 4000)
    assert exact <= logpd
    se = float(mc.std()) / math.sqrt(len(mc))
    assert abs(float(mc.mean()) - exact) < 4 * se + 1e-6
    assert logpd - exact < 2.0  # and the fitted bound is informative (gap under 2 nats)
    # MVN-logit guides: the auxiliary bound never exceeds log p(D) (before and after fitting)
    for kw in ({"covariance": "full"}, {"covariance": "lowrank", "aux": "reverse"}):
        pyro.clear_param_store()
        g = MVNLBBNNGuide(model, init_rho=(-1.0, -0.5), init_sd=1.0, **kw).to(D)
        for steps in (0, 300):
            r = fit(model, g, x, y, steps=steps, lr=5e-2, progress=False, seed=1)
            with r.activate(), torch.no_grad():
                t = _elbo_terms(model, g, x, y, 4000)
            se = float(t.std()) / math.sqrt(len(t))
            assert float(t.mean()) - 4 * se <= logpd, (kw, steps, float(t.mean()), logpd)
        assert logpd - float(t.mean()) < 2.5
    # with r = q(λ) the bound is E_λ[exact MF ELBO at α = σ(λ)] (the reference code's objective)
    pyro.clear_param_store()
    g = MVNLBBNNGuide(model, covariance="full", init_sd=0.8).to(D)
    with torch.no_grad(), pyro.get_param_store().scope():
        lam = g.draw_inclusion_logits(0, model.specs[0], 4000)
        vals = torch.stack([_exact_mf_elbo(g, model, x, y, hyp, torch.sigmoid(lam_i)) for lam_i in lam])
        t = _elbo_terms(model, g, x, y, 4000)
    se = math.hypot(float(vals.std()), float(t.std())) / math.sqrt(4000)
    assert abs(float(vals.mean()) - float(t.mean())) < 4 * se
    assert float(vals.max()) <= logpd


def test_expected_sigmoid_quadrature():
    torch.manual_seed(0)
    mean, var = torch.tensor([-1.0, 0.3, 2.0], dtype=D), torch.tensor([0.5, 2.0, 0.1], dtype=D)
    z = mean + var.sqrt() * torch.randn(400_000, 3, dtype=D)
    mc = torch.sigmoid(z)
    assert torch.all((expected_sigmoid(mean, var) - mc.mean(0)).abs() < 5 * mc.std(0) / math.sqrt(4e5))


# ------------------------------------------------------------------------------ sparsity & prediction


def test_mpm_density_and_prediction_modes_on_planted_network():
    torch.manual_seed(0)
    model = _model(d=6, hidden=(4,), k=3)
    guide = MeanFieldLBBNNGuide(model)
    planted = {s.name: torch.rand(s.shape) < 0.3 for s in model.specs if s.role == "weight"}
    with torch.no_grad():
        for name, m in planted.items():
            om = getattr(guide, name.replace(".", "_") + "_omega")
            om.copy_(torch.where(m, torch.tensor(2.0), torch.tensor(-2.0)))
    rep = guide.sparsity_report(model)
    for name, m in planted.items():
        assert torch.equal(rep.masks[name], m)
    total = sum(m.numel() for m in planted.values())
    assert rep.density == pytest.approx(sum(int(m.sum()) for m in planted.values()) / total)
    assert rep.extras["mean_inclusion"]["fc0.weight"] == pytest.approx(
        float(torch.sigmoid(torch.where(planted["fc0.weight"], 2.0, -2.0)).mean()), rel=1e-6
    )
    x = torch.randn(9, 6)
    # MED MEA = the network with weights I(α > 0.5) κ and bias means; ALL MEA = α κ
    with torch.no_grad():
        p = {}
        for s in model.specs:
            loc = getattr(guide, s.name.replace(".", "_") + "_loc")
            p[s.name] = loc * planted[s.name] if s.role == "weight" else loc
        ref = torch.softmax(model.architecture(x, p), -1)
    out = guide.predictive(model, x, num_samples=5, mode="mpm-mean")
    assert torch.allclose(out.probs, ref, atol=1e-6)
    bma = guide.predictive(model, x, num_samples=10, mode="bma")
    assert bma.draw_probs.shape == (10, 9, 3) and torch.allclose(bma.probs.sum(-1), torch.ones(9))
    with pytest.raises(ValueError, match="mode"):
        guide.predictive(model, x, mode="median")


def test_planted_sparse_logistic_selection():
    """A one-neuron LBBNN recovers the support of a planted sparse logistic model (MPM)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=g)
    beta = torch.tensor([2.0, 0, 0, -2.0, 0, 1.5, 0, 0])
    y = torch.bernoulli(torch.sigmoid(x @ beta), generator=g)
    model, guide, _ = build("lbbnn", 8, 1, "binary", hidden=(), hyper="fixed", inclusion=0.25)
    res = fit(model, guide, x, y, steps=600, lr=5e-2, progress=False, seed=0)
    with res.activate():
        rep = guide.sparsity_report(model)
    assert torch.equal(rep.masks["fc0.weight"].reshape(-1), beta != 0)
    assert rep.density == pytest.approx(3 / 8)


# --------------------------------------------------------------------------------- schedule & EB


def test_empirical_bayes_moves_then_freezes():
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = torch.randint(0, 3, (64,))
    model, guide, _ = build(
        "lbbnn", 4, 3, "multiclass", hidden=(6,), hyper="eb-point", inclusion=0.2, eb_steps=60
    )
    psi0 = model.prior.psi.clone()
    res = fit(model, guide, x, y, steps=60, lr=5e-2, progress=False)
    assert bool(model.prior.eb_frozen) and not model.prior.eb_trainable
    psi1 = model.prior.psi.clone()
    assert torch.all(psi1 - psi0 > 0.02)  # ψ moved up towards the mean α (≈ 0.5-0.7 at init)
    from zoo.infer.loop import resume

    resume(res, x, y, 40, progress=False)
    assert torch.equal(model.prior.psi, psi1)
    with res.activate():
        assert torch.allclose(model.prior.eb_psi.detach(), psi1)  # the parameter is no longer stepped
    # fit_lbbnn: per-group learning rates, fresh optimizer per stage, structure frozen in post-training
    model, guide, _ = build("lbbnn", 4, 3, "multiclass", hidden=(6,), hyper="eb-point", eb_steps=0)
    res = fit_lbbnn(model, guide, x, y, pretrain_steps=20, train_steps=20, posttrain_steps=10, batch_size=32)
    assert bool(model.prior.eb_frozen) and bool(guide.structure_frozen) and res.steps == 50
    with res.activate():
        a0 = guide.inclusion_probs()
    from zoo.infer.loop import resume as _resume

    _resume(res, x, y, 5, progress=False)
    with res.activate():
        assert all(torch.equal(a0[k], v) for k, v in guide.inclusion_probs().items())
    assert param_group("fc0_weight_omega") == "omega" and param_group("prior.eb_psi") == "psi"
    assert param_group("fc0_weight_loc") == "slab" and param_group("fc1_weight_scale_tril_off") == "sigma"


def test_eb_early_stop_rule_freezes_when_layer_one_psi_drops():
    """``eb_stop_inclusion`` (the reference code's rule): the EB stage ends as soon as ψ of
    layer 1 is below the threshold, long before ``eb_steps``; 0 disables it; bad values are rejected."""
    torch.manual_seed(0)

    def eb_model(**kw):
        return build("lbbnn", 4, 3, "multiclass", hidden=(6,), hyper="eb-point", **kw)[:2]

    model, guide = eb_model(inclusion=0.5, eb_steps=1000, eb_stop_inclusion=0.3)
    prior = model.prior
    assert not prior.eb_stage_over(1) and prior.eb_stage_over(1000)
    prior.eb_psi = torch.tensor([0.29, 0.9])  # PyroModule: sets the (constrained) parameter's value
    assert prior.eb_stage_over(1)
    guide.closed_form_update(model, torch.zeros(2, 4), None)
    assert bool(prior.eb_frozen) and torch.allclose(prior.psi, torch.tensor([0.29, 0.9]))
    assert not prior.eb_stage_over(5000)  # frozen: nothing left to stop
    off, _ = eb_model(inclusion=0.01, eb_steps=9)
    assert not off.prior.eb_stage_over(1) and off.prior.eb_stage_over(9)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="eb_stop_inclusion"):
            eb_model(eb_stop_inclusion=bad)
    # through a real fit: with a threshold above the initial ψ the stage ends after the first step
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    m2, g2 = eb_model(inclusion=0.2, eb_steps=500, eb_stop_inclusion=0.25)
    fit(m2, g2, x, y, steps=3, lr=5e-2, progress=False)
    assert bool(m2.prior.eb_frozen)


def test_fit_lbbnn_staged_is_the_entry_fit_function(tmp_path):
    """``fit_options={"stage_lrs": ...}`` runs Algorithm 1 (pre-training = the prior's ``eb_steps``, fresh
    per-stage optimizers, hyperparameters frozen); without it the entry fits like ``zoo.infer.loop.fit``."""
    from guides.lbbnn.training import STAGE_LRS, fit_lbbnn_staged
    from zoo.experiments.runs import fit_on_dataset

    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    model, guide, _ = build("lbbnn", 4, 3, "multiclass", hidden=(6,), hyper="eb-point", eb_steps=7)
    res = fit_lbbnn_staged(model, guide, x, y, steps=12, stage_lrs="short", batch_size=32, progress=False)
    assert res.steps == 12 and res.config["schedule"] == {"pretrain": 7, "train": 5, "posttrain": 0}
    assert bool(model.prior.eb_frozen) and STAGE_LRS["paper"]["pretrain"]["omega"] == 0.1
    # the same seed and plain fit give identical parameters to zoo.infer.loop.fit
    pyro.set_rng_seed(1)
    m1, g1, _ = build("lbbnn", 4, 3, "multiclass", hidden=(6,), hyper="fixed")
    r1 = fit_lbbnn_staged(m1, g1, x, y, steps=5, lr=1e-2, progress=False, seed=3)
    pyro.set_rng_seed(1)
    m2, g2, _ = build("lbbnn", 4, 3, "multiclass", hidden=(6,), hyper="fixed")
    r2 = fit(m2, g2, x, y, steps=5, lr=1e-2, progress=False, seed=3)
    assert r1.elbo == pytest.approx(r2.elbo) and "schedule" not in r1.config
    with pytest.raises(ValueError, match="stage_lrs"):
        fit_lbbnn_staged(model, guide, x, y, steps=3, stage_lrs="nope")
    # through fit_on_dataset (what protocols call), with a time budget spanning the stages
    run = fit_on_dataset(
        "lbbnn",
        "breast-cancer",
        hidden=[5],
        steps=30,
        batch_size=64,
        num_samples=4,
        progress=False,
        options={"hyper": "eb-point", "eb_steps": 10},
        fit_options={"stage_lrs": "short"},
        max_seconds=600,
    )
    assert run.metrics["steps"] == 30 and run.result.config["schedule"]["pretrain"] == 10
    assert bool(run.result.model.prior.eb_frozen)
    with pytest.raises(ValueError, match="fit_options"):
        fit_on_dataset(
            "mfvi-bnn", "breast-cancer", steps=2, fit_options={"stage_lrs": "short"}, progress=False
        )


# ------------------------------------------------------------------------------ checkpoint & BNN


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(40, 4)
    y = torch.randint(0, 3, (40,))
    for gname in ("mean-field", "lowrank-mvn"):
        model, guide, spec = build("lbbnn", 4, 3, "multiclass", hidden=(5,), guide=gname, eb_steps=5)
        res = fit(model, guide, x, y, steps=10, progress=False, spec=spec)
        res.save(tmp_path / f"{gname}.pt")
        back = load(tmp_path / f"{gname}.pt")
        with res.activate():
            a = guide.inclusion_probs()
            pa = guide.predictive(model, x, mode="mean").probs
        with back.activate():
            b = back.guide.inclusion_probs()
            pb = back.guide.predictive(back.model, x, mode="mean").probs
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert torch.allclose(pa, pb)
        assert torch.equal(back.model.prior.psi, model.prior.psi) and bool(back.model.prior.eb_frozen)


def test_reduces_to_gaussian_bnn_when_alpha_is_one():
    """With α ≡ 1 the LBBNN ELBO is the Bayes-by-backprop ELBO minus the constant Σ log(1/ψ)."""
    torch.manual_seed(0)
    psi = 0.25  # exactly representable: the prior's buffers start in float32
    model = _model(d=3, hidden=(4,), k=2, inclusion=psi).to(D)
    guide = MeanFieldLBBNNGuide(model, init_rho=(-2.0, -1.0)).to(D)
    with torch.no_grad():
        for s in model.specs:
            if s.role == "weight":
                getattr(guide, s.name.replace(".", "_") + "_omega").fill_(60.0)
    x = torch.randn(6, 3, dtype=D)
    y = torch.randint(0, 2, (6,))
    gtr = poutine.trace(guide).get_trace(x, y)
    mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x, y)
    elbo = float(mtr.log_prob_sum() - gtr.log_prob_sum())
    with torch.no_grad():
        params, kl, n_w = {}, 0.0, 0
        for s in model.specs:
            loc, scale = guide.slab_params(s)
            if s.role == "weight":
                assert torch.all(gtr.nodes[f"{s.name}.gamma"]["value"] == 1)
                params[s.name] = gtr.nodes[f"{s.name}.slab"]["value"]
                n_w += s.numel
            else:
                params[s.name] = gtr.nodes[s.name]["value"]
            kl += float(gaussian_kl(loc, scale, torch.tensor(1.0, dtype=D)).sum())
        f = model.architecture(x, params)
        ll = float(torch.distributions.Categorical(logits=f).log_prob(y).sum())
    bbb = ll - kl
    assert elbo == pytest.approx(bbb - n_w * math.log(1 / psi), abs=1e-8)


@pytest.mark.parametrize("guide_name", ["mean-field", "lcrt", "mvn"])
def test_closed_form_kl_elbo_equals_trace_elbo(guide_name):
    """ClosedFormKL_ELBO (model scores of the closed-form sites masked, guide adds the KL alone) gives the
    same loss and the same gradients as Trace_ELBO (guide adds KL + log p to cancel the model's score) on
    the same random draws; the LBBNN guides use it by default with the closed-form KL."""
    import pyro.infer

    import zoo.families.lbbnn.flows  # noqa: F401  (registers lcrt)
    from guides.lbbnn.elbo import ClosedFormKL_ELBO
    from zoo.experiments.registry import build

    torch.manual_seed(0)
    x, y = torch.randn(40, 5), torch.randint(0, 3, (40,))
    model, guide, _ = build("lbbnn", 5, 3, "multiclass", hidden=[7], guide=guide_name, hyper="fixed")
    out, calls = {}, []
    log_density = model.prior.log_density
    model.prior.log_density = lambda *a, **k: calls.append(1) or log_density(*a, **k)
    for loss in (pyro.infer.Trace_ELBO(), ClosedFormKL_ELBO()):
        pyro.clear_param_store()
        pyro.set_rng_seed(11)
        calls.clear()
        value = loss.differentiable_loss(model, guide, x, y)
        # the cancelling prior score is computed only under Trace_ELBO
        assert (len(calls) > 0) == (type(loss) is pyro.infer.Trace_ELBO)
        params = [p for p in guide.parameters() if p.requires_grad]
        grads = torch.autograd.grad(value, params, allow_unused=True)
        out[type(loss).__name__] = (
            value.detach(),
            [g if g is not None else torch.zeros_like(p) for g, p in zip(grads, params)],
        )
    (v0, g0), (v1, g1) = out.values()
    torch.testing.assert_close(v1, v0, rtol=1e-5, atol=1e-3)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    assert guide.closed_form_sites() and "fc0.weight.slab" in guide.closed_form_sites()
    if guide_name != "lcrt":
        assert isinstance(guide.default_loss(), ClosedFormKL_ELBO)


def test_init_floor_script_density_stays_above_the_logit_budget_floor():
    """``benchmarks/lbbnn_init_floor.py``: under Adam at lr η every inclusion logit moves at most about
    η·t in t steps, so the MPM density can never fall below ``P(λ₀ > η·t)`` for λ₀ ~ U(−15, 10)
    (the mechanism behind paper 003's MNIST densities, benchmarks/RESULTS.md)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "lbbnn_init_floor.py"
    spec = importlib.util.spec_from_file_location("lbbnn_init_floor", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.floor(0.0) == pytest.approx(0.4) and mod.floor(8.25) == pytest.approx(0.07)
    steps, lr = 40, 0.05  # budget 2.0 logits: floor 0.32
    out = mod.main(
        ["--dataset", "digits", "--steps", str(steps), "--lr", str(lr), "--every", "20", "--hidden", "30"]
    )
    # Kingma & Ba (2015) §2.1: one Adam step moves a parameter by at most lr·(1−β1)/√(1−β2)
    assert out["max_abs_dlambda"] <= lr * steps * 0.1 / math.sqrt(1e-3)
    # the KL drives the logits down at close to full speed, so the density tracks the floor P(λ₀ > lr·t)
    for row in out["trajectory"]:
        assert row["floor"] - 0.01 <= row["density"] <= row["floor"] + 0.04
    # every weight that started above the budget is still in the median-probability model
    top = out["bins"][-1]
    assert top["lambda0"] == [5, 10] and top["kept"] == 1.0
    # and the budget was used: logits that started just above 0 were pushed down by the KL
    assert out["bins"][2]["mean_dlambda"] < -0.5


def test_registered_kls_agree_with_the_explicit_closed_form():
    """``kl_divergence(q(γ), Bernoulli(ψ))`` is registered for the inclusion distribution, and the KL pieces
    built on torch's Bernoulli entropy / ``kl_divergence(Normal, Normal)`` equal the explicit formulas
    of Eqs. 4.5-4.7 (arXiv:1903.07594) to float precision."""
    from torch.distributions import Bernoulli, kl_divergence

    from zoo.families.lbbnn.prior import InclusionPrior, bernoulli_kl

    g = torch.Generator().manual_seed(0)
    for dtype, tol in ((D, 1e-13), (torch.float32, 2e-6)):
        logits = 6 * torch.randn(40, 30, generator=g, dtype=dtype)
        loc = torch.randn(40, 30, generator=g, dtype=dtype)
        scale = 0.01 + torch.rand(40, 30, generator=g, dtype=dtype)
        psi, s2 = torch.tensor(0.3, dtype=dtype), torch.tensor(0.7, dtype=dtype)
        a = torch.sigmoid(logits)
        log_a, log_1ma = torch.nn.functional.logsigmoid(logits), torch.nn.functional.logsigmoid(-logits)
        bern = a * (log_a - torch.log(psi)) + (1 - a) * (log_1ma - torch.log1p(-psi))
        gauss = 0.5 * (torch.log(s2) - 2 * torch.log(scale) + (scale**2 + loc**2) / s2 - 1)
        torch.testing.assert_close(bernoulli_kl(logits, psi), bern, rtol=tol, atol=tol)
        torch.testing.assert_close(gaussian_kl(loc, scale, s2), gauss, rtol=tol, atol=tol)
        ss = spike_slab_kl(logits, loc, scale, psi, s2)
        torch.testing.assert_close(ss, bern + a * gauss, rtol=tol, atol=tol)
        q = InclusionConcrete(logits, 0.5)
        torch.testing.assert_close(
            kl_divergence(q, Bernoulli(probs=psi.expand(40, 30))), bernoulli_kl(logits, psi)
        )
        p = InclusionPrior(psi, torch.Size((40, 30)))
        torch.testing.assert_close(kl_divergence(q, p), bernoulli_kl(logits, psi))
    # saturated logits stay finite
    assert torch.isfinite(bernoulli_kl(torch.tensor([-200.0, 200.0]), torch.tensor(0.1))).all()


def test_lbbnn_options_config_validates_and_keeps_the_keyword_form():
    """The builder's options are a validated :class:`LBBNNOptions`; the old keyword calls still work."""
    import dataclasses

    from zoo.experiments.registry import get_entry
    from zoo.families.lbbnn.entry import LBBNNOptions, build_lbbnn

    assert get_entry("lbbnn").options is LBBNNOptions
    defaults = LBBNNOptions()
    assert defaults.inclusion == 0.25 and defaults.hyper == "eb-point" and defaults.eb_steps == 500
    kw = build_lbbnn(4, 3, "multiclass", (5,), hyper="fixed", inclusion=0.2)
    opt = build_lbbnn(4, 3, "multiclass", (5,), options=LBBNNOptions(hyper="fixed", inclusion=0.2))
    mixed = build_lbbnn(4, 3, "multiclass", (5,), options={"hyper": "fixed"}, inclusion=0.2)
    assert kw.prior.config() == opt.prior.config() == mixed.prior.config()
    assert LBBNNOptions.from_dict(defaults.to_dict()) == defaults
    with pytest.raises(ValueError, match="nope"):
        build_lbbnn(4, 3, "multiclass", (5,), nope=1)
    for field, bad in (("inclusion", 1.0), ("hyper", "beta"), ("noise", "free"), ("slab_var", -1.0)):
        with pytest.raises(ValueError, match=field):
            LBBNNOptions(**{field: bad})
        with pytest.raises(ValueError, match=field):
            build("lbbnn", 4, 3, "multiclass", hidden=(5,), **{field: bad})
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.inclusion = 0.5


def test_default_guide_is_lcrt_and_the_paper_protocols_name_mean_field():
    """The entry's default guide is LCRT (the same family as ``mean-field``, a higher ELBO:
    benchmarks/lbbnn_guides_elbo.py); the paper-001 image protocol still fits the mean-field estimator."""
    from guides.lbbnn.lcrt import LCRTLBBNNGuide
    from zoo.experiments.registry import get_entry
    from zoo.experiments.reproduce import PROTOCOLS

    assert get_entry("lbbnn").default_guide == "lcrt"
    _, guide, _ = build("lbbnn", 3, 1, "regression", hidden=(4,))
    assert type(guide) is LCRTLBBNNGuide
    _, mf, _ = build("lbbnn", 3, 1, "regression", hidden=(4,), guide="mean-field")
    assert type(mf) is MeanFieldLBBNNGuide
    runs = PROTOCOLS["lbbnn-mnist10k"].runs([0])
    guides = {r.variant: r.kwargs.get("guide") for r in runs if r.model == "lbbnn"}
    assert guides == {"lbbnn-mf": "mean-field", "lbbnn-mvn": "mvn", "lbbnn-lowrank-mvn": "lowrank-mvn"}
