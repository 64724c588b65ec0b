"""Latent-binary BNN (paper 001) in use: median-probability-model sparsity and prediction modes, empirical
Bayes and the staged training schedule (Algorithm 1), checkpoints, the registry entry's options and default
guide, and the initialization-floor benchmark script.

Ground truths: planted inclusion patterns and a planted sparse logistic model (the MPM must recover them), the
network of the MPM's mean weights, ``zoo.infer.loop.fit`` for the unstaged fit (identical ELBO trace), the
documented stage lengths and learning rates, a save/load round trip (same inclusion probabilities and
predictions), and Adam's per-step bound on a parameter's move (Kingma & Ba 2015, §2.1) for the density floor.
"""

from __future__ import annotations

import math

import pyro
import pytest
import torch

from guides.lbbnn.meanfield import MeanFieldLBBNNGuide
from guides.lbbnn.training import fit_lbbnn, param_group
from zoo.experiments.registry import build
from zoo.infer.checkpoint import load
from zoo.infer.loop import fit

from .helpers import lbbnn_model as _model

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
