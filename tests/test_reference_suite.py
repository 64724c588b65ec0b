"""The ``reference`` suite of ``zoo bench``: reference instances as datasets (pinned data, widths, options)
and the scorer that measures a fit's distance to the stored gold standard."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.experiments.bench import BenchPlan, load_bench_dataset, parse_spec
from zoo.experiments.config import RunConfig
from zoo.experiments.reference_suite import (
    METRICS,
    is_reference_name,
    load_reference_dataset,
    reference_scorer,
)
from zoo.experiments.runs import fit_on_dataset
from zoo.experiments.suites import LOWER_IS_BETTER, SUITES, Suite, reference_suite
from zoo.reference.instances import get_instance
from zoo.reference.store import default_root, stored_names

EXACT = "ss-selection-linear"  # synthetic, exact (enumeration): needs no data root


def test_reference_names_and_dataset_pin_the_instance():
    assert is_reference_name("reference:x") and not is_reference_name("uci:yacht")
    assert not is_reference_name(3)
    inst, name = get_instance(EXACT), "reference:" + EXACT
    ds0, ds3 = load_reference_dataset(name, 0), load_reference_dataset(name, 3)
    np.testing.assert_array_equal(ds0.x_train, inst.dataset().x_train)
    np.testing.assert_array_equal(ds0.y_test, ds3.y_test)  # the split is a replicate: same data
    assert ds0.meta["reference_instance"] == EXACT and ds0.meta["hidden"] == []
    assert ds0.meta["model_options"] == {"lbbnn": dict(inst.options)}
    with pytest.raises(ValueError, match="unknown reference instance"):
        load_reference_dataset("reference:nope")
    with pytest.raises(ValueError, match="split"):
        load_reference_dataset("reference:" + EXACT, -1)
    np.testing.assert_array_equal(load_bench_dataset("reference:" + EXACT, 0, None, None).x_test, ds0.x_test)


def test_suite_lists_the_stored_instances_only(tmp_path):
    assert reference_suite(tmp_path) is None  # an empty store: no suite
    suite = reference_suite()
    stored = stored_names(default_root())
    assert EXACT in stored and suite is not None and SUITES["reference"].datasets == suite.datasets
    assert set(suite.datasets) == {"reference:" + n for n in stored}
    assert set(suite.metrics) == set(METRICS) and set(METRICS) <= LOWER_IS_BETTER
    with pytest.raises(ValueError, match="direction"):
        Suite(name="x", description="", datasets=("toy-hs",), splits=(0,), metrics=("made-up",))


def test_bench_plan_fits_the_instances_own_model_options(data_dir):  # ss-boston reads the data root
    suite = SUITES["reference"]
    plan = BenchPlan(suite=suite, specs=(parse_spec("lbbnn"), parse_spec("mfvi-bnn")), steps=2, splits=(0,))
    settings = plan.preflight()
    key = next(k for k in settings if k.startswith("lbbnn") and EXACT in k)
    assert settings[key]["options"] == dict(get_instance(EXACT).options) and settings[key]["hidden"] == ()
    other = next(k for k in settings if k.startswith("mfvi-bnn") and EXACT in k)
    assert settings[other]["options"] == {}  # another model keeps its own defaults


def _run(steps: int, seed: int = 0):
    ds = load_reference_dataset("reference:" + EXACT)
    inst = get_instance(EXACT)
    cfg = RunConfig(hidden=(), steps=steps, seed=seed, lr=2e-2, progress=False, options=dict(inst.options))
    return fit_on_dataset("lbbnn", ds, cfg)


def test_scorer_is_smaller_for_a_trained_fit_and_rejects_other_data():
    untrained, trained = reference_scorer(_run(1)), reference_scorer(_run(1500))
    assert set(trained) == {"w2_y_sd", "w1_y_sd", "nll_gap_ref", "pip_mae"}
    assert all(np.isfinite(v) for v in trained.values())
    # training moves the approximation towards the exact posterior, by far more than seed noise
    assert trained["w2_y_sd"] < 0.5 * untrained["w2_y_sd"]
    assert trained["pip_mae"] < untrained["pip_mae"]
    cfg = RunConfig(hidden=(), steps=1, progress=False)
    other = fit_on_dataset("lbbnn", get_instance(EXACT).dataset(), cfg)
    with pytest.raises(ValueError, match="reference:NAME"):
        reference_scorer(other)
