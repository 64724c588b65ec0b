"""The exact ELBO of the bow-tie CAVI (Sheinkman & Wade 2025, arXiv 2411.11132, App. B).

Assembled from its components without relying on post-update cancellations — only the structural
cancellation of the ``E[log tau]``/``E[log psi]`` terms between the GIG factors and the weight prior, which
holds for any ``delta_hat`` — so it is exact at every point and non-decreasing after every single factor
update:

* global part (:func:`global_elbo`): per layer the GIG scale terms
  ``log Z(nu_hat, delta_hat, lam) - log Z(nu, delta, lam) + (delta_hat^2 - delta^2)/2 E[1/.]`` (``log Z`` the
  GIG log-normalizer of App. E.1), the weight rows' Gaussian entropy and expected prior, and the
  inverse-gamma noise factors (expected log-prior plus entropy);
* local part (:func:`local_elbo`), per data point: every hidden unit's expected log-density of the activation
  given the gate, the gate and Pólya–Gamma terms of the augmented joint (§2.3–2.4) and the Bernoulli entropy,
  the activations' Gaussian entropy ``1/2 log|2 pi e S|`` and, with ``y``, the output likelihood; without
  ``y`` it is the prediction ELBO of App. B.2.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from guides.bowtie.linalg import F64, logdet
from guides.bowtie.moments import Moments, layer_pre_moments, weight_squares
from guides.bowtie.noise import expected_squares, noise_log_moments, noise_precision
from guides.bowtie.scales import inv_psi, inv_tau, psi_factor, tau_factor, weight_precision
from guides.bowtie.state import Globals, Hyper, Locals
from zoo.families.bowtie.model import log_cosh_half, pg_mean
from zoo.families.bowtie.prior import gig_log_normalizer
from zoo.ops.expectations import LOG_2PI, expected_log_inverse_gamma, inverse_gamma_entropy

__all__ = ["local_elbo", "global_elbo", "expected_gaussian_loglik", "bernoulli_entropy"]

LOG2 = math.log(2.0)


def expected_gaussian_loglik(e_log_var: Tensor, e_prec: Tensor, sq: Tensor) -> Tensor:
    """``E[log N(v | mu, s2)] = -1/2 (log 2 pi + E[log s2]) - 1/2 E[1/s2] E[(v - mu)^2]``."""
    return -0.5 * (LOG_2PI + e_log_var) - 0.5 * e_prec * sq


def bernoulli_entropy(rho: Tensor) -> Tensor:
    """``H[Bern(rho)] = -rho log rho - (1 - rho) log(1 - rho)`` (``0 log 0 = 0``)."""
    return -(torch.special.xlogy(rho, rho) + torch.special.xlogy(1 - rho, 1 - rho))


def _hidden_unit_terms(temp: float, g: Globals, loc: Locals, mom: Moments, k: int) -> Tensor:
    """Per-unit local terms (N, D) of hidden layer ``k``: activation given gate, gate and PG terms of the
    augmented joint (``-log 2 + (rho - 1/2) E[z]/T - E[omega] E[z^2]/(2T^2)``), minus ``E[log q(omega)]``
    (``A^2 E[omega]/2 - log cosh(A/2)``) and the gate entropy."""
    ez, ez2 = layer_pre_moments(g, mom, k)
    rho, a = loc.rho[k], loc.A[k]
    _, e_log = noise_log_moments(g, k)
    sq = expected_squares(g, loc, mom, None, k)
    eom = pg_mean(a)
    return (
        expected_gaussian_loglik(e_log, noise_precision(g, k), sq)
        - LOG2
        + (rho - 0.5) * ez / temp
        - eom * ez2 / (2 * temp**2)
        + 0.5 * a * a * eom
        - log_cosh_half(a)
        + bernoulli_entropy(rho)
    )


def local_elbo(hyp: Hyper, g: Globals, loc: Locals, mom: Moments, y: Tensor | None) -> Tensor:
    """Per-datapoint ELBO terms (N,): hidden units, activation entropies and (with ``y``) the output term."""
    total = 0.0
    for k in range(g.num_hidden):
        unit = _hidden_unit_terms(hyp.temp, g, loc, mom, k)
        d = hyp.widths[k + 1]
        total = total + unit.sum(-1) + 0.5 * logdet(loc.S[k]) + 0.5 * d * (1 + LOG_2PI)
    if y is not None:
        k = g.num_hidden
        _, e_log = noise_log_moments(g, k)
        sq = expected_squares(g, loc, mom, y, k)
        total = total + expected_gaussian_loglik(e_log, noise_precision(g, k), sq).sum(-1)
    return total


def _scale_terms(hyp: Hyper, g: Globals, k: int) -> list[Tensor]:
    """GIG terms of ``q(tau_k)`` and ``q(psi_k)`` (Eqs. 13–14), the ``E[log .]`` parts cancelled."""
    out = []
    for (nu, delta, lam, nu_hat, delta_hat, _), inv in (
        (tau_factor(hyp, g, k), inv_tau(hyp, g, k)),
        (psi_factor(hyp, g, k), inv_psi(hyp, g, k)),
    ):
        out.append(
            (
                gig_log_normalizer(nu_hat, delta_hat, lam)
                - gig_log_normalizer(nu, delta, lam)
                + 0.5 * (delta_hat**2 - delta**2) * inv
            ).sum()
        )
    return out


def _weight_terms(hyp: Hyper, g: Globals, k: int) -> Tensor:
    """Entropy of ``q(b, W)`` of layer ``k`` plus its expected log-prior (the ``log 2 pi`` parts cancelled;
    the ``-1/2 log(tau psi)`` parts are in :func:`_scale_terms`)."""
    m, b = g.m[k], g.B[k]
    s0sq = hyp.bias_scale**2
    eb2 = m[:, 0] ** 2 + b[:, 0, 0]
    wq = (weight_precision(hyp, g, k) * weight_squares(m, b)).sum(-1)
    return (0.5 * logdet(b) + 0.5 * b.shape[-1] - 0.5 * torch.log(s0sq) - 0.5 * eb2 / s0sq - 0.5 * wq).sum()


def _layer_terms(hyp: Hyper, g: Globals, k: int) -> list[Tensor]:
    """The global ELBO terms of layer ``k``, in summation order."""
    if hyp.gaussian:  # E[log N(W | 0, v)] keeps its -0.5 log v; the GIG terms carry it otherwise
        v = hyp.weight_var[k]
        return [-(0.5 * torch.log(v) * hyp.widths[k + 1] * hyp.widths[k]), _weight_terms(hyp, g, k)]
    return [*_scale_terms(hyp, g, k), _weight_terms(hyp, g, k)]


def _noise_terms(a0: Tensor, b0: Tensor, g: Globals, k: int) -> Tensor:
    """``E[log IG(eta^2 | a0, b0)] + H[q(eta^2)]`` of layer ``k``'s noise factors (output: ``k = L``)."""
    a, b = g.alpha[k], g.beta[k]
    e_recip, e_log = noise_log_moments(g, k)
    return expected_log_inverse_gamma(a0, b0, e_log, e_recip) + inverse_gamma_entropy(a, b)


def global_elbo(hyp: Hyper, g: Globals) -> Tensor:
    """Global ELBO terms (scalar): scale factors, weight rows and noise factors of every layer."""
    total = torch.zeros((), dtype=F64)
    for k in range(g.num_hidden + 1):
        for term in _layer_terms(hyp, g, k):
            total = total + term
    for k in range(g.num_hidden):
        total = total + _noise_terms(*hyp.hidden_noise, g, k).sum()
    a0, b0 = hyp.noise
    a, b = g.alpha[-1], g.beta[-1]
    e_recip, e_log = noise_log_moments(g, g.num_hidden)
    return total + expected_log_inverse_gamma(a0, b0, e_log, e_recip) + inverse_gamma_entropy(a, b)
