"""The z-flow of Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395 §3.2, Eqs. 5-11) on the
node-wise horseshoe BNN of Ghosh, Yao & Doshi-Velez (2019, arXiv:1705.10388)."""

from __future__ import annotations

from collections.abc import Mapping

import pyro.distributions as dist
import torch
from torch import Tensor

from guides.flows.zflow import ZFlowConfig, ZFlowMixin
from guides.horseshoe.factorized import HorseshoeGuide
from zoo.core.architectures import ParamSpec
from zoo.core.model import BayesianModel

__all__ = ["HorseshoeFlowGuide"]


class HorseshoeFlowGuide(ZFlowMixin, HorseshoeGuide):
    """The z-flow (Eqs. 5-11 of Skaaret-Lund et al. (2023)) on the node-wise horseshoe BNN of Ghosh et al.
    (2019): a prior × guide
    combination none of the anchors offer.

    The non-centered weights ``β_l`` (unit rows ``(K, F)``: the ``in`` weights, then the bias) get the MNF
    family ``q(β_kj | z) = N(z_j μ_kj, σ_kj²)`` with one ``z ∈ R^in`` per layer from a ``K``-step IAF
    (bias column: ``z = 1``), and the reverse model ``r(z | β)`` of Eq. (11) evaluated on the sampled
    weight part of ``β``.  The scales (``τ_kl``, ``v_l``, ``κ``, ``c``) keep Ghosh et al.'s (2019)
    log-normal factors
    and the closed-form inverse-gamma auxiliary updates (Eq. 9, Algorithm 1) of
    :class:`guides.horseshoe.factorized.HorseshoeGuide` after each gradient step.

    The objective is the auxiliary bound (Eqs. 9-10) by Monte Carlo under ``Trace_ELBO``: Ghosh et al.'s
    (2019)
    local-reparameterization ELBO with analytic prior/entropy terms (§4.2, App. A.2) assumes a Gaussian
    ``q(β)`` and is refused here (``supports_lrt = False``: :class:`guides.horseshoe.lrt.HorseshoeLRTELBO`,
    ``lrt_forward`` and ``expected_log_prior_plus_entropy`` raise ``ValueError``).
    Pruning (``prune_probabilities``, §4.3) depends only on the scales and is unchanged; ``mean_rows`` and
    weight-space draws include ``z``.
    """

    supports_lrt = False

    def __init__(self, model: BayesianModel, zflow: ZFlowConfig | Mapping | None = None, **kwargs) -> None:
        """``zflow``: the z-flow's options (:class:`guides.flows.zflow.ZFlowConfig` or a mapping; its fields
        may also be given by keyword, and override ``zflow``'s); other keyword arguments go to
        :class:`guides.horseshoe.factorized.HorseshoeGuide` (``init_sd``, ``init_scales``)."""
        cfg = ZFlowConfig.take(zflow, kwargs)
        super().__init__(model, **kwargs)
        if self.centered:
            raise ValueError("centered: the z-flow guide needs the non-centered horseshoe (centered=False)")
        self._zspecs: list[ParamSpec] = []
        self._zcur: Tensor | None = None
        for layer in self.layers:
            w = [s for s in layer.specs if s.role == "weight"]
            if len(w) != 1 or len(w[0].shape) != 2 or w[0].unit_dim != 0:
                raise ValueError(f"model: layer {layer.prefix} needs one (out, in) weight matrix (an MLP)")
            self._zspecs.append(w[0])
        self._init_zflows(self._zspecs, cfg)

    def _z_rows(self, i: int, z: Tensor) -> Tensor:
        """``z`` (``(..., in)``) as a ``(..., K, F)`` multiplier of layer ``i``'s unit rows (bias: 1)."""
        layer, spec = self.layers[i], self._zspecs[i]
        lead = z.shape[:-1]
        parts = {
            s.name: z.unsqueeze(-2).expand(*lead, *s.shape)
            if s is spec
            else torch.ones(*lead, *s.shape, dtype=z.dtype, device=z.device)
            for s in layer.specs
        }
        return layer.join(parts)

    def _rows_distribution(self, i: int, layer, tau2: Tensor | None) -> dist.Distribution:
        """``q(β_l | z) = N(z μ_l, σ_l²)`` with ``z`` drawn here (auxiliary site ``fc{l}.z0``)."""
        z = self.sample_layer_z(i, self._zspecs[i])
        self._zcur = z
        loc = getattr(self, f"l{i}_loc") * self._z_rows(i, z)
        return dist.Normal(loc, self._beta_sd(i).expand(loc.shape)).to_event(2)

    def _rows_sampled(self, i: int, layer, rows: Tensor) -> None:
        """``-Σ log κ - log r(z | β)`` of layer ``i`` (Eq. 10), ``r`` on the sampled weight part of ``β``."""
        z, self._zcur = self._zcur, None
        self.add_zflow_factor(i, self._zspecs[i], z, layer.split(rows)[self._zspecs[i].name])

    def expected_log_prior_plus_entropy(self) -> Tensor:
        raise ValueError("the horseshoe z-flow guide has no closed-form prior/entropy terms (q(β) is a flow)")
