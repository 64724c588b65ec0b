"""Composition of architecture / prior / likelihood: exactness vs torch.nn, Pyro interop, conformance."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive, Trace_ELBO, TraceMeanField_ELBO
from torch import nn

from guides.autoguides import make_autoguide
from zoo.core.architectures import MLP, ParamSpec
from zoo.core.likelihoods import GaussianLikelihood, make_likelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import available, build, get_entry
from zoo.infer.loop import fit
from zoo.priors import GaussianPrior
from zoo.testing import check_entry


def test_mlp_equals_torch_nn_with_the_same_weights():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 4), nn.ReLU(), nn.Linear(4, 2))
    arch = MLP(5, (7, 4), 2)
    params = {}
    for l, lin in enumerate([ref[0], ref[2], ref[4]]):
        params[f"fc{l}.weight"], params[f"fc{l}.bias"] = lin.weight, lin.bias
    x = torch.randn(11, 5)
    assert torch.allclose(arch(x, params), ref(x), atol=1e-6)
    # leading sample dims broadcast: (S, 1, out, in) as a vectorized particle plate leaves them
    batched = {k: torch.stack([v, 2 * v]).unsqueeze(1) for k, v in params.items()}
    out = arch(x, batched)
    assert out.shape == (2, 11, 2) and torch.allclose(out[0], ref(x), atol=1e-6)
    specs = arch.param_specs()
    assert specs[0] == ParamSpec("fc0.weight", (7, 5), 0, "weight", 5, 7)
    assert arch.num_params() == sum(p.numel() for p in ref.parameters())


def test_gaussian_prior_sites_and_fan_in_scaling():
    prior = GaussianPrior(2.0, 0.5, fan_in_scaling=True)
    arch = MLP(4, (3,), 1)
    tr = pyro.poutine.trace(prior.sample_params).get_trace(arch.param_specs())
    w = tr.nodes["fc0.weight"]["fn"]
    assert w.event_shape == (3, 4)
    assert torch.allclose(w.base_dist.scale, torch.tensor(1.0))  # 2 / sqrt(4)
    assert torch.allclose(tr.nodes["fc0.bias"]["fn"].base_dist.scale, torch.tensor(0.5))
    draws = torch.stack([prior.sample_params(arch.param_specs())["fc1.weight"] for _ in range(4000)])
    assert abs(float(draws.std()) - 2.0 / 3**0.5) < 0.05
    with pytest.raises(ValueError, match="weight_scale"):
        GaussianPrior(-1.0)
    with pytest.raises(TypeError, match="bias_scale"):
        GaussianPrior(1.0, "big")


def test_model_works_with_pyro_machinery():
    x = torch.randn(30, 3)
    y = torch.randn(30)
    model = BayesianModel(MLP(3, (4,), 1), GaussianPrior(), GaussianLikelihood("gamma", 6.0, 6.0))
    guide = make_autoguide("normal", model)
    for elbo in (
        Trace_ELBO(),
        TraceMeanField_ELBO(),
        Trace_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=1),
    ):
        assert torch.isfinite(torch.tensor(elbo.loss(model, guide, x, y)))
    pred = Predictive(
        model, guide=guide, num_samples=6, parallel=True, return_sites=["obs", "f", "precision"]
    )(x)
    assert pred["obs"].shape == (6, 30) and pred["f"].shape == (6, 30, 1)
    prior_pred = Predictive(model, num_samples=5)(x)
    assert prior_pred["obs"].shape == (5, 30)
    assert set(pyro.poutine.trace(model).get_trace(x, y).stochastic_nodes) - {"data"} == {
        "fc0.weight",
        "fc0.bias",
        "fc1.weight",
        "fc1.bias",
        "precision",
    }


def test_composition_rejects_wrong_parts():
    with pytest.raises(TypeError, match="architecture"):
        BayesianModel(nn.Linear(2, 2), GaussianPrior(), GaussianLikelihood())
    with pytest.raises(TypeError, match="prior"):
        BayesianModel(MLP(2, (), 1), dist.Normal(0, 1), GaussianLikelihood())
    with pytest.raises(TypeError, match="likelihood"):
        BayesianModel(MLP(2, (), 1), GaussianPrior(), "gaussian")
    with pytest.raises(ValueError, match="hidden"):
        MLP(2, (3, 0), 1)
    with pytest.raises(ValueError, match="activation"):
        MLP(2, (3,), 1, activation="gelu2")
    with pytest.raises(ValueError, match="task"):
        make_likelihood("ordinal")
    with pytest.raises(ValueError, match="noise"):
        GaussianLikelihood("student")


def test_custom_prior_in_one_file_plugs_in():
    """A user prior written against the contract runs under an autoguide, fit, predict."""
    from zoo.core.prior import Prior

    class LaplacePrior(Prior):
        def __init__(self, scale=1.0):
            super().__init__()
            self.register_buffer("scale", torch.tensor(scale))

        def sample_params(self, specs):
            return {
                s.name: pyro.sample(
                    s.name, dist.Laplace(0.0, self.scale).expand(s.shape).to_event(len(s.shape))
                )
                for s in specs
            }

    x = torch.randn(40, 2)
    y = x[:, 0] - x[:, 1]
    model = BayesianModel(MLP(2, (5,), 1), LaplacePrior(0.5), GaussianLikelihood())
    res = fit(model, make_autoguide("normal", model), x, y, steps=300, lr=0.03, progress=False)
    assert res.elbo[-1] > res.elbo[0]
    assert res.predict(x, num_samples=10).mean.shape == (40,)


def _entry_guides() -> list:
    """One case per (registry entry, guide): every guide of every entry, id ``<entry>/<guide>``."""
    return [
        pytest.param(name, guide, id=f"{name}/{guide}")
        for name in available()
        for guide in get_entry(name).guides
    ]


@pytest.mark.parametrize("name,guide", _entry_guides())
def test_registry_conformance(name, guide, device):
    """Every guide of every registry entry passes the conformance kit (:func:`zoo.testing.check_entry`):
    the entry contract, every contract of its prior, and fit -> predict without mutating, finite and
    closed-form ELBOs, the device, save / load, the ArviZ export and Pyro's parameter store.  Then, as a
    proper Pyro guide, it runs under a plain single-particle ``Trace_ELBO`` with validation on (no
    ``max_plate_nesting``, so every batch dim of a guide site must belong to the model's data plate)."""
    check_entry(name, guide=guide, device=str(device))
    entry = get_entry(name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(24, 3, generator=g).to(device)
    task = "regression" if "regression" in entry.tasks else "binary"
    y = torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1] if task == "regression" else (x[:, 0] > 0).long()
    hidden = [3] if tuple(entry.default_hidden) else []
    model, guide_obj, spec = build(name, 3, 1, task, hidden=hidden, guide=guide)
    res = fit(model, guide_obj, x, y, steps=2, progress=False, seed=0, device=device, spec=spec)
    with res.activate(), torch.no_grad():
        assert math.isfinite(Trace_ELBO().loss(res.model, res.guide, x, y))


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown model"):
        get_entry("bowtie-xyz")
    with pytest.raises(TypeError, match="model name"):
        get_entry(3)
    with pytest.raises(ValueError, match="task"):
        build("blr-cavi", 3, 1, "multiclass")
    with pytest.raises(ValueError, match="hidden"):
        build("blr-cavi", 3, 1, "regression", hidden=[4])


def test_abstract_interfaces_name_the_missing_method():
    """A new prior/guide/likelihood/architecture that forgets part of the contract cannot be constructed: the
    ``abc`` error names its class and the missing method."""
    import pytest as _pytest

    from zoo.core.guide import ClosedFormGuide
    from zoo.core.prior import Prior

    class HalfPrior(Prior):
        pass

    class HalfGuide(ClosedFormGuide):
        pass

    from zoo.core.architectures import Architecture
    from zoo.core.likelihoods import Likelihood

    class HalfLikelihood(Likelihood):
        pass

    class HalfArchitecture(Architecture):
        def param_specs(self):
            return []

    def names(cls: str, *methods: str) -> str:  # Python 3.11 and 3.12+ word the abc error differently
        listed = ", ".join(f"'?{m}'?" for m in methods)
        return f"{cls} (with|without an implementation for) abstract methods? {listed}"

    with _pytest.raises(TypeError, match=names("HalfPrior", "sample_params")):
        HalfPrior()
    with _pytest.raises(TypeError, match=names("HalfGuide", "closed_form_update")):
        HalfGuide()
    with _pytest.raises(TypeError, match=names("HalfLikelihood", "distribution")):
        HalfLikelihood()
    with _pytest.raises(TypeError, match=names("HalfArchitecture", "config", "forward")):
        HalfArchitecture()
