"""Gaussian weight prior with one shared inverse-gamma variance scale: the HMC / mfVI baseline model of
Sheinkman & Wade 2025 ("Variational Bayesian Bow-tie Neural Networks with Shrinkage", arXiv:2411.11132),
App. D.2::

    W_{l,d,d'} ~ N(0, s_w^2 gamma / sqrt(D_{l-1})),   b_{l,d} ~ N(0, s_b^2 gamma),   gamma ~ IG(2, 1).

``D_{l-1}`` is the layer's fan-in; the variance is divided by its *square root*, as App. D.2 writes it (not
by ``D_{l-1}`` as in the usual fan-in scaling).  ``gamma`` is one latent site (``"gauss.gamma"``) shared by
every layer, so the posterior learns the overall weight scale.  ``mfvi-bnn`` builds it with the option
``hierarchical_scale=True``.
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

__all__ = ["HierarchicalGaussianPrior", "SCALE_SITE"]

#: the name of the shared variance-scale site ``gamma``
SCALE_SITE = "gauss.gamma"


class HierarchicalGaussianPrior(Prior):
    """``W ~ N(0, s_w^2 gamma / sqrt(fan_in))``, ``b ~ N(0, s_b^2 gamma)``, ``gamma ~ IG(a, b)``
    (arXiv:2411.11132, App. D.2; module docstring).

    :param weight_scale, bias_scale: ``s_w``, ``s_b``.
    :param concentration, rate: the inverse-gamma prior of ``gamma`` (App. D.2: ``IG(2, 1)``).
    """

    def __init__(
        self,
        weight_scale: float = 1.0,
        bias_scale: float = 1.0,
        concentration: float = 2.0,
        rate: float = 1.0,
    ) -> None:
        super().__init__()
        self.register_buffer("weight_scale", torch.tensor(check_positive("weight_scale", weight_scale)))
        self.register_buffer("bias_scale", torch.tensor(check_positive("bias_scale", bias_scale)))
        self.register_buffer("concentration", torch.tensor(check_positive("concentration", concentration)))
        self.register_buffer("rate", torch.tensor(check_positive("rate", rate)))

    def config(self) -> dict:
        return {
            "weight_scale": float(self.weight_scale),
            "bias_scale": float(self.bias_scale),
            "concentration": float(self.concentration),
            "rate": float(self.rate),
        }

    def base_scale(self, spec: ParamSpec) -> Tensor:
        """The standard deviation of ``spec``'s entries at ``gamma = 1`` (a 0-dim tensor)."""
        if spec.role == "bias":
            return self.bias_scale
        return self.weight_scale / math.sqrt(math.sqrt(spec.fan_in))

    def distribution(self, spec: ParamSpec, gamma: Tensor) -> dist.Distribution:
        """``p(spec | gamma)``: batch shape ``gamma.shape`` (particle dims), event shape ``spec.shape``."""
        n = len(spec.shape)
        std = self.base_scale(spec) * gamma.sqrt()
        std = std.reshape(*std.shape, *([1] * n)).expand(*gamma.shape, *spec.shape)
        return dist.Normal(torch.zeros_like(std), std).to_event(n)

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        gamma = pyro.sample(SCALE_SITE, dist.InverseGamma(self.concentration, self.rate))
        return {s.name: pyro.sample(s.name, self.distribution(s, gamma)) for s in specs}
