"""Pyro autoguides as zoo guides (the baseline for every prior), with BNN-friendly initialization, and the
guides' shared prior-compatibility check.

Any Pyro autoguide works on any zoo model whose latent sites are all continuous, because zoo models are
plain Pyro models; this module adds a name → constructor table and an initialization that suits networks:
weights start at LeCun-normal draws ``N(0, 1/fan_in)`` (fan-in = last event dim), biases at 0, every
other latent at its prior median, and the guide scales start small (``init_scale``), as in
Bayes-by-backprop practice.  ``"iaf"`` is :class:`AutoIAFNormal`: inverse autoregressive flows (Kingma,
Salimans, Jozefowicz, Chen, Sutskever & Welling 2016, arXiv:1606.04934, §4, Eqs. 10-14, the numerically
stable update) over the whole unconstrained latent vector, on a diagonal Gaussian base started at the
same initialization.

Autoguides cannot represent discrete latents (the spike-and-slab inclusion indicators, the bow-tie
gates): :func:`make_autoguide` refuses a zoo model with such a site at build time with
:class:`IncompatiblePriorError`, which every zoo guide raises through :func:`require_prior` when it is
given a prior it cannot serve.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.distributions.transforms import ComposeTransformModule
from pyro.infer import autoguide
from pyro.infer.autoguide.initialization import init_to_median
from pyro.nn import PyroParam
from pyro.poutine.util import site_is_subsample
from torch import nn

__all__ = [
    "init_to_lecun",
    "AUTOGUIDES",
    "AutoIAFNormal",
    "AutoMultivariateNormal",
    "OwnDrawMultivariateNormal",
    "IncompatiblePriorError",
    "discrete_latent_sites",
    "is_discrete_site",
    "latent_sites",
    "make_autoguide",
    "autoguide_factory",
    "require_prior",
]


class IncompatiblePriorError(ValueError, TypeError):
    """A guide was given a prior (or model) it cannot serve.  A ``ValueError``; also a ``TypeError`` so
    code written against the guides' earlier ``TypeError`` keeps working."""


def _prior_label(model) -> str:
    prior = getattr(model, "prior", None)
    if prior is None:
        return f"model {type(model).__name__} (no prior)"
    return type(prior).__name__


def require_prior(
    model: object, name: str, guide_cls: type | str, needs: tuple[type, ...], what: str = ""
) -> None:
    """Raise :class:`IncompatiblePriorError` unless ``model.prior`` is an instance of one of ``needs``.

    The message names the guide (registry ``name`` and class) and the prior, e.g. ``guide 'structured'
    (StructuredHorseshoeGuide) cannot serve prior SpikeSlabPrior: it needs a HorseshoePrior``; ``what``
    replaces the default "a <class> or a <class>" requirement (e.g. to give the reason)."""
    if isinstance(getattr(model, "prior", None), needs):
        return
    raise incompatible(model, name, guide_cls, what or "a " + " or a ".join(c.__name__ for c in needs))


def incompatible(model: object, name: str, guide_cls: type | str, what: str) -> IncompatiblePriorError:
    """The :class:`IncompatiblePriorError` of guide ``name`` (class ``guide_cls``) on ``model``."""
    cls = guide_cls if isinstance(guide_cls, str) else guide_cls.__name__
    return IncompatiblePriorError(
        f"guide {name!r} ({cls}) cannot serve prior {_prior_label(model)}: it needs {what}"
    )


def is_discrete_site(site: dict) -> bool:
    """A site is discrete if its support says so, or if its distribution cannot be reparameterized and a
    draw is integer-valued (a pmf extended to [0, 1], e.g. the spike-and-slab inclusion prior; a draw of a
    continuous distribution is integer with probability 0)."""
    fn = site["fn"]
    if fn.support.is_discrete or getattr(fn, "has_enumerate_support", False):
        return True
    v = site["value"]
    return (
        not fn.has_rsample and torch.is_tensor(v) and v.is_floating_point() and bool((v == v.round()).all())
    )


def latent_sites(model: Callable[..., Any]) -> dict[str, dict]:
    """The latent sample sites of a zoo model (name -> trace site), from one dummy trace on two zero
    inputs with no data term, inside a private parameter-store scope and RNG fork (nothing global
    changes).  Non-zoo models (no ``architecture``) are not traced: ``{}``."""
    arch = getattr(model, "architecture", None)
    if arch is None:
        return {}
    ref = next((b for b in model.buffers() if b.is_floating_point()), torch.zeros(()))
    x = torch.zeros(2, arch.in_features, dtype=ref.dtype, device=ref.device)
    with torch.random.fork_rng(devices=[]), pyro.get_param_store().scope(), torch.no_grad():
        tr = poutine.trace(model).get_trace(x, None)
    return {
        name: site
        for name, site in tr.nodes.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and name != "obs"
        and not site_is_subsample(site)
    }


def discrete_latent_sites(model: Callable[..., Any]) -> list[str]:
    """The discrete latent sites of a zoo model (see :func:`latent_sites`)."""
    return [name for name, site in latent_sites(model).items() if is_discrete_site(site)]


def init_to_lecun(site: dict) -> torch.Tensor:
    """Initial location: LeCun-normal for ``*.weight`` sites, zero for ``*.bias``, prior median otherwise."""
    name = site["name"]
    fn = site["fn"]
    if name.endswith(".weight"):
        shape = fn.event_shape if len(fn.event_shape) else fn.batch_shape
        fan_in = shape[-1] if len(shape) else 1
        ref = fn.sample()
        return torch.randn(ref.shape, dtype=ref.dtype, device=ref.device) / math.sqrt(fan_in)
    if name.endswith(".bias"):
        return torch.zeros_like(fn.sample())
    return init_to_median(site)


class AutoIAFNormal(autoguide.AutoContinuous):
    """IAF posterior over the packed unconstrained latent vector (Kingma et al. 2016, arXiv:1606.04934,
    §4): ``z_0 ~ N(m, diag(s^2))`` with ``m`` at the zoo initialization (:func:`init_to_lecun`) and
    ``s = init_scale`` at the start, then ``num_transforms`` stable IAF steps (their Eq. 14,
    :class:`guides.flows.iaf.IAF`; MADE hidden widths ``hidden``, which may be narrower than the latent
    dimension).  Pyro's own ``AutoIAFNormal`` starts from a standard-normal base (every weight ``N(0, 1)``)
    and sizes its MADE as ``3 D + 1``; this one keeps the zoo's start and a width independent of ``D``.
    """

    def __init__(
        self,
        model: Callable[..., Any],
        init_loc_fn: Callable = init_to_lecun,
        init_scale: float = 1e-2,
        hidden: tuple[int, ...] = (64,),
        num_transforms: int = 2,
        sigmoid_bias: float = 2.0,
    ) -> None:
        if not init_scale > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale!r}")
        super().__init__(model, init_loc_fn=init_loc_fn)
        self._init_scale = float(init_scale)
        self._flow_options = (tuple(hidden), int(num_transforms), float(sigmoid_bias))

    def _setup_prototype(self, *args, **kwargs) -> None:
        super()._setup_prototype(*args, **kwargs)
        loc = self._init_loc()
        self.loc = nn.Parameter(loc)
        self.scale = PyroParam(torch.full_like(loc, self._init_scale), constraints.positive)
        from guides.flows.iaf import IAF  # here: the guides.flows package imports this module

        hidden, steps, bias = self._flow_options
        flow = IAF(self.latent_dim, hidden, steps, bias).to(dtype=loc.dtype, device=loc.device)
        self.flow = ComposeTransformModule(list(flow.steps))

    def get_base_dist(self) -> dist.Distribution:
        return dist.Normal(self.loc, self.scale).to_event(1)

    def get_transform(self, *args: Any, **kwargs: Any) -> ComposeTransformModule:
        return self.flow


class OwnDrawMultivariateNormal(dist.MultivariateNormal):
    """A multivariate normal whose ``log_prob`` at its own latest ``rsample`` draw is computed from the noise
    that made it: for ``z = loc + L eps``, ``log q(z) = -||eps||^2 / 2 - sum_i log L_ii - (d / 2) log 2 pi``
    — the same function of the parameters as ``torch``'s triangular solve ``L^-1 (z - loc)``, so the same
    value and the same reparameterized ELBO gradient in exact arithmetic, but without the solve's rounding
    error.  Any other value goes through ``torch``'s ``log_prob``.

    Why: the solve's error grows with the condition number of ``L``.  Fitting ``mfvi-bnn``'s ``mvn`` guide
    on yacht (split 0, 50 units, float32, Adam 1e-2), ``cond(L)`` grew from 4e7 to 1e18 in eight steps near
    step 4320 while ``loc`` and the scales barely moved, the naive ``log q`` of the guide's own draws was off
    by up to 7e23 and the single-sample ELBO jumped to +1e28: the optimizer was rewarded for the rounding
    error of an ill-conditioned ``L``, and the fit stopped with a divergence.  With the density taken from
    the noise the objective carries no such reward.
    """

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        value = self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)
        self._own_draw = (value, eps)
        return value

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        own = getattr(self, "_own_draw", None)
        if own is None or value is not own[0]:
            return super().log_prob(value)
        eps = own[1]
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return -0.5 * (eps * eps).sum(-1) - half_log_det - 0.5 * self._event_shape[0] * math.log(2 * math.pi)


class AutoMultivariateNormal(autoguide.AutoMultivariateNormal):
    """Pyro's ``AutoMultivariateNormal`` (a full-covariance Gaussian over the packed unconstrained latents)
    whose posterior evaluates the density of its own draws stably (:class:`OwnDrawMultivariateNormal`)."""

    def get_posterior(self, *args, **kwargs) -> dist.Distribution:
        return OwnDrawMultivariateNormal(self.loc, scale_tril=self.scale[..., None] * self.scale_tril)


AUTOGUIDES: dict[str, Callable] = {
    "normal": autoguide.AutoNormal,
    "diagonal": autoguide.AutoDiagonalNormal,
    "lowrank": autoguide.AutoLowRankMultivariateNormal,
    "mvn": AutoMultivariateNormal,
    "delta": autoguide.AutoDelta,
    "iaf": AutoIAFNormal,
}


def make_autoguide(
    name: str, model: Callable[..., Any], init_scale: float = 1e-2, **kwargs: Any
) -> autoguide.AutoGuide:
    """Build the autoguide ``name`` (one of :data:`AUTOGUIDES`) for ``model``.

    A zoo model with a discrete latent site is refused (:class:`IncompatiblePriorError`): an autoguide
    would treat it as continuous."""
    if name not in AUTOGUIDES:
        raise ValueError(f"guide must be one of {sorted(AUTOGUIDES)}, got {name!r}")
    cls = AUTOGUIDES[name]
    discrete = discrete_latent_sites(model)
    if discrete:
        raise incompatible(
            model,
            name,
            cls,
            f"continuous latents only: autoguides cannot represent the discrete site(s) {discrete}",
        )
    kwargs.setdefault("init_loc_fn", init_to_lecun)
    if name != "delta":
        kwargs.setdefault("init_scale", init_scale)
    return cls(model, **kwargs)


def autoguide_factory(name: str) -> Callable:
    """A registry guide factory ``(model, **guide_options) -> make_autoguide(name, model, ...)``."""
    if name not in AUTOGUIDES:
        raise ValueError(f"guide must be one of {sorted(AUTOGUIDES)}, got {name!r}")

    def factory(model: Callable[..., Any], **options: Any) -> autoguide.AutoGuide:
        return make_autoguide(name, model, **options)

    factory.__doc__ = f"The {name!r} autoguide ({AUTOGUIDES[name].__name__}) with the zoo's initialization."
    return factory
