"""Closed-form KL divergences of the bow-tie guide's non-reparameterized factors, registered with
:func:`torch.distributions.kl.register_kl` (Sheinkman & Wade 2025, arXiv 2411.11132, App. B, E.1).

``TraceMeanField_ELBO`` uses ``KL(q || p)`` at every latent site that has one and otherwise a Monte Carlo
term that needs a reparameterized ``q``.  The CAVI posterior has three non-reparameterized kinds of factor:
the gates ``q(gamma) = Bern(rho)`` (Eq. 18; torch's Bernoulli KL), the Pólya–Gamma variables ``q(omega) =
PG(1, A)`` against the model's ``PG(1, z/T)`` (Eq. 17), and, when a scale prior is a proper GIG
(``lam > 0``), the scales ``q(tau)``, ``q(psi)`` (Eqs. 13–14).  With the two KLs below every site is
covered (Pyro refuses non-reparameterized guides outright while validation is enabled; the estimator
itself is unbiased here, since the model parents of every guide site are never its guide descendants).

* ``KL(PG(b, c_q) || PG(b, c_p)) = b [log cosh(c_q/2) - log cosh(c_p/2)] - (c_q^2 - c_p^2)/2 E_q[omega]``
  from ``PG(omega | b, c) = cosh^b(c/2) exp(-c^2 omega/2) PG(omega | b, 0)`` (Eq. 9), with
  ``E_q[omega] = b tanh(c_q/2)/(2 c_q)``; only equal shapes ``b`` have a closed form.
* ``KL(GIG_q || GIG_p) = log Z_p - log Z_q + (nu_q - nu_p) E_q[log x] - (delta_q^2 - delta_p^2)/2 E_q[1/x]
  - (lam_q^2 - lam_p^2)/2 E_q[x]`` with ``GIG(x) = x^(nu-1) exp(-(delta^2/x + lam^2 x)/2) / Z`` (App. E.1).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.distributions.kl import register_kl

from zoo.distributions import GeneralizedInverseGaussian, PolyaGamma, log_cosh, polya_gamma_mean

__all__ = ["kl_polya_gamma", "kl_gig"]


@register_kl(PolyaGamma, PolyaGamma)
def kl_polya_gamma(q: PolyaGamma, p: PolyaGamma) -> Tensor:
    """``KL(PG(b, c_q) || PG(b, c_p))`` (module docstring); ``NotImplementedError`` for unequal ``b``."""
    if not bool(torch.equal(*torch.broadcast_tensors(q.b, p.b))):
        raise NotImplementedError("KL between Pólya-Gamma distributions with different shapes b")
    cq, cp = q.c, p.c
    e_omega = polya_gamma_mean(q.b, cq)
    return q.b * (log_cosh(0.5 * cq) - log_cosh(0.5 * cp)) - 0.5 * (cq * cq - cp * cp) * e_omega


@register_kl(GeneralizedInverseGaussian, GeneralizedInverseGaussian)
def kl_gig(q: GeneralizedInverseGaussian, p: GeneralizedInverseGaussian) -> Tensor:
    """``KL(GIG(nu_q, delta_q, lam_q) || GIG(nu_p, delta_p, lam_p))`` (module docstring).  A moment that
    is infinite under ``q`` enters only with a zero coefficient (the IG / Gamma limits)."""

    def term(coef: Tensor, moment: Tensor) -> Tensor:
        return torch.where(coef == 0, torch.zeros_like(coef), coef * moment)

    d2 = q.delta * q.delta - p.delta * p.delta
    l2 = q.lam * q.lam - p.lam * p.lam
    return (
        p.log_normalizer()
        - q.log_normalizer()
        + term(q.nu - p.nu, q.mean_log)
        - 0.5 * term(d2, q.mean_reciprocal)
        - 0.5 * term(l2, q.mean)
    )
