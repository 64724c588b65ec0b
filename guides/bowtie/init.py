"""Data-driven initialization of the bow-tie CAVI (Sheinkman & Wade 2025, arXiv 2411.11132, App. D.1, Alg. 3).

Hidden weight means are random hyperplanes through random points of the data's (padded) bounding box
(Algorithm 3) with Laplace or spike-and-slab normals; a deterministic forward pass gives the locals
``rho, A, t, M`` (:func:`guides.bowtie.activations.gate_forward`); the output layer is a ridge regression
on the last hidden layer with a GCV-chosen penalty (App. D.1 step 5); ``B = init_cov I``,
``S = local_init_cov I``, the noise factors start at their priors and ``delta_hat`` is drawn as in App. D.1
step 3.  All randomness comes from torch's RNG (``fit(seed=...)``).
"""

from __future__ import annotations

import math

import pyro.distributions as dist
import torch
from torch import Tensor

from guides.bowtie.activations import gate_forward
from guides.bowtie.linalg import F64
from guides.bowtie.scales import initial_deltas
from guides.bowtie.state import Hyper, Locals

__all__ = ["hyperplane_weights", "ridge_gcv", "initial_state"]


def hyperplane_weights(z: Tensor, d: int, init: str) -> tuple[Tensor, Tensor]:
    """Algorithm 3: ``d`` hyperplanes through uniform points of the padded bounding box of the inputs ``z``;
    normals ``Laplace(0, sqrt(2/D_prev))`` (``"laplace"``) or spike-and-slab (``"spikeslab"``).  Returns
    ``(W, b)`` means."""
    dp = z.shape[1]
    lo, hi = z.min(0).values, z.max(0).values
    pad = 0.05 * (hi - lo)
    if init == "laplace":
        mw = dist.Laplace(torch.zeros(d, dp, dtype=F64), math.sqrt(2.0 / dp)).sample()
    else:
        keep = torch.rand(d, dp, dtype=F64) < 1.0 / (1.0 + math.sqrt(dp))
        mw = keep * torch.randn(d, dp, dtype=F64) * math.sqrt(2.0 / math.sqrt(dp))
    # drawn on the CPU and moved, so that a seed gives the same hyperplanes on every device
    mw, u = mw.to(z.device), torch.rand(d, dp, dtype=F64).to(z.device)
    point = lo - pad + (hi - lo + 2 * pad) * u
    return mw, -(mw * point).sum(1)


def ridge_gcv(z: Tensor, y: Tensor) -> Tensor:
    """Ridge regression of each output on ``(1, z)`` (unpenalized intercept), penalty by generalized
    cross-validation over a log grid — the output-layer initialization of App. D.1 step 5.  Returns
    (D_out, D+1)."""
    zm, ym = z.mean(0), y.mean(0)
    zc, yc = z - zm, y - ym
    u, sv, vh = torch.linalg.svd(zc, full_matrices=False)
    uty = u.T @ yc
    n = z.shape[0]
    best, coef = math.inf, None
    for lam in torch.logspace(-4, 4, 17, dtype=F64, device=z.device):
        f = sv**2 / (sv**2 + lam)
        fit = u @ (f.unsqueeze(-1) * uty)
        gcv = ((yc - fit) ** 2).sum() / (n * (1 - f.sum() / n) ** 2)
        if gcv < best:
            best = float(gcv)
            coef = vh.T @ ((sv / (sv**2 + lam)).unsqueeze(-1) * uty)
    intercept = ym - zm @ coef
    return torch.cat([intercept.unsqueeze(-1), coef.T], 1)


def _identity_rows(cov: float, d: int, dp: int, device: torch.device) -> Tensor:
    return cov * torch.eye(dp + 1, dtype=F64, device=device).expand(d, -1, -1).clone()


def initial_state(
    hyp: Hyper, x: Tensor, y: Tensor, init: str, init_cov: float, local_init_cov: float
) -> tuple[dict[str, Tensor], Locals]:
    """The initial global factors (a ``{buffer name: value}`` dict) and training locals (module docstring)."""
    w, nh = hyp.widths, len(hyp.widths) - 2
    a0h, b0h = hyp.hidden_noise
    out: dict[str, Tensor] = {}
    loc = Locals([], [], [], [], [])
    z = x
    for k in range(nh):
        d = w[k + 1]
        mw, mb = hyperplane_weights(z, d, init)
        fields, z = gate_forward(z, mw, mb, hyp.temp, local_init_cov)
        for name, value in zip(Locals.FIELDS, fields):
            getattr(loc, name).append(value)
        out[f"m{k}"] = torch.cat([mb.unsqueeze(-1), mw], 1)
        out[f"alpha{k}"] = a0h.expand(d).clone()
        out[f"beta{k}"] = b0h.expand(d).clone()
    out[f"m{nh}"] = ridge_gcv(z, y)
    for k in range(nh + 1):
        out[f"B{k}"] = _identity_rows(init_cov, w[k + 1], w[k], x.device)
        if not hyp.gaussian:
            out[f"dtau{k}"], out[f"dpsi{k}"] = initial_deltas(hyp, k)
    out["alpha_out"], out["beta_out"] = hyp.noise
    return out, loc
