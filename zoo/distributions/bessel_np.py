r"""Float64 numpy kernels of the modified Bessel function :math:`K_\nu` for the GIG code of Sheinkman &
Wade (2025).

Sheinkman & Wade 2025 (arXiv 2411.11132), App. E.1: every GIG moment used by CAVI (Eqs. (13)-(14)) is a ratio
or an order-derivative of :math:`K_\nu`, at orders down to :math:`\hat\nu \approx -1250` (Eq. (13)) where
:math:`K_\nu` over/underflows; so everything here works in log space (see :mod:`zoo.distributions.gig`):

* :math:`|\nu| \ge 20`: the uniform (Debye / Olver) asymptotic expansion, DLMF 10.41.4, with 12 correction
  terms generated exactly from the recurrence DLMF 10.41.10, differentiated analytically in :math:`\nu`;
* :math:`|\nu| < 20`: ``scipy.special.kve`` (AMOS), with a saddle-centred trapezoid rule for
  :math:`K_\nu(x) = \tfrac12\int e^{\nu t - x\cosh t} dt` where it overflows and for
  :math:`\partial_\nu \log K_\nu`.

:func:`logk_np`, :func:`dlogk_np` and :func:`log_ratio_np` are the kernels behind the torch front ends of
:mod:`zoo.distributions.bessel`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
from scipy import special

__all__ = ["logk_np", "dlogk_np", "log_ratio_np"]

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


def _quad_window(
    mu: np.ndarray, c: np.ndarray, log_a: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integration window ``[-v_lo, u_hi]`` around the saddle and the number of trapezoid nodes: the
    integrand is below ``exp(-L)`` of its maximum outside, since ``g(u) <= -2c sinh^2(u/2)`` (right) and
    ``g(-v) <= -a (cosh v - 1), -mu (v - 1)`` (left)."""
    L = _QUAD_LOG_CUTOFF
    u_hi = 2.0 * _asinh_sqrt_exp(math.log(L / 2.0) - np.log(c))
    v_lo = 2.0 * _asinh_sqrt_exp(math.log(L / 2.0) - log_a)
    with np.errstate(divide="ignore"):
        v_lo = np.minimum(v_lo, np.where(mu > 0, 1.0 + L / np.where(mu > 0, mu, 1.0), np.inf))
    h_target = np.minimum(0.2, 0.3 / np.sqrt(c))
    n_nodes = np.ceil((u_hi + v_lo) / h_target).astype(np.int64) + 1
    return u_hi, v_lo, n_nodes


def _quad_groups(n_nodes: np.ndarray) -> Iterator[np.ndarray]:
    """Index groups of elements with similar node counts (sorted ascending), of bounded memory."""
    order = np.argsort(n_nodes, kind="stable")
    start = 0
    while start < n_nodes.size:
        n_min = int(n_nodes[order[start]])
        stop = start + 1
        while (
            stop < n_nodes.size
            and int(n_nodes[order[stop]]) <= max(2 * n_min, 64)
            and (stop - start + 1) * int(n_nodes[order[stop]]) <= _QUAD_MAX_ELEMENTS
        ):
            stop += 1
        yield order[start:stop]
        start = stop


def _quad_weights(
    mu: np.ndarray, c: np.ndarray, log_a: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trapezoid weights ``w`` of ``e^{g(u)}`` at the ``n`` nodes ``u`` of ``[lo, hi]``, and the step."""
    step = (hi - lo) / (n - 1)
    u = lo + step * np.arange(n)[None, :]
    au = np.abs(u)
    with np.errstate(over="ignore", invalid="ignore"):
        right = -np.exp(math.log(2.0) + np.log(c) + 2.0 * _log_sinh(au / 2.0)) - np.where(
            mu > 0, mu * (np.sinh(au) - au), 0.0
        )
        left = -np.exp(log_a + math.log(2.0) + 2.0 * _log_sinh(au / 2.0)) - mu * (np.expm1(-au) + au)
    g = np.where(u >= 0, right, left)
    g = np.where(np.isnan(g), -np.inf, g)
    w = np.exp(g)
    w[:, 0] *= 0.5
    w[:, -1] *= 0.5
    return w, u, step


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
    c = np.hypot(mu, x)
    tstar = _asinh_ratio(mu, x)
    log_a = 2.0 * np.log(x) - np.log(c + mu)  # a = c - mu
    u_hi, v_lo, n_nodes = _quad_window(mu, c, log_a)
    for idx in _quad_groups(n_nodes):
        n = max(int(n_nodes[idx].max()), 32)
        w, u, step = _quad_weights(
            mu[idx, None], c[idx, None], log_a[idx, None], -v_lo[idx, None], u_hi[idx, None], n
        )
        total = w.sum(axis=1)
        out_logk[idx] = np.log(total * step[:, 0] / 2.0) - c[idx] + mu[idx] * tstar[idx]
        out_d[idx] = tstar[idx] + (w * u).sum(axis=1) / total
    return out_logk, out_d


# ----------------------------------------------------------------------------------------------------------
# numpy float64 kernels (broadcast arrays)
# ----------------------------------------------------------------------------------------------------------


def logk_np(nu: np.ndarray, x: np.ndarray) -> np.ndarray:
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


def dlogk_np(nu: np.ndarray, x: np.ndarray) -> np.ndarray:
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


def log_ratio_np(nu: np.ndarray, x: np.ndarray) -> np.ndarray:
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
            v[bad] = logk_np(m1[bad], xx[bad]) - logk_np(m0[bad], xx[bad])
        out[mod] = v
    return out
