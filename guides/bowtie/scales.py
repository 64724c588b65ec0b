"""Shrinkage-scale factors of the bow-tie CAVI (Sheinkman & Wade 2025, arXiv 2411.11132, §3.1–3.2, App. E).

Under the N-GIG prior ``W_{l,d,d'} ~ N(0, tau_l psi_{l,d,d'})`` (Eqs. 5–7) the optimal factors are GIG:

* Eq. (13): ``q(tau_l) = GIG(nu_glob - D_l D_{l-1}/2, delta_hat_l, lam_glob)`` with
  ``delta_hat_l^2 = delta_glob^2 + sum_{d,d'} E[1/psi_{l,d,d'}] E[W^2_{l,d,d'}]``;
* Eq. (14): ``q(psi_{l,d,d'}) = GIG(nu_loc - 1/2, delta_hat, lam_loc)`` with
  ``delta_hat^2 = E[1/tau_l] E[W^2_{l,d,d'}] + delta_loc^2``.

The orders ``nu_hat`` are constants, so only ``delta_hat`` is stored.  :func:`em_delta_glob` is the EM step
for ``delta_glob`` (§3.2, App. E.2, inverse-gamma case) and :func:`initial_deltas` the ``delta_hat`` draws of
the initialization (App. D.1).  Under the Gaussian weight prior of the GVBNN ablation there are no scale
factors and the weight precision is the fixed ``1 / v_l``.
"""

from __future__ import annotations

import pyro.distributions as dist
import torch
from torch import Tensor

from guides.bowtie.moments import weight_squares
from guides.bowtie.state import Globals, Hyper
from zoo.families.bowtie.prior import gig_mean_reciprocal

__all__ = [
    "tau_factor",
    "psi_factor",
    "inv_tau",
    "inv_psi",
    "weight_precision",
    "prior_precision",
    "update_tau",
    "update_psi",
    "em_delta_glob",
    "initial_deltas",
]

ScaleFactor = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def tau_factor(hyp: Hyper, g: Globals, k: int) -> ScaleFactor:
    """Prior ``(nu, delta, lam)`` and variational ``(nu_hat, delta_hat, lam)`` of ``tau_k`` (Eq. 13)."""
    nu, delta, lam = hyp.glob
    nu_hat = nu - 0.5 * hyp.widths[k + 1] * hyp.widths[k]
    return nu, delta, lam, nu_hat, g.dtau[k], lam


def psi_factor(hyp: Hyper, g: Globals, k: int) -> ScaleFactor:
    """Prior and variational GIG parameters of the local scales of layer ``k`` (Eq. 14)."""
    nu, delta, lam = hyp.loc[k]
    return nu, delta, lam, nu - 0.5, g.dpsi[k], lam


def inv_tau(hyp: Hyper, g: Globals, k: int) -> Tensor:
    """``E[1/tau_k]`` under Eq. (13)."""
    _, _, _, nu_hat, delta_hat, lam = tau_factor(hyp, g, k)
    return gig_mean_reciprocal(nu_hat, delta_hat, lam)


def inv_psi(hyp: Hyper, g: Globals, k: int) -> Tensor:
    """``E[1/psi_k]`` under Eq. (14), shape (D, D_prev)."""
    _, _, _, nu_hat, delta_hat, lam = psi_factor(hyp, g, k)
    return gig_mean_reciprocal(nu_hat, delta_hat, lam)


def weight_precision(hyp: Hyper, g: Globals, k: int) -> Tensor:
    """``E[1/(tau_l psi_{l,d,d'})] = E[1/tau] E[1/psi]``, shape (D, D_prev); ``1/v_l`` under the Gaussian
    prior."""
    if hyp.gaussian:
        return (1.0 / hyp.weight_var[k]).expand(hyp.widths[k + 1], hyp.widths[k])
    return inv_tau(hyp, g, k) * inv_psi(hyp, g, k)


def prior_precision(hyp: Hyper, g: Globals, k: int) -> Tensor:
    """Diagonal of ``D_{l,d}^{-1} = diag(s_0^-2, E[1/tau] E[1/psi_{d,:}])`` (Eq. 16), shape (D, D_prev+1)."""
    wprec = weight_precision(hyp, g, k)
    return torch.cat([torch.full_like(wprec[:, :1], 1.0) / hyp.bias_scale**2, wprec], 1)


def update_tau(hyp: Hyper, g: Globals) -> list[Tensor]:
    """Eq. (13): ``delta_hat^2 = delta_glob^2 + sum E[1/psi] E[W^2]`` of every layer."""
    out = []
    for k in range(g.num_hidden + 1):
        _, delta, *_ = tau_factor(hyp, g, k)
        out.append((delta**2 + (inv_psi(hyp, g, k) * weight_squares(g.m[k], g.B[k])).sum()).sqrt())
    return out


def update_psi(hyp: Hyper, g: Globals) -> list[Tensor]:
    """Eq. (14): ``delta_hat^2 = E[1/tau] E[W^2] + delta_loc^2`` of every layer."""
    out = []
    for k in range(g.num_hidden + 1):
        _, delta, *_ = psi_factor(hyp, g, k)
        out.append((inv_tau(hyp, g, k) * weight_squares(g.m[k], g.B[k]) + delta**2).sqrt())
    return out


def em_delta_glob(hyp: Hyper, g: Globals) -> Tensor:
    """§3.2 / App. E.2 (IG): the *effective* ``delta_glob^2 = 2 alpha (L+1) / sum_l E[1/tau_l]`` with
    ``alpha = -nu_glob``."""
    inv = sum(inv_tau(hyp, g, k) for k in range(g.num_hidden + 1))
    return (-2.0 * hyp.glob[0] * (g.num_hidden + 1) / inv).sqrt()


def _initial_delta(nu: Tensor, delta: Tensor, lam: Tensor, shape: tuple[int, ...]) -> Tensor:
    """App. D.1 step 3 (IG case): ``delta_hat = sqrt(2 (-nu - 1) x)`` with ``x`` drawn from the prior
    ``IG(-nu, delta^2/2)`` (the prior mean ``x = delta^2 / (2 (-nu - 1))`` gives back ``delta``); ``delta``
    itself otherwise."""
    if float(lam) == 0.0 and float(nu) < -1.0:
        draw = dist.InverseGamma(-nu, 0.5 * delta**2).sample(shape)
        return (2.0 * (-nu - 1.0) * draw).sqrt()
    return delta.expand(shape).clone()


def initial_deltas(hyp: Hyper, k: int) -> tuple[Tensor, Tensor]:
    """Initial ``delta_hat`` of ``q(tau_k)`` and ``q(psi_k)`` (App. D.1; torch's RNG, ``tau`` first)."""
    dtau = _initial_delta(*hyp.glob, ())
    return dtau, _initial_delta(*hyp.loc[k], (hyp.widths[k + 1], hyp.widths[k]))
