"""Closed-form expectations and entropies shared by every CAVI / closed-form update in the zoo.

Written once here and imported by the guides (conjugate regression, bow-tie η² factors, horseshoe
inverse-gamma auxiliaries, collapsed hyper-posteriors), so no update formula is copy-pasted.  The
entropies are :mod:`torch.distributions`' own ``entropy()`` (built with ``validate_args=False``: callers
pass parameters that are positive by construction, and the ELBO path must not pay for the checks).

Parameterizations: ``InverseGamma(a, b)`` has density ``b^a / Γ(a) x^{-a-1} e^{-b/x}``;
``Gamma(a, b)`` has rate ``b`` (Bishop 2006, *Pattern Recognition and Machine Learning*, App. B).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Gamma, InverseGamma, MultivariateNormal

__all__ = [
    "inverse_gamma_moments",
    "inverse_gamma_entropy",
    "expected_log_inverse_gamma",
    "gamma_moments",
    "gamma_entropy",
    "expected_log_gamma",
    "gaussian_entropy_tril",
    "expected_log_normal",
]

LOG_2PI = math.log(2 * math.pi)


def inverse_gamma_moments(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(E[x], E[1/x], E[log x])`` under ``IG(a, b)``; ``E[x] = inf`` for ``a <= 1``."""
    mean = torch.where(a > 1, b / (a - 1).clamp_min(1e-300), torch.full_like(a, math.inf))
    return mean, a / b, torch.log(b) - torch.digamma(a)


def inverse_gamma_entropy(a: Tensor, b: Tensor) -> Tensor:
    """``H[IG(a, b)] = a + log b + lgamma(a) - (1 + a) digamma(a)`` (torch's ``InverseGamma.entropy``)."""
    return InverseGamma(a, b, validate_args=False).entropy()


def expected_log_inverse_gamma(a0: Tensor, b0: Tensor, e_log: Tensor, e_recip: Tensor) -> Tensor:
    """``E_q[log IG(x | a0, b0)]`` given ``E_q[log x]`` and ``E_q[1/x]``."""
    return a0 * torch.log(b0) - torch.lgamma(a0) - (a0 + 1) * e_log - b0 * e_recip


def gamma_moments(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``(E[x], E[log x])`` under ``Gamma(a, rate=b)``."""
    return a / b, torch.digamma(a) - torch.log(b)


def gamma_entropy(a: Tensor, b: Tensor) -> Tensor:
    """``H[Gamma(a, rate=b)] = a - log b + lgamma(a) + (1 - a) digamma(a)`` (torch's ``Gamma.entropy``)."""
    return Gamma(a, b, validate_args=False).entropy()


def expected_log_gamma(a0: Tensor, b0: Tensor, e_x: Tensor, e_log: Tensor) -> Tensor:
    """``E_q[log Gamma(x | a0, rate=b0)]``."""
    return a0 * torch.log(b0) - torch.lgamma(a0) + (a0 - 1) * e_log - b0 * e_x


def gaussian_entropy_tril(scale_tril: Tensor) -> Tensor:
    """Entropy ``d/2 (1 + log 2π) + Σ_i log L_ii`` of ``N(m, L L^T)`` from its Cholesky factor ``L``
    (batched over leading dims; ``torch.distributions.MultivariateNormal``)."""
    loc = scale_tril.new_zeros(scale_tril.shape[:-1])
    return MultivariateNormal(loc, scale_tril=scale_tril, validate_args=False).entropy()


def expected_log_normal(second_moment: Tensor, var0: Tensor) -> Tensor:
    """Elementwise ``E_q[log N(w | 0, var0)]`` given ``E_q[w^2]`` (summed by the caller)."""
    return -0.5 * (LOG_2PI + torch.log(var0)) - 0.5 * second_moment / var0
