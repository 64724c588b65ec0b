"""Exact conditional draws of the node-wise horseshoe's scales given the weights: the Gibbs block that
:func:`zoo.infer.mcmc.fit_nuts` alternates with NUTS transitions of the weights (``gibbs=True``,
:mod:`zoo.infer.mcmc_gibbs`).

In the centered, hierarchical form of :class:`~zoo.families.horseshoe.prior.HorseshoePrior` (Ghosh, Yao &
Doshi-Velez 2019, arXiv:1705.10388, Eq. 1 with the inverse-gamma auxiliaries of §3.3) every scale has an
inverse-gamma full conditional (the same algebra as the linear horseshoe's Gibbs sampler, Makalic &
Schmidt 2016, arXiv:1508.03884, Eqs. 7-10).  For a hidden layer ``p`` with ``K`` units whose rows
``w_k`` (``F`` entries each, bias last) are the site ``p.w``, and ``IG(a, b)`` with rate ``b``::

    p.tau2_k | w_k, lam_k, v2   ~ IG(1/2 + F/2,  1/lam_k + |w_k|^2 / (2 v2))
    p.lam_k  | tau2_k           ~ IG(1,          1/tau2_k + 1/b0^2)
    p.v2     | w, tau2, theta   ~ IG(1/2 + KF/2, 1/theta + sum_k |w_k|^2 / (2 tau2_k))
    p.theta  | v2               ~ IG(1,          1/v2 + 1/bg^2)

and for the output layer, whose ``K F`` entries share one scale::

    p.kappa2 | w, rho ~ IG(1/2 + KF/2, 1/rho + |w|^2 / 2),    p.rho | kappa2 ~ IG(1, 1/kappa2 + 1/b_kappa^2).

The draws are made in that order, each given the newest value of the others (one systematic-scan Gibbs
sweep), so the block leaves the joint posterior invariant.  The regularized horseshoe (Eq. 2) has no
conjugate conditional for its slab ``c^2`` (it enters through ``c^2 tau^2 / (c^2 + tau^2 v^2)``) and is
not supported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyro.distributions as dist
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.families.horseshoe.prior import HorseshoePrior, group_layers

__all__ = ["scale_sites", "draw_scales"]


def _check(prior: HorseshoePrior) -> None:
    if not isinstance(prior, HorseshoePrior):
        raise TypeError(f"prior must be a HorseshoePrior, got {type(prior).__name__}")
    if prior.regularized:
        raise ValueError(
            "prior: the regularized horseshoe's slab c^2 has no conjugate full conditional; sample it with "
            "plain NUTS (gibbs=False)"
        )


def scale_sites(prior: HorseshoePrior, specs: Sequence[ParamSpec]) -> list[str]:
    """The names of the scale sites :func:`draw_scales` draws, in draw order."""
    _check(prior)
    out = []
    for layer in group_layers(specs):
        p = layer.prefix
        names = ("kappa2", "rho") if layer.output else ("tau2", "lam", "v2", "theta")
        out += [f"{p}.{n}" for n in names]
    return out


def _ig(shape: Tensor | float, rate: Tensor) -> Tensor:
    return dist.InverseGamma(torch.as_tensor(shape, dtype=rate.dtype, device=rate.device), rate).sample()


def draw_scales(
    prior: HorseshoePrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """One Gibbs sweep over the scales (module docstring): new values of every :func:`scale_sites` site given
    ``values`` (the current value of every site, the centered rows ``p.w`` included).  Leading batch
    dimensions (independent chains) broadcast: rows ``(..., K, F)``, unit scales ``(..., K)``, layer and
    output scales ``(...)``."""
    _check(prior)
    out: dict[str, Tensor] = {}
    for layer in group_layers(specs):
        p, k, f = layer.prefix, layer.units, layer.fan
        w = values[f"{p}.w"]
        if tuple(w.shape[-2:]) != (k, f):
            raise ValueError(f"values[{p + '.w'!r}] must have shape (..., {k}, {f}), got {tuple(w.shape)}")
        if layer.output:
            kappa2 = _ig(0.5 + k * f / 2, 1.0 / values[f"{p}.rho"] + w.square().sum((-2, -1)) / 2)
            out[f"{p}.kappa2"] = kappa2
            out[f"{p}.rho"] = _ig(1.0, 1.0 / kappa2 + prior.b_kappa**-2)
            continue
        ss = w.square().sum(-1)  # |w_k|^2, shape (K,)
        tau2 = _ig(0.5 + f / 2, 1.0 / values[f"{p}.lam"] + ss / (2 * values[f"{p}.v2"][..., None]))
        out[f"{p}.tau2"] = tau2
        out[f"{p}.lam"] = _ig(1.0, 1.0 / tau2 + prior.b0**-2)
        v2 = _ig(0.5 + k * f / 2, 1.0 / values[f"{p}.theta"] + (ss / tau2).sum(-1) / 2)
        out[f"{p}.v2"] = v2
        out[f"{p}.theta"] = _ig(1.0, 1.0 / v2 + prior.bg**-2)
    return out
