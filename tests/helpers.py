"""Small builders and reference computations shared by several test modules."""

from __future__ import annotations

import math
import re

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroParam
from scipy import integrate

import zoo
from zoo.core.architectures import MLP
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.core.prior import Prior
from zoo.data import make_bowtie_toy
from zoo.distributions import GeneralizedInverseGaussian
from zoo.families.bowtie.model import BowtieModel
from zoo.families.bowtie.prior import BowtieNoisePrior, NGIGPrior
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.families.lbbnn.prior import SpikeSlabPrior
from zoo.priors import GaussianPrior


def blr_data(n: int = 60, d: int = 3, seed: int = 1, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    w = torch.linspace(-1.5, 1.0, d, dtype=dtype)
    y = x @ w + 0.4 * torch.randn(n, generator=g, dtype=dtype)
    return x.to(device), y.to(device)


def blr_model(d: int = 3, s0: float = 2.0, a0: float = 2.0, b0: float = 1.0) -> BayesianModel:
    return BayesianModel(
        MLP(d, (), 1, bias=False), GaussianPrior(s0), GaussianLikelihood("inverse_gamma", a0, b0)
    )


def mlp_model(d: int = 3, hidden=(8,), task: str = "regression", k: int = 1) -> BayesianModel:
    from zoo.core.likelihoods import make_likelihood

    out = 1 if task in ("regression", "binary") else k
    return BayesianModel(MLP(d, hidden, out), GaussianPrior(1.0), make_likelihood(task, out))


def lbbnn_model(d=4, hidden=(5,), k=3, task="multiclass", **prior_kw) -> BayesianModel:
    """An LBBNN: an MLP under the spike-and-slab prior (``prior_kw``) with the ``task``'s likelihood."""
    from zoo.core.likelihoods import make_likelihood

    arch = MLP(d, hidden, 1 if task == "binary" else k)
    lik = make_likelihood(task, k if task == "multiclass" else 1)
    return BayesianModel(arch, SpikeSlabPrior.for_architecture(arch, **prior_kw), lik)


def gibbs_config(**settings):
    """A short NUTS-within-Gibbs run for plumbing tests: one chain, 10 warm-up and 8 kept iterations, trees of
    depth 5 at most, sequential, no progress bar; ``settings`` override."""
    from zoo.infer.mcmc import NUTSConfig

    base = dict(chains=1, warmup=10, samples=8, max_tree_depth=5, jit_compile=False, gibbs=True)
    return NUTSConfig(**{**base, "parallel": False, "progress": False, **settings})


def bowtie_toy(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of the bow-tie toy regression (``zoo.data.make_bowtie_toy``) as float64 tensors."""
    x, y = make_bowtie_toy(n, seed=seed)
    return torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)


def bowtie_small_model(hidden, **kw) -> BowtieModel:
    """A float64 bow-tie on 2 inputs with moderate hyperparameters (T = 0.5, hidden noise IG(3, 0.2)) so
    Monte Carlo checks have small variance; ``kw`` override."""
    kw.setdefault("temperature", 0.5)
    kw.setdefault("prior", NGIGPrior(bias_scale=3.0))
    kw.setdefault("hidden_noise", BowtieNoisePrior(3.0, 0.2))
    kw.setdefault("noise_rate", 1.0)
    return BowtieModel(2, hidden, 1, **kw).double()


def t64(*xs):
    return [torch.as_tensor(x, dtype=torch.float64) for x in xs]


def gig(nu, delta, lam):
    return GeneralizedInverseGaussian(*t64(nu, delta, lam))


def simpson_exp(logf, lo, hi, n=40_001):
    """int_lo^hi exp(logf(t)) dt by composite Simpson on a dense grid (logf vectorized over float64 t)."""
    t = torch.linspace(lo, hi, n, dtype=torch.float64)
    lf = logf(t).numpy()
    top = lf.max()
    return math.exp(top) * integrate.simpson(np.exp(lf - top), x=t.numpy())


# --------------------------------------------------------- the conformance kit's toys (zoo.testing tests)


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


def toy_param_key(name: str, what: str) -> str:
    """The name of ``ToyGuide``'s parameter ``what`` (``loc``, ``sd``) of the site ``name``."""
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
            setattr(self, toy_param_key(s.name, "loc"), PyroParam(loc))
            setattr(
                self, toy_param_key(s.name, "sd"), PyroParam(torch.full_like(loc, 0.05), constraints.positive)
            )

    def covers(self, spec) -> bool:
        return True

    def factor(self, s) -> dist.Distribution:
        loc, sd = getattr(self, toy_param_key(s.name, "loc")), getattr(self, toy_param_key(s.name, "sd"))
        return dist.Normal(loc, sd).to_event(len(s.shape))

    def forward(self, x, y=None, subsample=None):
        for s in self.specs:
            pyro.sample(s.name, self.factor(s))


def toy_model(hidden=(3,)) -> BayesianModel:
    """The model ``ToyGuide`` fits: a Gaussian-prior MLP on 2 inputs with fixed noise scale 0.5."""
    return BayesianModel(MLP(2, hidden, 1), GaussianPrior(), GaussianLikelihood("fixed", scale=0.5))


def hs_model() -> BayesianModel:
    """A regularized-horseshoe MLP on 2 inputs, one hidden layer of 3, a Gamma(6, 6) noise precision."""
    return BayesianModel(
        MLP(2, (3,), 1), HorseshoePrior(regularized=True), GaussianLikelihood("gamma", 6.0, 6.0)
    )


def assert_breaks(cid: str, pattern: str, fn, *args, **kwargs) -> str:
    """``fn(*args, **kwargs)`` fails the kit's contract ``cid`` with a message matching ``pattern``."""
    with pytest.raises(AssertionError) as err:
        fn(*args, **kwargs)
    msg = str(err.value)
    assert msg.startswith(f"[{cid}] "), msg
    assert re.search(pattern, msg), msg
    return msg


# ------------------------------------------------------------------ the fuzz tests' hypothesis strategies


def floats_without_subnormals(*args, **kwargs) -> st.SearchStrategy:
    """``st.floats`` without subnormals (the test session flushes denormals: ``tests/conftest.py``)."""
    return st.floats(*args, allow_subnormal=False, **kwargs)


SHORT_TEXT = st.text(max_size=4)


def not_a_dataset(s: str) -> bool:
    """``s`` names no dataset of ``zoo.data``."""
    from zoo.data import is_dataset_name

    return not is_dataset_name(s)


def _not_a_device(s: object) -> bool:
    try:
        return torch.device(s).type != "cpu"  # type: ignore[arg-type]
    except Exception:
        return True


#: the fuzz tests' Hypothesis settings: a fixed, derandomized set of 60 examples per test, no example database
FUZZ_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: the registry guides of ``mfvi-bnn`` (a fuzzed guide name must not be one)
MFVI_GUIDES = tuple(zoo.get_entry("mfvi-bnn").guides)

BAD_DEVICE = st.one_of(
    st.sampled_from(["meta", "xla", "hpu", "cuda:99", "gpu", "", "cpu:x"]),
    SHORT_TEXT.filter(_not_a_device),
    st.integers(),
    floats_without_subnormals(),
)
