"""Elementwise transforms shared by the guides."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["inv_softplus"]

#: below this, ``log(expm1(x))`` loses all precision in float32; inputs are clamped up to it
INV_SOFTPLUS_MIN = 1e-8


def inv_softplus(x: Tensor | float) -> Tensor:
    """The inverse of ``softplus(u) = log(1 + e^u)``: ``u = x + log(-expm1(-x))`` (stable for large ``x``).

    ``x`` is clamped to at least :data:`INV_SOFTPLUS_MIN`; a Python float gives a 0-d float64 tensor.
    """
    t = torch.as_tensor(x, dtype=torch.float64) if not torch.is_tensor(x) else x
    t = t.clamp_min(INV_SOFTPLUS_MIN)
    return t + torch.log(-torch.expm1(-t))
