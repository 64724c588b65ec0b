"""Prediction with the bow-tie CAVI posterior (Sheinkman & Wade 2025, arXiv 2411.11132, §3.5, Eqs. 22–26).

Given the test-point locals ``q(a_*), q(gamma_*), q(omega_*)`` (fitted with the globals fixed, §3.5):

* the closed-form predictive mean (Eq. 26) ``E[y_*] = m_{L+1}^T E[a~_{*,L}]`` and variance
  ``E[z_*^2] - E[z_*]^2 + E[sigma2]`` (:func:`predictive_moments`);
* per-draw locations/scales and joint samples of ``y_*`` by the Monte Carlo scheme of Eq. (25):
  ``a_l^(j) ~ q(a_l | a_{l-1}^(j))``, ``(W, b)_{L+1}^(j) ~ q``, ``sigma2^(j) ~ q``
  (:func:`monte_carlo_draws`).
"""

from __future__ import annotations

import pyro.distributions as dist
import torch
from torch import Tensor

from guides.bowtie.linalg import F64
from guides.bowtie.moments import Moments, layer_pre_moments
from guides.bowtie.state import Globals, Locals
from zoo.infer.predict import Predictions

__all__ = ["predictive_moments", "monte_carlo_draws", "as_predictions"]


def predictive_moments(g: Globals, mom: Moments) -> tuple[Tensor, Tensor]:
    """Closed-form predictive mean (Eq. 26) and variance ``Var[z_*] + E[sigma2]``, (N, D_out)."""
    ez, ez2 = layer_pre_moments(g, mom, g.num_hidden)
    e_s2 = g.beta[-1] / (g.alpha[-1] - 1.0)
    return ez, (ez2 - ez**2).clamp_min(0) + e_s2


def monte_carlo_draws(g: Globals, loc: Locals, x: Tensor, num_samples: int) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. (25): ``(locs, scales, samples)``, each (num_samples, N, D_out)."""
    k = g.num_hidden
    h = x.to(F64).expand(num_samples, -1, -1)
    for j in range(k):
        noise = (
            torch.linalg.cholesky(loc.S[j])
            @ torch.randn(num_samples, *loc.t[j].shape, 1, dtype=F64, device=loc.S[j].device)
        ).squeeze(-1)
        h = loc.t[j] + (loc.M[j] @ h.unsqueeze(-1)).squeeze(-1) + noise
    rows = dist.MultivariateNormal(g.m[k], covariance_matrix=g.B[k]).sample((num_samples,))
    locs = rows[:, None, :, 0] + (h.unsqueeze(-2) * rows[:, None, :, 1:]).sum(-1)
    s2 = dist.InverseGamma(g.alpha[-1], g.beta[-1]).sample((num_samples,))
    scales = s2.sqrt()[:, None, None].expand_as(locs)
    samples = locs + scales * torch.randn_like(locs)
    return locs, scales, samples


def as_predictions(
    values: dict[str, Tensor], dtype: torch.dtype, single_output: bool, extras: dict
) -> Predictions:
    """Regression :class:`~zoo.infer.predict.Predictions` in ``dtype``, the output axis dropped when
    ``single_output``."""

    def out(v: Tensor) -> Tensor:
        v = v[..., 0] if single_output else v
        return v.to(dtype)

    return Predictions("regression", **{name: out(v) for name, v in values.items()}, extras=extras)
