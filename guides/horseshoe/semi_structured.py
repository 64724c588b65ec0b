"""The semi-structured horseshoe family (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.1.2, Table 1,
after Louizos & Welling 2016): the weights of a layer get a matrix normal ``q(beta_l) = MN(M_l, U_l, V_l)``
with diagonal ``U`` (over a unit's ``F`` incoming entries) and ``V`` (over the ``K`` units); the scale
factors stay those of Eq. 4."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from guides.horseshoe.factorized import HorseshoeGuide
from zoo.families.horseshoe.prior import HSLayer

__all__ = ["SemiStructuredHorseshoeGuide"]


class SemiStructuredHorseshoeGuide(HorseshoeGuide):
    """Semi-structured: ``q(beta_l) = MN(M_l, diag U_l, diag V_l)``, i.e. ``Var(beta_kf) = V_k U_f``; the
    pre-activation variance given the scales is ``(a^T U a) V_kk`` (Eq. 7)."""

    family = "semi-structured"

    def _init_sd(self, i: int, layer: HSLayer) -> None:
        self._param(f"l{i}_log_u", torch.full((layer.fan,), 2 * math.log(self.init_sd)))
        self._param(f"l{i}_log_v", torch.zeros(layer.units))

    def _uv(self, i: int) -> tuple[Tensor, Tensor]:
        return torch.exp(getattr(self, f"l{i}_log_u")), torch.exp(getattr(self, f"l{i}_log_v"))

    def _beta_sd(self, i: int) -> Tensor:
        u, v = self._uv(i)
        return torch.sqrt(v[:, None] * u[None, :])

    def _lrt_hidden(self, i: int, a: Tensor, tau2: Tensor) -> tuple[Tensor, Tensor]:
        u, v = self._uv(i)
        return a @ getattr(self, f"l{i}_loc").T, ((a * a) @ u)[..., None] * v
