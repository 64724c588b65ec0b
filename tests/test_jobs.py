"""The main-job runner: registry hooks for custom fit functions and extra metrics."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.experiments import registry
from zoo.experiments.runs import fit_on_dataset
from zoo.infer.loop import fit


@pytest.fixture
def custom_entry():
    base = registry.get_entry("mfvi-bnn")
    calls = []

    def my_fit(model, guide, x, y, **kw):
        calls.append(kw["steps"])
        return fit(model, guide, x, y, **{**kw, "steps": 3})

    entry = registry.ModelEntry(
        name="test-hooks",
        summary="test entry",
        build=base.build,
        guides=base.guides,
        fit_defaults={"steps": 50, "batch_size": None},
        references=("test",),
        fit_fn=my_fit,
        extra_metrics=lambda run: {"n_params": run.result.model.architecture.num_params()},
    )
    registry.register(entry)
    yield calls
    registry._REGISTRY.pop("test-hooks")


def test_fit_fn_and_extra_metrics_hooks(custom_entry):
    run = fit_on_dataset("test-hooks", "diabetes", hidden=[4], progress=False, num_samples=5)
    assert custom_entry == [50] and run.result.steps == 3
    assert run.metrics["n_params"] == 10 * 4 + 4 + 4 + 1
    assert {"rmse", "nll", "coverage95", "n_train"} <= set(run.metrics)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get_entry("test-hooks"))


def test_ood_metrics_entropy():
    """Out-of-domain entropy (paper 001 §4.2): the same test set as "OOD" reproduces the in-domain entropy
    exactly (same predictive seed); entropies lie in [0, log K]; bad inputs name the argument."""
    import dataclasses
    import math

    from zoo.experiments.runs import fit_on_dataset, ood_metrics

    run = fit_on_dataset("lbbnn", "digits", hidden=[8], steps=30, num_samples=5, progress=False)
    same = ood_metrics(run, ood=run.dataset, num_samples=5)
    assert same["entropy_ood"] == pytest.approx(same["entropy_in"], rel=1e-6)
    assert 0.0 <= same["entropy_in"] <= math.log(10) + 1e-9
    rng = np.random.default_rng(0)
    noise = dataclasses.replace(
        run.dataset, name="digits-noise", x_test=rng.normal(size=run.dataset.x_test.shape)
    )
    out = ood_metrics(run, ood=noise, num_samples=5)
    assert 0.0 <= out["entropy_ood"] <= math.log(10) + 1e-9
    with pytest.raises(ValueError, match="ood"):
        ood_metrics(run)  # digits has no default OOD partner
    ds = run.dataset
    narrow = dataclasses.replace(
        ds, x_train=ds.x_train[:, :10], x_test=ds.x_test[:, :10], x_mean=None, x_std=None
    )
    with pytest.raises(ValueError, match="ood"):
        ood_metrics(run, ood=narrow)
    reg = fit_on_dataset("mfvi-bnn", "diabetes", hidden=[3], steps=5, num_samples=5, progress=False)
    with pytest.raises(ValueError, match="run"):
        ood_metrics(reg, ood=run.dataset)


def test_max_seconds_budget_stops_the_fit_and_records_epochs():
    """``max_seconds``: the fit stops after the first step past the wall-clock budget (the step cap stays);
    the row records the steps and epochs done; a non-positive budget is rejected by name."""
    run = fit_on_dataset(
        "mfvi-bnn",
        "diabetes",
        hidden=[4],
        steps=100000,
        batch_size=99,
        max_seconds=0.3,
        progress=False,
        num_samples=3,
    )
    assert 1 <= run.result.steps < 100000 and run.metrics["steps"] == run.result.steps
    assert run.metrics["epochs"] == pytest.approx(run.result.steps * 99 / run.dataset.n_train, abs=0.01)
    full = fit_on_dataset(
        "mfvi-bnn", "diabetes", hidden=[4], steps=7, max_seconds=1e6, progress=False, num_samples=3
    )
    assert full.result.steps == 7 and full.metrics["epochs"] == 7.0  # batch 512 > n_train: full batch
    with pytest.raises(ValueError, match="max_seconds"):
        fit_on_dataset("mfvi-bnn", "diabetes", hidden=[4], steps=3, max_seconds=0, progress=False)


def test_lbbnn_image_metrics_prediction_variants():
    """Paper 001 Table 3's prediction variants on a digits fit: the posterior-mean network's accuracy
    against a hand forward pass of ``E[α] κ``; per-layer MPM densities average (weighted by layer size) to
    the overall density; inclusion means match the guide's α; confident fraction in [0, 1]."""
    from zoo.families.lbbnn.entry import image_metrics

    run = fit_on_dataset("lbbnn", "digits", hidden=[16], steps=150, num_samples=5, progress=False)
    m = image_metrics(run, num_samples=5)
    g, model = run.result.guide, run.result.model
    _, _, x, y = run.dataset.tensors()
    with run.result.activate():
        probs = g.inclusion_probs()
        params = {}
        for s in model.specs:
            loc, _ = g.slab_params(s)
            params[s.name] = (probs[s.name] * loc if s.name in probs else loc).detach()
        f = model.architecture(x, params)
    assert m["acc_mean"] == pytest.approx(float((f.argmax(-1) == y).double().mean()))
    sizes = {k: v.numel() for k, v in probs.items()}
    total = sum(m[f"density_{k.split('.')[0]}"] * n for k, n in sizes.items()) / sum(sizes.values())
    assert total == pytest.approx(run.metrics["density"])
    for k, v in probs.items():
        assert m[f"inclusion_{k.split('.')[0]}"] == pytest.approx(float(v.mean()))
    assert 0.0 <= m["frac_confident"] <= 1.0 and 0.0 <= m["acc_mpm"] <= 1.0
    assert m["acc_bma_r1"] > 0.3 and m["acc_bma_r5"] > 0.3  # 10 classes: well above chance after 150 steps


def test_posttrain_steps_freeze_the_structure_and_report_post_metrics():
    """``posttrain_steps`` (paper 001 Algorithm 1 stage 3): the inclusion probabilities stay fixed while the
    slab keeps training; every metric is reported again with a ``post_`` prefix."""
    import torch

    run0 = fit_on_dataset("lbbnn", "digits", hidden=[8], steps=40, num_samples=3, progress=False)
    with run0.result.activate():
        alpha0 = {k: v.detach().clone() for k, v in run0.result.guide.inclusion_probs().items()}
        loc0 = run0.result.guide.slab_params(run0.result.model.specs[0])[0].detach().clone()
    run = fit_on_dataset(
        "lbbnn", "digits", hidden=[8], steps=40, num_samples=3, progress=False, posttrain_steps=30
    )
    assert run.result.steps == 70 and run.metrics["posttrain_steps"] == 30
    assert run.metrics["density"] == pytest.approx(run0.metrics["density"])
    assert run.metrics["post_density"] == pytest.approx(run.metrics["density"])
    assert {"post_accuracy", "post_nll", "post_ece"} <= set(run.metrics)
    with run.result.activate():
        alpha = run.result.guide.inclusion_probs()
        loc = run.result.guide.slab_params(run.result.model.specs[0])[0].detach()
    for k, v in alpha.items():
        torch.testing.assert_close(v.detach(), alpha0[k])
    assert (loc - loc0).abs().max() > 1e-4
    with pytest.raises(ValueError, match="posttrain_steps"):
        fit_on_dataset(
            "mfvi-bnn", "diabetes", hidden=[3], steps=3, num_samples=3, progress=False, posttrain_steps=2
        )


def test_fit_on_dataset_is_reproducible_within_one_process():
    """Two fits with the same seed in one process agree exactly (the guide's random initialization is
    seeded too: protocol workers run many fits in one process, in an order that varies)."""
    import torch

    a = fit_on_dataset("lbbnn", "digits", hidden=[8], steps=20, num_samples=3, progress=False, seed=3)
    torch.rand(7)  # disturb the global RNG between the fits
    b = fit_on_dataset("lbbnn", "digits", hidden=[8], steps=20, num_samples=3, progress=False, seed=3)
    assert a.metrics["elbo"] == b.metrics["elbo"] and a.metrics["density"] == b.metrics["density"]


def test_run_config_object_mapping_and_keywords_agree_and_validate():
    """``fit_on_dataset`` takes a RunConfig, a mapping or the keywords it always took; validation names the
    field before anything is loaded or fitted."""
    from zoo.experiments.config import RunConfig

    kw = {"hidden": [3], "steps": 5, "num_samples": 3, "progress": False, "seed": 2}
    a = fit_on_dataset("mfvi-bnn", "diabetes", **kw)
    b = fit_on_dataset("mfvi-bnn", "diabetes", RunConfig(**kw))
    c = fit_on_dataset("mfvi-bnn", "diabetes", {**kw, "seed": 9}, seed=2)
    assert a.metrics["elbo"] == b.metrics["elbo"] == c.metrics["elbo"]
    assert a.result.config["dataset"] == "diabetes" and a.result.config["split"] == 0
    assert a.result.fit_config.steps == 5 and a.result.fit_config.metadata["y_std"] > 0
    cfg = RunConfig(**kw)
    assert cfg.hidden == (3,) and RunConfig.from_dict(cfg.to_dict()) == cfg
    cases = [
        ({"hidden": [0]}, ValueError, "hidden"),
        ({"steps": -1}, ValueError, "steps"),
        ({"lr": 0}, ValueError, "lr"),
        ({"num_samples": 0}, ValueError, "num_samples"),
        ({"options": 3}, TypeError, "options"),
        ({"train_metrics": 1}, TypeError, "train_metrics"),
        ({"posttrain_lr": -1.0}, ValueError, "posttrain_lr"),
        ({"stepz": 3}, ValueError, "stepz"),
    ]
    for bad, exc, name in cases:
        with pytest.raises(exc, match=name):
            fit_on_dataset("mfvi-bnn", "diabetes", **bad)
