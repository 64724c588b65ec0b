r"""Pólya–Gamma distribution PG(b, c) (Sheinkman & Wade (2025), Sec. 2.3, Eqs. (8)-(9), (17)).

:math:`X \sim PG(b, c)` iff :math:`X \overset{D}{=} \frac{1}{2\pi^2}\sum_{k\ge1} \frac{g_k}{(k-1/2)^2 +
c^2/(4\pi^2)}`, :math:`g_k \sim \mathrm{Gam}(b, 1)` i.i.d., with :math:`b > 0`, :math:`c \in \mathbb{R}`
(Polson, Scott & Windle 2013).  Its Laplace transform is :math:`E[e^{-tX}] = \cosh^b(c/2) /
\cosh^b(\sqrt{(c^2/2 + t)/2})`, and the density tilts as :math:`p(x \mid b, c) = \cosh^b(c/2)\, e^{-c^2 x/2}\,
p(x \mid b, 0)` (Polson, Scott & Windle 2013; used for Eq. (9)).

* ``mean`` (Eq. (9)): :math:`E[X] = \frac{b}{2c}\tanh(c/2)`, with the :math:`c \to 0` limit :math:`b/4` taken
  by a Taylor series for small :math:`|c|` (no 0/0).
* ``variance``: :math:`\mathrm{Var}[X] = \frac{b}{4c^3}\,\frac{\sinh c - c}{\cosh^2(c/2)}`, limit
  :math:`b/24`, evaluated as :math:`\frac{b}{4c^3}(2\tanh(c/2) - c\,\mathrm{sech}^2(c/2))` for :math:`|c| \ge
  1/2` and a series below.
* ``sample``: the ``polyagamma`` package (Windle et al. hybrid sampler) on the CPU with a numpy ``Generator``
  seeded from torch's RNG, so ``pyro.set_rng_seed`` makes draws reproducible; results are moved to the
  parameters' device and dtype.
* ``log_prob``: :math:`\log p(x\mid b,0)` from ``polyagamma.polyagamma_pdf(..., return_log=True)`` where its
  alternating series is well conditioned (left of and around the mode).  That series cancels catastrophically
  in the right tail (it returns NaN or round-off there; e.g. PG(1, 0) beyond x ~ 7), so there we use instead

  - the exact large-x expansion from the first singularity of the Laplace transform, :math:`p(x\mid b,0) =
    e^{-\pi^2 x/2} \sum_j g_j(b)\, x^{b-1-j} / \Gamma(b-j) + O(e^{-9\pi^2 x/2})` (a Hankel-contour expansion;
    finite for integer b), or
  - for large b, numerical Laplace inversion along the vertical line through the saddle point (trapezoid
    rule).

  Each element uses the candidate with the best estimated conditioning; the result is accurate to about 1e-12
  relative in tests against a multi-precision evaluation.  ``log_prob`` is differentiable in ``c`` only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Number
from typing import Any, NoReturn

import numpy as np
import polyagamma as _pg
import torch
from pyro.distributions import TorchDistribution
from scipy import special
from torch.distributions import constraints
from torch.distributions.utils import broadcast_all

_EMPTY_SHAPE = torch.Size()

__all__ = ["PolyaGamma", "polya_gamma_mean", "polya_gamma_variance", "log_cosh"]


# ----------------------------------------------------------------------------------------------------------
# Closed-form moments (torch, differentiable)
# ----------------------------------------------------------------------------------------------------------

# tanh(y)/y = 1 - y^2/3 + 2 y^4/15 - 17 y^6/315 + ...   (y = c/2)
_MEAN_SERIES_CUT = 1e-3
# (sinh c - c) / (4 c^3 cosh^2(c/2)) = sum_k a_k c^(2k)   (exact rationals via series expansion)
_VAR_SERIES = (
    1 / 24,
    -1 / 120,
    17 / 13440,
    -31 / 181440,
    691 / 31933440,
    -5461 / 2075673600,
    929569 / 2988969984000,
    -3202291 / 88921857024000,
    221930581 / 54064489070592000,
    -4722116521 / 10218188434341888000,
    56963745931 / 1105968630540533760000,
)
_VAR_SERIES_CUT = 0.5


def log_cosh(x: torch.Tensor) -> torch.Tensor:
    """Overflow-free log cosh(x) = |x| + log1p(exp(-2|x|)) - log 2; used by the PG tilt."""
    ax = x.abs()
    return ax + torch.log1p(torch.exp(-2.0 * ax)) - math.log(2.0)


def polya_gamma_mean(b: float | torch.Tensor, c: float | torch.Tensor) -> torch.Tensor:
    r""":math:`E[PG(b, c)] = \frac{b}{2c}\tanh(c/2)` (Sheinkman & Wade (2025) Eq. (9)); equals :math:`b/4`
    at :math:`c = 0`.

    Finite and smooth for every real ``c`` (series for :math:`|c| < 10^{-3}`); differentiable.  For the
    bow-tie CAVI (Eq. (17)), ``E[omega] = polya_gamma_mean(1, A)``.
    """
    b, c = broadcast_all(b, c)
    small = c.abs() < _MEAN_SERIES_CUT
    c_safe = torch.where(small, torch.ones_like(c), c)
    direct = b * torch.tanh(c_safe / 2.0) / (2.0 * c_safe)
    y2 = (c / 2.0) ** 2
    series = (b / 4.0) * (1.0 - y2 / 3.0 + 2.0 * y2 * y2 / 15.0)
    return torch.where(small, series, direct)


def polya_gamma_variance(b: float | torch.Tensor, c: float | torch.Tensor) -> torch.Tensor:
    r""":math:`\mathrm{Var}[PG(b, c)] = \frac{b}{4c^3}\frac{\sinh c - c}{\cosh^2(c/2)}`, :math:`b/24` at 0.

    Series for :math:`|c| < 1/2` (no cancellation); differentiable."""
    b, c = broadcast_all(b, c)
    small = c.abs() < _VAR_SERIES_CUT
    c_safe = torch.where(small, torch.ones_like(c), c)
    half = c_safe / 2.0
    sech2 = 1.0 / torch.cosh(half) ** 2
    direct = b * (2.0 * torch.tanh(half) - c_safe * sech2) / (4.0 * c_safe**3)
    c2 = c * c
    series = torch.zeros_like(c)
    for coef in reversed(_VAR_SERIES):
        series = series * c2 + coef
    return torch.where(small, b * series, direct)


# ----------------------------------------------------------------------------------------------------------
# log density of PG(b, 0) in float64 numpy
# ----------------------------------------------------------------------------------------------------------

_HALF_PI2 = math.pi**2 / 2.0
_COND_OK = 1e3
_TAIL_TERMS = 40


def _tail_log_h_coeffs(n_coef: int = 64) -> np.ndarray:
    """Taylor coefficients l_k of log h(t0 + u), h(t) = (t - t0) / cosh(sqrt(t / 2)), t0 = -pi^2/2.

    h is analytic and zero free in |u| < 4 pi^2 (next zero of cosh at t = -9 pi^2 / 2), so the coefficients
    follow from a discrete Cauchy integral on |u| = 0.9 * 4 pi^2 (aliasing error ~ 0.9^1024).
    """
    m = 1024
    radius = 0.9 * 4.0 * math.pi**2
    theta = 2.0 * math.pi * np.arange(m) / m
    u = radius * np.exp(1j * theta)
    log_h = np.log(u) - np.log(np.cos(np.sqrt(-(-_HALF_PI2 + u) / 2.0)))
    log_h = np.real(log_h) + 1j * np.unwrap(np.imag(log_h))
    coef = (np.fft.fft(log_h) / m).real[:n_coef]
    return coef * radius ** (-np.arange(n_coef, dtype=np.float64))


_LOG_H = _tail_log_h_coeffs()


def _tail_logpdf(x: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Large-x expansion of log p(x | b, 0) and a conditioning/truncation indicator (1-D arrays)."""
    n_terms = _TAIL_TERMS
    # power series of exp(b * (log h - log h(t0))) by the J.C.P. Miller recurrence
    g = np.zeros((x.size, n_terms))
    g[:, 0] = 1.0
    kl = np.arange(n_terms) * _LOG_H[:n_terms]
    for n in range(1, n_terms):
        g[:, n] = b / n * (g[:, n - 1 :: -1][:, :n] * kl[1 : n + 1]).sum(axis=1)
    j = np.arange(n_terms)
    # term_j / term_0 = g_j x^-j Gamma(b) / Gamma(b - j) = g_j prod_{k=1..j} (b - k) / x  (0 from k = b on)
    falling = np.ones((x.size, n_terms))
    falling[:, 1:] = np.cumprod((b[:, None] - j[None, 1:]) / x[:, None], axis=1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        terms = g * falling
        total = terms.sum(axis=1)
        cond = np.abs(terms).sum(axis=1) / np.abs(total)
        trunc = np.abs(terms[:, -3:]).max(axis=1) / np.abs(total)
        value = -_HALF_PI2 * x + b * _LOG_H[0] + (b - 1.0) * np.log(x) - special.gammaln(b) + np.log(total)
    # the next singularity contributes ~exp(-4 pi^2 x) relative; insist on x >= 1 and a converged sum
    bad = ~np.isfinite(value) | (x < 1.0) | (trunc > 1e-16) | ~np.isfinite(cond)
    cond = np.where(bad, np.inf, cond)
    return value, cond


def _series_peak(b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Index ``n*`` of the largest term of the small-x series (bisection on the log-term's derivative; 0 when
    the terms decrease from the start)."""

    def dphi(n: np.ndarray) -> np.ndarray:
        return (
            special.digamma(n + b) - special.digamma(n + 1.0) + 2.0 / (2.0 * n + b) - 2.0 * (2.0 * n + b) / y
        )

    lo = np.zeros_like(y)
    hi = np.sqrt(b * y) + b + 10.0
    start_up = dphi(lo) > 0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        up = dphi(mid) > 0
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    return np.where(start_up, 0.5 * (lo + hi), 0.0)


def _series_log_term(n: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log of the ``n``-th term of the alternating small-x series at ``y = 4 x``."""
    return (
        math.log(4.0)
        + b * math.log(2.0)
        - special.gammaln(b)
        + special.gammaln(n + b)
        - special.gammaln(n + 1.0)
        + np.log(2.0 * n + b)
        - 0.5 * np.log(2.0 * math.pi * y**3)
        - (2.0 * n + b) ** 2 / (2.0 * y)
    )


def _small_x_series_cond(x: np.ndarray, b: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Largest term / sum of the alternating small-x series evaluated by ``polyagamma_pdf`` (<= 200 terms)."""
    y = 4.0 * x
    n_star = _series_peak(b, y)
    log_max = np.maximum.reduce(
        [_series_log_term(k, b, y) for k in (np.floor(n_star), np.ceil(n_star), 0.0 * n_star)]
    )
    # index where terms are exp(-40) below the largest one: must be inside the package's 200-term truncation
    m = 2.0 * n_star + b
    n_stop = 0.5 * (np.sqrt(m * m + 80.0 * y) - b)
    with np.errstate(over="ignore", invalid="ignore"):
        cond = np.exp(log_max - value)
    return np.where(np.isfinite(value) & (n_stop < 190.0), cond, np.inf)


def _log_cosh_sqrt_half(t: np.ndarray) -> np.ndarray:
    """Complex log cosh(sqrt(t / 2)) with the principal root (Re >= 0), overflow free."""
    z = np.sqrt(t / 2.0 + 0j)
    return z + np.log1p(np.exp(-2.0 * z)) - math.log(2.0)


def _saddle_point(x: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The real saddle ``s`` of ``phi(t) = t x - b kappa(t)`` (bisection) and ``phi(s)``."""
    # kappa'(s) = x / b; kappa'(t) = tanh(w)/(4w), w = sqrt(t/2) (t >= 0) or tan(v)/(4v) (t < 0)
    r = 4.0 * x / b
    below = r < 1.0
    lo = np.zeros_like(x)
    hi = np.where(below, 1.0 / r + 1.0, math.pi / 2.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            f_below = np.tanh(mid) / mid - r  # decreasing in w
            f_above = np.tan(mid) / mid - r  # increasing in v
        go_right = np.where(below, f_below > 0, f_above < 0)
        lo = np.where(go_right, mid, lo)
        hi = np.where(go_right, hi, mid)
    m = 0.5 * (lo + hi)
    sigma = np.where(below, 2.0 * m * m, -2.0 * m * m)
    return sigma, sigma * x - b * _log_cosh_sqrt_half(sigma).real


def _saddle_window(
    x: np.ndarray, b: np.ndarray, sigma: np.ndarray, phi0: np.ndarray, max_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Upper end ``y_max`` of the integration line (where the integrand is below ``exp(-50)`` of its value at
    the saddle) and the number of trapezoid nodes."""
    # curvature phi'' = -b kappa''(s), kappa''(t) = (w sech^2 w - tanh w) / (16 w^3)
    w = np.sqrt(sigma / 2.0 + 0j)
    with np.errstate(all="ignore"):
        k2 = ((w / np.cosh(w) ** 2 - np.tanh(w)) / (16.0 * w**3)).real
    k2 = np.where(np.abs(w) < 1e-3, -1.0 / 24.0, k2)
    width = 1.0 / np.sqrt(np.maximum(-b * k2, 1e-300))
    ys = width[:, None] * 2.0 ** np.arange(0, 48)[None, :]
    mag = ys * 0.0 + (x * sigma)[:, None] - b[:, None] * _log_cosh_sqrt_half(sigma[:, None] + 1j * ys).real
    mag = mag - phi0[:, None]
    first = np.argmax(mag < -50.0, axis=1)
    y_max = np.take_along_axis(ys, first[:, None], axis=1)[:, 0]
    step_target = np.minimum(width / 4.0, 0.5 / x)
    return y_max, np.minimum(np.ceil(y_max / step_target).astype(np.int64) + 1, max_nodes)


def _saddle_logpdf(x: np.ndarray, b: np.ndarray, max_nodes: int = 1 << 17) -> np.ndarray:
    """log p(x | b, 0) by Laplace inversion p = (1/pi) int_0^inf Re exp(phi(s + iy)) dy, phi(t) = t x - b
    kappa(t), kappa(t) = log cosh(sqrt(t/2)), on the vertical line through the real saddle s (trapezoid rule;
    1-D arrays)."""
    sigma, phi0 = _saddle_point(x, b)
    y_max, n_nodes = _saddle_window(x, b, sigma, phi0, max_nodes)
    out = np.empty_like(x)
    chunk = max(1, 4_000_000 // int(n_nodes.max()))
    for s in range(0, x.size, chunk):
        sl = slice(s, s + chunk)
        n = int(n_nodes[sl].max())
        step = y_max[sl] / (n - 1)
        y = step[:, None] * np.arange(n)[None, :]
        t = sigma[sl, None] + 1j * y
        val = x[sl, None] * t - b[sl, None] * _log_cosh_sqrt_half(t) - phi0[sl, None]
        integrand = np.exp(val).real
        integrand[:, 0] *= 0.5
        integral = integrand.sum(axis=1) * step
        out[sl] = phi0[sl] + np.log(integral / math.pi)
    return out


def _pg0_logpdf(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log p(x | b, 0) for broadcast float64 arrays; -inf outside x > 0."""
    x, b = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(b, dtype=np.float64))
    shape = x.shape
    x, b = x.reshape(-1), b.reshape(-1)
    out = np.full(x.shape, -np.inf)
    valid = (x > 0) & np.isfinite(x) & (b > 0)
    out[~(b > 0)] = np.nan
    if not np.any(valid):
        return out.reshape(shape)
    xv, bv = x[valid], b[valid]
    with np.errstate(all="ignore"):
        pkg = np.asarray(_pg.polyagamma_pdf(xv, h=bv, z=0.0, return_log=True), dtype=np.float64)
    cond_pkg = _small_x_series_cond(xv, bv, pkg)
    res = np.where(cond_pkg <= _COND_OK, pkg, np.nan)
    todo = np.isnan(res)
    if np.any(todo):
        tail, cond_tail = _tail_logpdf(xv[todo], bv[todo])
        sub = res[todo]
        use_tail = cond_tail <= _COND_OK
        sub[use_tail] = tail[use_tail]
        rest = ~use_tail
        if np.any(rest):
            sub[rest] = _saddle_logpdf(xv[todo][rest], bv[todo][rest])
        res[todo] = sub
    out[valid] = res
    return out.reshape(shape)


class _PG0LogPdf(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        shape = torch.broadcast_shapes(x.shape, b.shape)
        val = _pg0_logpdf(
            x.detach().to("cpu", torch.float64).numpy(), b.detach().to("cpu", torch.float64).numpy()
        )
        return torch.as_tensor(val, dtype=x.dtype, device=x.device).reshape(shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> NoReturn:  # pragma: no cover
        # explicit failure instead of a silently wrong gradient
        raise NotImplementedError("PolyaGamma.log_prob is differentiable in c only (not in the value or b)")


# ----------------------------------------------------------------------------------------------------------
# The distribution
# ----------------------------------------------------------------------------------------------------------


class PolyaGamma(TorchDistribution):
    r"""Pólya–Gamma distribution PG(b, c), Sheinkman & Wade (2025) Sec. 2.3 (Eqs. (8)-(9)); q(omega) =
    PG(1, A) in Eq. (17).

    Args:
        b: shape, ``b > 0`` (real; the bow-tie model uses ``b = 1``).
        c: tilting parameter, real (default 0).

    ``sample`` draws on the CPU with the ``polyagamma`` package from a numpy ``Generator`` seeded by
    ``torch.randint`` (reproducible under ``pyro.set_rng_seed``), and returns a tensor on the parameters'
    device and dtype; ``has_rsample`` is False.  ``mean``/``variance`` are closed form and finite at
    ``c = 0``.
    """

    arg_constraints = {"b": constraints.positive, "c": constraints.real}
    support = constraints.positive
    has_rsample = False

    def __init__(
        self, b: float | torch.Tensor, c: float | torch.Tensor = 0.0, validate_args: bool | None = None
    ) -> None:
        self.b, self.c = broadcast_all(b, c)
        if isinstance(b, Number) and isinstance(c, Number):
            batch_shape = torch.Size()
        else:
            batch_shape = self.b.shape
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape: Sequence[int], _instance: PolyaGamma | None = None) -> PolyaGamma:
        new = self._get_checked_instance(PolyaGamma, _instance)
        batch_shape = torch.Size(batch_shape)
        new.b = self.b.expand(batch_shape)
        new.c = self.c.expand(batch_shape)
        super(PolyaGamma, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> torch.Tensor:
        return polya_gamma_mean(self.b, self.c)

    @property
    def variance(self) -> torch.Tensor:
        return polya_gamma_variance(self.b, self.c)

    def sample(self, sample_shape: torch.Size = _EMPTY_SHAPE) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            seed = int(torch.randint(0, 2**62, (1,)).item())
            rng = np.random.default_rng(seed)
            h = np.ascontiguousarray(np.broadcast_to(self.b.detach().to("cpu", torch.float64).numpy(), shape))
            z = np.ascontiguousarray(np.broadcast_to(self.c.detach().to("cpu", torch.float64).numpy(), shape))
            if len(shape) == 0:
                draws = np.asarray(_pg.random_polyagamma(float(h), float(z), random_state=rng))
            else:
                draws = _pg.random_polyagamma(h, z, size=tuple(shape), random_state=rng)
            return torch.as_tensor(np.asarray(draws, dtype=np.float64), device=self.b.device).to(self.b.dtype)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        b, c = self.b, self.c
        log_p0 = _PG0LogPdf.apply(value, b)
        return b * log_cosh(c / 2.0) - 0.5 * c * c * value + log_p0

    def cdf(self, value: torch.Tensor) -> torch.Tensor:
        """CDF from ``polyagamma.polyagamma_cdf`` (CPU, float64; not differentiable)."""
        shape = torch.broadcast_shapes(value.shape, self.batch_shape)
        args = [t.detach().to("cpu", torch.float64).numpy() for t in (value, self.b, self.c)]
        x, h, z = np.broadcast_arrays(*args)
        out = np.asarray(_pg.polyagamma_cdf(x, h=h, z=z), dtype=np.float64)
        return torch.as_tensor(out, dtype=value.dtype, device=value.device).reshape(shape)
