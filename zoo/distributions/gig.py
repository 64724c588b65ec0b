r"""Generalized inverse Gaussian distribution and stable modified-Bessel-K numerics.

Parameterization (paper 000, App. E.1, used by Eqs. (6), (7), (13), (14))
-------------------------------------------------------------------------
``GeneralizedInverseGaussian(nu, delta, lam)`` has density, for :math:`x > 0`,

.. math::

    p(x \mid \nu, \delta, \lambda) = \frac{(\lambda/\delta)^{\nu}}{2 K_\nu(\lambda\delta)}
        \, x^{\nu - 1} \exp\!\Big(-\tfrac12\big(\delta^2 / x + \lambda^2 x\big)\Big),

with :math:`\nu \in \mathbb{R}`, :math:`\delta \ge 0`, :math:`\lambda \ge 0` and :math:`K_\nu` the modified
Bessel function of the second kind.  In the common :math:`(p, a, b)` form this is
``(p, a, b) = (nu, lam**2, delta**2)``; in ``scipy.stats.geninvgauss`` it is
``p = nu, b = lam * delta, scale = delta / lam``.  The boundary cases are proper and handled *exactly*
(closed forms, no Bessel functions):

* ``delta == 0`` (needs ``nu > 0``, ``lam > 0``): Gamma(shape ``nu``, rate ``lam**2 / 2``) -- the Laplace / NG
  columns of Table 1;
* ``lam == 0`` (needs ``nu < 0``, ``delta > 0``): InverseGamma(shape ``-nu``, scale ``delta**2 / 2``) -- the
  Student-t column of Table 1, and every q(tau), q(psi) of the paper's experiments.

Moments used by CAVI (paper 000 App. E.1; note Sec. 2.2), with :math:`z = \lambda\delta`, :math:`R_\nu(z) =
K_{\nu+1}(z) / K_\nu(z)`:

* :math:`E[x] = (\delta/\lambda) R_\nu(z)`,
* :math:`E[1/x] = (\lambda/\delta) R_\nu(z) - 2\nu/\delta^2 = (\lambda/\delta) / R_{\nu-1}(z)` (the second
  form is used: it has no cancellation),
* :math:`E[\log x] = \log(\delta/\lambda) + \partial_\nu \log K_\nu(z)`.

Numerics of :math:`K_\nu` (note Sec. 5.3)
-----------------------------------------
q(tau_l) has order :math:`\hat\nu = \nu - D_l D_{l-1}/2` (about -1250 for a 50x50 layer, Eq. (13)), where
:math:`K_\nu` over/underflows.  Everything is therefore done in log space, in float64 on the CPU:

* :math:`|\nu| \ge 20`: the uniform (Debye / Olver) asymptotic expansion, DLMF 10.41.4, with 12 correction
  terms :math:`u_k(p)` generated exactly from the recurrence DLMF 10.41.10.  Its relative error is below 1e-15
  for :math:`|\nu| \ge 20` uniformly in :math:`x > 0` (checked against mpmath).  The expansion is
  differentiated analytically in :math:`\nu`, and :math:`\log K_{\nu+1} - \log K_\nu` is formed without
  cancellation.
* :math:`|\nu| < 20`: ``scipy.special.kve`` (AMOS).  Where it overflows (tiny ``x``), and for
  :math:`\partial_\nu \log K_\nu`, the integral :math:`K_\nu(x) = \tfrac12\int_{\mathbb R} e^{\nu t - x\cosh
  t}\,dt` is evaluated with the trapezoidal rule, centred on the saddle point :math:`t^* =
  \operatorname{asinh}(\nu/x)`. The integrand is entire, so the rule converges geometrically;
  :math:`\partial_\nu \log K_\nu = E_w[t]` under the normalized integrand (no finite differences).

Sampling uses Devroye's (2014) rejection algorithm for the log-concave density of :math:`\log x`, vectorized
in torch, so it runs on the parameters' device, is seeded by torch's RNG (``pyro.set_rng_seed``), and works
for any order (including +-1250) and for tiny ``delta * lam``.  Boundary cases sample from Gamma /
InverseGamma.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Number

import numpy as np
import torch
from pyro.distributions import TorchDistribution
from scipy import special
from torch.distributions import constraints
from torch.distributions.utils import broadcast_all

_EMPTY_SHAPE = torch.Size()

__all__ = [
    "GeneralizedInverseGaussian",
    "bessel_k_ratio",
    "log_bessel_k",
    "log_bessel_k_dnu",
    "log_bessel_k_ratio",
]

# ----------------------------------------------------------------------------------------------------------
# Uniform (Debye) asymptotic expansion of K_nu for large order, DLMF 10.41.4 / 10.41.10
# ----------------------------------------------------------------------------------------------------------

_DEBYE_MIN_ORDER = 20.0
_DEBYE_TERMS = 12
_LOG_HALF_PI = 0.5 * math.log(math.pi / 2.0)


def _debye_polynomials(n_terms: int) -> list[np.ndarray]:
    """Coefficients (ascending powers of p) of the Debye polynomials u_0..u_n, exact recurrence DLMF 10.41.10:

    u_{k+1}(p) = p^2 (1 - p^2) u_k'(p) / 2 + (1/8) int_0^p (1 - 5 t^2) u_k(t) dt.
    """
    polys: list[list[Fraction]] = [[Fraction(1)]]
    for _ in range(n_terms):
        u = polys[-1]
        nxt = [Fraction(0)] * (len(u) + 3)
        for j in range(1, len(u)):
            d = j * u[j]  # coefficient of p^(j-1) in u'
            nxt[j + 1] += d / 2
            nxt[j + 3] -= d / 2
        for j, coef in enumerate(u):
            nxt[j + 1] += coef / (8 * (j + 1))
            nxt[j + 3] -= 5 * coef / (8 * (j + 3))
        polys.append(nxt)
    return [np.array([float(c) for c in p]) for p in polys]


_U = _debye_polynomials(_DEBYE_TERMS)
_DU = [np.polynomial.polynomial.polyder(u) if len(u) > 1 else np.zeros(1) for u in _U]


def _asinh_ratio(mu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """asinh(mu / x) for mu >= 0, x > 0 without overflow of mu / x."""
    with np.errstate(over="ignore", divide="ignore"):
        r = mu / x
        out = np.arcsinh(r)
    big = ~np.isfinite(r) | (r > 1e300)
    if np.any(big):
        out = np.where(big, np.log(2.0 * np.where(mu > 0, mu, 1.0)) - np.log(x), out)
    return out


def _debye_sums(mu: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S = sum_k (-1)^k u_k(p) / mu^k and dS/dmu (x fixed), with p = mu / c."""
    p = mu / c
    dp = (1.0 - p * p) / c  # dp/dmu at fixed x
    s = np.zeros_like(mu)
    ds = np.zeros_like(mu)
    inv = 1.0 / mu
    powk = np.ones_like(mu)
    for k in range(_DEBYE_TERMS + 1):
        sign = -1.0 if k % 2 else 1.0
        uk = np.polynomial.polynomial.polyval(p, _U[k])
        duk = np.polynomial.polynomial.polyval(p, _DU[k])
        s += sign * uk * powk
        ds += sign * (duk * dp - k * uk * inv) * powk
        powk = powk * inv
    return s, ds


def _debye_logk(mu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log K_mu(x), mu >= 20, x > 0."""
    c = np.hypot(mu, x)
    s, _ = _debye_sums(mu, c)
    return _LOG_HALF_PI - 0.5 * np.log(c) - c + mu * _asinh_ratio(mu, x) + np.log(s)


def _debye_dlogk(mu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d/dmu log K_mu(x), mu >= 20, x > 0 (analytic derivative of the expansion)."""
    c = np.hypot(mu, x)
    s, ds = _debye_sums(mu, c)
    return _asinh_ratio(mu, x) - 0.5 * mu / (c * c) + ds / s


def _debye_log_ratio_up(mu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log K_{mu+1}(x) - log K_mu(x) for mu >= 20, formed without cancellation."""
    c0 = np.hypot(mu, x)
    c1 = np.hypot(mu + 1.0, x)
    dc = (2.0 * mu + 1.0) / (c0 + c1)  # c1 - c0
    da = np.log1p((1.0 + dc) / (mu + c0))  # asinh((mu+1)/x) - asinh(mu/x)
    s0, _ = _debye_sums(mu, c0)
    s1, _ = _debye_sums(mu + 1.0, c1)
    return -0.5 * np.log1p(dc / c0) - dc + _asinh_ratio(mu + 1.0, x) + mu * da + (np.log(s1) - np.log(s0))


# ----------------------------------------------------------------------------------------------------------
# Saddle-centred trapezoidal quadrature of K_nu(x) = 1/2 int exp(nu t - x cosh t) dt  (moderate orders)
# ----------------------------------------------------------------------------------------------------------

_QUAD_LOG_CUTOFF = 45.0  # integrand truncated where it is below exp(-45) of its maximum
_QUAD_MAX_ELEMENTS = 4_000_000  # chunk size (elements x nodes) to bound memory


def _log_sinh(y: np.ndarray) -> np.ndarray:
    """log sinh(y) for y >= 0 (-inf at 0), overflow free."""
    with np.errstate(divide="ignore"):
        return y + np.log(-np.expm1(-2.0 * y)) - math.log(2.0)


def _asinh_sqrt_exp(log_y: np.ndarray) -> np.ndarray:
    """asinh(sqrt(exp(log_y))) without overflow."""
    with np.errstate(over="ignore"):
        small = np.arcsinh(np.exp(0.5 * np.minimum(log_y, 600.0)))
    return np.where(log_y < 600.0, small, 0.5 * log_y + math.log(2.0))


def _quad_logk_dlogk(mu: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log K_mu(x), d/dmu log K_mu(x)) for mu >= 0, x > 0 (1-D arrays) by saddle-centred trapezoid rule.

    With t = t* + u, t* = asinh(mu/x), c = hypot(mu, x), the log-integrand relative to the saddle is the
    concave g(u) = -2c sinh^2(u/2) - mu (sinh u - u) = -(c - mu)(cosh u - 1) - mu (e^u - 1 - u) (Devroye's
    psi), so log K = log(1/2 int e^g du) - c + mu t*, and d/dmu log K = t* + E_g[u].
    """
    out_logk = np.empty_like(mu)
    out_d = np.empty_like(mu)
    if mu.size == 0:
        return out_logk, out_d
    L = _QUAD_LOG_CUTOFF
    c = np.hypot(mu, x)
    tstar = _asinh_ratio(mu, x)
    log_a = 2.0 * np.log(x) - np.log(c + mu)  # a = c - mu
    # integration window: g(u) <= -2c sinh^2(u/2) (right), g(-v) <= -a (cosh v - 1), -mu (v - 1) (left)
    u_hi = 2.0 * _asinh_sqrt_exp(math.log(L / 2.0) - np.log(c))
    v_lo = 2.0 * _asinh_sqrt_exp(math.log(L / 2.0) - log_a)
    with np.errstate(divide="ignore"):
        v_lo = np.minimum(v_lo, np.where(mu > 0, 1.0 + L / np.where(mu > 0, mu, 1.0), np.inf))
    h_target = np.minimum(0.2, 0.3 / np.sqrt(c))
    n_nodes = np.ceil((u_hi + v_lo) / h_target).astype(np.int64) + 1
    order = np.argsort(n_nodes, kind="stable")
    start = 0
    while start < mu.size:
        n_min = int(n_nodes[order[start]])
        stop = start + 1
        # group elements with similar node counts (sorted ascending), bounded memory
        while (
            stop < mu.size
            and int(n_nodes[order[stop]]) <= max(2 * n_min, 64)
            and (stop - start + 1) * int(n_nodes[order[stop]]) <= _QUAD_MAX_ELEMENTS
        ):
            stop += 1
        idx = order[start:stop]
        n = max(int(n_nodes[idx].max()), 32)
        m_, c_, la_ = mu[idx, None], c[idx, None], log_a[idx, None]
        lo, hi = -v_lo[idx, None], u_hi[idx, None]
        step = (hi - lo) / (n - 1)
        u = lo + step * np.arange(n)[None, :]
        au = np.abs(u)
        with np.errstate(over="ignore", invalid="ignore"):
            right = -np.exp(math.log(2.0) + np.log(c_) + 2.0 * _log_sinh(au / 2.0)) - np.where(
                m_ > 0, m_ * (np.sinh(au) - au), 0.0
            )
            left = -np.exp(la_ + math.log(2.0) + 2.0 * _log_sinh(au / 2.0)) - m_ * (np.expm1(-au) + au)
        g = np.where(u >= 0, right, left)
        g = np.where(np.isnan(g), -np.inf, g)
        w = np.exp(g)
        w[:, 0] *= 0.5
        w[:, -1] *= 0.5
        total = w.sum(axis=1)
        out_logk[idx] = np.log(total * step[:, 0] / 2.0) - c[idx] + mu[idx] * tstar[idx]
        out_d[idx] = tstar[idx] + (w * u).sum(axis=1) / total
        start = stop
    return out_logk, out_d


# ----------------------------------------------------------------------------------------------------------
# numpy float64 kernels (broadcast arrays)
# ----------------------------------------------------------------------------------------------------------


def _logk_np(nu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log K_nu(x) for any real nu, x >= 0 (x = 0 gives +inf, x < 0 nan)."""
    nu, x = np.broadcast_arrays(np.asarray(nu, dtype=np.float64), np.asarray(x, dtype=np.float64))
    mu = np.abs(nu)
    out = np.full(nu.shape, np.nan)
    pos = (x > 0) & np.isfinite(mu)
    out[(x == 0) & ~np.isnan(nu)] = np.inf
    big = pos & (mu >= _DEBYE_MIN_ORDER) & np.isfinite(x)
    if np.any(big):
        out[big] = _debye_logk(mu[big], x[big])
    mod = pos & ~big & np.isfinite(x)
    if np.any(mod):
        m, xx = mu[mod], x[mod]
        with np.errstate(divide="ignore", over="ignore"):
            v = np.log(special.kve(m, xx)) - xx
        bad = ~np.isfinite(v)
        if np.any(bad):
            v[bad] = _quad_logk_dlogk(m[bad], xx[bad])[0]
        out[mod] = v
    out[np.isposinf(x) & ~np.isnan(nu)] = -np.inf
    return out


def _dlogk_np(nu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d/dnu log K_nu(x) for real nu, x > 0 (odd in nu)."""
    nu, x = np.broadcast_arrays(np.asarray(nu, dtype=np.float64), np.asarray(x, dtype=np.float64))
    mu = np.abs(nu)
    out = np.full(nu.shape, np.nan)
    pos = (x > 0) & np.isfinite(x) & np.isfinite(mu)
    big = pos & (mu >= _DEBYE_MIN_ORDER)
    if np.any(big):
        out[big] = _debye_dlogk(mu[big], x[big])
    mod = pos & ~big
    if np.any(mod):
        out[mod] = _quad_logk_dlogk(mu[mod], x[mod])[1]
    out[x == 0] = np.inf  # K_mu(0+) ~ Gamma(mu) (2/x)^mu / 2
    return np.sign(nu) * out


def _log_ratio_np(nu: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log(K_{nu+1}(x) / K_nu(x)) for real nu, x > 0."""
    nu, x = np.broadcast_arrays(np.asarray(nu, dtype=np.float64), np.asarray(x, dtype=np.float64))
    mu0, mu1 = np.abs(nu), np.abs(nu + 1.0)
    out = np.full(nu.shape, np.nan)
    pos = (x > 0) & np.isfinite(x) & np.isfinite(mu0)
    big = pos & (np.minimum(mu0, mu1) >= _DEBYE_MIN_ORDER)
    if np.any(big):
        up = nu[big] >= 0  # mu1 = mu0 + 1, else mu0 = mu1 + 1
        base = np.where(up, mu0[big], mu1[big])
        r = _debye_log_ratio_up(base, x[big])
        out[big] = np.where(up, r, -r)
    mod = pos & ~big
    if np.any(mod):
        m0, m1, xx = mu0[mod], mu1[mod], x[mod]
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            k0, k1 = special.kve(m0, xx), special.kve(m1, xx)
            v = np.log(k1) - np.log(k0)
        bad = ~np.isfinite(v) | ~(k0 > 0) | ~(k1 > 0) | ~np.isfinite(k0) | ~np.isfinite(k1)
        if np.any(bad):
            v[bad] = _logk_np(m1[bad], xx[bad]) - _logk_np(m0[bad], xx[bad])
        out[mod] = v
    return out


# ----------------------------------------------------------------------------------------------------------
# torch front ends
# ----------------------------------------------------------------------------------------------------------


def _as_tensors(*args) -> tuple[list[torch.Tensor], torch.dtype, torch.device]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    dtypes = [a.dtype for a in tensors if a.dtype.is_floating_point]
    dtype = dtypes[0] if dtypes else torch.get_default_dtype()
    for d in dtypes[1:]:
        dtype = torch.promote_types(dtype, d)
    out = [
        a.to(dtype) if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=dtype, device=device)
        for a in args
    ]
    return out, dtype, device


def _np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if grad.shape == shape:
        return grad
    lead = grad.dim() - len(shape)
    grad = grad.sum(dim=tuple(range(lead))) if lead > 0 else grad
    dims = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


class _LogBesselK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, nu, x):
        shape = torch.broadcast_shapes(nu.shape, x.shape)
        nu_b, x_b = np.broadcast_arrays(_np64(nu), _np64(x))
        out = torch.as_tensor(_logk_np(nu_b, x_b), dtype=x.dtype, device=x.device).reshape(shape)
        ctx.save_for_backward(nu, x)
        return out

    @staticmethod
    def backward(ctx, grad):
        nu, x = ctx.saved_tensors
        nu_b, x_b = np.broadcast_arrays(_np64(nu), _np64(x))
        g_nu = g_x = None
        if ctx.needs_input_grad[0]:
            d = torch.as_tensor(_dlogk_np(nu_b, x_b), dtype=grad.dtype, device=grad.device)
            g_nu = _sum_to(grad * d, nu.shape)
        if ctx.needs_input_grad[1]:
            # d/dx log K_nu(x) = nu / x - K_{nu+1}(x) / K_nu(x)
            r = np.exp(_log_ratio_np(nu_b, x_b))
            d = torch.as_tensor(nu_b / x_b - r, dtype=grad.dtype, device=grad.device)
            g_x = _sum_to(grad * d, x.shape)
        return g_nu, g_x


class _BesselKRatio(torch.autograd.Function):
    @staticmethod
    def forward(ctx, nu, x):
        shape = torch.broadcast_shapes(nu.shape, x.shape)
        nu_b, x_b = np.broadcast_arrays(_np64(nu), _np64(x))
        r = np.exp(_log_ratio_np(nu_b, x_b))
        ctx.save_for_backward(nu, x)
        ctx.ratio = r
        return torch.as_tensor(r, dtype=x.dtype, device=x.device).reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        nu, x = ctx.saved_tensors
        nu_b, x_b = np.broadcast_arrays(_np64(nu), _np64(x))
        r = ctx.ratio
        g_nu = g_x = None
        if ctx.needs_input_grad[0]:
            d = r * (_dlogk_np(nu_b + 1.0, x_b) - _dlogk_np(nu_b, x_b))
            g_nu = _sum_to(grad * torch.as_tensor(d, dtype=grad.dtype, device=grad.device), nu.shape)
        if ctx.needs_input_grad[1]:
            # dR/dx = R^2 - (2 nu + 1) R / x - 1  (from K' recurrences)
            d = r * r - (2.0 * nu_b + 1.0) * r / x_b - 1.0
            g_x = _sum_to(grad * torch.as_tensor(d, dtype=grad.dtype, device=grad.device), x.shape)
        return g_nu, g_x


def log_bessel_k(nu, x) -> torch.Tensor:
    r""":math:`\log K_\nu(x)`, the log modified Bessel function of the second kind, stable for any real order.

    Float64 on the CPU internally (``scipy.special.kve`` for :math:`|\nu| < 20`, with a saddle-point trapezoid
    fallback where it overflows; uniform Debye expansion DLMF 10.41.4 for :math:`|\nu| \ge 20`, e.g. the
    :math:`\hat\nu \approx -1250` of Eq. (13)).  Returns a tensor of the broadcast shape on the inputs' device
    and dtype.  Differentiable in both arguments (first order): :math:`\partial_x \log K_\nu = \nu/x -
    K_{\nu+1}/K_\nu`, :math:`\partial_\nu \log K_\nu` from :func:`log_bessel_k_dnu`.  ``x = 0`` gives
    ``+inf``.
    """
    (nu_t, x_t), _, _ = _as_tensors(nu, x)
    return _LogBesselK.apply(nu_t, x_t)


def bessel_k_ratio(nu, x) -> torch.Tensor:
    r""":math:`K_{\nu+1}(x) / K_\nu(x)`, finite and accurate for any real order (e.g. :math:`\nu = -1250`).

    The Bessel ratio behind every GIG moment in paper 000 App. E.1 (and the Gamma-prior EM step, App. E.2).
    Computed as ``exp(log_bessel_k_ratio(nu, x))``; differentiable (first order) in both arguments.
    """
    (nu_t, x_t), _, _ = _as_tensors(nu, x)
    return _BesselKRatio.apply(nu_t, x_t)


def log_bessel_k_ratio(nu, x) -> torch.Tensor:
    r""":math:`\log K_{\nu+1}(x) - \log K_\nu(x)`, without cancellation at large :math:`|\nu|` (not
    differentiable)."""
    (nu_t, x_t), dtype, device = _as_tensors(nu, x)
    nu_b, x_b = np.broadcast_arrays(_np64(nu_t), _np64(x_t))
    return torch.as_tensor(_log_ratio_np(nu_b, x_b), dtype=dtype, device=device)


def log_bessel_k_dnu(nu, x) -> torch.Tensor:
    r""":math:`\partial_\nu \log K_\nu(x)`, needed for :math:`E[\log x]` under a GIG (not differentiable).

    Analytic derivative of the Debye expansion for :math:`|\nu| \ge 20`; for smaller orders the exact identity
    :math:`\partial_\nu \log K_\nu(x) = E_w[t]`, :math:`w(t) \propto e^{\nu t - x\cosh t}`, by trapezoid
    quadrature.
    """
    (nu_t, x_t), dtype, device = _as_tensors(nu, x)
    nu_b, x_b = np.broadcast_arrays(_np64(nu_t), _np64(x_t))
    return torch.as_tensor(_dlogk_np(nu_b, x_b), dtype=dtype, device=device)


# ----------------------------------------------------------------------------------------------------------
# Devroye (2014) sampler for log of a two-parameter GIG, vectorized in torch
# ----------------------------------------------------------------------------------------------------------


def _t_log_sinh(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-2.0 * y)) - math.log(2.0)


def _devroye_log_gig(order: torch.Tensor, log_omega: torch.Tensor, max_iter: int = 10_000) -> torch.Tensor:
    """Sample Y = log X - log(mode shift) where X has density prop. to x^(order-1) exp(-omega (x + 1/x) / 2).

    ``order >= 0``; returns ``asinh(order / omega) + Y``, i.e. log X, with Y drawn by Devroye (2014), "Random
    variate generation for the generalized inverse Gaussian distribution", Stat. Comput. 24:239-246. All
    float64 tensors of one shape on one device.  ``alpha = sqrt(omega^2 + order^2) - order`` is carried in log
    space so tiny ``omega`` (near-Gamma) stays exact.
    """
    lam = order
    omega = torch.exp(log_omega)
    c = torch.hypot(lam, omega)
    log_alpha = 2.0 * log_omega - torch.log(c + lam)
    alpha = torch.exp(log_alpha)
    lam_pos = lam > 0

    def psi(x):
        a_term = torch.exp(log_alpha + math.log(2.0) + 2.0 * _t_log_sinh(x.abs() / 2.0))
        l_term = torch.where(lam_pos, lam * (torch.expm1(x) - x), torch.zeros_like(x))
        return -a_term - l_term

    def dpsi(x):
        a_term = torch.sign(x) * torch.exp(log_alpha + _t_log_sinh(x.abs()))
        l_term = torch.where(lam_pos, lam * torch.expm1(x), torch.zeros_like(x))
        return -a_term - l_term

    one = torch.ones_like(lam)
    x1 = -psi(one)
    t = torch.where(
        (x1 >= 0.5) & (x1 <= 2.0),
        one,
        torch.where(x1 > 2.0, torch.sqrt(2.0 / (alpha + lam)), torch.log(4.0 / (alpha + 2.0 * lam))),
    )
    x2 = -psi(-one)
    s_alpha = torch.log(alpha + 1.0 + torch.sqrt(1.0 + 2.0 * alpha)) - log_alpha
    s_small = torch.minimum(torch.where(lam_pos, 1.0 / torch.where(lam_pos, lam, one), torch.inf), s_alpha)
    s = torch.where(
        (x2 >= 0.5) & (x2 <= 2.0),
        one,
        torch.where(x2 > 2.0, torch.sqrt(4.0 / (alpha * math.cosh(1.0) + lam)), s_small),
    )
    eta, zeta = -psi(t), -dpsi(t)
    theta, xi = -psi(-s), dpsi(-s)
    p, r = 1.0 / xi, 1.0 / zeta
    td = t - r * eta
    sd = s - p * theta
    q = td + sd
    total = p + q + r

    out = torch.empty_like(lam)
    pending = torch.ones_like(lam, dtype=torch.bool)
    for _ in range(max_iter):
        idx = pending.nonzero(as_tuple=True)
        n = idx[0].numel()
        if n == 0:
            break
        u = torch.rand(n, dtype=lam.dtype, device=lam.device)
        v = 1.0 - torch.rand(n, dtype=lam.dtype, device=lam.device)  # (0, 1]
        w = 1.0 - torch.rand(n, dtype=lam.dtype, device=lam.device)
        q_, r_, p_, tot = q[idx], r[idx], p[idx], total[idx]
        td_, sd_ = td[idx], sd[idx]
        xs = torch.where(
            u * tot < q_,
            -sd_ + q_ * v,
            torch.where(u * tot < q_ + r_, td_ - r_ * torch.log(v), -sd_ + p_ * torch.log(v)),
        )
        log_chi = torch.where(
            xs > td_,
            -eta[idx] - zeta[idx] * (xs - t[idx]),
            torch.where(xs < -sd_, -theta[idx] + xi[idx] * (xs + s[idx]), torch.zeros_like(xs)),
        )
        # psi on the pending subset
        ax = xs.abs()
        a_term = torch.exp(log_alpha[idx] + math.log(2.0) + 2.0 * _t_log_sinh(ax / 2.0))
        lam_i = lam[idx]
        l_term = torch.where(lam_i > 0, lam_i * (torch.expm1(xs) - xs), torch.zeros_like(xs))
        accept = torch.log(w) + log_chi <= -a_term - l_term
        acc_idx = tuple(i[accept] for i in idx)
        out[acc_idx] = xs[accept]
        pending[acc_idx] = False
    else:  # pragma: no cover - acceptance probability is bounded below (Devroye 2014)
        raise RuntimeError("GIG rejection sampler did not terminate")
    # mode shift asinh(order / omega) = log(order + c) - log(omega)
    shift = torch.where(lam_pos, torch.log(lam + c) - log_omega, torch.asinh(lam / omega))
    return out + shift


# ----------------------------------------------------------------------------------------------------------
# The distribution
# ----------------------------------------------------------------------------------------------------------


class GeneralizedInverseGaussian(TorchDistribution):
    r"""GIG(nu, delta, lam) in the parameterization of paper 000, App. E.1 (priors Eqs. (6)-(7), posteriors
    (13)-(14)).

    .. math::

        p(x \mid \nu, \delta, \lambda) = \frac{(\lambda/\delta)^{\nu}}{2 K_\nu(\lambda\delta)}
            x^{\nu-1} \exp\!\big(-\tfrac12(\delta^2/x + \lambda^2 x)\big), \qquad x > 0.

    Args:
        nu: order :math:`\nu \in \mathbb{R}`.
        delta: :math:`\delta \ge 0` (``delta**2`` multiplies ``1/x``); ``delta = 0`` is the Gamma(nu, rate
            lam^2/2) limit and needs ``nu > 0``, ``lam > 0``.
        lam: :math:`\lambda \ge 0` (``lam**2`` multiplies ``x``); ``lam = 0`` is the InverseGamma(-nu,
            delta^2/2) limit and needs ``nu < 0``, ``delta > 0``.

    Equivalent forms: ``(p, a, b) = (nu, lam**2, delta**2)``; ``scipy.stats.geninvgauss(p=nu, b=lam*delta,
    scale=delta/lam)``.

    Beyond ``mean``/``variance``/``log_prob``/``sample``/``entropy`` it exposes the CAVI moments of App. E.1:
    :attr:`mean_reciprocal` (E[1/x]) and :attr:`mean_log` (E[log x]).  Moments are computed in float64 with
    the stable Bessel numerics of this module (finite at orders like -1250), returned in the parameters' dtype
    and device, and are not differentiable; ``log_prob`` is differentiable in the value and all parameters.
    """

    arg_constraints = {
        "nu": constraints.real,
        "delta": constraints.nonnegative,
        "lam": constraints.nonnegative,
    }
    support = constraints.positive
    has_rsample = False

    def __init__(self, nu, delta, lam, validate_args=None):
        self.nu, self.delta, self.lam = broadcast_all(nu, delta, lam)
        if all(isinstance(a, Number) for a in (nu, delta, lam)):
            batch_shape = torch.Size()
        else:
            batch_shape = self.nu.shape
        super().__init__(batch_shape, validate_args=validate_args)
        if self._validate_args:
            self._check_boundary()

    def _check_boundary(self) -> None:
        nu, delta, lam = self.nu, self.delta, self.lam
        if bool(((delta == 0) & (lam == 0)).any()):
            raise ValueError("GeneralizedInverseGaussian: delta and lam cannot both be 0 (improper)")
        if bool(((delta == 0) & ~(nu > 0)).any()):
            raise ValueError("GeneralizedInverseGaussian: delta = 0 (Gamma limit) requires nu > 0")
        if bool(((lam == 0) & ~(nu < 0)).any()):
            raise ValueError("GeneralizedInverseGaussian: lam = 0 (inverse-gamma limit) requires nu < 0")
        if not bool(torch.isfinite(nu).all() & torch.isfinite(delta).all() & torch.isfinite(lam).all()):
            raise ValueError("GeneralizedInverseGaussian: parameters must be finite")

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(GeneralizedInverseGaussian, _instance)
        batch_shape = torch.Size(batch_shape)
        new.nu = self.nu.expand(batch_shape)
        new.delta = self.delta.expand(batch_shape)
        new.lam = self.lam.expand(batch_shape)
        super(GeneralizedInverseGaussian, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    # ---------------------------------------------------------------- helpers
    def _np_params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _np64(self.nu), _np64(self.delta), _np64(self.lam)

    def _to_tensor(self, arr: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(arr), dtype=self.nu.dtype, device=self.nu.device).reshape(
            self.batch_shape
        )

    @staticmethod
    def _cases(delta: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        gamma = delta == 0
        invgamma = (lam == 0) & ~gamma
        general = ~gamma & ~invgamma
        return gamma, invgamma, general

    def _moments_np(self, what: str) -> np.ndarray:
        nu, delta, lam = self._np_params()
        gamma, invgamma, general = self._cases(delta, lam)
        out = np.full(nu.shape, np.nan)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # Gamma(shape nu, rate beta = lam^2/2), delta = 0 (App. E.1, case 2)
            if np.any(gamma):
                a, beta = nu[gamma], 0.5 * lam[gamma] ** 2
                if what == "mean":
                    v = a / beta
                elif what == "recip":
                    v = np.where(a > 1, beta / (a - 1.0), np.inf)
                elif what == "log":
                    v = special.digamma(a) - np.log(beta)
                else:  # var
                    v = a / beta**2
                out[gamma] = v
            # InverseGamma(shape alpha = -nu, scale beta = delta^2/2), lam = 0 (App. E.1, case 1)
            if np.any(invgamma):
                a, beta = -nu[invgamma], 0.5 * delta[invgamma] ** 2
                if what == "mean":
                    v = np.where(a > 1, beta / (a - 1.0), np.inf)
                elif what == "recip":
                    v = a / beta
                elif what == "log":
                    v = np.log(beta) - special.digamma(a)
                else:
                    v = np.where(a > 2, beta**2 / ((a - 1.0) ** 2 * (a - 2.0)), np.inf)
                out[invgamma] = v
            if np.any(general):
                n, d, l_ = nu[general], delta[general], lam[general]
                z = d * l_
                log_s = np.log(d) - np.log(l_)
                if what == "mean":
                    v = np.exp(log_s + _log_ratio_np(n, z))
                elif what == "recip":
                    v = np.exp(-log_s - _log_ratio_np(n - 1.0, z))
                elif what == "log":
                    v = log_s + _dlogk_np(n, z)
                else:
                    r0 = _log_ratio_np(n, z)
                    r1 = _log_ratio_np(n + 1.0, z)
                    v = np.exp(2.0 * (log_s + r0)) * np.expm1(r1 - r0)
                out[general] = v
        return out

    # ---------------------------------------------------------------- moments
    @property
    def mean(self) -> torch.Tensor:
        r""":math:`E[x] = (\delta/\lambda) K_{\nu+1}(\lambda\delta)/K_\nu(\lambda\delta)` (App. E.1); inf if
        undefined."""
        return self._to_tensor(self._moments_np("mean"))

    @property
    def mean_reciprocal(self) -> torch.Tensor:
        r"""E[1/x] (App. E.1): :math:`(\lambda/\delta) K_{\nu+1}/K_\nu - 2\nu/\delta^2`.

        Evaluated as :math:`(\lambda/\delta) K_{\nu-1}/K_\nu`, which has no cancellation."""
        return self._to_tensor(self._moments_np("recip"))

    @property
    def mean_log(self) -> torch.Tensor:
        r""":math:`E[\log x] = \log(\delta/\lambda) + \partial_\nu \log K_\nu(\lambda\delta)`.

        Digamma forms at the Gamma / inverse-gamma limits (App. E.1 cases 1-2)."""
        return self._to_tensor(self._moments_np("log"))

    @property
    def variance(self) -> torch.Tensor:
        r""":math:`(\delta/\lambda)^2 [K_{\nu+2}/K_\nu - (K_{\nu+1}/K_\nu)^2]`; inf if undefined."""
        return self._to_tensor(self._moments_np("var"))

    @property
    def mode(self) -> torch.Tensor:
        nu, delta, lam = self.nu, self.delta, self.lam
        lam2 = lam * lam
        safe_lam2 = torch.where(lam2 > 0, lam2, torch.ones_like(lam2))
        general = ((nu - 1.0) + torch.sqrt((nu - 1.0) ** 2 + lam2 * delta * delta)) / safe_lam2
        # lam = 0: inverse-gamma mode delta^2 / (2 (1 - nu))
        return torch.where(lam2 > 0, general, delta * delta / (2.0 * (1.0 - nu)))

    def log_normalizer(self) -> torch.Tensor:
        r"""log of :math:`\int x^{\nu-1} e^{-(\delta^2/x + \lambda^2 x)/2} dx = 2 (\delta/\lambda)^\nu
        K_\nu(\lambda\delta)` (``lgamma`` forms at the limits).  Differentiable in the parameters."""
        nu, delta, lam = self.nu, self.delta, self.lam
        gamma = delta == 0
        invgamma = (lam == 0) & ~gamma
        general = ~gamma & ~invgamma
        one = torch.ones_like(nu)
        d_s = torch.where(general, delta, one)
        l_s = torch.where(general, lam, one)
        log_gen = math.log(2.0) + log_bessel_k(nu, d_s * l_s) + nu * (torch.log(d_s) - torch.log(l_s))
        nu_g = torch.where(gamma, nu, one)
        l_g = torch.where(gamma, lam, one)
        log_gam = torch.lgamma(nu_g) - nu_g * torch.log(0.5 * l_g * l_g)
        nu_i = torch.where(invgamma, nu, -one)
        d_i = torch.where(invgamma, delta, one)
        log_ig = torch.lgamma(-nu_i) + nu_i * torch.log(0.5 * d_i * d_i)
        return torch.where(general, log_gen, torch.where(gamma, log_gam, log_ig))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        nu, delta, lam = self.nu, self.delta, self.lam
        return (
            (nu - 1.0) * torch.log(value)
            - 0.5 * (delta * delta / value + lam * lam * value)
            - self.log_normalizer()
        )

    def entropy(self) -> torch.Tensor:
        r""":math:`H = \log Z - (\nu - 1) E[\log x] + \tfrac12(\delta^2 E[1/x] + \lambda^2 E[x])`."""
        nu, delta, lam = self._np_params()
        e_log = self._moments_np("log")
        with np.errstate(invalid="ignore"):
            e_rec = np.where(delta > 0, delta**2 * self._moments_np("recip"), 0.0)
            e_x = np.where(lam > 0, lam**2 * self._moments_np("mean"), 0.0)
        log_z = _np64(self.log_normalizer())
        return self._to_tensor(log_z - (nu - 1.0) * e_log + 0.5 * (e_rec + e_x))

    def sample(self, sample_shape=_EMPTY_SHAPE):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            f64 = torch.float64
            nu = self.nu.expand(shape).to(f64).reshape(-1)
            delta = self.delta.expand(shape).to(f64).reshape(-1)
            lam = self.lam.expand(shape).to(f64).reshape(-1)
            out = torch.empty_like(nu)
            gamma = delta == 0
            invgamma = (lam == 0) & ~gamma
            general = ~gamma & ~invgamma
            if bool(gamma.any()):
                rate = 0.5 * lam[gamma] ** 2
                out[gamma] = torch.distributions.Gamma(nu[gamma], rate).sample()
            if bool(invgamma.any()):
                scale = 0.5 * delta[invgamma] ** 2
                out[invgamma] = (
                    scale / torch.distributions.Gamma(-nu[invgamma], torch.ones_like(scale)).sample()
                )
            if bool(general.any()):
                n, d, l_ = nu[general], delta[general], lam[general]
                log_y = _devroye_log_gig(n.abs(), torch.log(d) + torch.log(l_))
                sign = torch.where(n < 0, -1.0, 1.0).to(f64)  # 1/X ~ GIG(-nu, lam, delta)
                out[general] = torch.exp(torch.log(d) - torch.log(l_) + sign * log_y)
            return out.reshape(shape).to(self.nu.dtype)
