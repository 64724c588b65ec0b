"""Pyro autoguides as zoo guides (the baseline for every prior), with BNN-friendly initialization.

Any Pyro autoguide works on any zoo model because zoo models are plain Pyro models; this module only
adds a name → constructor table and an initialization that suits networks: weights start at
LeCun-normal draws ``N(0, 1/fan_in)`` (fan-in = last event dim), biases at 0, every other latent at
its prior median, and the guide scales start small (``init_scale``), as in Bayes-by-backprop practice.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from pyro.infer import autoguide
from pyro.infer.autoguide.initialization import init_to_median

__all__ = ["init_to_lecun", "AUTOGUIDES", "make_autoguide"]


def init_to_lecun(site: dict) -> torch.Tensor:
    """Initial location: LeCun-normal for ``*.weight`` sites, zero for ``*.bias``, prior median otherwise."""
    name = site["name"]
    fn = site["fn"]
    if name.endswith(".weight"):
        shape = fn.event_shape if len(fn.event_shape) else fn.batch_shape
        fan_in = shape[-1] if len(shape) else 1
        ref = fn.sample()
        return torch.randn(ref.shape, dtype=ref.dtype, device=ref.device) / math.sqrt(fan_in)
    if name.endswith(".bias"):
        return torch.zeros_like(fn.sample())
    return init_to_median(site)


AUTOGUIDES: dict[str, Callable] = {
    "normal": autoguide.AutoNormal,
    "diagonal": autoguide.AutoDiagonalNormal,
    "lowrank": autoguide.AutoLowRankMultivariateNormal,
    "mvn": autoguide.AutoMultivariateNormal,
    "delta": autoguide.AutoDelta,
}


def make_autoguide(name: str, model, init_scale: float = 1e-2, **kwargs):
    """Build the autoguide ``name`` (one of :data:`AUTOGUIDES`) for ``model``."""
    if name not in AUTOGUIDES:
        raise ValueError(f"guide must be one of {sorted(AUTOGUIDES)}, got {name!r}")
    cls = AUTOGUIDES[name]
    kwargs.setdefault("init_loc_fn", init_to_lecun)
    if name != "delta":
        kwargs.setdefault("init_scale", init_scale)
    return cls(model, **kwargs)
