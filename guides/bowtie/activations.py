"""Local (per-datapoint) factors of the bow-tie CAVI (Sheinkman & Wade 2025, arXiv 2411.11132, Eqs. 17–19).

* Eq. (17): ``q(omega_{n,l,d}) = PG(1, A)`` with ``A = sqrt(E[z^2]) / T`` (:func:`update_omega`);
* Eq. (18): ``q(gamma_{n,l,d}) = Bern(rho)``, ``logit rho = E[z]/T + E[eta^-2] (E[a z] - E[z^2]/2)``
  (:func:`update_rho`);
* Eq. (19): ``q(a_n) = prod_l N(a_{n,l} | t_{n,l} + M_{n,l} a_{n,l-1}, S_{n,l})`` by the backward recursion
  ``l = L..1`` in message-passing form ``S_l^{-1} = Lambda_l - K_{l+1}^T S_{l+1} K_{l+1}``,
  ``t_l = S_l (h_l + K_{l+1}^T t_{l+1})``, ``M_l = S_l K_l`` with ``K_l = diag(E[eta^-2_l] rho_l) m^W_l``
  (:func:`update_activations`); integrating out ``a_{l+1}`` given ``a_l`` leaves
  ``exp(1/2 (t + M a_l)^T S^{-1} (t + M a_l))``, the origin of the ``K^T S K`` and ``K^T t`` terms.

Every update is batched over data points and units.  ``y = None`` gives the test-time versions of §3.5
(no output term), where the locals are initialized by :func:`forward_init_locals` and iterated by
:func:`fit_local_loop` until the prediction ELBO (App. B.2) settles.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from guides.bowtie.elbo import local_elbo
from guides.bowtie.linalg import F64, gauss_from_precision
from guides.bowtie.moments import Moments, forward_moments, layer_pre_moments, row_second_moment
from guides.bowtie.noise import noise_precision
from guides.bowtie.state import Globals, Hyper, Locals
from zoo.families.bowtie.model import pg_mean
from zoo.infer.distributed import data_sum

__all__ = [
    "update_omega",
    "update_rho",
    "update_activations",
    "local_sweep",
    "gate_forward",
    "forward_init_locals",
    "fit_local_loop",
]


def update_omega(temp: float, g: Globals, loc: Locals, mom: Moments) -> None:
    """Eq. (17): ``A = sqrt(E[z^2]) / T`` of every hidden layer (in place)."""
    for k in range(g.num_hidden):
        _, ez2 = layer_pre_moments(g, mom, k)
        loc.A[k] = ez2.clamp_min(0).sqrt() / temp


def update_rho(temp: float, g: Globals, loc: Locals, mom: Moments, k: int) -> None:
    """Eq. (18): ``logit rho = E[z]/T + E[eta^-2] (E[a z] - E[z^2]/2)`` of hidden layer ``k`` (in place)."""
    ez, ez2 = layer_pre_moments(g, mom, k)
    eaz = mom.cross_dot(k, g.m[k], ez)
    loc.rho[k] = torch.sigmoid(ez / temp + noise_precision(g, k) * (eaz - 0.5 * ez2))


def _gain(g: Globals, loc: Locals, k: int) -> Tensor:
    """``K_k = diag(E[eta^-2_k] rho_k) m^W_k``, (N, D_k, D_{k-1})."""
    return (noise_precision(g, k) * loc.rho[k]).unsqueeze(-1) * g.m[k][:, 1:]


def _own_information(g: Globals, loc: Locals, k: int) -> Tensor:
    """``E[eta^-2_k] rho_k m^b_k``: the linear term of layer ``k``'s own conditional, (N, D_k)."""
    return noise_precision(g, k) * loc.rho[k] * g.m[k][:, 0]


def _shared_times_gain(s1: Tensor, g: Globals, loc: Locals, k: int) -> Tensor:
    """``M_k = S K_k`` (N, D_k, D_{k-1}) for one matrix ``S`` (D_k, D_k) and the gain
    ``K_k = diag(w_n) m^W_k``, ``w = E[eta^-2_k] rho_k``: ``M[n, i, :] = sum_j w[n, j] S[i, j] m^W[j, :]``,
    one matrix product of ``w`` with the (D_k, D_k D_{k-1}) array ``S[i, j] m^W[j, :]`` instead of N small
    ones."""
    w, mw = noise_precision(g, k) * loc.rho[k], g.m[k][:, 1:]
    d, p = mw.shape
    table = (s1.unsqueeze(-1) * mw.unsqueeze(0)).transpose(0, 1).reshape(d, d * p)  # [j, (i, p)]
    return (w @ table).reshape(w.shape[0], d, p)


def _last_hidden(g: Globals, loc: Locals, y: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(S_L, t_L, K_L)`` of the last hidden layer, ``S_L`` one (D, D) matrix: its precision does not depend
    on ``n`` (App. A), so one Cholesky replaces N."""
    k = g.num_hidden - 1
    e = noise_precision(g, k)
    h = _own_information(g, loc, k)
    lam = torch.diag(e)
    if y is not None:
        c = noise_precision(g, k + 1)
        m_out, eww_out = g.m[k + 1], row_second_moment(g.m[k + 1], g.B[k + 1])
        lam = lam + torch.einsum("d,dij->ij", c, eww_out[:, 1:, 1:])
        h = h + (c * y) @ m_out[:, 1:] - c @ eww_out[:, 1:, 0]
    s1, _ = gauss_from_precision(lam, torch.zeros_like(e))
    return s1, h @ s1, _gain(g, loc, k) if g.num_hidden > 1 else None


def _inner_hidden(
    temp: float, g: Globals, loc: Locals, k: int, nxt: tuple[Tensor, Tensor, Tensor]
) -> tuple[Tensor, Tensor, Tensor]:
    """``(S_k, t_k, K_k)`` of hidden layer ``k < L - 1`` given ``(S, t, K)`` of layer ``k + 1``."""
    s_next, t_next, k_next = nxt
    e, rho = noise_precision(g, k), loc.rho[k]
    n = rho.shape[0]
    h = _own_information(g, loc, k)
    m_next, eww_next = g.m[k + 1], row_second_moment(g.m[k + 1], g.B[k + 1])
    e_next, rho_next = noise_precision(g, k + 1), loc.rho[k + 1]
    c = e_next * rho_next + pg_mean(loc.A[k + 1]) / temp**2
    lam = torch.diag_embed(e.expand(n, -1)) + torch.einsum("nd,dij->nij", c, eww_next[:, 1:, 1:])
    h = h + ((rho_next - 0.5) / temp) @ m_next[:, 1:] - c @ eww_next[:, 1:, 0]
    lam = lam - k_next.transpose(-1, -2) @ s_next @ k_next
    h = h + (k_next.transpose(-1, -2) @ t_next.unsqueeze(-1)).squeeze(-1)
    s, t = gauss_from_precision(lam, h)
    return s, t, _gain(g, loc, k)


def update_activations(temp: float, g: Globals, loc: Locals, y: Tensor | None) -> None:
    """Eq. (19) by the backward recursion ``l = L..1`` (in place); ``y = None``: test time (§3.5).  The last
    hidden layer's ``S`` is stored as an expanded (N, D, D) view of one matrix.  Without hidden layers
    (``L = 0``, a linear regression) there is nothing to update."""
    if g.num_hidden == 0:
        return
    k = g.num_hidden - 1
    s1, t, kk = _last_hidden(g, loc, y)
    s = s1.expand(t.shape[0], -1, -1)
    loc.S[k], loc.t[k], loc.M[k] = s, t, _shared_times_gain(s1, g, loc, k)
    nxt = (s, t, kk)
    for k in range(g.num_hidden - 2, -1, -1):
        s, t, kk = _inner_hidden(temp, g, loc, k, nxt)
        loc.S[k], loc.t[k], loc.M[k] = s, t, s @ kk
        nxt = (s, t, kk)


def local_sweep(temp: float, g: Globals, x: Tensor, y: Tensor | None, loc: Locals) -> Moments:
    """``omega``, ``q(a)``, ``gamma`` with the globals fixed (the local part of Algorithm 1; §3.5); returns
    the forward moments after ``q(a)``."""
    update_omega(temp, g, loc, forward_moments(x, loc))
    update_activations(temp, g, loc, y)
    mom = forward_moments(x, loc)
    for k in range(g.num_hidden):
        update_rho(temp, g, loc, mom, k)
    return mom


def gate_forward(
    z: Tensor, mw: Tensor, mb: Tensor, temp: float, cov: float
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]:
    """One deterministic layer with weight means ``(mw, mb)`` (§3.3 step 2, App. D.1): ``pre = W z + b``,
    ``rho = sigmoid(pre/T)``, ``A = |pre|/T``, ``S = cov I``, ``t = rho b``, ``M = diag(rho) W``.  Returns
    ``(rho, A, S, t, M)`` and the next input ``rho * pre``."""
    n, d = z.shape[0], mw.shape[0]
    pre = z @ mw.T + mb
    r = torch.sigmoid(pre / temp)
    s = cov * torch.eye(d, dtype=F64, device=z.device).expand(n, d, d).clone()
    return (r, pre.abs() / temp, s, mb * r, r.unsqueeze(-1) * mw), r * pre


def forward_init_locals(temp: float, g: Globals, x: Tensor, cov: float) -> Locals:
    """Locals of a deterministic forward pass with the current weight means (the initialization of the
    test-time and SVI local updates, §3.3 and §3.5)."""
    loc = Locals([], [], [], [], [])
    z = x
    for k in range(g.num_hidden):
        m = g.m[k]
        fields, z = gate_forward(z, m[:, 1:], m[:, 0], temp, cov)
        for name, value in zip(Locals.FIELDS, fields):
            getattr(loc, name).append(value)
    return loc


def fit_local_loop(
    hyp: Hyper, g: Globals, x: Tensor, y: Tensor | None, loc: Locals, tol: float, max_iters: int
) -> tuple[int, float]:
    """Iterate :func:`local_sweep` until the local ELBO changes by less than ``tol`` relatively; returns the
    number of sweeps and the final local ELBO (no sweep without hidden layers: there are no locals)."""
    if g.num_hidden == 0:
        return 0, 0.0
    prev, cur, it = None, math.nan, 0
    for it in range(1, max_iters + 1):  # noqa: B007
        mom = local_sweep(hyp.temp, g, x, y, loc)
        cur = float(data_sum(local_elbo(hyp, g, loc, mom, y).sum()))  # all ranks stop together
        if prev is not None and abs(cur - prev) / max(1.0, abs(cur)) < tol:
            break
        prev = cur
    return it, cur
