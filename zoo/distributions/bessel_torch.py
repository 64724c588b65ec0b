r"""GIG moments and :math:`\log K_\nu` in pure torch (any device, no host round-trip), by saddle-point
trapezoid quadrature.

If :math:`x \sim \mathrm{GIG}(\nu, \delta, \lambda)` (Sheinkman & Wade 2025, arXiv 2411.11132, App. E.1) then
:math:`t = \log(x\lambda/\delta)` has density :math:`w(t) \propto e^{\nu t - z\cosh t}` on :math:`\mathbb R`,
:math:`z = \lambda\delta`, whose normalizer is :math:`2 K_\nu(z)` (DLMF 10.32.9:
:math:`K_\nu(z) = \tfrac12\int_{\mathbb R} e^{\nu t - z\cosh t}\,dt`).  Hence every moment the CAVI updates
of Eqs. (13)-(14) need is an expectation under ``w`` on one set of nodes:

* :math:`\log K_\nu(z)` = log of the integral;
* :math:`K_{\nu+1}/K_\nu = E_w[e^t]`, :math:`K_{\nu-1}/K_\nu = E_w[e^{-t}]`, so :math:`E[x] = (\delta/\lambda)
  E_w[e^t]` and :math:`E[1/x] = (\lambda/\delta) E_w[e^{-t}]`, both without cancellation;
* :math:`\partial_\nu \log K_\nu(z) = E_w[t]`, so :math:`E[\log x] = \log(\delta/\lambda) + E_w[t]`;
* :math:`\mathrm{Var}[x] = (\delta/\lambda)^2 \mathrm{Var}_w[e^t]` (two-pass, no cancellation).

The integrand is entire and decays double-exponentially, so the trapezoidal rule converges geometrically
(Trefethen & Weideman 2014, "The exponentially convergent trapezoidal rule", SIAM Review 56(3), §5): the
nodes span the window where the integrands of orders ``nu - 1 .. nu + 2`` are within ``WINDOW`` nats of
their maxima (edges found by bisection around the saddle :math:`t^* = \operatorname{asinh}(\nu/z)`), which
covers orders like :math:`\hat\nu \approx -1250` (Eq. 13) and tiny ``z`` alike.  The edges are detached, so
autograd differentiates the quadrature of the exact derivative integrand (``log_k`` is differentiable).
Agreement with the float64 numpy/scipy kernels of :mod:`zoo.distributions.bessel_np` is tested over a grid.

Cost: ``NODES`` transcendental evaluations per element — trivially parallel on a GPU, but about 100 times
the numpy kernels on one CPU core, so :class:`~zoo.distributions.gig.GeneralizedInverseGaussian` uses this
module for tensors off the CPU only (no device-to-host copy in the CAVI sweep) and numpy on the CPU.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["WINDOW", "NODES", "log_k", "quadrature_moments", "gig_moment_torch"]

#: nats below the maximum at which the integrand is cut off
WINDOW = 60.0
#: trapezoid nodes per element
NODES = 256
_BISECT = 40
_T_MAX = 700.0
_CHUNK = 1 << 14


def _g(nu: Tensor, z: Tensor, t: Tensor) -> Tensor:
    return nu * t - z * torch.cosh(t)


def _edge(nu: Tensor, z: Tensor, side: float) -> Tensor:
    """The point right (``side = 1``) or left (``-1``) of the saddle where ``g`` is ``WINDOW`` below its
    maximum (bisection: ``g`` is concave, monotone on each side)."""
    ts = torch.asinh(nu / z)
    target = _g(nu, z, ts) - WINDOW
    inner, outer = ts, torch.full_like(ts, side * _T_MAX)
    for _ in range(_BISECT):
        mid = 0.5 * (inner + outer)
        above = _g(nu, z, mid) > target
        inner, outer = torch.where(above, mid, inner), torch.where(above, outer, mid)
    return outer


def _nodes(nu: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Saddle ``t*`` ``(..., 1)``, node offsets ``s = t - t*`` ``(..., NODES)`` and spacing ``(..., 1)``
    covering orders ``nu - 1`` to ``nu + 2``."""
    with torch.no_grad():
        ts = torch.asinh(nu / z).unsqueeze(-1)
        lo = torch.minimum(_edge(nu - 1.0, z, -1.0), _edge(nu, z, -1.0)).unsqueeze(-1) - ts
        hi = torch.maximum(_edge(nu + 2.0, z, 1.0), _edge(nu, z, 1.0)).unsqueeze(-1) - ts
        u = torch.linspace(0.0, 1.0, NODES, dtype=nu.dtype, device=nu.device)
        s = lo + (hi - lo) * u
    return ts, s, (hi - lo) / (NODES - 1)


def _g_rel(nu: Tensor, z: Tensor, ts: Tensor, s: Tensor) -> Tensor:
    """``g(t* + s) - g(t*)``, with ``cosh(t* + s) - cosh t* = 2 sinh(t* + s/2) sinh(s/2)``: no rounding of
    the large ``z cosh`` terms (``nu``, ``z``: ``(..., 1)``)."""
    return nu * s - 2.0 * z * torch.sinh(ts + 0.5 * s) * torch.sinh(0.5 * s)


def _flat(nu: Tensor, z: Tensor) -> tuple[Tensor, Tensor, torch.Size]:
    nu, z = torch.broadcast_tensors(torch.as_tensor(nu), torch.as_tensor(z))
    dtype = torch.promote_types(torch.promote_types(nu.dtype, z.dtype), torch.float64)
    return nu.to(dtype).reshape(-1), z.to(dtype).reshape(-1), nu.shape


def log_k(nu: Tensor, z: Tensor) -> Tensor:
    r""":math:`\log K_\nu(z)` for ``z > 0`` (float64 internally, result in the inputs' dtype and device);
    differentiable in ``nu`` and ``z``."""
    nu_f, z_f, shape = _flat(nu, z)
    out = []
    for a in range(0, max(nu_f.numel(), 1), _CHUNK):
        n, x = nu_f[a : a + _CHUNK], z_f[a : a + _CHUNK]
        ts, s, h = _nodes(n.detach(), x.detach())
        g_star = n * ts.squeeze(-1) - x * torch.cosh(ts.squeeze(-1))
        g = _g_rel(n.unsqueeze(-1), x.unsqueeze(-1), ts, s)
        # trapezoid: the end nodes carry ~e^-WINDOW of the mass, so equal weights are exact to rounding
        out.append(g_star + torch.logsumexp(g, -1) + torch.log(0.5 * h.squeeze(-1)))
    res = torch.cat(out) if out else nu_f
    return res.reshape(shape).to(torch.promote_types(torch.as_tensor(nu).dtype, torch.as_tensor(z).dtype))


def quadrature_moments(nu: Tensor, z: Tensor) -> dict[str, Tensor]:
    r"""Float64 tensors (broadcast shape) of ``log_k`` (:math:`\log K_\nu(z)`), ``log_ratio``
    (:math:`\log K_{\nu+1}/K_\nu`), ``log_inv_ratio`` (:math:`\log K_{\nu-1}/K_\nu`), ``dlogk``
    (:math:`\partial_\nu\log K_\nu`) and ``rel_var`` (:math:`\mathrm{Var}_w[e^t] / E_w[e^t]^2`); not
    differentiable."""
    nu_f, z_f, shape = _flat(nu, z)
    names = ("log_k", "log_ratio", "log_inv_ratio", "dlogk", "rel_var")
    parts: dict[str, list[Tensor]] = {k: [] for k in names}
    with torch.no_grad():
        for a in range(0, max(nu_f.numel(), 1), _CHUNK):
            n, x = nu_f[a : a + _CHUNK].unsqueeze(-1), z_f[a : a + _CHUNK].unsqueeze(-1)
            ts, s, h = _nodes(n.squeeze(-1), x.squeeze(-1))
            g = _g_rel(n, x, ts, s)
            lse = torch.logsumexp(g, -1)
            w = torch.softmax(g, -1)
            # log E_w[e^s], log E_w[e^-s]; t = t* + s
            log_r = torch.logsumexp(g + s, -1) - lse
            g_star = (n * ts - x * torch.cosh(ts)).squeeze(-1)
            parts["log_k"].append(g_star + lse + torch.log(0.5 * h.squeeze(-1)))
            parts["log_ratio"].append(ts.squeeze(-1) + log_r)
            parts["log_inv_ratio"].append(torch.logsumexp(g - s, -1) - lse - ts.squeeze(-1))
            parts["dlogk"].append(ts.squeeze(-1) + (w * s).sum(-1))
            parts["rel_var"].append((w * torch.expm1(s - log_r.unsqueeze(-1)) ** 2).sum(-1))
    return {k: (torch.cat(v) if v else nu_f).reshape(shape) for k, v in parts.items()}


def _limit_moment(what: str, a: Tensor, beta: Tensor, gamma: bool) -> Tensor:
    """Gamma(shape ``a``, rate ``beta``) or InverseGamma(shape ``a``, scale ``beta``) moments (App. E.1,
    the ``delta = 0`` / ``lam = 0`` limits); ``inf`` where a moment does not exist."""
    inf = torch.full_like(a, float("inf"))
    if what == "log":
        return torch.digamma(a) - torch.log(beta) if gamma else torch.log(beta) - torch.digamma(a)
    if (what, gamma) in (("mean", True), ("recip", False)):
        return a / beta
    if what in ("mean", "recip"):  # Gamma E[1/x], InverseGamma mean
        return torch.where(a > 1, beta / (a - 1.0), inf)
    if gamma:
        return a / beta**2
    return torch.where(a > 2, beta**2 / ((a - 1.0) ** 2 * (a - 2.0)), inf)


def gig_moment_torch(what: str, nu: Tensor, delta: Tensor, lam: Tensor) -> Tensor:
    """Moment ``what`` (``"mean"``, ``"recip"``, ``"log"``, ``"var"``) of ``GIG(nu, delta, lam)``,
    elementwise, in float64 on the parameters' device: the torch counterpart of
    :func:`zoo.distributions.gig_moments.gig_moment_np`."""
    nu, delta, lam = (v.to(torch.float64) for v in torch.broadcast_tensors(nu, delta, lam))
    gamma = delta == 0
    invgamma = (lam == 0) & ~gamma
    general = ~gamma & ~invgamma
    one = torch.ones_like(nu)
    d_s, l_s = torch.where(general, delta, one), torch.where(general, lam, one)
    q = quadrature_moments(torch.where(general, nu, one), d_s * l_s)
    log_s = torch.log(d_s) - torch.log(l_s)
    gen = {
        "mean": lambda: torch.exp(log_s + q["log_ratio"]),
        "recip": lambda: torch.exp(q["log_inv_ratio"] - log_s),
        "log": lambda: log_s + q["dlogk"],
        "var": lambda: torch.exp(2.0 * (log_s + q["log_ratio"])) * q["rel_var"],
    }[what]()
    g_val = _limit_moment(
        what, torch.where(gamma, nu, 2 * one + 1), 0.5 * torch.where(gamma, lam, one) ** 2, True
    )
    i_val = _limit_moment(
        what, torch.where(invgamma, -nu, 2 * one + 1), 0.5 * torch.where(invgamma, delta, one) ** 2, False
    )
    return torch.where(general, gen, torch.where(gamma, g_val, i_val))
