"""``zoo.testing``, the conformance kit: it passes on the zoo's priors and guides, and for every contract a
deliberately broken prior or guide that breaks exactly that contract fails with a message naming it."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.distributions import constraints
from pyro.infer import Trace_ELBO
from pyro.nn import PyroModule, PyroParam

from guides.autoguides import make_autoguide
from guides.baselines.conjugate import LinearRegressionCAVIGuide
from guides.flows.weightspace import WeightSpaceGuide
from guides.horseshoe.factorized import HorseshoeGuide
from zoo.core.architectures import MLP
from zoo.core.gaussian import GaussianPrior
from zoo.core.guide import ClosedFormGuide
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.core.prior import Prior, site_name_clashes
from zoo.experiments import registry
from zoo.families.bowtie.prior import NGIGPrior
from zoo.families.collapsed.prior import CollapsedPrior
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.families.lbbnn.prior import SpikeSlabPrior
from zoo.infer.predict import Predictions
from zoo.testing import CONTRACTS, KitConfig, check_entry, check_guide, check_prior

from .helpers import blr_model

# ---------------------------------------------------------------------------------------------- toy prior


class ToyPrior(Prior):
    """A correct prior: per layer a scale ``fc{l}.scale ~ LogNormal(0, 0.5)``, ``w ~ N(0, scale^2)``,
    ``b ~ N(0, bias_scale^2)``; hyperparameters in buffers."""

    def __init__(self, bias_scale: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("bias_scale", torch.tensor(bias_scale))
        self.register_buffer("spread", torch.tensor(0.5))

    def layer_scale(self, layer: str) -> torch.Tensor:
        zero = torch.zeros_like(self.spread)
        return pyro.sample(f"{layer}.scale", dist.LogNormal(zero, self.spread))

    def weight(self, s, scale: torch.Tensor) -> torch.Tensor:
        scale = scale[..., None, None].expand(*scale.shape, *s.shape)
        return pyro.sample(s.name, dist.Normal(torch.zeros_like(scale), scale).to_event(2))

    def bias(self, s) -> torch.Tensor:
        d = dist.Normal(torch.zeros_like(self.bias_scale), self.bias_scale).expand(s.shape).to_event(1)
        return pyro.sample(s.name, d)

    def sample_params(self, specs):
        out = {}
        for s in specs:
            layer = s.name.rsplit(".", 1)[0]
            out[s.name] = self.weight(s, self.layer_scale(layer)) if s.role == "weight" else self.bias(s)
        return out


class RaisesOnBias(ToyPrior):
    def bias(self, s):
        raise RuntimeError("no bias prior")


class DropsAValue(ToyPrior):
    def sample_params(self, specs):
        out = super().sample_params(specs)
        del out["fc1.bias"]
        return out


class ForgetsBiasSites(ToyPrior):
    """The broken DL variant of the tutorial: biases fixed at zero, no sites."""

    def bias(self, s):
        return torch.zeros(s.shape)


class WrongEventDims(ToyPrior):
    def weight(self, s, scale):
        scale = scale[..., None, None].expand(*scale.shape, *s.shape)
        return pyro.sample(s.name, dist.Normal(torch.zeros_like(scale), scale).to_event(1))


class ReturnsAnotherValue(ToyPrior):
    def bias(self, s):
        return 2.0 * super().bias(s)


class NoisyDerivedWeights(ToyPrior):
    """Non-centred weights ``w = scale * raw`` plus noise drawn outside any site."""

    def weight(self, s, scale):
        raw = pyro.sample(s.name.replace("weight", "raw"), dist.Normal(0.0, 1.0).expand(s.shape).to_event(2))
        return scale[..., None, None] * raw + 1e-3 * torch.randn(s.shape)


class NonCentredWeights(ToyPrior):
    """Correct non-centred weights ``w = scale * raw`` (like the horseshoe's): derived, not a site."""

    def weight(self, s, scale):
        zero = torch.zeros_like(self.spread)
        raw = pyro.sample(s.name.replace("weight", "raw"), dist.Normal(zero, 1.0).expand(s.shape).to_event(2))
        return scale[..., None, None] * raw


class BatchedScales(ToyPrior):
    def layer_scale(self, layer):
        s = pyro.sample(f"{layer}.scales", dist.LogNormal(torch.zeros_like(self.spread), 1.0).expand((2,)))
        return s.mean(-1)


class SpecNamedSite(ToyPrior):
    def weight(self, s, scale):
        pyro.sample(f"{s.name}.s2", dist.LogNormal(torch.zeros_like(self.spread), 1.0))
        return super().weight(s, scale)


class BareSiteName(ToyPrior):
    def layer_scale(self, layer):
        return pyro.sample(f"scale_{layer}", dist.LogNormal(torch.zeros_like(self.spread), self.spread))


class ReshapesScale(ToyPrior):
    """Breaks under particles: ``reshape(())`` assumes one draw."""

    def weight(self, s, scale):
        scale = scale.reshape(()).expand(s.shape)
        return pyro.sample(s.name, dist.Normal(torch.zeros_like(scale), scale).to_event(2))


class PlainTensorAttribute(ToyPrior):
    def __init__(self):
        super().__init__()
        self.weight_scale = torch.tensor(1.0)  # not a buffer: .to() leaves it behind

    def layer_scale(self, layer):
        return super().layer_scale(layer) * self.weight_scale


class PythonFloatSite(ToyPrior):
    def layer_scale(self, layer):
        return pyro.sample(f"{layer}.scale", dist.LogNormal(0.0, 0.5))  # float32 whatever the buffers


class BareParam(ToyPrior):
    def layer_scale(self, layer):
        learned = pyro.param(f"{layer}.learned_scale", torch.tensor(1.0), constraint=constraints.positive)
        return super().layer_scale(layer) * learned.to(self.spread)


class InflatedUnitScales(HorseshoePrior):
    """A Gibbs block whose unit-scale draws are twice their exact conditional's."""

    def draw_conditionals(self, specs, values):
        out = super().draw_conditionals(specs, values)
        return {**out, "fc0.tau2": 2.0 * out["fc0.tau2"]}


BROKEN_PRIORS = [
    ("runs", RaisesOnBias, "no bias prior"),
    ("param-values", DropsAValue, "fc1.bias"),
    ("param-sites", ForgetsBiasSites, r"fc0\.bias.*same in 64 independent prior draws"),
    ("param-sites", WrongEventDims, r"fc0\.weight.*event shape"),
    ("param-sites", ReturnsAnotherValue, r"fc0\.bias.*other than its site"),
    ("param-sites", NoisyDerivedWeights, r"fc0\.weight.*not a deterministic function"),
    ("event-dims", BatchedScales, r"fc0\.scales.*batch shape \(2,\)"),
    ("site-names", SpecNamedSite, r"'fc0\.weight\.s2'.*'fc0\.weight'"),
    ("site-names", BareSiteName, "'scale_fc0' is not namespaced"),
    ("particles", ReshapesScale, "particle plate"),
    ("buffers", PlainTensorAttribute, r"plain tensor attribute.*weight_scale"),
    ("buffers", PythonFloatSite, r"'fc0\.scale' is torch\.float32"),
    ("param-store", BareParam, r"added \['fc0\.learned_scale'"),
    ("conditionals", InflatedUnitScales, r"fc0\.tau2.*no longer follow the prior"),
]


def _assert_breaks(cid: str, pattern: str, fn, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as err:
        fn(*args, **kwargs)
    msg = str(err.value)
    assert msg.startswith(f"[{cid}] "), msg
    assert re.search(pattern, msg), msg
    return msg


@pytest.mark.parametrize("cid,cls,pattern", BROKEN_PRIORS, ids=[c.__name__ for _, c, _ in BROKEN_PRIORS])
def test_broken_prior_fails_its_contract(cid, cls, pattern):
    store = dict(pyro.get_param_store().items())
    _assert_breaks(cid, pattern, check_prior, cls())
    assert dict(pyro.get_param_store().items()) == store  # a failed check leaves no debris


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


def test_model_build_refuses_a_site_named_after_a_spec():
    """``fc0.weight.s2`` next to ``fc0.weight`` would break AutoNormal deep inside Pyro ("'Parameter' object
    has no attribute 's2'"): the model refuses it when it is built, naming prior and both sites."""
    with pytest.raises(
        ValueError, match=r"prior: SpecNamedSite.*'fc0\.weight\.s2'.*'fc0\.weight'.*'fc0\.s2'"
    ):
        BayesianModel(MLP(3, (4,), 1), SpecNamedSite(), GaussianLikelihood())
    assert site_name_clashes(["fc0.weight", "fc0.weight.s2", "fc0.tau", "hs.c2", "fc0"]) == [
        ("fc0", "fc0.tau"),
        ("fc0", "fc0.weight"),
        ("fc0", "fc0.weight.s2"),
        ("fc0.weight", "fc0.weight.s2"),
    ]
    # the spike-and-slab's factor sites ``fc0.weight.gamma`` / ``.slab`` have no ``fc0.weight`` site: allowed
    rng = torch.get_rng_state()
    BayesianModel(MLP(3, (4,), 1), SpikeSlabPrior(2, hyper="eb-point"), GaussianLikelihood())
    assert torch.equal(torch.get_rng_state(), rng) and len(pyro.get_param_store()) == 0  # the trial trace


# ---------------------------------------------------------------------------------------------- toy guide


def _key(name: str, what: str) -> str:
    return f"{name.replace('.', '_')}_{what}"


class ToyGuide(PyroModule):
    """A correct mean-field guide for a model whose only latents are its parameters (fixed noise)."""

    def __init__(self, model: BayesianModel) -> None:
        super().__init__()
        ref = next(model.buffers())
        self.specs = [s for s in model.specs if self.covers(s)]
        g = torch.Generator().manual_seed(1)
        for s in self.specs:
            loc = 0.1 * torch.randn(s.shape, generator=g, dtype=ref.dtype).to(ref.device)
            setattr(self, _key(s.name, "loc"), PyroParam(loc))
            setattr(self, _key(s.name, "sd"), PyroParam(torch.full_like(loc, 0.05), constraints.positive))

    def covers(self, spec) -> bool:
        return True

    def factor(self, s) -> dist.Distribution:
        loc, sd = getattr(self, _key(s.name, "loc")), getattr(self, _key(s.name, "sd"))
        return dist.Normal(loc, sd).to_event(len(s.shape))

    def forward(self, x, y=None, subsample=None):
        for s in self.specs:
            pyro.sample(s.name, self.factor(s))


def toy_model(hidden=(3,)) -> BayesianModel:
    return BayesianModel(MLP(2, hidden, 1), GaussianPrior(), GaussianLikelihood("fixed", scale=0.5))


class NotAGuide:
    def __init__(self, model):
        pass


class FailingUpdate(ToyGuide, ClosedFormGuide):
    def closed_form_update(self, model, x, y, subsample=None):
        raise RuntimeError("the closed-form step diverged")


class NanELBO(Trace_ELBO):
    def loss(self, model, guide, *args, **kwargs):
        return float("nan")


class NanOwnLoss(ToyGuide):
    def default_loss(self):
        return NanELBO()


class MissesASite(ToyGuide):
    def covers(self, spec):
        return spec.name != "fc1.bias"


class ExtraSite(ToyGuide):
    def forward(self, x, y=None, subsample=None):
        super().forward(x, y, subsample)
        pyro.sample("fc0.extra", dist.Normal(torch.zeros(()), 1.0))


class WrongClosedForm(LinearRegressionCAVIGuide):
    def closed_form_elbo(self, model, x, y, subsample=None):
        return super().closed_form_elbo(model, x, y, subsample) + 0.5  # e.g. a dropped constant


class WrongAnalyticPart(HorseshoeGuide):
    def expected_log_prior_plus_entropy(self):
        return super().expected_log_prior_plus_entropy() + 1.0


class CountsCalls(ToyGuide):
    def __init__(self, model):
        super().__init__(model)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x, y=None, subsample=None):
        self.calls += 1
        super().forward(x, y, subsample)


class OwnRandomStream(ToyGuide):
    """Draws its predictions with a private generator that no seed reaches."""

    def __init__(self, model):
        super().__init__(model)
        self.gen = torch.Generator().manual_seed(0)

    def predictive(self, model, x, num_samples=100, **kwargs):
        w = {s.name: getattr(self, _key(s.name, "loc")).detach() for s in self.specs}
        f = model.architecture(x, w)[..., 0]
        noise = torch.randn(f.shape, generator=self.gen, dtype=f.dtype)
        return Predictions("regression", mean=f + 0.01 * noise, var=torch.ones_like(f))


class PlainAttributeState(ToyGuide, ClosedFormGuide):
    """Keeps a fitted shift in a plain attribute: not saved, lost on load."""

    shift = 0.0

    def closed_form_update(self, model, x, y, subsample=None):
        self.shift = float(y.mean())

    def factor(self, s):
        d = super().factor(s)
        return dist.Normal(d.base_dist.loc + self.shift, d.base_dist.scale).to_event(len(s.shape))


class NoPredictiveSamples(ToyGuide):
    """Its own predictive returns mean and variance but no joint samples."""

    def predictive(self, model, x, num_samples=100, **kwargs):
        w = {s.name: getattr(self, _key(s.name, "loc")).detach() for s in self.specs}
        f = model.architecture(x, w)[..., 0]
        return Predictions("regression", mean=f, var=torch.full_like(f, 0.25))


class Float32Bias(ToyGuide):
    def factor(self, s):
        if s.role == "bias":
            return dist.Normal(torch.zeros(s.shape), 0.05).to_event(1)  # default dtype, not the model's
        return super().factor(s)


class BareParamAtBuild(ToyGuide):
    def __init__(self, model):
        super().__init__(model)
        pyro.param("toy_temperature", torch.tensor(1.0))


BROKEN_GUIDES = [
    ("guide-build", NotAGuide, toy_model, "not a callable guide"),
    ("fit", FailingUpdate, toy_model, "closed-form step diverged"),
    ("elbo-finite", NanOwnLoss, toy_model, "own loss NanELBO.* is nan"),
    ("coverage", MissesASite, toy_model, r"\['fc1\.bias'\] have no factor"),
    ("coverage", ExtraSite, toy_model, r"\['fc0\.extra'\] are not latent sites"),
    (
        "closed-form-elbo",
        WrongClosedForm,
        lambda: blr_model().double(),
        "closed_form_elbo .* standard errors",
    ),
    ("closed-form-elbo", WrongAnalyticPart, lambda: _hs_model(), "expected_log_prior_plus_entropy"),
    ("predict-pure", CountsCalls, toy_model, r"changed the fit's state: \['guide calls'\]"),
    ("predict-pure", OwnRandomStream, toy_model, "twice gives different 'mean'"),
    ("checkpoint", PlainAttributeState, toy_model, "after save / load, predict gives other 'mean'"),
    ("arviz", NoPredictiveSamples, toy_model, "to_inference_data raised AttributeError"),
    ("guide-dtype", Float32Bias, toy_model, "float64"),
    ("param-store", BareParamAtBuild, toy_model, r"added \['toy_temperature'\]"),
]


def _hs_model() -> BayesianModel:
    return BayesianModel(
        MLP(2, (3,), 1), HorseshoePrior(regularized=True), GaussianLikelihood("gamma", 6.0, 6.0)
    )


@pytest.mark.filterwarnings("ignore:Found .*vars in:UserWarning")  # Pyro's own hint for the coverage cases
@pytest.mark.parametrize(
    "cid,cls,make_model,pattern", BROKEN_GUIDES, ids=[c.__name__ for _, c, _, _ in BROKEN_GUIDES]
)
def test_broken_guide_fails_its_contract(cid, cls, make_model, pattern):
    _assert_breaks(cid, pattern, check_guide, cls, make_model())
    assert len(pyro.get_param_store()) == 0


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


def test_closed_form_tolerance_is_in_standard_errors():
    """An offset of 0.5 nats in the blr-cavi closed form is about 60 standard errors of 2000 draws: it fails
    at the default 5 and passes at a tolerance of 5000 standard errors (the check scales with the SE)."""
    check_guide(WrongClosedForm, blr_model().double(), tolerance_se=5e3)
    with pytest.raises(AssertionError, match=r"^\[closed-form-elbo\]"):
        check_guide(WrongClosedForm, blr_model().double(), tolerance_se=5.0)


# ---------------------------------------------------------------------------------------------- entries


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


def test_every_contract_has_a_broken_example():
    broken = {c for c, *_ in BROKEN_PRIORS} | {c for c, *_ in BROKEN_GUIDES} | {"entry"}
    assert broken == set(CONTRACTS), set(CONTRACTS) ^ broken


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
