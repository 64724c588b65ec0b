r"""Sampling the generalized inverse Gaussian of Sheinkman & Wade (2025, arXiv 2411.11132).

Devroye's (2014) rejection algorithm for the log-concave density of :math:`\log x` ("Random variate generation
for the generalized inverse Gaussian distribution", Stat. Comput. 24:239-246), vectorized in torch: it runs on
the parameters' device, is seeded by torch's RNG (``pyro.set_rng_seed``) and works for any order (including
+-1250) and for tiny ``delta * lam``.  The Gamma (``delta = 0``) and inverse-gamma (``lam = 0``) limits are
drawn exactly (:func:`sample_gig`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.distributions.gig_moments import gig_cases

__all__ = ["sample_gig"]


def _t_log_sinh(y: Tensor) -> Tensor:
    return y + torch.log(-torch.expm1(-2.0 * y)) - math.log(2.0)


def _psi(x: Tensor, log_alpha: Tensor, lam: Tensor) -> Tensor:
    """Devroye's ``psi(x) = -alpha (cosh x - 1) - lam (e^x - 1 - x)``, ``alpha`` in log space."""
    a_term = torch.exp(log_alpha + math.log(2.0) + 2.0 * _t_log_sinh(x.abs() / 2.0))
    l_term = torch.where(lam > 0, lam * (torch.expm1(x) - x), torch.zeros_like(x))
    return -a_term - l_term


def _dpsi(x: Tensor, log_alpha: Tensor, lam: Tensor) -> Tensor:
    """``psi'(x) = -alpha sinh x - lam (e^x - 1)``."""
    a_term = torch.sign(x) * torch.exp(log_alpha + _t_log_sinh(x.abs()))
    l_term = torch.where(lam > 0, lam * torch.expm1(x), torch.zeros_like(x))
    return -a_term - l_term


@dataclass
class _Envelope:
    """Devroye's three-piece hat: the flat centre ``[-sd, td]`` and exponential tails at ``t`` and ``-s``."""

    t: Tensor
    s: Tensor
    eta: Tensor
    zeta: Tensor
    theta: Tensor
    xi: Tensor
    p: Tensor
    q: Tensor
    r: Tensor
    td: Tensor
    sd: Tensor
    total: Tensor

    def __getitem__(self, idx) -> _Envelope:
        return _Envelope(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def _envelope(lam: Tensor, log_alpha: Tensor) -> _Envelope:
    alpha = torch.exp(log_alpha)
    one = torch.ones_like(lam)
    x1 = -_psi(one, log_alpha, lam)
    t = torch.where(
        (x1 >= 0.5) & (x1 <= 2.0),
        one,
        torch.where(x1 > 2.0, torch.sqrt(2.0 / (alpha + lam)), torch.log(4.0 / (alpha + 2.0 * lam))),
    )
    x2 = -_psi(-one, log_alpha, lam)
    s_alpha = torch.log(alpha + 1.0 + torch.sqrt(1.0 + 2.0 * alpha)) - log_alpha
    s_small = torch.minimum(torch.where(lam > 0, 1.0 / torch.where(lam > 0, lam, one), torch.inf), s_alpha)
    s = torch.where(
        (x2 >= 0.5) & (x2 <= 2.0),
        one,
        torch.where(x2 > 2.0, torch.sqrt(4.0 / (alpha * math.cosh(1.0) + lam)), s_small),
    )
    eta, zeta = -_psi(t, log_alpha, lam), -_dpsi(t, log_alpha, lam)
    theta, xi = -_psi(-s, log_alpha, lam), _dpsi(-s, log_alpha, lam)
    p, r = 1.0 / xi, 1.0 / zeta
    td = t - r * eta
    sd = s - p * theta
    q = td + sd
    return _Envelope(t, s, eta, zeta, theta, xi, p, q, r, td, sd, p + q + r)


def _propose(env: _Envelope, u: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """A draw ``x`` from the hat (``u`` picks the piece, ``v`` in (0, 1] places it) and ``log hat(x)``."""
    xs = torch.where(
        u * env.total < env.q,
        -env.sd + env.q * v,
        torch.where(
            u * env.total < env.q + env.r, env.td - env.r * torch.log(v), -env.sd + env.p * torch.log(v)
        ),
    )
    log_chi = torch.where(
        xs > env.td,
        -env.eta - env.zeta * (xs - env.t),
        torch.where(xs < -env.sd, -env.theta + env.xi * (xs + env.s), torch.zeros_like(xs)),
    )
    return xs, log_chi


def _devroye_log_gig(order: Tensor, log_omega: Tensor, max_iter: int = 10_000) -> Tensor:
    """Sample Y = log X - log(mode shift) where X has density prop. to x^(order-1) exp(-omega (x + 1/x) / 2).

    ``order >= 0``; returns ``asinh(order / omega) + Y``, i.e. log X, with Y drawn by Devroye (2014). All
    float64 tensors of one shape on one device.  ``alpha = sqrt(omega^2 + order^2) - order`` is carried in log
    space so tiny ``omega`` (near-Gamma) stays exact.
    """
    lam = order
    omega = torch.exp(log_omega)
    c = torch.hypot(lam, omega)
    log_alpha = 2.0 * log_omega - torch.log(c + lam)
    env = _envelope(lam, log_alpha)
    out = torch.empty_like(lam)
    pending = torch.ones_like(lam, dtype=torch.bool)
    for _ in range(max_iter):
        idx = pending.nonzero(as_tuple=True)
        n = idx[0].numel()
        if n == 0:
            break
        u = torch.rand(n, dtype=lam.dtype, device=lam.device)
        v = 1.0 - torch.rand(n, dtype=lam.dtype, device=lam.device)  # (0, 1]
        w = 1.0 - torch.rand(n, dtype=lam.dtype, device=lam.device)
        xs, log_chi = _propose(env[idx], u, v)
        accept = torch.log(w) + log_chi <= _psi(xs, log_alpha[idx], lam[idx])
        acc_idx = tuple(i[accept] for i in idx)
        out[acc_idx] = xs[accept]
        pending[acc_idx] = False
    else:  # pragma: no cover - acceptance probability is bounded below (Devroye 2014)
        raise RuntimeError("GIG rejection sampler did not terminate")
    # mode shift asinh(order / omega) = log(order + c) - log(omega)
    shift = torch.where(lam > 0, torch.log(lam + c) - log_omega, torch.asinh(lam / omega))
    return out + shift


def sample_gig(nu: Tensor, delta: Tensor, lam: Tensor) -> Tensor:
    """One draw per element of the flat float64 parameter tensors: Gamma / inverse-gamma at the limits,
    Devroye's sampler otherwise (``1/X ~ GIG(-nu, lam, delta)`` handles ``nu < 0``)."""
    out = torch.empty_like(nu)
    gamma, invgamma, general = gig_cases(delta, lam)
    if bool(gamma.any()):
        rate = 0.5 * lam[gamma] ** 2
        out[gamma] = torch.distributions.Gamma(nu[gamma], rate).sample()
    if bool(invgamma.any()):
        scale = 0.5 * delta[invgamma] ** 2
        out[invgamma] = scale / torch.distributions.Gamma(-nu[invgamma], torch.ones_like(scale)).sample()
    if bool(general.any()):
        n, d, l_ = nu[general], delta[general], lam[general]
        log_y = _devroye_log_gig(n.abs(), torch.log(d) + torch.log(l_))
        sign = torch.where(n < 0, -1.0, 1.0).to(torch.float64)
        out[general] = torch.exp(torch.log(d) - torch.log(l_) + sign * log_y)
    return out
