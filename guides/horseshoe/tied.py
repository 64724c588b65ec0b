"""The factorized (tied) horseshoe family (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.1.1, Table 1):
``q(beta_ij) = N(mu_ij, 1)`` — half the weight parameters of the factorized family; the weights escape
isotropically, but pruning through ``tau v`` still works (§6.5, Fig. 13)."""

from __future__ import annotations

import torch
from torch import Tensor

from guides.horseshoe.factorized import HorseshoeGuide
from zoo.families.horseshoe.prior import HSLayer

__all__ = ["TiedHorseshoeGuide"]


class TiedHorseshoeGuide(HorseshoeGuide):
    """Factorized (tied): ``q(beta_ij) = N(mu_ij, 1)`` (Table 1)."""

    family = "tied"

    def _init_sd(self, i: int, layer: HSLayer) -> None:
        """No variance parameters: the standard deviations are fixed at 1."""

    def _beta_sd(self, i: int) -> Tensor:
        return torch.ones_like(getattr(self, f"l{i}_loc"))
