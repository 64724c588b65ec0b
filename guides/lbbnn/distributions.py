"""The variational distributions of an LBBNN weight: inclusion ``q(γ)`` and slab ``q(θ | γ)``.

Hubin & Storvik (2019), "Variational Inference for Bayesian Neural Networks under Model and Parameter
Uncertainty", arXiv:1903.07594, §4.1-4.2: ``q(β, γ) = α N(κ, τ²) + (1-α) δ₀`` per weight (Eqs. 4.5-4.7),
``γ`` sampled by the binary Concrete relaxation (Eq. 4.10).  The analytic KL of ``q(γ)`` against a
Bernoulli prior is registered with :func:`torch.distributions.kl.register_kl`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from torch import Tensor
from torch.distributions import Bernoulli
from torch.distributions.kl import register_kl

from zoo.families.lbbnn.prior import InclusionPrior, bernoulli_kl

__all__ = ["InclusionConcrete", "SlabGivenInclusion"]

_EMPTY = torch.Size()


class InclusionConcrete(TorchDistribution):
    """``q(γ) = Bernoulli(σ(logits))`` sampled with the binary Concrete relaxation (Eq. 4.10).

    ``rsample`` returns the hard value ``I(logits + logit u > 0)`` with the Concrete gradient when
    ``straight_through`` (default), else the relaxed value ``σ((logits + logit u)/δ)``.  ``log_prob`` is the
    Bernoulli pmf ``γ log α + (1-γ) log(1-α)``, extended to [0, 1] for relaxed values (as the paper's
    estimator of Eq. 4.14 scores them).
    """

    arg_constraints = {"logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(
        self,
        logits: Tensor,
        temperature: float,
        straight_through: bool = True,
        validate_args: bool | None = None,
    ) -> None:
        self.logits = logits
        self.temperature = float(temperature)
        self.straight_through = bool(straight_through)
        super().__init__(logits.shape, validate_args=validate_args)

    def expand(
        self, batch_shape: Sequence[int], _instance: InclusionConcrete | None = None
    ) -> InclusionConcrete:
        return InclusionConcrete(
            self.logits.expand(torch.Size(batch_shape)), self.temperature, self.straight_through
        )

    def rsample(self, sample_shape: torch.Size = _EMPTY) -> Tensor:
        shape = self._extended_shape(sample_shape)
        tiny = torch.finfo(self.logits.dtype).tiny
        u = torch.rand(shape, dtype=self.logits.dtype, device=self.logits.device).clamp(tiny, 1 - 1e-7)
        z = self.logits + (torch.log(u) - torch.log1p(-u))
        soft = torch.sigmoid(z / self.temperature)
        if not self.straight_through:
            return soft
        hard = (z > 0).to(soft.dtype)
        return hard + (soft - soft.detach())

    def log_prob(self, value: Tensor) -> Tensor:
        return value * F.logsigmoid(self.logits) + (1 - value) * F.logsigmoid(-self.logits)

    @property
    def mean(self) -> Tensor:
        return torch.sigmoid(self.logits)


class SlabGivenInclusion(TorchDistribution):
    """``q(θ | γ) = γ N(loc, scale²) + (1 - γ) N(0, prior_scale²)`` scored as
    ``γ log N(θ; loc, scale) + (1-γ) log N(θ; 0, prior_scale)``.

    ``rsample`` draws ``loc + scale ε`` for every entry: an excluded entry's value never reaches the network
    (``β = γ θ``) and its score equals the model's prior score, so the two cancel for any value.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(
        self,
        gamma: Tensor,
        loc: Tensor,
        scale: Tensor,
        prior_scale: Tensor,
        validate_args: bool | None = None,
    ) -> None:
        self.gamma, self.loc, self.scale, self.prior_scale = torch.broadcast_tensors(
            gamma, loc, scale, prior_scale
        )
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(
        self, batch_shape: Sequence[int], _instance: SlabGivenInclusion | None = None
    ) -> SlabGivenInclusion:
        s = torch.Size(batch_shape)
        return SlabGivenInclusion(
            self.gamma.expand(s), self.loc.expand(s), self.scale.expand(s), self.prior_scale.expand(s)
        )

    def rsample(self, sample_shape: torch.Size = _EMPTY) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * eps

    def log_prob(self, value: Tensor) -> Tensor:
        q = dist.Normal(self.loc, self.scale).log_prob(value)
        p = dist.Normal(torch.zeros_like(self.prior_scale), self.prior_scale).log_prob(value)
        return self.gamma * q + (1 - self.gamma) * p


@register_kl(InclusionConcrete, Bernoulli)
def _kl_inclusion_bernoulli(q: InclusionConcrete, p: Bernoulli) -> Tensor:
    """``KL(Bern(α) || Bern(ψ))`` elementwise (the inclusion part of the closed-form KL)."""
    return bernoulli_kl(q.logits, p.probs)


@register_kl(InclusionConcrete, InclusionPrior)
def _kl_inclusion_prior(q: InclusionConcrete, p: InclusionPrior) -> Tensor:
    """``KL(Bern(α) || Bern(ψ))`` against the model's broadcast inclusion prior (elementwise)."""
    return bernoulli_kl(q.logits, p.probs)
