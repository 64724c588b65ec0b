r"""Closed-form moments of the generalized inverse Gaussian of Sheinkman & Wade (2025, arXiv
2411.11132, App. E.1), used by the CAVI updates of Eqs. (13)-(14).

With :math:`z = \lambda\delta` and :math:`R_\nu(z) = K_{\nu+1}(z) / K_\nu(z)`: :math:`E[x] = (\delta/\lambda)
R_\nu(z)`, :math:`E[1/x] = (\lambda/\delta) / R_{\nu-1}(z)` (no cancellation), :math:`E[\log x] =
\log(\delta/\lambda) + \partial_\nu \log K_\nu(z)` and :math:`Var[x] = (\delta/\lambda)^2 (R_\nu R_{\nu+1} -
R_\nu^2)`; the Gamma (``delta = 0``) and inverse-gamma (``lam = 0``) limits (App. E.1 cases 1-2) have digamma
forms.  Numpy float64 throughout (:mod:`zoo.distributions.bessel_np`), except the torch log-normalizers of the
two limits, which the GIG class and the bow-tie prior share.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch
from scipy import special

from zoo.distributions.bessel_np import dlogk_np, log_ratio_np

__all__ = [
    "MOMENTS",
    "gig_cases",
    "gig_moment_np",
    "gamma_log_normalizer",
    "inverse_gamma_log_normalizer",
]

#: the moments :func:`gig_moment_np` computes: E[x], E[1/x], E[log x], Var[x]
MOMENTS = ("mean", "recip", "log", "var")

_Array = TypeVar("_Array", np.ndarray, torch.Tensor)


def gig_cases(delta: _Array, lam: _Array) -> tuple[_Array, _Array, _Array]:
    """Masks ``(gamma, invgamma, general)`` of the GIG cases of App. E.1: ``delta = 0`` (Gamma limit),
    ``lam = 0`` (inverse-gamma limit) and the general case; numpy arrays or torch tensors."""
    gamma = delta == 0
    invgamma = (lam == 0) & ~gamma
    general = ~gamma & ~invgamma
    return gamma, invgamma, general


def _gamma_moment(what: str, a: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Gamma(shape ``a = nu``, rate ``beta = lam^2/2``), the ``delta = 0`` limit (App. E.1, case 2)."""
    if what == "mean":
        return a / beta
    if what == "recip":
        return np.where(a > 1, beta / (a - 1.0), np.inf)
    if what == "log":
        return special.digamma(a) - np.log(beta)
    return a / beta**2


def _inverse_gamma_moment(what: str, a: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """InverseGamma(shape ``a = -nu``, scale ``beta = delta^2/2``): the ``lam = 0`` limit (App. E.1)."""
    if what == "mean":
        return np.where(a > 1, beta / (a - 1.0), np.inf)
    if what == "recip":
        return a / beta
    if what == "log":
        return np.log(beta) - special.digamma(a)
    return np.where(a > 2, beta**2 / ((a - 1.0) ** 2 * (a - 2.0)), np.inf)


def _general_moment(what: str, nu: np.ndarray, delta: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """The general case ``delta, lam > 0`` through log Bessel ratios (module docstring)."""
    z = delta * lam
    log_s = np.log(delta) - np.log(lam)
    if what == "mean":
        return np.exp(log_s + log_ratio_np(nu, z))
    if what == "recip":
        return np.exp(-log_s - log_ratio_np(nu - 1.0, z))
    if what == "log":
        return log_s + dlogk_np(nu, z)
    r0 = log_ratio_np(nu, z)
    r1 = log_ratio_np(nu + 1.0, z)
    return np.exp(2.0 * (log_s + r0)) * np.expm1(r1 - r0)


def gig_moment_np(what: str, nu: np.ndarray, delta: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Moment ``what`` (one of :data:`MOMENTS`) of ``GIG(nu, delta, lam)``, elementwise over float64 arrays
    of one shape; ``inf`` where it does not exist."""
    gamma, invgamma, general = gig_cases(delta, lam)
    out = np.full(nu.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if np.any(gamma):
            out[gamma] = _gamma_moment(what, nu[gamma], 0.5 * lam[gamma] ** 2)
        if np.any(invgamma):
            out[invgamma] = _inverse_gamma_moment(what, -nu[invgamma], 0.5 * delta[invgamma] ** 2)
        if np.any(general):
            out[general] = _general_moment(what, nu[general], delta[general], lam[general])
    return out


def gamma_log_normalizer(nu: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``log int x^{nu-1} e^{-lam^2 x / 2} dx = lgamma(nu) - nu log(lam^2/2)`` (the ``delta = 0`` limit)."""
    return torch.lgamma(nu) - nu * torch.log(0.5 * lam * lam)


def inverse_gamma_log_normalizer(nu: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``log int x^{nu-1} e^{-delta^2 / (2x)} dx = lgamma(-nu) + nu log(delta^2/2)`` (the ``lam = 0``
    limit)."""
    return torch.lgamma(-nu) + nu * torch.log(0.5 * delta * delta)
