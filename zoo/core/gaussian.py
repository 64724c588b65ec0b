"""Independent Gaussian prior on every weight and bias — the "mfVI"/BBB baseline prior.

``w ~ N(0, s_w^2)``, ``b ~ N(0, s_b^2)``: the arguments are standard deviations, not variances.  With
``fan_in_scaling=True`` the weight scale of a layer is ``s_w / sqrt(fan_in)``, i.e. the prior variance is
``s_w^2 / fan_in`` (the usual "standard parameterization" prior; Tomczak, Swaroop, Foong & Turner 2021,
"Collapsed variational bounds for Bayesian neural networks", NeurIPS 34, Table 4, uses the prior
variance ``gamma = 1/N_in``; Sheinkman & Wade 2025, arXiv:2411.11132, App. D.2, uses
``sigma_W^2 gamma / sqrt(D_{l-1})`` for its mean-field baseline).
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
    """Independent ``N(0, s^2)`` on every weight and bias (module docstring).

    :param weight_scale: ``s_w``, the prior **standard deviation** of the weights (before fan-in scaling);
        ``GaussianPrior(1.0)`` is ``N(0, 1)`` and ``GaussianPrior(0.5)`` is ``N(0, 0.25)``.
    :param bias_scale: ``s_b``, the prior standard deviation of the biases (never fan-in scaled).
    :param fan_in_scaling: divide the weight sd of each layer by ``sqrt(fan_in)`` (prior variance
        ``s_w^2 / fan_in``).

    Usage::

        prior = GaussianPrior(1.0, fan_in_scaling=True)
        model = BayesianModel(MLP(8, [50], 1), prior, GaussianLikelihood())
    """

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
