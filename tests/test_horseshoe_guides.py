"""Horseshoe guides end to end (paper 004): pruning, centered vs non-centered, autoguides, checkpoints,
registry entries, protocols and the CLI."""

from __future__ import annotations

import json
import math

import pyro
import pytest
import torch

from guides.autoguides import make_autoguide
from guides.horseshoe.factorized import HorseshoeGuide
from guides.horseshoe.pruning import prune_network
from guides.horseshoe.semi_structured import SemiStructuredHorseshoeGuide
from guides.horseshoe.structured import StructuredHorseshoeGuide
from guides.horseshoe.tied import TiedHorseshoeGuide
from zoo.core.architectures import MLP
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import available, build
from zoo.experiments.reproduce import PROTOCOLS, available_protocols
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.infer import checkpoint
from zoo.infer.loop import fit

PLANTED_OFF = [1, 3, 4]


def small_data(n=64, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)


def _plant(guide, structured: bool):
    """Units PLANTED_OFF get tau ~ e^-20 (tau v ~ 5e-9 < delta), the others tau ~ 1."""
    with torch.no_grad():
        mu = torch.zeros(6)
        mu[PLANTED_OFF] = -40.0
        if structured:
            guide.l0_m_unconstrained[:, -1] = mu
        else:
            guide.l0_tau_mu_unconstrained.copy_(mu)
        guide.l0_v_mu_unconstrained.fill_(0.0)
        guide.update_auxiliaries()


@pytest.mark.parametrize("family", [HorseshoeGuide, StructuredHorseshoeGuide], ids=lambda c: c.family)
def test_pruning_keeps_exactly_the_planted_units_and_pruned_net_predicts(family):
    torch.manual_seed(0)
    model = BayesianModel(MLP(3, (6,), 1), HorseshoePrior(), GaussianLikelihood("gamma", 6.0, 6.0))
    guide = family(model)
    _plant(guide, family is StructuredHorseshoeGuide)
    report = guide.sparsity_report(model)
    keep = report.masks["fc0.weight"].any(1)
    assert keep.tolist() == [k not in PLANTED_OFF for k in range(6)]
    assert report.masks["fc0.bias"].tolist() == keep.tolist()
    assert report.masks["fc1.weight"][0].tolist() == keep.tolist()  # the pruned units' outgoing weights
    assert report.extras["units_kept"] == {"fc0": 3}
    assert report.extras["compression"] == {"fc0": 0.5}
    assert report.density == pytest.approx((3 * 4 + 3 + 1) / (6 * 4 + 6 + 1))
    norms = report.extras["weight_norms"]["fc0"]
    assert max(norms[k] for k in PLANTED_OFF) < 1e-6 < min(norms[k] for k in range(6) if k not in PLANTED_OFF)
    params = guide.posterior_mean_params(model)
    small, small_params = prune_network(model, params, report)
    assert small.hidden == (3,)
    x = torch.randn(20, 3)
    full_out = model.architecture(x, params)
    assert torch.allclose(small(x, small_params), full_out, atol=1e-5, rtol=1e-5)


def _fit(model, guide, steps=20, **kw):
    x, y = small_data()
    return fit(
        model, guide, x.to(torch.float32), y, steps=steps, lr=5e-3, batch_size=32, progress=False, **kw
    )


def test_centered_and_noncentered_smoke():
    x, _ = small_data()
    for centered in (False, True):
        model, guide, _ = build("hs-bnn", 3, 1, "regression", hidden=[5], centered=centered)
        r = _fit(model, guide)
        assert all(math.isfinite(e) for e in r.elbo)
        site = "fc0.w" if centered else "fc0.beta"
        assert site in pyro.poutine.trace(guide).get_trace().nodes
        pred = r.predict(x[:7], num_samples=10)
        assert pred.mean.shape == (7,) and torch.isfinite(pred.var).all()
        with r.activate():
            assert 0 < guide.sparsity_report(model).density <= 1
    with pytest.raises(ValueError, match="centered"):
        build("hs-bnn", 3, 1, "regression", hidden=[5], centered=True, guide="structured")


def test_autoguide_runs_on_the_horseshoe_prior():
    model = BayesianModel(
        MLP(3, (5,), 1), HorseshoePrior(regularized=True), GaussianLikelihood("gamma", 6, 6)
    )
    guide = make_autoguide("normal", model)
    r = _fit(model, guide, steps=15)
    assert all(math.isfinite(e) for e in r.elbo)
    assert r.predict(small_data()[0][:4], num_samples=5).mean.shape == (4,)


@pytest.mark.parametrize(
    "guide_name", ["factorized", "structured", "tied", "semi-structured"], ids=lambda s: s
)
def test_checkpoint_round_trip(tmp_path, guide_name, device):
    x, y = (t.to(device) for t in small_data())
    pyro.set_rng_seed(0)
    model, guide, spec = build("reg-hs-bnn", 3, 1, "regression", hidden=[4], guide=guide_name)
    r = fit(model, guide, x, y, steps=6, lr=5e-3, batch_size=32, progress=False, spec=spec, device=device)
    path = tmp_path / "ckpt.pt"
    checkpoint.save(r, path)
    r2 = checkpoint.load(path)
    assert type(r2.guide) is type(guide)
    s1, s2 = guide.state_dict(), r2.guide.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    p1 = r.predict(x[:5], num_samples=8, seed=3).mean
    p2 = r2.predict(x[:5], num_samples=8, seed=3).mean
    assert torch.equal(p1, p2)
    with r2.activate():
        assert r2.guide.sparsity_report(r2.model).as_dict() == guide.sparsity_report(model).as_dict()
    # resume continues the exact run: fit 6 + save/load + 4 == fit 10
    from zoo.infer.loop import resume

    resume(r2, x, y, 4, progress=False)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    model3, guide3, _ = build("reg-hs-bnn", 3, 1, "regression", hidden=[4], guide=guide_name)
    r3 = fit(model3, guide3, x, y, steps=10, lr=5e-3, batch_size=32, progress=False, spec=spec, device=device)
    assert r2.elbo == pytest.approx(r3.elbo, rel=1e-5)


def test_registry_entries_and_protocols():
    assert {"hs-bnn", "reg-hs-bnn"} <= set(available())
    m, g, _ = build("hs-bnn", 4, 3, "multiclass", hidden=[6])
    assert isinstance(g, HorseshoeGuide) and m.likelihood.task == "multiclass"
    m, g, _ = build("reg-hs-bnn", 4, 1, "binary", hidden=[6], guide="tied")
    assert isinstance(g, TiedHorseshoeGuide) and m.prior.regularized
    assert isinstance(
        build("hs-bnn", 2, 1, "regression", guide="semi-structured")[1], SemiStructuredHorseshoeGuide
    )
    with pytest.raises(ValueError, match="regularized"):
        build("reg-hs-bnn", 2, 1, "regression", regularized=False)
    with pytest.raises(TypeError, match="HorseshoePrior"):
        HorseshoeGuide(
            BayesianModel(
                MLP(2, (3,), 1), __import__("zoo.priors").priors.GaussianPrior(), GaussianLikelihood()
            )
        )
    assert {"hs-toys", "hs-uci"} <= set(available_protocols())
    toys = PROTOCOLS["hs-toys"].runs(None)
    assert len(toys) == 3 * 5 * 3 + 5 * 2
    uci = [r for r in PROTOCOLS["hs-uci"].runs(None) if r.variant != "nuts"]  # nuts rows: tests/test_nuts.py
    assert len(uci) == 8 * 10 * 4
    assert {r.variant for r in uci} == {"hs-fact", "hs-struct", "reghs-fact", "reghs-struct"}


def test_zoo_fit_cli_on_yacht(tmp_path, data_dir):
    from zoo.experiments.cli import main

    out = tmp_path / "run"
    code = main(
        [
            "fit",
            "hs-bnn",
            "--dataset",
            "uci:yacht",
            "--split",
            "0",
            "--steps",
            "30",
            "--num-samples",
            "10",
            "--data-dir",
            str(data_dir),
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code in (0, None)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["guide"] == "factorized" and 0 < metrics["density"] <= 1
    assert math.isfinite(metrics["rmse"]) and (out / "checkpoint.pt").exists()


def test_protocol_metrics_count_units_by_rule_and_by_profile():
    """``hs_metrics`` (the hs protocols' extra columns) agrees with the sparsity report it summarizes, and the
    regression scores carry both RMSE conventions (App. D of arXiv:1705.10388 and the usual one)."""
    from zoo.experiments.runs import fit_on_dataset
    from zoo.families.horseshoe.entry import ACTIVE_FRACTION, hs_metrics

    run = fit_on_dataset("hs-bnn", "toy-hs", split=0, hidden=[8], steps=40, num_samples=20, progress=False)
    info = run.metrics
    assert info["rmse_draws"] >= info["rmse"] - 1e-9
    assert info["rmse_pointwise"] > 0
    guide, model = run.result.guide, run.result.model
    with run.result.activate():
        report = guide.sparsity_report(model)
    norms = torch.tensor(report.extras["weight_norms"]["fc0"])
    assert info["units_kept"] == report.extras["units_kept"]["fc0"] == 8  # nothing is pruned after 40 steps
    assert info["units_active"] == int((norms >= ACTIVE_FRACTION * norms.max()).sum())
    # plant: switch off all but two units -> the rule prunes them and the profile sees two active units
    with torch.no_grad():
        guide.l0_tau_mu_unconstrained[2:] = -40.0
        guide.update_auxiliaries()
    planted = hs_metrics(run)
    assert planted == {"units_kept": 2, "units_active": 2}


def test_hs_toys_figure_script(tmp_path):
    """``benchmarks/plot_hs_toys.py`` draws the protocol's JSON (one row per variant and trial)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "plot_hs_toys.py"
    spec = importlib.util.spec_from_file_location("plot_hs_toys", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [
        {"variant": f"{tag}-{w}", "nll": 3.0 + 0.1 * k, "units_kept": 15, "units_active": 3}
        for tag in ("gauss", "hs-fact", "hs-struct")
        for w in (10, 100, 1000)
        for k in range(2)
    ] + [{"variant": n, "nll": 0.1, "units_kept": 15, "units_active": 2} for n in ("hs221-centered",)]
    src = tmp_path / "hs-toys.json"
    src.write_text(json.dumps({"rows": rows}))
    out = mod.main([str(src)])
    assert out == tmp_path / "hs-toys.png" and out.stat().st_size > 1000
    assert not list(tmp_path.glob("*.tmp.png"))


def test_hs_procedure_q90_is_the_pruning_rule(benchmark_script):
    """``benchmarks/hs_procedure.py``'s q90 (the 90 % quantile of tau v) decides the rule exactly: planted
    log-scales far below and far above log(1e-3) give q90 on the matching side, and a short study row
    agrees with the guide's own pruning probabilities (the script raises when they disagree)."""
    mod = benchmark_script("hs_procedure")
    run = mod.fit_variant("zoo", seed=0, steps=30)
    row = mod.summarize(run, "zoo", 0)
    assert row["units_kept"] == sum(q >= -3 for q in row["log10_q90"]) and len(row["log10_q90"]) == 15
    assert row["steps"] == 30
    with torch.no_grad():
        run.result.guide.l0_tau_mu_unconstrained[:4] = -40.0  # ln tau^2 = -40: tau v ~ 2e-9 v
    row = mod.summarize(run, "zoo", 0)
    assert sum(q < -3 for q in row["log10_q90"]) == 4 and row["units_kept"] == 11
    with torch.no_grad():  # a unit whose q90 sits just above 1e-3 is kept
        run.result.guide.l0_tau_mu_unconstrained[:4] = 2 * math.log(1e-3) + 0.5
    assert sum(q < -3 for q in mod.summarize(run, "zoo", 0)["log10_q90"]) == 0
