"""Closed-form pieces of the horseshoe BNN's variational inference (Ghosh, Yao & Doshi-Velez 2019, "Model
selection in Bayesian neural networks via horseshoe priors", arXiv:1705.10388).

Every scale ``a`` (``tau_kl``, ``v_l``, ``kappa``) has a log-normal factor ``q(ln a^2) = N(mu, var)`` (Eq. 4)
and its half-Cauchy prior is the inverse-gamma scale mixture of §3.3 (Wand et al. 2011)::

    a ~ C+(0, b)  <=>  a^2 | lam ~ IG(1/2, 1/lam),   lam ~ IG(1/2, 1/b^2).

The auxiliary's optimal factor is ``q(lam) = IG(1, rate)`` (Eqs. 9-11), and the prior/entropy terms of the
ELBO are analytic (App. A.2).  The pruning rule of §4.3 is a normal CDF because ``tau v`` is log-normal
(App. B.2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.ops.expectations import LOG_2PI, expected_log_inverse_gamma, inverse_gamma_entropy

__all__ = [
    "LOG_2PIE",
    "auxiliary_rate",
    "lognormal_entropy",
    "expected_log_half_cauchy_mixture",
    "prune_probability",
]

#: ``ln(2 pi e)``, the constant of a Gaussian entropy
LOG_2PIE = LOG_2PI + 1.0


def auxiliary_rate(mu: Tensor, var: Tensor, b: float) -> Tensor:
    """Closed-form rate of ``q(lam) = IG(1, rate)`` (Eq. 9): ``exp(-mu + var/2) + 1/b^2``.

    ``mu, var`` are the mean and variance of ``ln a^2`` (``a = tau, v`` or ``kappa``).  Computed in
    float64 (``1/bg^2 = 1e10`` for the paper's ``bg = 1e-5``, §6.5) and clamped below the dtype's overflow
    (a pruned unit drives ``mu`` far below zero).
    """
    dtype = mu.dtype
    expo = (-mu.double() + 0.5 * var.double()).clamp(max=math.log(torch.finfo(dtype).max) - 2.0)
    return (torch.exp(expo) + b**-2).to(dtype)


def lognormal_entropy(mu: Tensor, var: Tensor) -> Tensor:
    """Entropy of ``x`` with ``ln x ~ N(mu, var)``: ``mu + 0.5 ln(2 pi e var)`` (the entropy of ``ln x`` plus
    the Jacobian ``E[ln x]``; the prior densities of App. A.2 are on ``x = a^2``)."""
    return mu + 0.5 * (LOG_2PIE + torch.log(var))


def expected_log_half_cauchy_mixture(mu: Tensor, var: Tensor, rate: Tensor, b: float) -> Tensor:
    """``E[ln IG(a^2 | 1/2, 1/lam)] + E[ln IG(lam | 1/2, 1/b^2)] + H[q(lam)]`` elementwise, for
    ``q(ln a^2) = N(mu, var)`` and ``q(lam) = IG(1, rate)`` (the scale-mixture terms of App. A.2)."""
    one = torch.ones_like(rate)
    e_recip_lam = one / rate
    e_log_lam = torch.log(rate) - torch.digamma(one)
    half = torch.full_like(rate, 0.5)
    e_recip_a2 = torch.exp(-mu + 0.5 * var)
    term_a = -torch.lgamma(half) - 0.5 * e_log_lam - 1.5 * mu - e_recip_lam * e_recip_a2
    term_lam = expected_log_inverse_gamma(half, torch.full_like(rate, b**-2), e_log_lam, e_recip_lam)
    return term_a + term_lam + inverse_gamma_entropy(one, rate)


def prune_probability(mu_tau: Tensor, var_tau: Tensor, mu_v: Tensor, var_v: Tensor, delta: float) -> Tensor:
    """``P(tau v < delta)`` under log-normal ``q(ln tau^2), q(ln v^2)`` (the pruning rule of §4.3)::

    ln(tau v) ~ N((mu_tau + mu_v)/2, (var_tau + var_v)/4).
    """
    loc = 0.5 * (mu_tau + mu_v)
    scale = 0.5 * torch.sqrt(var_tau + var_v)
    return torch.special.ndtr((math.log(delta) - loc) / scale)
