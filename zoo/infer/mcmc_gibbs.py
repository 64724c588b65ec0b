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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from pyro import poutine
from pyro.infer import NUTS
from torch import Tensor

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
    the scales included), ``lp``, ``divergences`` (kept-draw indices), ``accept_rate``, ``mean_accept_prob``,
    ``step_size``."""
    if cfg.jit_compile:
        raise ValueError("jit_compile must be False with gibbs=True (the NUTS block's target changes)")
    prior = model.prior
    names = conditional_sites(model)
    with torch.no_grad():  # shapes from one prior trace
        trace = poutine.trace(poutine.block(model, hide=["obs"])).get_trace(x, y)
    scales = {n: torch.ones_like(trace.nodes[n]["value"]) for n in names}
    kernel = NUTS(poutine.condition(model, data=scales), **kernel_kwargs)
    kernel.setup(cfg.warmup, x, y)
    params = kernel.initial_params
    kept: dict[str, list[Tensor]] = {}
    lp: list[float] = []
    moved = 0
    for it in range(cfg.warmup + cfg.samples):
        before = params
        params = kernel.sample(params)
        values = {k: kernel.transforms[k].inv(v) if k in kernel.transforms else v for k, v in params.items()}
        with torch.no_grad():
            new = prior.draw_conditionals(model.specs, {**values, **scales})
        for n in names:
            scales[n].copy_(new[n])
        if it >= cfg.warmup:
            lp.append(-float(kernel._potential_energy_last))
            moved += int(any(not torch.equal(params[k], before[k]) for k in params))
            for k, v in {**values, **scales}.items():
                kept.setdefault(k, []).append(v.detach().clone())
        kernel.clear_cache()  # the potential energy of the kept point changed with the scales
        if tick is not None:
            tick()
    diag = kernel.diagnostics()
    return {
        "samples": {k: torch.stack(v) for k, v in kept.items()},
        "lp": torch.tensor(lp, dtype=torch.float64),
        "divergences": [int(d) for d in diag["divergences"]],
        "accept_rate": moved / max(cfg.samples, 1),
        "mean_accept_prob": float(kernel._mean_accept_prob),
        "step_size": float(kernel.step_size),
    }
