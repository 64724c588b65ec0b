"""Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395), the LBBNN-LCRT, LBBNN-FLOW and BNN-FLOW guides in
use: end-to-end fits through the registry (LCRT and weight-space training, predict in every mode, sparsity,
ArviZ export, checkpoints and resume), BNN-FLOW on a Gaussian-prior model, the node-wise horseshoe under the
z-flow guide, ``guide_options`` reaching the flow guides, and the tabular study (App. C): its BMA / MPM
metrics, the weak-signal selection protocol and the staged schedule of Algorithm 1. Ground truths: planted
regression and classification signals (accuracy, RMSE), save/load round trips (same predictions), the
horseshoe z-flow's log-densities computed term by term from the traced draws, and the tabular metrics scored
by hand from the same draws (WAIC, RMSE, ECE, the pinball loss against the exact quantiles of the Gaussian
mixture).
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine

from guides.flows.gaussian import GaussianFlowGuide
from guides.horseshoe.flow import HorseshoeFlowGuide
from guides.lbbnn.lcrt import LCRT_ELBO, fit_lcrt
from zoo.eval.diagnostics import to_inference_data
from zoo.experiments.registry import build
from zoo.infer.checkpoint import load
from zoo.infer.loop import fit, resume

# ---------------------------------------------------------------------------------------------------
# end to end: registry, fit (LCRT and weight-space), predict, export, checkpoints
# ---------------------------------------------------------------------------------------------------


def test_lbbnn_flow_end_to_end_registry_predict_export_checkpoint(tmp_path, device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 4, generator=g).to(device)
    y = (x[:, 0] - x[:, 1] > 0).float()
    for name in ("lcrt", "flow"):
        pyro.clear_param_store()
        model, guide, spec = build("lbbnn", 4, 1, "binary", hidden=(6,), guide=name, hyper="fixed")
        res = fit_lcrt(
            model, guide, x, y, steps=150, lr=0.05, batch_size=40, progress=False, spec=spec, device=device
        )
        resume(res, x, y, 5, progress=False)  # continue with the core default Trace_ELBO
        assert all(math.isfinite(v) for v in res.elbo)
        p = res.predict(x, num_samples=20, seed=0)
        assert float((p.probs.argmax(-1) == y.long()).float().mean()) > 0.85
        for mode in ("mpm", "mean", "mpm-mean"):
            pm = res.predict(x, num_samples=5, mode=mode)
            assert torch.allclose(pm.probs.sum(-1), torch.ones(120, device=device))
        with res.activate():
            rep = guide.sparsity_report(model)
        assert 0.0 <= rep.density <= 1.0
        idata = to_inference_data(res, x[:10], y[:10], num_samples=8)
        assert {"fc0.weight.gamma", "fc0.weight.slab", "fc1.bias"} <= set(idata.posterior.data_vars)
        assert not any("z0" in v for v in idata.posterior.data_vars)  # auxiliary: not exported
        res.save(tmp_path / f"{name}.pt")
        loaded = load(tmp_path / f"{name}.pt", device=device)
        p2 = loaded.predict(x, num_samples=20, seed=0)
        assert torch.allclose(p.probs, p2.probs, atol=1e-6)
        resume(loaded, x, y, 3, progress=False)


def test_bnn_flow_on_gaussian_prior_model_fit_predict(tmp_path, device):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(150, 3, generator=g)
    y = (torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(150, generator=g)).to(device)
    x = x.to(device)
    model, guide, spec = build("mfvi-bnn", 3, 1, "regression", hidden=(16,), guide="flow")
    assert isinstance(guide, GaussianFlowGuide)
    res = fit(
        model, guide, x, y, steps=300, lr=0.03, loss=LCRT_ELBO(), progress=False, spec=spec, device=device
    )
    p = res.predict(x, num_samples=30, seed=0)
    rmse = float(((p.mean - y) ** 2).mean().sqrt())
    assert rmse < 0.5 * float(y.std())
    assert torch.all(p.var > 0)
    idata = to_inference_data(res, x[:10], y[:10], num_samples=8)
    assert {"fc0.weight", "fc1.bias", "sigma2"} <= set(idata.posterior.data_vars)
    res.save(tmp_path / "bnnflow.pt")
    p2 = load(tmp_path / "bnnflow.pt", device=device).predict(x, num_samples=30, seed=0)
    assert torch.allclose(p.mean, p2.mean, atol=1e-5)


def test_horseshoe_prior_under_the_z_flow_guide(tmp_path, device):
    """Paper 004's node-wise horseshoe × paper 003's z-flow: q(β | z) = N(z μ, σ²) per unit row (bias
    column unscaled), the reverse-model factor of Eq. (10), the closed-form auxiliary updates, and the
    whole fit → predict → prune → export → checkpoint path."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(200, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(200, generator=g)
    y = ((y - y.mean()) / y.std()).to(device)
    x = x.to(device)
    model, guide, spec = build("hs-bnn", 3, 1, "regression", hidden=(16,), guide="flow")
    assert isinstance(guide, HorseshoeFlowGuide)
    from zoo.families.horseshoe.entry import default_loss

    assert default_loss(model, guide) is None  # Trace_ELBO: the LRT path assumes a Gaussian q(β)
    with pytest.raises(ValueError, match="Trace_ELBO"):
        guide.lrt_forward(model, x)

    # the wiring, term by term, against a hand computation from the traced z0 and β
    guide.to(device)
    with torch.no_grad():
        tr = poutine.trace(guide).get_trace(x, y)
        tr.compute_log_prob()
        for i, layer in enumerate(guide.layers):
            w_spec = guide._zspecs[i]
            z0 = tr.nodes[f"{layer.prefix}.z0"]["value"]
            assert tr.nodes[f"{layer.prefix}.z0"]["infer"].get("is_auxiliary")
            zk, logdet = guide._zp(w_spec, "zflow")(z0)
            beta = tr.nodes[f"{layer.prefix}.beta"]["value"]
            loc = getattr(guide, f"l{i}_loc")
            z_rows = torch.cat([zk.expand(layer.units, -1), torch.ones(layer.units, 1, device=device)], -1)
            want = torch.distributions.Normal(loc * z_rows, guide._beta_sd(i)).log_prob(beta).sum()
            assert torch.allclose(tr.nodes[f"{layer.prefix}.beta"]["log_prob_sum"], want, rtol=1e-5)
            w = beta[:, : w_spec.shape[1]]
            log_r = guide.log_reverse(w_spec, zk, w @ guide._zp(w_spec, "reverse_e"))
            got = tr.nodes[f"{layer.prefix}.zflow"]["log_prob_sum"]
            assert torch.allclose(got, -logdet - log_r, rtol=1e-5, atol=1e-5)

    res = fit(model, guide, x, y, steps=1500, lr=0.01, progress=False, spec=spec, device=device)
    assert all(math.isfinite(v) for v in res.elbo)
    assert float(np.mean(res.elbo[-50:])) > float(np.mean(res.elbo[:50])) + 500
    # the auxiliaries follow Eq. 9 after every gradient step
    lam_rate = guide.l0_lam_rate.clone()
    guide.update_auxiliaries()
    assert torch.allclose(guide.l0_lam_rate, lam_rate)
    p = res.predict(x, num_samples=50, seed=0)
    assert float(((p.mean - y) ** 2).mean().sqrt()) < 0.5
    with res.activate():
        rep = guide.sparsity_report(model)
    assert set(rep.extras["units_kept"]) == {"fc0"}
    idata = to_inference_data(res, x[:10], y[:10], num_samples=8)
    assert {"fc0.beta", "fc0.tau2", "fc1.beta"} <= set(idata.posterior.data_vars)  # as the HS guides
    assert not any("z0" in v for v in idata.posterior.data_vars)
    res.save(tmp_path / "hsflow.pt")
    p2 = load(tmp_path / "hsflow.pt", device=device).predict(x, num_samples=50, seed=0)
    assert torch.allclose(p.mean, p2.mean, atol=1e-5)


# ------------------------------------------------------------------------------- tabular study (App. C)


def test_guide_options_reach_the_flow_guides():
    """``guide_options`` reach the flow and LCRT guides (the protocols set MADE 2 x 100 / 2 x 250)."""
    import zoo.families.lbbnn.flows  # noqa: F401  (extends the registry entries)

    _, g, spec = build(
        "lbbnn", 5, 1, "binary", hidden=[4], guide="flow", guide_options={"flow_hidden": [7, 6]}
    )
    widths = {m.out_features for m in g.modules() if isinstance(m, torch.nn.Linear)}
    assert spec["guide_options"] == {"flow_hidden": [7, 6]} and {7, 6} <= widths, widths
    _, g2, _ = build("lbbnn", 5, 1, "binary", hidden=[4], guide="lcrt", guide_options={"init_scale": 0.01})
    assert float(g2.fc0_weight_loc.detach().abs().max()) <= 0.01
    with pytest.raises(TypeError, match="guide_options"):
        build("lbbnn", 5, 1, "binary", hidden=[4], guide="lcrt", guide_options={"nope": 1})
    # the horseshoe z-flow guide splits its options between the flows and the horseshoe factors
    opts = {"flow_hidden": [7, 6], "init_sd": 1e-3}
    _, g3, _ = build("hs-bnn", 5, 1, "regression", hidden=[4], guide="flow", guide_options=opts)
    assert {7, 6} <= {m.out_features for m in g3.modules() if isinstance(m, torch.nn.Linear)}
    assert torch.allclose(g3._beta_sd(0), torch.tensor(1e-3))
    with pytest.raises(TypeError, match="guide_options"):
        build("hs-bnn", 5, 1, "regression", hidden=[4], guide="flow", guide_options={"nope": 1})


TAUS = np.arange(1, 20) * 0.05


def _pinball(z, q):
    """Mean pinball loss of quantile predictions ``q`` (19, N) at the levels ``TAUS``."""
    u = z[None] - q
    return float(np.mean(np.maximum(TAUS[:, None] * u, (TAUS[:, None] - 1) * u)))


def _mixture_quantile(locs, tau):
    """The ``tau`` quantile of the equal-weight mixture of N(loc_s, 1) (root of its CDF)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    return brentq(lambda t: norm.cdf(t - locs).mean() - tau, -20, 20)


@pytest.fixture(scope="module")
def tabular_runs():
    from zoo.experiments.runs import fit_on_dataset

    common = {"hidden": [6], "steps": 60, "batch_size": 64, "num_samples": 5, "progress": False}
    opts = {"hyper": "fixed", "inclusion": 0.3}
    reg = fit_on_dataset(
        "lbbnn", "cv10:diabetes", split=2, guide="lcrt", options={**opts, "noise": "fixed"}, **common
    )
    cls = fit_on_dataset("lbbnn", "cv10:breast-cancer", split=2, guide="mean-field", options=opts, **common)
    return reg, cls


def test_tabular_metrics_match_hand_computation(tabular_runs):
    """The protocol's BMA / MPM metrics against the same draws scored by hand: WAIC sums, RMSE on both
    scales, the paper's point pinball, and the quantile pinball against the exact quantiles of the
    Gaussian mixture (its Monte Carlo error is second order, so 0.01 is generous for S = 1000)."""
    from scipy.special import logsumexp
    from scipy.stats import norm

    from zoo.families.lbbnn.tabular import mode_loglik

    reg, cls = tabular_runs
    m = reg.metrics
    y = reg.dataset.y_test
    mu, sd = reg.result.config["y_mean"], reg.result.config["y_std"]
    for mode in ("bma", "mpm"):
        ll, loc = mode_loglik(reg, mode, 1000, seed=0)
        assert ll.shape == loc.shape == (1000, len(y))
        np.testing.assert_allclose(ll, norm.logpdf(y, loc, sd), rtol=1e-5, atol=1e-5)
        lppd = logsumexp(ll, axis=0) - math.log(1000)
        assert m[f"{mode}_p_waic1"] == pytest.approx(2 * np.sum(lppd - ll.mean(0)), rel=1e-6)
        assert m[f"{mode}_p_waic2"] == pytest.approx(np.sum(ll.var(0, ddof=1)), rel=1e-6)
        assert m[f"{mode}_nll"] == pytest.approx(-lppd.mean(), rel=1e-6)
        mean = loc.mean(0)
        assert m[f"{mode}_rmse"] == pytest.approx(np.sqrt(np.mean((y - mean) ** 2)), rel=1e-6)
        assert m[f"{mode}_rmse_std"] == pytest.approx(m[f"{mode}_rmse"] / sd, rel=1e-6)
        z, zl = (y - mu) / sd, (loc - mu) / sd
        point = np.broadcast_to(zl.mean(0), (19, len(z)))
        assert m[f"{mode}_pinball"] == pytest.approx(_pinball(z, point), rel=1e-6)
        exact = np.array([[_mixture_quantile(zl[:, n], t) for n in range(len(z))] for t in TAUS])
        assert abs(m[f"{mode}_pinball_q"] - _pinball(z, exact)) < 0.01
        assert m[f"{mode}_pinball_q"] < m[f"{mode}_pinball"]  # quantiles beat the mean as every quantile
    # MPM networks keep exactly the median-probability weights; BMA draws switch weights on and off
    g = reg.result.guide
    with reg.result.activate():
        masks = g.sparsity_report(reg.result.model).masks
        mpm = g.draw_networks(50, "mpm")
        bma = g.draw_networks(50, "bma")
    for name, keep in masks.items():
        assert (mpm[name][:, ~keep] == 0).all() and (mpm[name][:, keep] != 0).all()
        on = (bma[name] != 0).double().mean(0)
        assert ((on > 0) & (on < 1)).any()
    # classification: accuracy and ECE of the averaged probabilities, WAIC from the same draws
    mc = cls.metrics
    yc = cls.dataset.y_test
    ll, probs = mode_loglik(cls, "bma", 1000, seed=0)
    p = probs.mean(0)
    assert probs.shape == (1000, len(yc), 2)
    np.testing.assert_allclose(ll, np.log(probs[:, np.arange(len(yc)), yc]), rtol=1e-5, atol=1e-6)
    assert mc["bma_accuracy"] == pytest.approx(np.mean(p.argmax(1) == yc))
    conf = p.max(1)
    bins = np.clip(np.ceil(conf * 10).astype(int) - 1, 0, 9)
    ece = sum(abs(np.sum((p.argmax(1) == yc)[bins == b]) - np.sum(conf[bins == b])) for b in range(10)) / len(
        yc
    )
    assert mc["bma_ece"] == pytest.approx(ece, abs=1e-9)
    lppd = logsumexp(ll, axis=0) - math.log(1000)
    assert mc["bma_p_waic1"] == pytest.approx(2 * np.sum(lppd - ll.mean(0)), rel=1e-6)


def test_weak_signal_selection_protocol_runs_on_the_weak_design(tmp_path):
    """``lbbnn-flow-selection-weak``: the three guides on ``logistic-sim-weak`` (smoke budget), TPR/FPR rows
    computed against the scaled truth."""
    import json

    from zoo.experiments.reproduce import run_protocol

    doc = run_protocol(
        "lbbnn-flow-selection-weak",
        tmp_path,
        splits=[0],
        overrides={"steps": 3, "num_samples": 4},
        progress=False,
        variants=["lbbnn-mf", "lbbnn-lcrt"],
    )
    rows = doc["rows"]
    assert {r["variant"] for r in rows} == {"lbbnn-mf", "lbbnn-lcrt"}
    for r in rows:
        assert r["dataset"] == "logistic-sim-weak"
        assert 0.0 <= r["tpr"] <= 1.0 and 0.0 <= r["fpr"] <= 1.0
    assert json.loads((tmp_path / "lbbnn-flow-selection-weak.json").read_text())["rows"] == rows
    md = (tmp_path / "lbbnn-flow-selection-weak.md").read_text()
    assert "Inclusion frequency per covariate on logistic-sim-weak" in md  # per-covariate counts (Fig. 5)
    assert all(len(r["selected"]) == len(r["truth"]) == 20 for r in rows)


@pytest.mark.parametrize("gname", ["lcrt", "flow"])
def test_staged_schedule_drives_lcrt_and_flow_guides(gname):
    """The image protocol's Algorithm 1 stages (``IMAGE_STAGE_LRS``) apply to the LCRT and FLOW guides: the
    inclusion logits move with the high pre-training step size, the schedule is recorded."""
    from guides.lbbnn.training import fit_lbbnn_staged
    from zoo.families.lbbnn.flows import IMAGE_STAGE_LRS

    torch.manual_seed(0)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    pyro.set_rng_seed(0)
    model, guide, _ = build("lbbnn", 6, 3, "multiclass", hidden=(5,), guide=gname, hyper="fixed", eb_steps=4)
    res = fit_lbbnn_staged(
        model, guide, x, y, steps=4, stage_lrs=IMAGE_STAGE_LRS, loss=guide.default_loss(), progress=False
    )
    assert res.config["schedule"]["pretrain"] == 4 and res.steps == 4
    with res.activate():
        alpha = guide.inclusion_probs()["fc0.weight"]
    # 4 Adam steps at 0.1 move logits by up to 0.4; at the slab step size 1e-3 they could move 0.004
    pyro.set_rng_seed(0)
    m0, g0, _ = build("lbbnn", 6, 3, "multiclass", hidden=(5,), guide=gname, hyper="fixed")
    with pyro.get_param_store().scope():
        a0 = g0.inclusion_probs()["fc0.weight"]
    assert (torch.logit(alpha) - torch.logit(a0)).abs().max() > 0.1
