"""BNN-FLOW / multiplicative normalizing flows (Louizos & Welling 2017, arXiv:1703.01961) in the form of
Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395, §3-4): the z-flow of :mod:`guides.flows.zflow` with
``α ≡ 1`` on a Gaussian-prior model (e.g. ``mfvi-bnn``), the dense special case of LBBNN-FLOW.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyro
import pyro.distributions as dist
import torch.nn.functional as F
from pyro.nn import PyroModule
from torch import Tensor

from guides.autoguides import require_prior
from guides.flows.zflow import ZFlowConfig, ZFlowMixin
from guides.lbbnn.base import init_noise_factor, init_slab_params, param_attr
from guides.lbbnn.lcrt import LCRTLinearMixin, point_site
from zoo.core.architectures import MLP, ParamSpec
from zoo.core.gaussian import GaussianPrior
from zoo.core.model import BayesianModel
from zoo.families.lbbnn.prior import gaussian_kl

__all__ = ["GaussianFlowGuide"]


class GaussianFlowGuide(ZFlowMixin, LCRTLinearMixin, PyroModule):
    """BNN-FLOW / MNF: Eq. (5) of arXiv:2305.03395 with ``α ≡ 1`` on a model with a :class:`GaussianPrior`
    (e.g. ``mfvi-bnn``): sites ``fc{l}.weight ~ N(z μ, σ²)``, ``fc{l}.bias ~ N(μ_b, σ_b²)``, closed-form
    Gaussian KL given ``z``, the same q-flows and reverse models as
    :class:`guides.flows.lbbnn.LBBNNFlowGuide`.

    A Gaussian/Gamma likelihood noise site gets a LogNormal factor (as the LBBNN guides).

    :param zflow: the z-flow's options, a :class:`guides.flows.zflow.ZFlowConfig` (or a mapping); its fields
        may also be given by keyword (``flow_hidden=[100, 100]``), and override ``zflow``'s.
    :param init_scale, init_rho: the slab and bias means' ``U(-init_scale, init_scale)`` start and ``ρ``'s
        uniform range (as :class:`guides.lbbnn.base.LBBNNGuide`).
    """

    def __init__(
        self,
        model: BayesianModel,
        zflow: ZFlowConfig | Mapping | None = None,
        init_scale: float = 0.2,
        init_rho: tuple[float, float] = (-5.0, -4.0),
        **options,
    ) -> None:
        cfg = ZFlowConfig.take(zflow, options)
        if options:
            raise TypeError(f"GaussianFlowGuide got unexpected keyword argument(s) {sorted(options)}")
        super().__init__()
        if not isinstance(model, BayesianModel):
            raise TypeError(f"model must be a zoo BayesianModel, got {type(model).__name__}")
        require_prior(
            model,
            "flow",
            type(self),
            (GaussianPrior,),
            "a GaussianPrior for its closed-form KL (guides.flows.weightspace.WeightSpaceGuide(model, "
            "'flow') is the z-flow of any continuous prior)",
        )
        if not isinstance(model.architecture, MLP):
            raise TypeError(f"model.architecture must be a zoo MLP, got {type(model.architecture).__name__}")
        self._model = (model,)
        self._specs = list(model.specs)
        self._wspecs = [s for s in self._specs if s.role == "weight"]
        self._lcrt_cache = None
        init_slab_params(self, self._specs, init_scale, init_rho)
        self._init_zflows(self._wspecs, cfg)
        self._noise_site = init_noise_factor(self, model)

    @property
    def model(self) -> BayesianModel:
        return self._model[0]

    def slab_params(self, spec: ParamSpec) -> tuple[Tensor, Tensor]:
        """``(μ, σ)`` of a weight or bias spec (``σ = softplus(ρ)``)."""
        loc, rho = getattr(self, param_attr(spec.name, "loc")), getattr(self, param_attr(spec.name, "rho"))
        return loc, F.softplus(rho)

    def _site(self, spec: ParamSpec, loc: Tensor, scale: Tensor) -> Tensor:
        prior = self.model.prior
        n = len(spec.shape)
        kl = gaussian_kl(loc, scale, prior.scale_for(spec) ** 2).sum(tuple(range(-n, 0)))
        if self.lcrt_mode:  # the LCRT messenger masks the model's score of the point value
            v = point_site(spec.name, spec.shape, loc)
            pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)
        else:
            v = pyro.sample(spec.name, dist.Normal(loc, scale).to_event(n).mask(False))
            pyro.factor(f"{spec.name}.kl", kl + prior.distribution(spec).log_prob(v), has_rsample=True)
        return v

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        for g, s in enumerate(self._wspecs):
            loc, scale = self.slab_params(s)
            z = self.sample_layer_z(g, s)
            w = self._site(s, loc * z.unsqueeze(-2), scale)
            if self.lcrt_mode:
                self._lcrt_cache[s.layer] = {"logits": None, "loc": loc, "scale": scale, "z": z}
            self.add_zflow_factor(g, s, z, None if self.lcrt_mode else w)
        for s in self._specs:
            if s.role == "bias":
                loc, scale = self.slab_params(s)
                self._site(s, loc, scale)
                if self.lcrt_mode:
                    self._lcrt_cache[("bias", s.layer)] = (loc, scale)
        if self._noise_site is not None:
            pyro.sample(self._noise_site, dist.LogNormal(self.noise_loc, self.noise_scale))
