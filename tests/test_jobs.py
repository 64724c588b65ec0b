"""The main-job runner: registry hooks for custom fit functions and extra metrics."""

from __future__ import annotations

import numpy as np
import pytest

from zoo import registry
from zoo.inference import fit
from zoo.jobs import fit_on_dataset


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

    from zoo.jobs import fit_on_dataset, ood_metrics

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
