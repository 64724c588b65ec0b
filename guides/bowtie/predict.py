"""Prediction with the bow-tie CAVI posterior (Sheinkman & Wade 2025, arXiv 2411.11132, §3.5, Eqs. 22–26).

Given the test-point locals ``q(a_*), q(gamma_*), q(omega_*)`` (fitted with the globals fixed, §3.5):

* the closed-form predictive mean (Eq. 26) ``E[y_*] = m_{L+1}^T E[a~_{*,L}]`` and variance
  ``E[z_*^2] - E[z_*]^2 + E[sigma2]`` (:func:`predictive_moments`);
* per-draw locations/scales and joint samples of ``y_*`` by the Monte Carlo scheme of Eq. (25):
  ``a_l^(j) ~ q(a_l | a_{l-1}^(j))``, ``(W, b)_{L+1}^(j) ~ q``, ``sigma2^(j) ~ q``
  (:func:`monte_carlo_draws`), over chunks of rows so that memory does not grow with the number of inputs
  beyond the draws themselves.
"""

from __future__ import annotations

import pyro.distributions as dist
import torch
from torch import Tensor

from guides.bowtie.linalg import F64
from guides.bowtie.moments import Moments, layer_pre_moments
from guides.bowtie.state import Globals, Locals
from zoo.core.validation import check_positive_int
from zoo.infer.predict import Predictions

__all__ = ["ROW_CHUNK", "predictive_moments", "monte_carlo_draws", "as_predictions"]

#: rows per chunk of :func:`monte_carlo_draws` (200 draws of 50 units: ~80 MB per tensor of a chunk)
ROW_CHUNK = 1024


def predictive_moments(g: Globals, mom: Moments) -> tuple[Tensor, Tensor]:
    """Closed-form predictive mean (Eq. 26) and variance ``Var[z_*] + E[sigma2]``, (N, D_out)."""
    ez, ez2 = layer_pre_moments(g, mom, g.num_hidden)
    e_s2 = g.beta[-1] / (g.alpha[-1] - 1.0)
    return ez, (ez2 - ez**2).clamp_min(0) + e_s2


def _last_hidden(g: Globals, loc: Locals, x: Tensor, num_samples: int, rows: slice) -> Tensor:
    """Eq. (25)'s draws ``a_L^(j) ~ q(a_L | a_{L-1}^(j))`` of the last hidden layer at ``rows`` (the inputs
    when ``L = 0``), (num_samples, rows, D_L).  Each row's Cholesky factor of ``S`` is used for all draws
    through ``einsum`` (a broadcast ``@`` would copy it ``num_samples`` times)."""
    h = x[rows].to(F64).expand(num_samples, -1, -1)
    for j in range(g.num_hidden):
        t, s = loc.t[j][rows], loc.S[j][rows]
        eps = torch.randn(num_samples, *t.shape, dtype=F64, device=s.device)
        noise = torch.einsum("nde,sne->snd", torch.linalg.cholesky(s), eps)
        h = t + torch.einsum("nde,sne->snd", loc.M[j][rows], h) + noise
    return h


def _global_draws(g: Globals, k: int, num_samples: int) -> tuple[Tensor, Tensor]:
    """The draws of the output rows ``(b, W)_{L+1}^(j)`` and of ``sigma2^(j)``, shared by every row."""
    rows = dist.MultivariateNormal(g.m[k], covariance_matrix=g.B[k]).sample((num_samples,))
    return rows, dist.InverseGamma(g.alpha[-1], g.beta[-1]).sample((num_samples,))


def monte_carlo_draws(
    g: Globals, loc: Locals, x: Tensor, num_samples: int, row_chunk: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. (25): ``(locs, scales, samples)``, each (num_samples, N, D_out).

    The rows of ``x`` go through in chunks of ``row_chunk`` (default :data:`ROW_CHUNK`), so the working memory
    is ``O(num_samples x row_chunk x D)`` whatever ``N`` (beyond the three outputs).  The global draws (output
    rows ``(b, W)_{L+1}^(j)``, ``sigma2^(j)``) are taken once, after the first chunk's local draws: with
    ``N <= row_chunk`` the random stream, hence every draw, is the one of the unchunked scheme, so committed
    bow-tie results keep their numbers.  Draw ``j`` uses the same globals at every row; the local draws of
    different chunks are independent."""
    row_chunk = ROW_CHUNK if row_chunk is None else check_positive_int("row_chunk", row_chunk)
    k, n = g.num_hidden, x.shape[0]
    rows = s2 = locs = samples = None
    for start in range(0, max(n, 1), row_chunk):
        r = slice(start, min(start + row_chunk, n))
        h = _last_hidden(g, loc, x, num_samples, r)
        if rows is None:  # after the first chunk's locals: the random stream of the unchunked scheme
            rows, s2 = _global_draws(g, k, num_samples)
            locs = torch.empty(num_samples, n, rows.shape[1], dtype=F64, device=rows.device)
            samples = torch.empty_like(locs)
        locs[:, r] = rows[:, None, :, 0] + (h.unsqueeze(-2) * rows[:, None, :, 1:]).sum(-1)
        samples[:, r] = locs[:, r] + s2.sqrt()[:, None, None] * torch.randn_like(locs[:, r])
    scales = s2.sqrt()[:, None, None].expand_as(locs)
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
