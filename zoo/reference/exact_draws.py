"""Independent draws from the exact posterior of the linear spike-and-slab regression
(:mod:`zoo.reference.enumeration`), for scoring a guide's predictive draws against it.

The posterior factorizes as ``p(γ | y) p(σ²_w, σ² | γ, y) p(θ, b | γ, σ²_w, σ², y)`` (Hubin & Storvik 2019,
arXiv:1903.07594, Eqs. 3.3-3.4 with no hidden layer; the variances on the quadrature grids of
:mod:`zoo.reference.quadrature`).  A draw takes a model ``γ`` from the enumerated model probabilities, a
grid node ``(σ²_w, σ²)`` from that model's node weights (likelihood × prior × trapezoid weight), and the
coefficients from the conjugate Gaussian ``N(m, C)``: with ``V^½ = diag(γ σ_w, s_b)``, ``M = V^½ X̃ᵀX̃ V^½
= U diag(λ) Uᵀ`` and ``z = Uᵀ V^½ X̃ᵀ y`` (the enumeration's quantities),
``β = V^½ U (z / (σ² + λ) + sqrt(σ² / (σ² + λ)) ε)`` with ``ε ~ N(0, I)`` — the posterior of the whitened
coefficients ``η = V^{-½} β`` has precision ``I + M / σ²``.  The draws are exact up to the quadrature grids
(the enumeration's ``quadrature_error``), and independent, so their Monte Carlo error is ``sd / sqrt(S)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from zoo.core.validation import check_count
from zoo.reference.enumeration import (
    EnumerationResult,
    SpikeSlabLinear,
    _grids,
    _inputs,
    model_masks,
)

__all__ = ["ExactDraws", "sample_spike_slab"]

_LOG_2PI = math.log(2 * math.pi)
_F64 = torch.float64


@dataclass(frozen=True)
class ExactDraws:
    """``S`` independent posterior draws: ``f`` and ``y`` ``(S, T)`` at the test inputs, the models
    ``gamma`` ``(S, p)`` (bool), ``noise_var`` and ``slab_var`` ``(S,)``, coefficients ``weights`` ``(S, p)``
    and ``bias`` ``(S,)``."""

    f: np.ndarray
    y: np.ndarray
    gamma: np.ndarray
    noise_var: np.ndarray
    slab_var: np.ndarray
    weights: np.ndarray
    bias: np.ndarray


def _model_draws(
    mask: Tensor, count: int, prior: SpikeSlabLinear, stats: dict, grids: tuple, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """``count`` draws of ``(β (count, p+1), σ², σ²_w)`` given one model ``mask`` ``(p,)``."""
    noise, slab = grids
    p = mask.shape[0]
    lw_rows, factors = [], []
    for s, lw in zip(slab.values.tolist(), slab.log_weight.tolist()):
        sd = torch.cat(
            [torch.full((p,), math.sqrt(s), dtype=_F64), torch.tensor([prior.bias_scale], dtype=_F64)]
        )
        sv = torch.cat([mask, torch.ones(1, dtype=_F64)]) * sd
        lam, u = torch.linalg.eigh(sv[:, None] * stats["gram"] * sv[None, :])
        lam = lam.clamp_min(0.0)
        z = u.T @ (sv * stats["xty"])
        s2 = noise.values
        den = s2[None, :] + lam[:, None]  # (P, Q)
        ll = -0.5 * (
            stats["n"] * (_LOG_2PI + torch.log(s2))
            + torch.log1p(lam[:, None] / s2).sum(0)
            + (stats["yy"] - (z[:, None] ** 2 / den).sum(0)) / s2
        )
        lw_rows.append(ll + noise.log_weight + lw)
        factors.append((sv, lam, u, z))
    joint = torch.stack(lw_rows)  # (slab nodes, noise nodes)
    flat = torch.softmax(joint.reshape(-1), 0)
    pick = torch.multinomial(flat, count, replacement=True, generator=gen)
    i_slab, i_noise = pick // joint.shape[1], pick % joint.shape[1]
    betas = torch.empty(count, p + 1, dtype=_F64)
    for k in torch.unique(i_slab).tolist():
        rows = (i_slab == k).nonzero().reshape(-1)
        sv, lam, u, z = factors[k]
        s2 = noise.values[i_noise[rows]][:, None]  # (r, 1)
        eps = torch.randn(len(rows), p + 1, dtype=_F64, generator=gen)
        eta = z / (s2 + lam) + torch.sqrt(s2 / (s2 + lam)) * eps
        betas[rows] = sv * (eta @ u.T)
    return betas, noise.values[i_noise], slab.values[i_slab]


def sample_spike_slab(
    x: Any,
    y: Any,
    exact: EnumerationResult,
    prior: SpikeSlabLinear,
    x_test: Any,
    num_draws: int = 1000,
    seed: int = 0,
) -> ExactDraws:
    """``num_draws`` independent draws from the exact posterior whose enumeration is ``exact`` (computed by
    :func:`~zoo.reference.enumeration.enumerate_spike_slab` with the same ``x``, ``y``, ``prior``), with the
    predictive draws of ``f`` and ``y`` at ``x_test`` (module docstring)."""
    num_draws = check_count("num_draws", num_draws, minimum=1)
    if not isinstance(exact, EnumerationResult):
        raise TypeError(f"exact must be an EnumerationResult, got {type(exact).__name__}")
    xt, yt, xtest = _inputs(x, y, x_test)
    if xtest is None:
        raise ValueError("x_test must be given (the inputs of the predictive draws)")
    p = xt.shape[1] - 1
    if exact.model_probs.shape != (2**p,):
        raise ValueError(
            f"exact has {exact.model_probs.size} models but `x` has p = {p} columns (2^p models)"
        )
    gen = torch.Generator().manual_seed(int(seed))
    stats = {"gram": xt.T @ xt, "xty": xt.T @ yt, "yy": yt @ yt, "n": xt.shape[0]}
    grids = _grids(prior, xt, yt)
    probs = torch.as_tensor(exact.model_probs, dtype=_F64)
    codes = torch.multinomial(probs / probs.sum(), num_draws, replacement=True, generator=gen)
    beta = torch.empty(num_draws, p + 1, dtype=_F64)
    s2 = torch.empty(num_draws, dtype=_F64)
    sw = torch.empty(num_draws, dtype=_F64)
    for code in torch.unique(codes).tolist():
        rows = (codes == code).nonzero().reshape(-1)
        mask = model_masks(torch.tensor(code), p).to(_F64)
        beta[rows], s2[rows], sw[rows] = _model_draws(mask, len(rows), prior, stats, grids, gen)
    f = beta @ xtest.T
    ynew = f + torch.sqrt(s2)[:, None] * torch.randn(f.shape, dtype=_F64, generator=gen)
    gamma = model_masks(codes, p)
    return ExactDraws(
        f=f.numpy(),
        y=ynew.numpy(),
        gamma=gamma.numpy(),
        noise_var=s2.numpy(),
        slab_var=sw.numpy(),
        weights=beta[:, :p].numpy(),
        bias=beta[:, p].numpy(),
    )
