"""Exact conditional draws of the collapsed priors' hyper-latents given the weights: the Gibbs block of
NUTS within Gibbs (:func:`zoo.infer.mcmc.fit_nuts` with ``gibbs=True``, :mod:`zoo.infer.mcmc_gibbs`).

Every hierarchy of Tomczak, Swaroop, Foong & Turner 2021 (App. B; :mod:`zoo.families.collapsed.prior`) is
conjugate per scalar parameter, and its full conditional is the paper's optimal hyper-posterior ``q*`` for a
point mass ``q(w) = delta_w`` (variance 0) — the closed forms of the prior module are reused::

    CM:   mu_p | w          ~ N((1 - alpha_reg) w, (1 - alpha_reg) gamma)          (Eq. 19)
    CV:   tau_p | w         ~ Gamma(alpha + 1/2, beta + w^2 / 2)                   (Eq. 50, delta = 1)
    CMV:  tau_p | w         ~ Gamma(alpha + 1/2, beta + delta w^2 / 2)             (Eq. 50, mu_p integrated)
          mu_p | w, tau_p   ~ N((1 - delta) w, 1 / ((1 + t) tau_p)),  1 + t = 1/(1 - delta)   (Eq. 36)

For CMV the pair ``(tau_p, mu_p)`` is drawn as one block, ``tau_p`` with ``mu_p`` integrated out and then
``mu_p`` given it, so each sweep is an exact draw of all hyper-latents from ``p(mu_p, tau_p | w)``.  The
weights themselves move in the NUTS block, where their prior is then Gaussian with fixed mean and variance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyro.distributions as dist
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.families.collapsed.prior import (
    CollapsedPrior,
    hyper_site,
    optimal_q_mu_cm,
    optimal_q_mu_cmv,
    optimal_q_tau,
)

__all__ = ["scale_sites", "draw_scales"]


def _check(prior: CollapsedPrior) -> None:
    if not isinstance(prior, CollapsedPrior):
        raise TypeError(f"prior must be a CollapsedPrior, got {type(prior).__name__}")
    if prior.kind == "cm" and bool((prior.alpha_reg >= 1).any()):
        raise ValueError("alpha_reg: the hierarchical CM prior needs alpha_reg < 1 (alpha > 0)")


def _latents(prior: CollapsedPrior) -> tuple[str, ...]:
    return {"cm": ("mu_p",), "cv": ("tau_p",), "cmv": ("tau_p", "mu_p")}[prior.kind]


def scale_sites(prior: CollapsedPrior, specs: Sequence[ParamSpec]) -> list[str]:
    """The hyper-latent sites :func:`draw_scales` draws, in draw order (per parameter, as sampled)."""
    _check(prior)
    return [hyper_site(s, latent) for s in specs for latent in _latents(prior)]


def draw_scales(
    prior: CollapsedPrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """One exact draw of every hyper-latent given the weights ``values[spec.name]`` (module docstring);
    leading batch dimensions (independent chains) broadcast."""
    _check(prior)
    out: dict[str, Tensor] = {}
    for s in specs:
        w = values[s.name]
        if tuple(w.shape[w.dim() - len(s.shape) :]) != tuple(s.shape):
            raise ValueError(f"values[{s.name!r}] must have shape (..., {', '.join(map(str, s.shape))})")
        if prior.kind == "cm":
            loc, var = optimal_q_mu_cm(w, prior.gamma_for(s), prior.alpha_reg_for(s))
            out[hyper_site(s, "mu_p")] = dist.Normal(loc, var.sqrt()).sample()
            continue
        delta = prior.delta_for(s)
        shape, rate = optimal_q_tau(w, torch.zeros_like(w), prior.alpha, prior.beta, delta)
        tau = dist.Gamma(shape, rate).sample()
        out[hyper_site(s, "tau_p")] = tau
        if prior.kind == "cmv":
            loc, factor = optimal_q_mu_cmv(w, delta)
            out[hyper_site(s, "mu_p")] = dist.Normal(loc, (factor * tau).rsqrt()).sample()
    return out
