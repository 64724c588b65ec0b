"""Bow-tie BNN of Sheinkman & Wade (2025, arXiv:2411.11132) in use: fitting through the training loop (CAVI
sweeps and minibatch SVI, §3.3), prediction, Bayesian-FDR pruning, ELBO-weighted ensembles, the registry
entry and its options.

Ground truths: Monte Carlo draws of the predictive (Eq. 25) against the closed forms (Eq. 26), the toy's true
regression function, the ReLU limit ``T, eta -> 0`` (§2.1), pruning rules of §3.4 on hand-set posteriors,
the AM-HM inequality between the paper's and the textbook SVI ``beta`` blends, the law of total variance for
ensembles (§3.6), and a state-dict round trip that reproduces the ELBO.
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Predictive

from guides.bowtie.cavi import BowtieCAVIGuide, ensemble_predictions
from zoo.data.synthetic import bowtie_mean
from zoo.experiments.registry import build, get_entry
from zoo.experiments.reproduce import PROTOCOLS
from zoo.families.bowtie.model import BowtieModel
from zoo.families.bowtie.prior import BowtieNoisePrior, GaussianBowtiePrior
from zoo.infer.loop import fit

from .helpers import bowtie_small_model as small_model
from .helpers import bowtie_toy as toy

F64 = torch.float64

# ------------------------------------------------------------------------------------------------ prediction


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
