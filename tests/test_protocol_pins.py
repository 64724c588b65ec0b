"""The protocols that reproduce published rows keep the published settings when the registry defaults move
(``MFVI_UNSCALED`` for the mfVI baseline, ``PAPER_NOISE`` for the horseshoe's noise model): every such run
builds the old model, and the defaults build the new one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.experiments.config import RunConfig
from zoo.experiments.registry import build
from zoo.experiments.reproduce import PROTOCOLS, available_protocols, run_config
from zoo.families.baselines.options import MFVI_UNSCALED
from zoo.families.collapsed.entry import VARIANTS
from zoo.families.collapsed.options import COLLAPSED_IG2_NOISE
from zoo.families.horseshoe.entry import PAPER_NOISE
from zoo.reference.instances import INSTANCES

available_protocols()


def _runs(protocol: str, model: str) -> list:
    return [r for r in PROTOCOLS[protocol].runs(None) if r.model == model and r.variant != "nuts"]


@pytest.mark.parametrize(
    "protocol",
    ["mfvi-uci", "collapsed-uci", "collapsed-mnist10k", "hs-toys", "lbbnn-mnist10k", "lbbnn-flow-mnist10k"],
)
def test_mfvi_rows_of_reproduction_protocols_use_the_published_baseline(protocol):
    runs = _runs(protocol, "mfvi-bnn")
    assert runs, f"{protocol} has no mfvi-bnn rows"
    for r in runs:
        _, _, cfg = run_config(r)
        assert dict(cfg.options) == MFVI_UNSCALED, (protocol, r.variant)


@pytest.mark.parametrize("protocol", ["hs-uci", "hs-toys"])
def test_horseshoe_regression_rows_use_the_papers_noise_model(protocol):
    runs = [r for r in _runs(protocol, "hs-bnn") + _runs(protocol, "reg-hs-bnn") if "221" not in r.variant]
    assert runs
    for r in runs:
        _, _, cfg = run_config(r)
        assert dict(cfg.options) == PAPER_NOISE["options"] and dict(cfg.guide_options) == {
            "noise_update": "gradient"
        }


def test_hs_uci_keeps_the_papers_5000_steps_and_the_defaults_train_large_sets_for_175_epochs():
    from zoo.data.core import from_arrays
    from zoo.experiments.runs import _fit_kwargs, default_steps
    from zoo.families.horseshoe.entry import FIT_DEFAULTS

    for r in _runs("hs-uci", "hs-bnn") + _runs("hs-uci", "reg-hs-bnn"):
        assert run_config(r)[2].steps == 5000, r.variant
    assert default_steps(FIT_DEFAULTS, 7373, 128) == 10081  # kin8nm's training rows: ceil(175 * 7373 / 128)
    assert default_steps(FIT_DEFAULTS, 277, 128) == 5000  # yacht: 5000 steps are 2310 epochs already
    assert default_steps(FIT_DEFAULTS, 7373, None) == 5000  # full batch: a step is an epoch
    assert default_steps({"steps": 300}, 10**6, 10) == 300  # entries without min_epochs keep their steps
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4000, 2)), rng.normal(size=4000)
    ds = from_arrays("big", "regression", x[:3800], y[:3800], x[3800:], y[3800:])
    cpu = torch.device("cpu")
    assert _fit_kwargs(RunConfig(), FIT_DEFAULTS, ds, cpu)["steps"] == 5196  # ceil(175 * 3800 / 128)
    assert _fit_kwargs(RunConfig(steps=7), FIT_DEFAULTS, ds, cpu)["steps"] == 7  # asked for: kept


@pytest.mark.parametrize("model", ["mfvi-bnn", "cm-bnn", "cv-bnn", "cmv-bnn", "ngig-bnn"])
def test_minibatch_svi_entries_train_large_sets_as_many_steps_as_the_horseshoe(model):
    from zoo.experiments.registry import MINIBATCH_SVI_DEFAULTS, get_entry
    from zoo.experiments.runs import default_steps
    from zoo.families.horseshoe.entry import FIT_DEFAULTS

    d = get_entry(model).fit_defaults
    assert dict(d) == dict(MINIBATCH_SVI_DEFAULTS)
    # naval's 10 740 training rows: ceil(700 * 10740 / 512) steps of 512, the horseshoe's 175 epochs of 128
    assert default_steps(d, 10740, 512) == 14684 == default_steps(FIT_DEFAULTS, 10740, 128)
    assert default_steps(d, 1295, 512) == 5000  # wine: 5000 steps of 512 are 1977 epochs already
    assert default_steps(d, 277, None) == 5000  # yacht is smaller than the batch: full batch


@pytest.mark.parametrize(("protocol", "models"), [("mfvi-uci", ["mfvi-bnn"]), ("collapsed-uci", VARIANTS)])
def test_uci_reproductions_keep_5000_steps_on_every_set(protocol, models):
    for m in models:
        runs = _runs(protocol, m)
        assert runs
        for r in runs:
            assert run_config(r)[2].steps == 5000, (protocol, r.variant, r.dataset)
    for r in PROTOCOLS["collapsed-mnist10k"].runs(None):  # its own budget, not the UCI pin
        assert run_config(r)[2].steps == 1563, r.variant


def test_pinned_and_default_models_differ_where_they_should():
    old = build("mfvi-bnn", 3, 1, "regression", hidden=[4], **MFVI_UNSCALED)[0]
    new = build("mfvi-bnn", 3, 1, "regression", hidden=[4])[0]
    assert old.prior.config()["fan_in_scaling"] is False and new.prior.config()["fan_in_scaling"] is True
    assert (float(old.likelihood.concentration), float(old.likelihood.rate)) == (2.0, 0.5)
    assert (float(new.likelihood.concentration), float(new.likelihood.rate)) == pytest.approx((1.0, 0.01))
    hs_old = build("hs-bnn", 3, 1, "regression", hidden=[4], **PAPER_NOISE["options"])
    hs_new = build("hs-bnn", 3, 1, "regression", hidden=[4])
    assert float(hs_old[0].likelihood.rate) == 6.0
    assert float(hs_new[0].likelihood.rate) == pytest.approx(0.01)
    assert hs_old[1].noise_update == hs_new[1].noise_update == "natural"  # the protocols pin "gradient"


def test_collapsed_uci_keeps_the_noise_prior_its_rows_were_run_with():
    runs = [r for r in PROTOCOLS["collapsed-uci"].runs(None) if r.model != "mfvi-bnn"]
    assert {r.model for r in runs} == {"cm-bnn", "cv-bnn", "cmv-bnn"}
    for r in runs:
        _, _, cfg = run_config(r)
        assert dict(cfg.options) == COLLAPSED_IG2_NOISE, r.variant
    old = build("cm-bnn", 3, 1, "regression", hidden=[4], **COLLAPSED_IG2_NOISE)[0].likelihood
    new = build("cm-bnn", 3, 1, "regression", hidden=[4])[0].likelihood
    assert (float(old.concentration), float(old.rate)) == (2.0, 0.5)
    assert (float(new.concentration), float(new.rate)) == pytest.approx((1.0, 0.01))


def test_gaussian_reference_instances_keep_the_published_prior():
    gauss = [i for i in INSTANCES.values() if i.model == "mfvi-bnn"]
    assert {i.name for i in gauss} >= {"gauss-221", "gauss-cubic", "gauss-bowtie", "gauss-yacht"}
    # the published prior on every one; the *-tanh instances change the units only
    for i in gauss:
        tanh = i.name.endswith("-tanh")
        assert dict(i.options) == ({**MFVI_UNSCALED, "activation": "tanh"} if tanh else MFVI_UNSCALED), i.name


@pytest.mark.parametrize(
    "protocol, converged, capped",
    [("bowtie-diabetes", "VBNN", "VBNN-200"), ("bowtie-uci", "VBNN", "VBNN-200")],
)
def test_bowtie_converged_rows_run_to_the_rule_and_capped_rows_keep_200_sweeps(protocol, converged, capped):
    """The converged rows run CAVI until the paper's stopping rule fires (SQUAREM, at most 3000 cycles); the
    capped rows keep the authors' code's 200 plain sweeps; both run by default."""
    from zoo.experiments.reproduce import select_variants

    p = PROTOCOLS[protocol]
    runs = select_variants(p.runs(None), None, p.opt_in)
    by = {v: [r for r in runs if r.variant == v] for v in (converged, capped)}
    assert by[converged] and len(by[converged]) == len(by[capped])
    for r in by[converged]:
        _, _, cfg = run_config(r)
        assert cfg.fit_options == {"accelerate": "squarem"} and cfg.steps == 3000, r
    for r in by[capped]:
        _, _, cfg = run_config(r)
        assert not cfg.fit_options and cfg.steps in (None, 200), r


@pytest.mark.parametrize(
    "protocol, models",
    [
        ("mfvi-uci", ["mfvi-bnn"]),
        ("collapsed-uci", ["mfvi-bnn", "cm-bnn", "cv-bnn", "cmv-bnn"]),
        ("hs-toys", ["mfvi-bnn"]),
    ],
)
def test_protocols_run_before_the_noise_refit_keep_the_last_iterates_noise(protocol, models):
    from zoo.infer.noise import NO_NOISE_REFIT

    for model in models:
        runs = _runs(protocol, model)
        assert runs, (protocol, model)
        for r in runs:
            assert dict(run_config(r)[2].fit_options) == NO_NOISE_REFIT, (protocol, r.variant)


def test_a_pinned_run_reaches_the_loop_without_the_refit():
    from zoo.experiments.runs import fit_on_dataset

    cfg = {"hidden": [4], "steps": 20, "progress": False, "num_samples": 5}
    on = fit_on_dataset("mfvi-bnn", "diabetes", cfg)
    off = fit_on_dataset("mfvi-bnn", "diabetes", {**cfg, "fit_options": {"noise_refit": False}})
    assert "noise_train" in on.result.loop_state and "noise_train" not in off.result.loop_state
    assert off.result.config["noise_refit"] is False
