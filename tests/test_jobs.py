"""The main-job runner: registry hooks for custom fit functions and extra metrics."""

from __future__ import annotations

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
