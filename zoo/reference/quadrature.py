"""Quadrature grids over a variance for :mod:`zoo.reference.enumeration`.

A variance ``σ²`` with an inverse-gamma prior is integrated out on an equispaced grid in ``u = log σ²`` by the
trapezoid rule.  The integrands (prior × Gaussian likelihood) are smooth and decay exponentially in ``u`` at
both ends, for which the trapezoid rule converges geometrically in the node spacing (Trefethen & Weideman
2014, "The exponentially convergent trapezoidal rule", SIAM Review 56(3), §5), so the difference between the
grid and its every-other-node subgrid is a conservative bound on the error.  Grids have an odd number of
nodes so that the subgrid is nodes ``0, 2, 4, ...``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from scipy import stats
from torch import Tensor

__all__ = ["VarianceGrid", "point_grid", "inverse_gamma_grid", "noise_grid_bounds", "MAX_NODES"]

#: the most nodes a grid may have (a larger one means a mis-specified range)
MAX_NODES = 20001


@dataclass(frozen=True)
class VarianceGrid:
    """Nodes ``values`` (``(Q,)``) and log weights: ``log_weight`` of the full trapezoid rule and
    ``log_weight_half`` of the subgrid (``-inf`` off it), each including the prior density and the
    Jacobian ``dσ²/du = σ²``.  A single node of weight 1 is a known variance (``exact``)."""

    values: Tensor
    log_weight: Tensor
    log_weight_half: Tensor
    exact: bool


def point_grid(value: float) -> VarianceGrid:
    """A known variance: one node of weight one."""
    v = torch.tensor([float(value)], dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    return VarianceGrid(v, zero, zero, exact=True)


def _trapezoid_log_weights(q: int, h: float) -> tuple[Tensor, Tensor]:
    w = torch.full((q,), math.log(h), dtype=torch.float64)
    w[0] = w[-1] = math.log(h / 2)
    half = torch.full((q,), -math.inf, dtype=torch.float64)
    half[0::2] = math.log(2 * h)
    half[0] = half[-1] = math.log(h)
    return w, half


def inverse_gamma_grid(concentration: float, rate: float, lo: float, hi: float, nodes: int) -> VarianceGrid:
    """Trapezoid grid of ``nodes`` (odd, >= 3) points on ``log σ² ∈ [lo, hi]`` for ``σ² ~ InvGamma(a, b)``
    (shape ``a = concentration``, scale ``b = rate``, as ``pyro.distributions.InverseGamma``)."""
    if nodes < 3 or nodes % 2 == 0 or nodes > MAX_NODES:
        raise ValueError(f"nodes must be odd and in [3, {MAX_NODES}], got {nodes}")
    if not hi > lo:
        raise ValueError(f"the grid range must be increasing, got [{lo}, {hi}]")
    u = torch.linspace(lo, hi, nodes, dtype=torch.float64)
    a, b = float(concentration), float(rate)
    # log InvGamma(e^u; a, b) + u  (the density of u = log σ²)
    log_prior = a * math.log(b) - math.lgamma(a) - a * u - b * torch.exp(-u)
    w, half = _trapezoid_log_weights(nodes, (hi - lo) / (nodes - 1))
    return VarianceGrid(torch.exp(u), log_prior + w, log_prior + half, exact=False)


def prior_mass_range(concentration: float, rate: float, tail: float = 1e-12) -> tuple[float, float]:
    """``[log q_tail, log q_{1-tail}]`` of ``InvGamma(a, b)``: ``1/σ² ~ Gamma(a, rate=b)``."""
    g = stats.gamma(concentration, scale=1.0 / rate)
    return -math.log(g.isf(tail)), -math.log(g.ppf(tail))


def noise_grid_bounds(
    n: int,
    num_columns: int,
    yy: float,
    rss_min: float,
    concentration: float,
    rate: float,
    margin: float = 12.0,
) -> tuple[float, float, float]:
    """``(lo, hi, spacing)`` in ``log σ²`` for the noise variance of a Gaussian linear model with ``n``
    observations and ``num_columns`` coefficients.

    For a fixed model the posterior of ``σ²`` lies between that of ``InvGamma(a + n/2, b + RSS/2)`` with the
    smallest possible ``RSS`` (the least-squares residual of the full design, ``rss_min``) and the one with
    ``RSS = yᵀy`` and only ``n - num_columns`` residual degrees of freedom; its standard deviation in
    ``log σ²`` is about ``sqrt(2 / dof)``.  The range reaches ``margin`` of the widest such deviations beyond
    both modes, and the spacing is a third of the narrowest one.
    """
    dof_hi = n + 2.0 * concentration
    dof_lo = max(n - num_columns, 0) + 2.0 * concentration
    sd_min, sd_max = math.sqrt(2.0 / dof_hi), math.sqrt(2.0 / dof_lo)
    lo = math.log((2.0 * rate + rss_min) / (dof_hi + 2.0)) - margin * sd_max
    hi = math.log((2.0 * rate + yy) / (dof_lo + 2.0)) + margin * sd_max
    return lo, hi, sd_min / 3.0


def odd_nodes(lo: float, hi: float, spacing: float) -> int:
    """The odd number of nodes that covers ``[lo, hi]`` at (at most) ``spacing``."""
    q = max(3, math.ceil((hi - lo) / spacing) + 1)
    q += 1 - q % 2
    if q > MAX_NODES:
        raise ValueError(f"the variance grid would need {q} nodes (> {MAX_NODES}); the data are degenerate")
    return q
