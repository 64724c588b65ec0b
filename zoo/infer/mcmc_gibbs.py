"""NUTS within Gibbs: one chain of :func:`zoo.infer.mcmc.fit_nuts` with ``gibbs=True``.

Each iteration makes one NUTS transition (Hoffman & Gelman 2014, arXiv:1111.4246) of the weights and
likelihood latents *given* the prior's scales, then draws the scales exactly from their full conditionals
given the new weights (the prior's ``conditional_sites`` / ``draw_conditionals``; for the horseshoe
:mod:`zoo.families.horseshoe.gibbs`).  Both blocks leave the joint posterior invariant, so their
alternation does too (a Metropolis-within-Gibbs scheme, Tierney 1994, §2.4).  It is for shrinkage priors
whose heavy-tailed scales NUTS alone explores badly: the scales' funnel never enters the NUTS block,
whose target is then a network with a Gaussian prior of fixed variances, and the scales move by exact
draws however far their tails reach.

The NUTS block runs Pyro's kernel on the model conditioned on the current scales (``poutine.condition``
on tensors that the Gibbs step overwrites in place); its cached potential energy is cleared after each
Gibbs step, and the step size and mass matrix are adapted during warm-up as usual.  The potential is
re-traced at every call, so the PyTorch JIT cannot be used (``jit_compile=False`` is required).  The scales
start at 1.  The recorded log density is the NUTS block's, given the scales.

With ``cfg.interweave`` each sweep is followed by the prior's ancillary moves (:mod:`zoo.infer.interweave`:
each scale redrawn with its standardized weights held fixed, the weights rescaled with it); the rescaled
weights are written back into the NUTS block's state.  A prior with a non-centered form
(``prior.centered = False``, ``fit_nuts(..., centered=False)``) and a ``reparameterize`` map has its NUTS
block move the *standardized* weights: the sweep maps them to the centered ones, draws, and maps back with
the new scales.  Then a unit the horseshoe switches off keeps unit-scale standardized weights whatever its
scale does, instead of a centered conditional whose width changes by orders of magnitude between
transitions (the step size adapted to one width diverges at the next).

The per-draw sampler statistics are the NUTS block's (:class:`~zoo.infer.mcmc_stats.RecordingNUTS`), except
``energy``: the block's Hamiltonian is that of the conditional target, which the Gibbs sweep changes between
transitions, so its marginal and transition distributions are not the ones the energy diagnostic (BFMI)
compares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from pyro import poutine
from torch import Tensor

from zoo.infer.interweave import likelihood_of
from zoo.infer.mcmc_stats import RecordingNUTS, stack_stats

__all__ = ["conditional_sites", "run_gibbs_chain"]


def conditional_sites(model: torch.nn.Module) -> list[str]:
    """The scale sites the Gibbs block of ``model``'s prior draws; ``ValueError`` (naming the prior) if it
    has no exact conditionals."""
    prior = getattr(model, "prior", None)
    if prior is None or not callable(getattr(prior, "conditional_sites", None)):
        raise ValueError(
            f"gibbs: the prior {type(prior).__name__} has no exact conditional draws of its scales "
            "(conditional_sites / draw_conditionals); sample it with plain NUTS (gibbs=False)"
        )
    return list(prior.conditional_sites(model.specs))


def run_gibbs_chain(
    model: torch.nn.Module,
    x: Tensor,
    y: Tensor,
    cfg: Any,
    kernel_kwargs: dict[str, Any],
    tick: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One NUTS-within-Gibbs chain (module docstring), seeded by the caller.  Returns the fields of
    :func:`zoo.infer.mcmc_chains.run_chain` except ``seed`` and the timings: ``samples`` (every latent site,
    the scales included), ``lp``, ``stats`` (module docstring), ``divergences`` (kept-draw indices),
    ``accept_rate``, ``mean_accept_prob``, ``step_size``."""
    if cfg.jit_compile:
        raise ValueError("jit_compile must be False with gibbs=True (the NUTS block's target changes)")
    prior = model.prior
    names = conditional_sites(model)
    with torch.no_grad():  # shapes from one prior trace
        trace = poutine.trace(poutine.block(model, hide=["obs"])).get_trace(x, y)
    scales = {n: torch.ones_like(trace.nodes[n]["value"]) for n in names}
    kernel = RecordingNUTS(poutine.condition(model, data=scales), **kernel_kwargs)
    kernel.setup(cfg.warmup, x, y)
    params = kernel.initial_params
    ncp = getattr(prior, "centered", True) is False
    log_lik = _log_likelihood(model, x, y, ncp) if getattr(cfg, "interweave", False) else None
    kept: dict[str, list[Tensor]] = {}
    lp: list[float] = []
    stats: list[dict] = []
    moved = 0
    for it in range(cfg.warmup + cfg.samples):
        before = params
        params = kernel.sample(params)
        stepped = any(not torch.equal(params[k], before[k]) for k in params)  # NUTS's move, not the sweep's
        values = {k: kernel.transforms[k].inv(v) if k in kernel.transforms else v for k, v in params.items()}
        with torch.no_grad():
            changed = _sweep(model, {**values, **scales}, log_lik, ncp)
        for n in names:
            scales[n].copy_(changed.pop(n))
        for k, v in changed.items():  # the weights the sweep rescaled (interweaving) or re-standardized
            if k in params:
                values[k] = v
                params[k] = kernel.transforms[k](v) if k in kernel.transforms else v
        if it >= cfg.warmup:
            lp.append(-float(kernel._potential_energy_last))
            stats.append(dict(kernel.last_stats))
            moved += int(stepped)
            for k, v in {**values, **scales}.items():
                kept.setdefault(k, []).append(v.detach().clone())
        kernel.clear_cache()  # the potential energy of the kept point changed with the scales
        if tick is not None:
            tick()
    diag = kernel.diagnostics()
    return {
        "samples": {k: torch.stack(v) for k, v in kept.items()},
        "lp": torch.tensor(lp, dtype=torch.float64),
        "stats": {k: v for k, v in stack_stats(stats).items() if k != "energy"},
        "divergences": [int(d) for d in diag["divergences"]],
        "accept_rate": moved / max(cfg.samples, 1),
        "mean_accept_prob": float(kernel._mean_accept_prob),
        "step_size": float(kernel.step_size),
    }


def _log_likelihood(model: torch.nn.Module, x: Tensor, y: Tensor, ncp: bool) -> Callable[..., Tensor]:
    """The data's log-likelihood given centered values (:func:`zoo.infer.interweave.likelihood_of`); for a
    model sampled non-centered the rows are standardized before conditioning."""
    base = likelihood_of(model, x, y)
    if not ncp:
        return base
    return lambda v: base({**v, **model.prior.reparameterize(model.specs, v, centered=False)})


def _sweep(
    model: torch.nn.Module, state: dict[str, Tensor], log_lik: Callable[..., Tensor] | None, ncp: bool
) -> dict[str, Tensor]:
    """One Gibbs sweep from ``state`` (every site): the exact conditional draws of the scales given the
    centered weights, then (``log_lik`` given) the ancillary moves; returns the new scales and the weight
    sites they changed (a non-centered model's rows standardized by the new scales; centered rows the
    caller does not sample are ignored by it)."""
    prior, specs = model.prior, model.specs
    if ncp:
        state = {**state, **prior.reparameterize(specs, state, centered=True)}
    new = dict(prior.draw_conditionals(specs, state))
    if log_lik is not None:
        new.update(prior.interweave(specs, {**state, **new}, log_lik))
    if ncp:  # the centered rows (new or not) standardized by the new scales
        new.update(prior.reparameterize(specs, {**state, **new}, centered=False))
    return new
