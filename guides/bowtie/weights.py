"""Weight-row factors of the bow-tie CAVI (Sheinkman & Wade 2025, arXiv 2411.11132, Eq. 16, §3.3).

``q(b_{l,d}, W_{l,d}) = N(m_{l,d}, B_{l,d})`` per row (bias first), full covariance: one Bayesian linear
regression per unit with prior precision ``D_{l,d}^{-1} = diag(s_0^-2, E[1/tau_l] E[1/psi_{l,d,:}])``:

* hidden units regress the activations on the previous layer, weighted by the gate, plus a Pólya–Gamma
  pseudo-observation: ``B^{-1} = D^{-1} + sum_n (E[omega]/T^2 + E[eta^-2] rho) E[a~ a~^T]``,
  ``B^{-1} m = sum_n (E[eta^-2] rho E[a_{n,l,d} a~] + (rho - 1/2)/T E[a~])``;
* output units: ``B^{-1} = D^{-1} + E[sigma^-2] sum_n E[a~ a~^T]``, ``B^{-1} m = E[sigma^-2] sum_n y E[a~]``.

SVI (§3.3, App. C) blends the natural parameters ``(B^{-1}, B^{-1} m)`` linearly (:func:`blend_rows`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from guides.bowtie.linalg import gauss_from_precision, natural_from_moments
from guides.bowtie.moments import Moments
from guides.bowtie.noise import noise_precision
from guides.bowtie.scales import prior_precision
from guides.bowtie.state import Globals, Hyper, Locals
from zoo.families.bowtie.model import pg_mean
from zoo.infer.distributed import data_sum

__all__ = ["weight_natural", "update_weights", "blend_rows"]


def weight_natural(
    hyp: Hyper, g: Globals, loc: Locals, mom: Moments, y: Tensor | None, k: int, scale: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Eq. (16) natural parameters ``(B^{-1}, B^{-1} m)`` of every unit of layer ``k`` (batched over units);
    data sums multiplied by ``scale`` (SVI: ``N/|S|``) and completed over the ranks of a data-parallel fit
    (:func:`zoo.infer.distributed.data_sum`: the sufficient statistics of distributed CAVI)."""
    temp = hyp.temp
    e = noise_precision(g, k)
    amean = mom.amean[k]
    if k == g.num_hidden:
        c = e.expand(amean.shape[0], -1)
        rhs = (c * y).T @ amean
    else:
        rho = loc.rho[k]
        c = e * rho + pg_mean(loc.A[k]) / temp**2
        rhs = mom.cross_sum(k, e * rho) + ((rho - 0.5) / temp).T @ amean
    prec = scale * data_sum(_gram(mom, k, c)) + torch.diag_embed(prior_precision(hyp, g, k))
    return prec, scale * data_sum(rhs)


def _gram(mom: Moments, k: int, c: Tensor) -> Tensor:
    """``sum_n c_{n,d} E[a~ a~^T]_n`` (D, P, P); where ``E[a~ a~^T] = C + E[a~] E[a~]^T`` with one ``C`` for
    every ``n`` (:class:`~guides.bowtie.moments.Moments`), ``(sum_n c_{n,d}) C + E[a~]^T diag(c_d) E[a~]``."""
    if mom.low_rank(k):
        amean, shared = mom.amean[k], mom.shared[k]
        outer = (amean.T.unsqueeze(0) * c.T.unsqueeze(1)) @ amean
        return outer + c.sum(0)[:, None, None] * shared
    aa = mom.aa(k)
    return (c.T @ aa.reshape(aa.shape[0], -1)).reshape(-1, *aa.shape[1:])


def update_weights(
    hyp: Hyper, g: Globals, loc: Locals, mom: Moments, y: Tensor | None, k: int
) -> tuple[Tensor, Tensor]:
    """Eq. (16), full batch: the new ``(B, m)`` of layer ``k``."""
    return gauss_from_precision(*weight_natural(hyp, g, loc, mom, y, k))


def blend_rows(
    cov: Tensor, mean: Tensor, prec_hat: Tensor, lin_hat: Tensor, step: float
) -> tuple[Tensor, Tensor]:
    """SVI step (Eq. 21): ``(1 - l)`` old plus ``l`` intermediate natural parameters; returns ``(B, m)``."""
    prec_old, lin_old = natural_from_moments(cov, mean)
    prec = (1 - step) * prec_old + step * prec_hat
    return gauss_from_precision(prec, (1 - step) * lin_old + step * lin_hat)
