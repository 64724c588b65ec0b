"""``zoo.testing``, the conformance kit, on working code: ``check_prior`` passes on the zoo's priors (and on
other tasks and depths), ``check_guide`` on the zoo's guides, ``check_entry`` on a third-party registry entry
(and fails one that cites no references), each without touching the checked objects or the random streams,
and bad arguments are refused before any check runs. Ground truth: the zoo's own priors and guides, the
correct ``ToyPrior`` / ``ToyGuide`` (``tests/helpers.py``), the horseshoe guide's analytic prior + entropy
part and the blr-cavi closed-form ELBO against Monte Carlo, and the state and RNG state saved before a check.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from guides.autoguides import make_autoguide
from guides.baselines.conjugate import LinearRegressionCAVIGuide
from guides.flows.weightspace import WeightSpaceGuide
from guides.horseshoe.factorized import HorseshoeGuide
from zoo.core.architectures import MLP
from zoo.core.gaussian import GaussianPrior
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.experiments import registry
from zoo.families.bowtie.prior import NGIGPrior
from zoo.families.collapsed.prior import CollapsedPrior
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.families.lbbnn.prior import SpikeSlabPrior
from zoo.testing import KitConfig, check_entry, check_guide, check_prior

from .helpers import ToyGuide, ToyPrior, blr_model, toy_model
from .helpers import assert_breaks as _assert_breaks
from .helpers import hs_model as _hs_model

# ------------------------------------------------------------------------------------------------- priors


class NonCentredWeights(ToyPrior):
    """Correct non-centred weights ``w = scale * raw`` (like the horseshoe's): derived, not a site."""

    def weight(self, s, scale):
        zero = torch.zeros_like(self.spread)
        raw = pyro.sample(s.name.replace("weight", "raw"), dist.Normal(zero, 1.0).expand(s.shape).to_event(2))
        return scale[..., None, None] * raw


@pytest.mark.parametrize(
    "prior",
    [
        GaussianPrior(),
        GaussianPrior(2.0, 0.5, fan_in_scaling=True),
        HorseshoePrior(regularized=True),
        HorseshoePrior(centered=True),
        NGIGPrior(),
        SpikeSlabPrior(2),
        SpikeSlabPrior(2, hyper="hierarchical"),
        CollapsedPrior("cm"),
        ToyPrior(),
        NonCentredWeights(),
    ],
    ids=lambda p: type(p).__name__,
)
def test_the_kit_passes_on_zoo_priors(prior):
    before = {k: v.clone() for k, v in prior.state_dict().items()}
    assert check_prior(prior) is None
    assert all(torch.equal(v, before[k]) for k, v in prior.state_dict().items())  # checks ran on a copy


@pytest.mark.parametrize("task,hidden", [("binary", (3, 2)), ("multiclass", (2,)), ("regression", ())])
def test_the_kit_passes_on_other_tasks_and_depths(task, hidden):
    prior = SpikeSlabPrior(len(hidden) + 1) if hidden == (3, 2) else HorseshoePrior()
    check_prior(prior, task=task, hidden=hidden)


def test_the_kit_leaves_the_random_streams_alone():
    torch.manual_seed(5)
    np.random.seed(5)  # noqa: NPY002 - the legacy stream is what pyro.set_rng_seed touches
    t, n = torch.get_rng_state(), np.random.get_state()[1].copy()  # noqa: NPY002
    check_prior(ToyPrior())
    assert torch.equal(torch.get_rng_state(), t) and np.array_equal(np.random.get_state()[1], n)  # noqa: NPY002


# ------------------------------------------------------------------------------------------------- guides


@pytest.mark.parametrize(
    "factory,make_model",
    [
        (ToyGuide, toy_model),
        (functools.partial(make_autoguide, "normal"), lambda: _hs_model()),
        (functools.partial(WeightSpaceGuide, family="tied"), lambda: _ngig_model()),
        (HorseshoeGuide, _hs_model),  # its analytic prior + entropy part against Monte Carlo
        (LinearRegressionCAVIGuide, lambda: blr_model().double()),  # its closed-form ELBO against Monte Carlo
    ],
    ids=["toy", "autonormal-hs", "tied-ngig", "horseshoe", "blr-cavi"],
)
def test_the_kit_passes_on_zoo_guides(factory, make_model):
    model = make_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert check_guide(factory, model) is None
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # fits ran on copies


def _ngig_model() -> BayesianModel:
    return BayesianModel(MLP(2, (3,), 1), NGIGPrior(), GaussianLikelihood("gamma", 6.0, 6.0))


# ------------------------------------------------------------------------------------------------ entries


@pytest.fixture
def scratch_registry():
    registry.load_plugins()
    saved = dict(registry._REGISTRY)
    try:
        yield registry
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)


def _toy_build(in_features, out_features, task, hidden):
    return BayesianModel(
        MLP(in_features, hidden, out_features), GaussianPrior(), GaussianLikelihood("fixed", 0.5)
    )


def _toy_entry(**changes) -> registry.ModelEntry:
    fields = {
        "name": "toy-bnn",
        "summary": "toy prior, toy guide",
        "build": _toy_build,
        "guides": {"toy": ToyGuide, "normal": functools.partial(make_autoguide, "normal")},
        "references": ("Nobody 2025, A toy (arXiv:0000.00000)",),
        "tasks": ("regression",),
    }
    return registry.ModelEntry(**{**fields, **changes})


def test_a_third_party_entry_passes_and_one_without_references_fails(scratch_registry):
    scratch_registry.register(_toy_entry())
    check_entry("toy-bnn")
    check_entry("toy-bnn", guide="normal", hidden=(2, 2))
    scratch_registry._REGISTRY.pop("toy-bnn")
    scratch_registry.register(_toy_entry(references=()))
    _assert_breaks("entry", "cites no references", check_entry, "toy-bnn")


def test_bad_arguments_are_refused_before_any_check():
    with pytest.raises(TypeError, match="prior must be a zoo Prior"):
        check_prior("gaussian")
    with pytest.raises(ValueError, match="hidden"):
        check_prior(ToyPrior(), hidden=(3, 0))
    with pytest.raises(ValueError, match="task"):
        check_prior(ToyPrior(), task="ordinal")
    with pytest.raises(ValueError, match="particles"):
        check_prior(ToyPrior(), config={"particles": 1})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['steps_'\]"):
        check_guide(ToyGuide, toy_model(), steps_=3)
    with pytest.raises(TypeError, match="guide_factory"):
        check_guide(3, toy_model())
    with pytest.raises(TypeError, match="model"):
        check_guide(ToyGuide, "toy")
    with pytest.raises(ValueError, match="unknown model"):
        check_entry("no-such-model")
    with pytest.raises(ValueError, match="guide"):
        check_entry("mfvi-bnn", guide="no-such-guide")
    with pytest.raises(ValueError, match="task"):
        check_entry("blr-cavi", task="binary")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            check_prior(ToyPrior(), device="cuda")
    assert KitConfig().tolerance_se == 5.0 and math.isclose(KitConfig(lr=0.1).lr, 0.1)
