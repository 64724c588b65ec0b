"""Ancillary (non-centered) moves of a prior's scales inside NUTS within Gibbs: the interweaving strategy of
Yu & Meng (2011, "To center or not to center: that is still the question", J. Comput. Graph. Statist.
20(3), §2-3: ASIS, the ancillarity-sufficiency interweaving strategy).

The Gibbs block of :mod:`zoo.infer.mcmc_gibbs` draws each scale ``s`` from its full conditional given the
*centered* weights ``w`` (the sufficient augmentation).  Where the data pin a group of weights down, ``w``
pins ``s`` down too and the chain crawls along the funnel; the non-centered (ancillary) augmentation
``w = sigma(s) z`` has the opposite failure, so interweaving one draw in each form mixes where either
alone is slow (Yu & Meng 2011, Theorem 1; the shrinkage-prior case: Bitto & Frühwirth-Schnatter 2019,
"Achieving shrinkage in a time-varying parameter model framework", J. Econometrics 210(1), §3).

The ancillary move keeps ``z = w / sigma(s)`` and every other latent fixed and redraws ``u = log s``
from its full conditional in the ``(s, z)`` coordinates.  The change of variables ``w = sigma(s) z`` has
Jacobian ``sigma(s)^F`` that cancels the normal density of ``w`` given ``s``, so that conditional is::

    p(u | z, rest, y)  ∝  p(s | rest) s  L(y | w = sigma(s) z)

— the scale's own prior conditional (with the Jacobian of ``u = log s``) times the likelihood with the
weights rescaled.  The likelihood couples the scales, so they move one at a time, each by an exact
univariate slice-sampling update (:func:`zoo.infer.slice.slice_step`), which leaves that conditional and
hence the joint posterior invariant.  Each move costs a few likelihood evaluations (a forward pass of the
network on the training rows), against the tens to hundreds of gradient evaluations of one NUTS
transition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from pyro import poutine
from torch import Tensor

from zoo.infer.slice import slice_step

__all__ = ["LogLikelihood", "ancillary_log_scale", "likelihood_of"]

#: the log-likelihood of the data given a complete set of latent values (site name -> value)
LogLikelihood = Callable[[Mapping[str, Tensor]], Tensor]

OBS = "obs"


def likelihood_of(model: Callable[..., object], *args: object) -> LogLikelihood:
    """``values -> log p(y | values)``: the log density of ``model``'s observed site ``"obs"`` (its scale
    included) with every latent site conditioned on ``values``; ``args`` are the model's arguments."""

    def log_lik(values: Mapping[str, Tensor]) -> Tensor:
        trace = poutine.trace(poutine.condition(model, data=dict(values))).get_trace(*args)
        if OBS not in trace.nodes:
            raise ValueError(f"the model has no observed site {OBS!r}")
        return trace.log_prob_sum(site_filter=lambda name, site: name == OBS)

    return log_lik


def ancillary_log_scale(
    u: Tensor,
    log_prior: Callable[[Tensor], Tensor],
    moved: Callable[[Tensor], Mapping[str, Tensor]],
    log_lik: LogLikelihood,
) -> Tensor:
    """One ancillary move (module docstring) of one log scale ``u = log s``: a 0-dim tensor for one chain,
    or one entry per independent chain when ``log_lik`` returns one value per chain.

    :param log_prior: ``u -> log p(s | rest) + u``, the scale's prior conditional on the log scale.
    :param moved: ``u -> values``: every latent site with the weights ``sigma(s) z`` and the scale ``s``.
    :param log_lik: :func:`likelihood_of` the model.
    :returns: the new ``u``.
    """

    def density(v: Tensor) -> Tensor:
        with torch.no_grad():
            return log_prior(v) + log_lik(moved(v))

    return slice_step(density, u)
