"""``zoo.fit``'s guards on the guide, before the first step (:mod:`zoo.infer.guide_match`), and the hint of a
fit that diverges at its first step (:mod:`zoo.infer.divergence`).

Ground truth: the site names of the mfvi-bnn and hs-bnn models (a guide of one fits the other's model
nowhere), dtypes set by hand, every built-in registry pair (all must pass), a Student-t prior whose
inverse-gamma scales with shape 0.005 put an ``init_to_median`` autoguide at unconstrained locations near 82,
and a module whose largest initial value is set by hand.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.nn import PyroModule, PyroParam

import zoo.infer.guide_match as guide_match
from guides.autoguides import make_autoguide
from zoo.core.architectures import MLP
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.core.prior import Prior
from zoo.experiments.registry import available, build, get_entry
from zoo.infer.divergence import HINT, DivergenceError, initial_values
from zoo.infer.loop import fit

from .helpers import ToyGuide, toy_model


def _data(n: int = 30, d: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(n, generator=g)


# --------------------------------------------------------------------------------- a guide of another model


def test_a_guide_built_for_another_model_is_refused_before_training():
    x, y = _data()
    mf, mf_guide, _ = build("mfvi-bnn", 3, 1, "regression", hidden=[4], seed=0)
    hs, hs_guide, _ = build("hs-bnn", 3, 1, "regression", hidden=[4], seed=0)
    before = {k: v.clone() for k, v in hs_guide.state_dict().items()}
    calls = []
    with pytest.raises(ValueError, match=r"^guide: HorseshoeGuide is not a guide for this model") as err:
        fit(mf, hs_guide, x, y, steps=30, progress=False, callbacks=[lambda *a: calls.append(a)])
    msg = str(err.value)
    assert "['fc0.bias', 'fc0.weight', 'fc1.bias', 'fc1.weight', 'sigma2'] have no factor" in msg
    assert "guide site(s) ['fc0.beta', 'fc0.lam', 'fc0.tau2'" in msg and "'precision']" in msg
    assert calls == [] and all(torch.equal(v, before[k]) for k, v in hs_guide.state_dict().items())
    assert len(pyro.get_param_store()) == 0
    # an autoguide fitted on mfvi-bnn, then handed the horseshoe model: refused too ...
    fit(mf, mf_guide, x, y, steps=2, progress=False)
    with pytest.raises(ValueError, match=r"guide: AutoNormal .*\['fc0\.beta', .*\] have no factor"):
        fit(hs, mf_guide, x, y, steps=3, progress=False)
    # ... and the check's copy of it left the original autoguide whole: it still fits its own model
    assert fit(mf, mf_guide, x, y, steps=2, progress=False).steps == 2


class _MissesABias(ToyGuide):
    def covers(self, spec) -> bool:
        return spec.name != "fc1.bias"


class _ExtraSite(ToyGuide):
    def forward(self, x, y=None, subsample=None):
        super().forward(x, y, subsample)
        pyro.sample("fc0.extra", dist.Normal(torch.zeros(()), 1.0))


@pytest.mark.filterwarnings("ignore:Found .*vars in:UserWarning")
@pytest.mark.parametrize(
    "cls,pattern",
    [(_MissesABias, r"\['fc1\.bias'\] have no factor"), (_ExtraSite, r"\['fc0\.extra'\] are not latent")],
)
def test_a_guide_missing_a_global_site_or_adding_one_is_refused(cls, pattern):
    model = toy_model()
    x, y = _data(d=2)
    with pytest.raises(ValueError, match=rf"^guide: {cls.__name__} .*{pattern}"):
        fit(model, cls(model), x, y, steps=5, progress=False)


def _registry_pairs() -> list:
    return [
        pytest.param(name, task, guide, id=f"{name}/{task}/{guide}")
        for name in available()
        for task in get_entry(name).tasks
        for guide in get_entry(name).guides
    ]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name,task,guide", _registry_pairs())
def test_every_builtin_pair_passes_the_check(name, task, guide, monkeypatch):
    """No built-in entry/guide pair is refused (closed-form CAVI guides, collapsed bounds, LBBNN's LCRT,
    flows, autoguides), on full batches and minibatches, and the check did trace each of them."""
    traced = []

    def spy(*args, **kwargs):
        out = trace_copies(*args, **kwargs)
        traced.append(out[1] is not None)
        return out

    trace_copies = guide_match.trace_copies
    monkeypatch.setattr(guide_match, "trace_copies", spy)
    entry = get_entry(name)
    out = 3 if task == "multiclass" else 1
    model, g, spec = build(name, 3, out, task, hidden=[3] if tuple(entry.default_hidden) else [], guide=guide)
    x, y = _data(24)
    y = {"regression": y, "binary": (x[:, 0] > 0).long(), "multiclass": x.argmax(-1)}[task]
    loss = entry.fit_defaults.get("loss")
    batch = None if entry.fit_defaults.get("batch_size") is None else 8
    res = fit(
        model, g, x, y, steps=1, batch_size=batch, progress=False, loss=loss and loss(model, g), spec=spec
    )
    assert res.steps == 1 and traced == [True]


def test_the_check_leaves_the_fit_unchanged(monkeypatch):
    """The check traces a copy in its own parameter-store scope and random stream: a lazily initialized
    autoguide fits exactly as it does without the check."""
    x, y = _data()

    def run() -> list[float]:
        model, g, _ = build("mfvi-bnn", 3, 1, "regression", hidden=[4])
        return fit(model, g, x, y, steps=4, batch_size=10, seed=3, progress=False).elbo

    checked = run()
    monkeypatch.setattr(guide_match, "trace_copies", lambda *a, **k: (None, None))
    assert run() == checked


# ----------------------------------------------------------------------------------------------------- dtype


@pytest.mark.parametrize("name,guide", [("hs-bnn", "factorized"), ("mfvi-bnn", "flow"), ("blr-cavi", "cavi")])
def test_a_guide_in_another_dtype_is_a_type_error_naming_both(name, guide):
    """float64 guide parameters (hs-bnn, mfvi-bnn flow) or buffers (blr-cavi: the values it samples) with a
    float32 model used to fail inside the first step with a raw torch dtype error."""
    x, y = _data()
    hidden = [] if name == "blr-cavi" else [3]
    model, g, _ = build(name, 3, 1, "regression", hidden=hidden, guide=guide, seed=0)
    with pytest.raises(TypeError, match=r"^guide: .* is torch\.float64 but the model is torch\.float32"):
        fit(model, g.double(), x, y, steps=2, progress=False)
    # model and guide in one dtype: the data (float32 here) is cast to it and the fit runs
    model.double()
    assert fit(model, g, x, y, steps=2, progress=False).steps == 2


# -------------------------------------------------------------------------------------- divergence at step 1


class _StudentT(Prior):
    """Student-t weights as an inverse-gamma scale mixture, ``lam ~ InvGamma(df / 2, df / 2)`` (Neal 1996,
    §2.2); biases standard normal."""

    def __init__(self, df: float) -> None:
        super().__init__()
        self.register_buffer("df", torch.tensor(float(df)))

    def sample_params(self, specs):
        out = {}
        for s in specs:
            nd = len(s.shape)
            zero = torch.zeros_like(self.df)
            if s.role == "bias":
                out[s.name] = pyro.sample(s.name, dist.Normal(zero, 1.0).expand(s.shape).to_event(nd))
                continue
            half = self.df / 2
            lam = pyro.sample(
                s.name.replace("weight", "lam"), dist.InverseGamma(half, half).expand(s.shape).to_event(nd)
            )
            scale = lam.sqrt() / math.sqrt(s.fan_in)
            out[s.name] = pyro.sample(s.name, dist.Normal(torch.zeros_like(scale), scale).to_event(nd))
        return out


def test_a_divergence_at_step_1_names_the_initial_values_not_the_learning_rate():
    """df = 0.01: the autoguide starts at the prior median of each inverse-gamma scale, an unconstrained
    location near 82 (a variance of e^82); the first ELBO is not finite whatever the learning rate."""
    x, y = _data(40)
    model = BayesianModel(MLP(3, (4,), 1), _StudentT(0.01), GaussianLikelihood())
    guide = make_autoguide("normal", model)
    with pytest.raises(DivergenceError, match=r"diverged at step 1: .*AutoNormal") as err:
        fit(model, guide, x, y, steps=5, lr=1e-6, progress=False, seed=0)
    msg = str(err.value)
    assert "learning rate is not the cause" in msg and "lower the learning rate" not in msg
    assert "init_loc_fn" in msg and "prior's hyperparameters" in msg
    name, value = err.value.initial
    assert (
        name.startswith("AutoNormal.locs.fc") and name.endswith(".lam") and f"{name!r} = {value:.6g}" in msg
    )
    # the value named is the largest initial value: a fresh autoguide set up under the fit's seed agrees
    twin = make_autoguide("normal", model)
    with pyro.get_param_store().scope(), torch.no_grad():
        pyro.set_rng_seed(0)
        twin(x, y)
        top = max((t for _, t in twin.named_parameters()), key=lambda t: float(t.abs().max()))
    top = top.detach().reshape(-1)
    assert value == float(top[top.abs().argmax()]) and value > 50


def test_later_steps_keep_the_optimizer_hint():
    assert str(DivergenceError(12, "the ELBO is nan", None)).endswith(f"hint: {HINT}")
    first = str(DivergenceError(1, "the ELBO is nan", None, initial=("w", -7.0)))
    assert HINT not in first and "'w' = -7" in first and "first step" in first


class _Holder(PyroModule):
    def __init__(self) -> None:
        super().__init__()
        self.a = PyroParam(torch.tensor([1.0, -7.0, 3.0]))
        self.register_buffer("b", torch.tensor([2.0, math.nan]))


class _FakeSVI:
    """Stands for ``pyro.infer.SVI``: its optimizer zeroes the parameters it gets."""

    def __init__(self) -> None:
        self.optim = lambda params: [p.data.zero_() for p in params]


def test_initial_values_records_the_largest_value_before_any_update():
    holder, svi = _Holder(), _FakeSVI()
    lazy = torch.tensor([0.5, -40.0])  # created during the step, as an autoguide's parameters are
    with pyro.get_param_store().scope(), initial_values(svi, holder) as found:
        assert (found["name"], found["value"]) == ("a", -7.0)  # the NaN buffer is skipped
        pyro.param("late", lazy)
        svi.optim([pyro.param("late").unconstrained()])
    assert (found["name"], found["value"]) == ("late", -40.0)  # read before the optimizer zeroed it
    assert callable(svi.optim) and svi.optim.__name__ == "<lambda>"  # restored
