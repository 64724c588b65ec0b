"""LBBNN-FLOW (Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §3-4, Eqs. 5-11): the z-flow of
:mod:`guides.flows.zflow` on the spike-and-slab LBBNN model.

The KL given ``z`` is analytic (``spike_slab_kl`` at loc ``zμ``) via the masked-site + factor convention of
:mod:`guides.lbbnn.meanfield`.  Like :class:`guides.lbbnn.lcrt.LCRTLBBNNGuide`, the guide samples
pre-activations under :class:`guides.lbbnn.lcrt.LCRT_ELBO` and genuine weight-space draws otherwise (plain
``Trace_ELBO``, prediction, ArviZ export, checkpoints).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from guides.flows.zflow import ZFlowConfig, ZFlowMixin
from guides.lbbnn.lcrt import LCRTLBBNNGuide
from zoo.core.architectures import ParamSpec
from zoo.core.model import BayesianModel

__all__ = ["LBBNNFlowGuide"]


class LBBNNFlowGuide(ZFlowMixin, LCRTLBBNNGuide):
    """LBBNN-FLOW (Eqs. 5-11) on the spike-and-slab model; see the module docstring.

    :param zflow: the z-flow's options, a :class:`guides.flows.zflow.ZFlowConfig` (or a mapping); its fields
        may also be given by keyword (``flow_hidden=[100, 100]``), and override ``zflow``'s.
    Other keyword arguments go to :class:`guides.lbbnn.lcrt.LCRTLBBNNGuide`.
    """

    def __init__(self, model: BayesianModel, zflow: ZFlowConfig | Mapping | None = None, **kwargs) -> None:
        cfg = ZFlowConfig.take(zflow, kwargs)
        super().__init__(model, **kwargs)
        self._init_zflows(self._wspecs, cfg)

    def layer_z(self, g: int, spec: ParamSpec) -> Tensor:
        return self.sample_layer_z(g, spec)

    def layer_done(
        self, g: int, spec: ParamSpec, z: Tensor, gamma: Tensor | None, theta: Tensor | None
    ) -> None:
        self.add_zflow_factor(g, spec, z, None if gamma is None else gamma * theta)

    @torch.no_grad()
    def _draw_params(self, num: int, mode: str, threshold: float) -> dict[str, Tensor]:
        """As :meth:`LBBNNGuide._draw_params` with slab means ``z μ`` (a fresh ``z`` per draw; the ``mean``
        modes use the flow image of ``μ_0``)."""
        out = super()._draw_params(num, mode, threshold)
        point = mode in ("mean", "mpm-mean")
        for g, s in enumerate(self._wspecs):
            loc, scale = self.slab_params(s)
            z = self.draw_z(s, 1 if point else num, mean=point).to(loc.dtype).unsqueeze(-2)
            if mode == "mean":
                out[s.name] = self.expected_inclusion(g, s) * loc * z
                continue
            if mode == "mpm-mean":
                out[s.name] = (self.expected_inclusion(g, s) > threshold).to(loc.dtype) * loc * z
                continue
            theta = loc * z + scale * torch.randn((num, *s.shape), dtype=loc.dtype, device=loc.device)
            if mode == "mpm":
                gamma = (self.expected_inclusion(g, s) > threshold).to(loc.dtype)
            else:
                gamma = torch.bernoulli(torch.sigmoid(self.draw_inclusion_logits(g, s, num)))
            out[s.name] = gamma * theta
        return out
