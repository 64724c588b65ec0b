"""Composition of architecture / prior / likelihood: exactness vs torch.nn, Pyro interop, conformance."""

from __future__ import annotations

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
from zoo.infer.checkpoint import load, save
from zoo.infer.loop import fit
from zoo.priors import GaussianPrior


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


@pytest.mark.parametrize("name", available())
def test_registry_conformance(name, tmp_path, device):
    """Every registry entry: builds, fits, predicts without mutating, moves devices, saves and loads."""
    entry = get_entry(name)
    task = entry.tasks[0]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g, device="cpu").to(device)
    y = (x[:, 0] - 0.5 * x[:, 1]).to(device) if task == "regression" else (x[:, 0] > 0).long().to(device)
    model, guide, spec = build(name, 3, 1, task)
    assert entry.default_guide == spec["guide"] and entry.references
    res = fit(model, guide, x, y, steps=5, progress=False, seed=1, device=device, spec=spec)
    assert res.device.type == torch.device(device).type and len(res.elbo) == 5
    before = {k: v.detach().clone() for k, v in res.param_state["params"].items()}
    buffers = (
        {k: v.clone() for k, v in res.guide.state_dict().items()} if isinstance(guide, nn.Module) else {}
    )
    p1 = res.predict(x, num_samples=4, seed=0)
    p2 = res.predict(x, num_samples=4, seed=0)
    assert torch.equal(p1.mean, p2.mean)
    for k, v in res.param_state["params"].items():
        assert torch.equal(v.detach(), before[k]), f"predict mutated {k}"
    for k, v in res.guide.state_dict().items() if buffers else []:
        assert torch.equal(v, buffers[k]), f"predict mutated buffer {k}"
    save(res, tmp_path / "c.pt")
    back = load(tmp_path / "c.pt")
    assert torch.allclose(back.predict(x, num_samples=4, seed=0).mean, p1.mean)
    with pytest.raises(ValueError, match="guide"):
        build(name, 3, 1, task, guide="no-such-guide")


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

    with _pytest.raises(TypeError, match="HalfPrior with abstract method sample_params"):
        HalfPrior()
    with _pytest.raises(TypeError, match="HalfGuide with abstract method closed_form_update"):
        HalfGuide()
    with _pytest.raises(TypeError, match="HalfLikelihood with abstract method distribution"):
        HalfLikelihood()
    with _pytest.raises(TypeError, match="HalfArchitecture with abstract methods config, forward"):
        HalfArchitecture()
