"""Independent Gaussian prior on every weight and bias — the "mfVI"/BBB baseline prior.

``w ~ N(0, s_w^2)``, ``b ~ N(0, s_b^2)``.  With ``fan_in_scaling=True`` the weight scale of a layer is
``s_w / sqrt(fan_in)`` (the usual "standard parameterization" prior, cf. paper 000 App. D.2, which
uses ``sigma_W^2 gamma / sqrt(D_{l-1})``; paper 002 Table 4 uses ``gamma = 1/fan_in``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.prior import Prior
from zoo.core.validation import check_positive

__all__ = ["GaussianPrior"]


class GaussianPrior(Prior):
    def __init__(
        self, weight_scale: float = 1.0, bias_scale: float = 1.0, fan_in_scaling: bool = False
    ) -> None:
        super().__init__()
        self.register_buffer("weight_scale", torch.tensor(check_positive("weight_scale", weight_scale)))
        self.register_buffer("bias_scale", torch.tensor(check_positive("bias_scale", bias_scale)))
        self.fan_in_scaling = bool(fan_in_scaling)

    def config(self) -> dict:
        return {
            "weight_scale": float(self.weight_scale),
            "bias_scale": float(self.bias_scale),
            "fan_in_scaling": self.fan_in_scaling,
        }

    def scale_for(self, spec: ParamSpec) -> Tensor:
        """Prior standard deviation of the entries of ``spec`` (a 0-dim tensor on the prior's device)."""
        if spec.role == "bias":
            return self.bias_scale
        if self.fan_in_scaling:
            return self.weight_scale / math.sqrt(spec.fan_in)
        return self.weight_scale

    def distribution(self, spec: ParamSpec) -> dist.Distribution:
        scale = self.scale_for(spec)
        return dist.Normal(torch.zeros_like(scale), scale).expand(spec.shape).to_event(len(spec.shape))

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        return {s.name: pyro.sample(s.name, self.distribution(s)) for s in specs}
