"""Weight-space guides for every prior whose network parameters are continuous sample sites: the
factorized, tied and z-flow families on the Gaussian, N-GIG and collapsed (CM/CV/CMV) priors.

The families are those of the horseshoe and z-flow papers, written on the weights themselves instead of a
prior-specific parameterization:

* ``"factorized"``: ``q(w_ij) = N(mu_ij, s_ij^2)`` (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.1,
  Table 1 "factorized"; Blundell et al. 2015, arXiv:1505.05424, §3.2);
* ``"tied"``: ``q(w_ij) = N(mu_ij, s_t^2)`` with one standard deviation per parameter tensor (Table 1
  "factorized (tied)" ties the non-centered variances to 1, their prior value; a prior without a
  unit-variance non-centered weight has no such reference, so the tied value is learned — one scale per
  layer's weights and one per layer's biases, half the parameters of the factorized family);
* ``"flow"``: the z-flow of Skaaret-Lund, Storvik & Hubin 2023 (arXiv:2305.03395, §3.1-3.2, Eqs. 5-11;
  :mod:`guides.flows.zflow`) with ``α ≡ 1``: ``q(w | z) = N(z_i mu_ij, s_ij^2)``, ``q(z)`` an IAF, the
  reverse model ``r(z | w)`` of Eq. 11 — BNN-FLOW / MNF (Louizos & Welling 2017, arXiv:1703.01961) on any
  continuous prior.

Every other latent site of the model (the N-GIG scales ``fc{l}.tau``/``fc{l}.psi``, a collapsed prior's
hyper-latents in its hierarchical form, the likelihood's noise) gets an
:class:`~pyro.infer.autoguide.AutoNormal` factor with the zoo's initialization.  The prior enters only
through ``Trace_ELBO``'s Monte Carlo ``log p(w, ...) - log q(w, ...)``, so one guide serves any prior with
one continuous sample site per :class:`~zoo.core.architectures.ParamSpec` (named by it) and no discrete
latent.  Priors with a closed-form KL have their own guides as well
(:class:`guides.flows.gaussian.GaussianFlowGuide`, the collapsed bounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroParam
from torch import Tensor

from guides.autoguides import incompatible, init_to_lecun, is_discrete_site, latent_sites
from guides.flows.zflow import ZFlowConfig, ZFlowMixin
from guides.lbbnn.base import param_attr
from zoo.core.architectures import MLP, ParamSpec
from zoo.core.model import BayesianModel
from zoo.core.validation import check_positive

__all__ = ["FAMILIES", "WeightSpaceGuide", "weight_space_factory"]

FAMILIES = ("factorized", "tied", "flow")


def _check_sites(model: BayesianModel, family: str) -> None:
    """:class:`~guides.autoguides.IncompatiblePriorError` unless the model has no discrete latent and every
    spec is a continuous sample site of the spec's shape."""
    sites = latent_sites(model)
    discrete = [n for n, site in sites.items() if is_discrete_site(site)]
    if discrete:
        raise incompatible(
            model, family, WeightSpaceGuide, f"continuous latents only; the discrete site(s) {discrete}"
        )
    missing = [s.name for s in model.specs if s.name not in sites]
    if missing:
        raise incompatible(
            model,
            family,
            WeightSpaceGuide,
            f"one continuous sample site per network parameter; it has no site {missing[0]!r} (its weights "
            "are deterministic functions of other sites: use that prior's own guides)",
        )
    for s in model.specs:
        if tuple(sites[s.name]["fn"].event_shape) != tuple(s.shape):
            raise incompatible(
                model, family, WeightSpaceGuide, f"site {s.name!r} with event shape {tuple(s.shape)}"
            )


class WeightSpaceGuide(ZFlowMixin, PyroModule):
    """Factorized / tied / z-flow Gaussian guide on the network parameters of any continuous prior
    (module docstring), with an ``AutoNormal`` for the remaining latents.

    :param model: a :class:`~zoo.core.model.BayesianModel` whose prior emits a continuous site per spec.
    :param family: ``"factorized"``, ``"tied"`` or ``"flow"``.
    :param init_sd: initial standard deviation of every weight factor (and of the ``AutoNormal`` part).
    :param zflow: ``"flow"`` only: the z-flow's options (:class:`guides.flows.zflow.ZFlowConfig` or a
        mapping); its fields may also be given by keyword (``flow_hidden``, ``num_steps``, ...).
    """

    def __init__(
        self,
        model: BayesianModel,
        family: str = "factorized",
        init_sd: float = 1e-2,
        zflow: ZFlowConfig | Mapping | None = None,
        **options,
    ) -> None:
        super().__init__()
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
        if not isinstance(model, BayesianModel):
            raise incompatible(model, family, WeightSpaceGuide, "a zoo BayesianModel")
        unknown = sorted(set(options) - set(ZFlowConfig.field_names()))
        if unknown or ((options or zflow is not None) and family != "flow"):
            given = sorted(options) + (["zflow"] if zflow is not None else [])
            raise TypeError(f"WeightSpaceGuide({family!r}) got unexpected keyword argument(s) {given}")
        cfg = ZFlowConfig.take(zflow, options) if family == "flow" else None
        if family == "flow" and not isinstance(model.architecture, MLP):
            raise incompatible(model, family, WeightSpaceGuide, "a zoo MLP (z-flow over (out, in) weights)")
        _check_sites(model, family)
        self.family = family
        self.init_sd = check_positive("init_sd", init_sd)
        self._specs: list[ParamSpec] = list(model.specs)
        self._wspecs = [s for s in self._specs if s.role == "weight"]
        ref = next((b for b in model.buffers() if b.is_floating_point()), torch.zeros(()))
        for s in self._specs:
            self._init_factor(s, ref)
        if family == "flow":
            self._init_zflows(self._wspecs, cfg)
            self.to(dtype=ref.dtype, device=ref.device)  # the flows are created in torch's default dtype
        hide = [s.name for s in self._specs]
        rest = set(latent_sites(model)) - set(hide)
        self.rest = (
            AutoNormal(poutine.block(model, hide=hide), init_loc_fn=init_to_lecun, init_scale=self.init_sd)
            if rest
            else None
        )

    def _init_factor(self, s: ParamSpec, ref: Tensor) -> None:
        """``loc``: LeCun-normal weights, zero biases; ``sd``: per entry, or one per tensor (tied)."""
        kw = {"dtype": ref.dtype, "device": ref.device}
        if s.role == "weight":
            loc = torch.randn(s.shape, **kw) / math.sqrt(s.fan_in)
        else:
            loc = torch.zeros(s.shape, **kw)
        shape = () if self.family == "tied" else s.shape
        setattr(self, param_attr(s.name, "loc"), PyroParam(loc))
        setattr(
            self,
            param_attr(s.name, "sd"),
            PyroParam(torch.full(shape, self.init_sd, **kw), constraints.positive),
        )

    def loc_scale(self, spec: ParamSpec) -> tuple[Tensor, Tensor]:
        """``(mu, s)`` of ``spec``'s factor (``s`` broadcast to the spec's shape)."""
        loc = getattr(self, param_attr(spec.name, "loc"))
        return loc, getattr(self, param_attr(spec.name, "sd")).expand(loc.shape)

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        for g, s in enumerate(self._wspecs):
            self._sample(s, g)
        for s in self._specs:
            if s.role != "weight":
                self._sample(s, None)
        if self.rest is not None:
            self.rest(x, y, subsample)

    def _sample(self, s: ParamSpec, g: int | None) -> None:
        loc, scale = self.loc_scale(s)
        flow = self.family == "flow" and g is not None
        z = self.sample_layer_z(g, s) if flow else None
        if z is not None:
            loc = loc * z.unsqueeze(-2)
        w = pyro.sample(s.name, dist.Normal(loc, scale).to_event(len(s.shape)))
        if z is not None:
            self.add_zflow_factor(g, s, z, w)


def weight_space_factory(family: str) -> Callable[..., WeightSpaceGuide]:
    """A registry guide factory ``(model, **guide_options) -> WeightSpaceGuide(model, family, ...)``."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")

    def factory(model: BayesianModel, **options) -> WeightSpaceGuide:
        return WeightSpaceGuide(model, family, **options)

    factory.__doc__ = f"The {family!r} weight-space guide (:class:`WeightSpaceGuide`)."
    return factory
