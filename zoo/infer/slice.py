"""Univariate slice sampling, vectorized over independent coordinates (Neal 2003, "Slice sampling", Ann.
Statist. 31(3), §4, Figs. 3 and 5: stepping out, then shrinkage).

:func:`slice_step` makes one exact slice-sampling update of every entry of ``x`` at once, where entry
``i`` has its own one-dimensional target ``exp(log_density(x)[i])`` that depends on ``x[i]`` only — the
full conditionals of a Gibbs block whose coordinates are conditionally independent (the regularized
horseshoe's unit scales given the layer scale and the slab, or one scalar per independent chain).  It
is the Gibbs step for full conditionals with no closed-form sampler (:mod:`zoo.families.horseshoe.gibbs`).

Why it is written here: Pyro and PyTorch have no slice sampler, and the ones in maintained Python packages
(e.g. TensorFlow Probability's) work on other tensor libraries.  Stepping out with a cap of ``max_steps``
widths, placed at random around the current point, and shrinkage towards it leave each target exactly
invariant (Neal 2003, §4.1, the cap included), so the update can sit in a Gibbs sweep.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["slice_step"]


def slice_step(
    log_density: Callable[[Tensor], Tensor],
    x: Tensor,
    width: float = 2.0,
    max_steps: int = 32,
    max_shrinks: int = 200,
) -> Tensor:
    """One slice-sampling update of every entry of ``x`` (module docstring).

    :param log_density: maps a tensor shaped like ``x`` to the elementwise log target (up to a constant per
        entry); ``-inf`` outside the support.  It must be finite at ``x``.
    :param width: the initial interval width ``w`` (in ``x``'s units).
    :param max_steps: the cap ``m`` on stepping-out steps, shared at random between the two ends.
    :param max_shrinks: shrinkage proposals before an entry keeps its current value (it is in its own
        slice, so the update stays valid; each proposal halves the interval on average, so 200 are never
        reached in practice).
    """
    if width <= 0 or max_steps < 1 or max_shrinks < 1:
        raise ValueError(
            f"width, max_steps and max_shrinks must be positive, got {width}, {max_steps}, {max_shrinks}"
        )
    x = x.detach()
    level = log_density(x)
    if not torch.isfinite(level).all():
        raise ValueError("x: the log density must be finite at the current point of every entry")
    level = level - torch.empty_like(level).exponential_()  # log of the slice height
    left = x - width * torch.rand_like(x)
    right = left + width
    j = torch.floor(max_steps * torch.rand_like(x))
    k = (max_steps - 1) - j
    for _ in range(max_steps):  # step out (Fig. 3), every entry at once
        grow = (j > 0) & (log_density(left) > level)
        grow_r = (k > 0) & (log_density(right) > level)
        if not (grow.any() or grow_r.any()):
            break
        left = torch.where(grow, left - width, left)
        right = torch.where(grow_r, right + width, right)
        j, k = j - grow.to(j.dtype), k - grow_r.to(k.dtype)
    out, done = x.clone(), torch.zeros_like(x, dtype=torch.bool)
    for _ in range(max_shrinks):  # shrinkage (Fig. 5)
        prop = left + (right - left) * torch.rand_like(x)
        accept = ~done & (log_density(prop) > level)
        out = torch.where(accept, prop, out)
        done = done | accept
        if bool(done.all()):
            break
        below = ~done & (prop < x)
        left = torch.where(below, prop, left)
        right = torch.where(~done & ~below, prop, right)
    return out
