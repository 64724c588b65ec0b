"""Tests for ``zoo.distributions``: log-space Bessel-K numerics (note Sec. 5.3) and the GIG of App. E.1 with
the CAVI moments of Eqs. (13)-(14) (paper 000).

Ground truths: mpmath's Bessel K (and its integral representation at order 1250), numerical derivatives and
``gradcheck``, quadrature of the unnormalized GIG density in ``t = log x`` (normalization, moments, entropy),
the exact gamma and inverse-gamma limits, ``scipy.stats.geninvgauss``, and KS tests of the sampler against
scipy and against a numerically integrated CDF.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyro
import pytest
import torch
from scipy import integrate, optimize, special, stats

from zoo.distributions import (
    GeneralizedInverseGaussian,
    bessel_k_ratio,
    log_bessel_k,
    log_bessel_k_dnu,
    log_bessel_k_ratio,
)

from .helpers import gig, simpson_exp, t64

pytestmark = pytest.mark.usefixtures("one_torch_thread")

F64 = torch.float64
P_MIN = 1e-3  # KS / goodness-of-fit threshold at a fixed seed


# ----------------------------------------------------------------------------------------------------------
# reference computations independent of the Bessel code
# ----------------------------------------------------------------------------------------------------------


def gig_quad_moments(nu, delta, lam):
    """E[x], E[1/x], E[log x], Var[x] by quadrature of the *unnormalized* App. E.1 density in t = log x."""

    def lp(t):
        with np.errstate(over="ignore"):
            return nu * t - 0.5 * (delta**2 * np.exp(-t) + lam**2 * np.exp(t))

    t_mode = optimize.minimize_scalar(lambda t: -lp(t), bracket=(-3.0, 3.0)).x
    h = 1e-3
    curv = -(lp(t_mode + h) - 2 * lp(t_mode) + lp(t_mode - h)) / h**2
    s = 1.0 / math.sqrt(curv)
    lo, hi = t_mode - 60 * s, t_mode + 60 * s
    top = lp(t_mode)

    def integral(f):
        # quad may warn that 1e-13 is not reachable; the moments are compared at 1e-10 below
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)
            return integrate.quad(
                lambda t: np.exp(lp(t) - top) * f(t - t_mode),
                lo,
                hi,
                points=[t_mode],
                limit=400,
                epsabs=0,
                epsrel=1e-13,
            )[0]

    i0 = integral(lambda u: 1.0)
    e_x = math.exp(t_mode) * integral(np.exp) / i0
    e_x2 = math.exp(2 * t_mode) * integral(lambda u: np.exp(2 * u)) / i0
    e_inv = math.exp(-t_mode) * integral(lambda u: np.exp(-u)) / i0
    e_log = t_mode + integral(lambda u: u) / i0
    var = math.exp(2 * t_mode) * integral(lambda u: (np.exp(u) - e_x * math.exp(-t_mode)) ** 2) / i0
    assert var == pytest.approx(e_x2 - e_x**2, rel=1e-6)
    return e_x, e_inv, e_log, var, (lo, hi, t_mode)


def ks_in_log_space(dist, n=4000):
    """KS test of samples of log x against the CDF obtained by integrating exp(log_prob) numerically."""
    t = torch.log(dist.sample((n,))).numpy()
    grid = np.linspace(t.min() - 5.0, t.max() + 5.0, 100_001)
    lp = dist.log_prob(torch.exp(torch.tensor(grid, dtype=F64))).numpy() + grid
    dens = np.exp(lp - lp.max())
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0.0)
    mass = cdf[-1] * math.exp(lp.max())
    cdf = cdf / cdf[-1]
    return stats.kstest(t, lambda v: np.interp(v, grid, cdf)).pvalue, mass


# ----------------------------------------------------------------------------------------------------------
# Bessel K numerics
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "nu,x",
    [
        (0.0, 1e-10),
        (0.3, 1e-30),
        (2.5, 1.0),
        (-7.3, 30.0),
        (15.0, 1e-3),
        (19.9, 0.5),
        (-20.0, 7.0),
        (35.0, 2.0),
    ],
)
def test_log_bessel_k_matches_mpmath(nu, x):
    mp = pytest.importorskip("mpmath")
    with mp.workdps(40):
        ref = float(mp.log(mp.besselk(abs(nu), x)))
        ref_ratio = float(mp.log(mp.besselk(abs(nu + 1), x)) - mp.log(mp.besselk(abs(nu), x)))
        ref_dnu = float(mp.diff(lambda n: mp.log(mp.besselk(n, x)), nu))
    nu_t, x_t = t64(nu, x)
    assert log_bessel_k(nu_t, x_t).item() == pytest.approx(ref, rel=1e-13, abs=1e-13)
    assert log_bessel_k_ratio(nu_t, x_t).item() == pytest.approx(ref_ratio, rel=1e-12, abs=1e-12)
    assert log_bessel_k_dnu(nu_t, x_t).item() == pytest.approx(ref_dnu, rel=1e-11, abs=1e-11)


@pytest.mark.parametrize("x", [1e-10, 50.0, 1e4])
def test_log_bessel_k_order_1250_matches_mpmath_integral(x):
    """nu = -1250 (q(tau) of a 50x50 layer, Eq. (13)): compare with the integral representation
    K_nu(x) = 1/2 int exp(nu t - x cosh t) dt evaluated in 30-digit arithmetic."""
    mp = pytest.importorskip("mpmath")
    nu = 1250.0
    with mp.workdps(30):
        n, xm = mp.mpf(nu), mp.mpf(x)
        c = mp.sqrt(n**2 + xm**2)
        tstar = mp.asinh(n / xm)

        def g(u):
            return mp.exp(-2 * c * mp.sinh(u / 2) ** 2 - n * (mp.sinh(u) - u))

        s = 1 / mp.sqrt(c)
        pts = [k * s for k in (-40, -10, -3, 0, 3, 10, 40)]
        i0 = mp.quad(g, pts)
        i1 = mp.quad(lambda u: u * g(u), pts)
        ref = float(mp.log(i0 / 2) - c + n * tstar)
        ref_dnu = float(tstar + i1 / i0)
    for sign in (1.0, -1.0):
        nu_t, x_t = t64(sign * nu, x)
        assert log_bessel_k(nu_t, x_t).item() == pytest.approx(ref, rel=1e-14)
        assert log_bessel_k_dnu(nu_t, x_t).item() == pytest.approx(sign * ref_dnu, rel=1e-13)


def test_bessel_k_ratio_finite_and_consistent_at_large_order():
    x = torch.logspace(-12, 6, 37, dtype=F64)
    for nu in (-1250.0, -800.5, 1250.0, -20.5, -19.5, 19.5):
        nu_t = torch.full_like(x, nu)
        r = bessel_k_ratio(nu_t, x)
        r_prev = bessel_k_ratio(nu_t - 1.0, x)
        assert torch.isfinite(r).all() and (r > 0).all()
        # recurrence K_{nu+1} = K_{nu-1} + (2 nu / x) K_nu  <=>  R(nu) = 1 / R(nu - 1) + 2 nu / x
        lhs, rhs = r, 1.0 / r_prev + 2.0 * nu_t / x
        scale = r.abs() + (1.0 / r_prev).abs() + (2.0 * nu_t / x).abs()
        assert ((lhs - rhs).abs() / scale).max().item() < 1e-13
        # and the log-ratio equals the difference of the log K's (which are ~1e4 here)
        diff = log_bessel_k(nu_t + 1.0, x) - log_bessel_k(nu_t, x)
        assert torch.allclose(
            torch.log(r), diff, rtol=0, atol=1e-10 * (1 + log_bessel_k(nu_t, x).abs().max())
        )


def test_log_bessel_k_dnu_matches_numerical_derivative():
    nu = torch.tensor([-1250.0, -300.0, -21.0, -3.7, -0.2, 0.0, 0.6, 8.0, 19.0, 64.0], dtype=F64)
    for xv in (1e-8, 0.7, 40.0, 3e3):
        x = torch.full_like(nu, xv)
        h = 1e-4
        num = (log_bessel_k(nu + h, x) - log_bessel_k(nu - h, x)) / (2 * h)
        assert torch.allclose(log_bessel_k_dnu(nu, x), num, rtol=1e-6, atol=1e-6)


def test_bessel_autograd_gradcheck():
    nu = torch.tensor([-1250.0, -2.3, 0.4, 25.0], dtype=F64, requires_grad=True)
    x = torch.tensor([30.0, 0.8, 3.0, 12.0], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(log_bessel_k, (nu, x), eps=1e-6, atol=1e-5, rtol=1e-6)
    assert torch.autograd.gradcheck(bessel_k_ratio, (nu, x), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_bessel_device_dtype_and_broadcast(device):
    nu = torch.tensor([[-1250.0], [0.5]], dtype=torch.float32, device=device)
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float32, device=device)
    for fn in (log_bessel_k, bessel_k_ratio, log_bessel_k_ratio, log_bessel_k_dnu):
        out = fn(nu, x)
        assert out.shape == (2, 3) and out.dtype == torch.float32 and out.device == nu.device
        assert torch.isfinite(out).all()
    # K_{1/2}(x) = sqrt(pi / (2x)) e^{-x}
    half = log_bessel_k(0.5, torch.tensor([0.1, 1.0, 10.0], dtype=F64))
    ref = 0.5 * torch.log(math.pi / (2 * torch.tensor([0.1, 1.0, 10.0], dtype=F64))) - torch.tensor(
        [0.1, 1.0, 10.0], dtype=F64
    )
    assert torch.allclose(half, ref, rtol=1e-14)


# ----------------------------------------------------------------------------------------------------------
# GIG
# ----------------------------------------------------------------------------------------------------------

GIG_GENERAL = [
    (-1.5, 1.0, 1.0),
    (0.5, 2.0, 0.3),
    (0.0, 1.0, 1.0),
    (-0.5, 0.7, 2.0),  # inverse Gaussian (Table 1 NIG, corrected nu)
    (4.0, 1e-8, 1.0),  # tiny delta: near Gamma
    (-2.5, 3.0, 1e-9),  # tiny lam: near inverse gamma
    (-1250.0, 50.0, 1.0),  # nu_hat of q(tau) for a 50x50 layer, large delta_hat
    (-1250.0, 1e3, 1e-2),
    (-1250.0, 1e-6, 1.0),  # tiny delta at large |nu|
    (-1250.0, 5.0, 1e-8),  # tiny lam at large |nu|
    (1250.0, 1.0, 3.0),
    (-24.5, 0.3, 2.0),
]


@pytest.mark.parametrize("nu,delta,lam", GIG_GENERAL)
def test_gig_moments_match_quadrature(nu, delta, lam):
    e_x, e_inv, e_log, var, _ = gig_quad_moments(nu, delta, lam)
    d = gig(nu, delta, lam)
    assert d.mean.item() == pytest.approx(e_x, rel=1e-10)
    assert d.mean_reciprocal.item() == pytest.approx(e_inv, rel=1e-10)
    assert d.mean_log.item() == pytest.approx(e_log, rel=1e-10, abs=1e-10)
    assert d.variance.item() == pytest.approx(var, rel=1e-7)


@pytest.mark.parametrize("nu,delta,lam", GIG_GENERAL + [(3.0, 0.0, 2.0), (-3.0, 2.0, 0.0), (0.4, 0.0, 1.5)])
def test_gig_log_prob_normalizes(nu, delta, lam):
    d = gig(nu, delta, lam)
    if delta > 0 and lam > 0:
        *_, (lo, hi, _) = gig_quad_moments(nu, delta, lam)
    else:
        lo, hi = -80.0, 12.0
    total = simpson_exp(lambda t: d.log_prob(torch.exp(t)) + t, lo, hi, n=200_001)
    assert total == pytest.approx(1.0, abs=1e-9)


def test_gig_entropy_matches_quadrature():
    for nu, delta, lam in [(-1.5, 1.0, 1.0), (-1250.0, 50.0, 1.0), (2.0, 0.0, 1.0), (-3.0, 2.0, 0.0)]:
        d = gig(nu, delta, lam)
        if delta > 0 and lam > 0:
            *_, (lo, hi, _) = gig_quad_moments(nu, delta, lam)
        else:
            lo, hi = -40.0, 10.0
        t = torch.linspace(lo, hi, 200_001, dtype=F64)
        lp = d.log_prob(torch.exp(t))
        ref = -integrate.simpson((torch.exp(lp + t) * lp).numpy(), x=t.numpy())
        assert d.entropy().item() == pytest.approx(ref, rel=1e-8, abs=1e-8)


def test_gig_limits_are_exact_gamma_and_inverse_gamma():
    # delta = 0: Gamma(nu, rate lam^2/2) (App. E.1 case 2)
    nu, lam = 3.5, 1.7
    d = gig(nu, 0.0, lam)
    rate = lam**2 / 2
    assert d.mean.item() == pytest.approx(nu / rate, rel=1e-15)
    assert d.mean_reciprocal.item() == pytest.approx(rate / (nu - 1), rel=1e-15)
    assert d.mean_log.item() == pytest.approx(special.digamma(nu) - math.log(rate), rel=1e-15)
    assert d.variance.item() == pytest.approx(nu / rate**2, rel=1e-15)
    x = torch.tensor([0.1, 1.0, 7.0], dtype=F64)
    ref = torch.distributions.Gamma(torch.tensor(nu, dtype=F64), torch.tensor(rate, dtype=F64)).log_prob(x)
    assert torch.allclose(d.log_prob(x), ref, rtol=1e-14)
    # lam = 0: InverseGamma(-nu, delta^2/2) (App. E.1 case 1); E log x = log(delta^2/2) - digamma(-nu)
    nu, delta = -2.5, 1.3
    d = gig(nu, delta, 0.0)
    beta = delta**2 / 2
    assert d.mean.item() == pytest.approx(-(delta**2) / (2 * nu + 2), rel=1e-15)
    assert d.mean_reciprocal.item() == pytest.approx(-2 * nu / delta**2, rel=1e-15)
    assert d.mean_log.item() == pytest.approx(math.log(beta) - special.digamma(-nu), rel=1e-15)
    assert d.variance.item() == pytest.approx(beta**2 / ((-nu - 1) ** 2 * (-nu - 2)), rel=1e-14)
    ref = pyro.distributions.InverseGamma(
        torch.tensor(-nu, dtype=F64), torch.tensor(beta, dtype=F64)
    ).log_prob(x)
    assert torch.allclose(d.log_prob(x), ref, rtol=1e-14)
    # undefined moments are inf, not nan
    assert math.isinf(gig(-0.5, 1.0, 0.0).mean.item())
    assert math.isinf(gig(0.5, 0.0, 1.0).mean_reciprocal.item())


@pytest.mark.parametrize(
    "nu,delta,lam,limit",
    [
        (3.0, 1e-12, 2.0, "gamma"),
        (1250.0, 1e-9, 2.0, "gamma"),
        (-1250.0, 5.0, 1e-12, "invgamma"),
        (-3.5, 0.5, 1e-13, "invgamma"),
    ],
)
def test_gig_near_limits_are_continuous(nu, delta, lam, limit):
    d = gig(nu, delta, lam)
    lim = gig(nu, 0.0, lam) if limit == "gamma" else gig(nu, delta, 0.0)
    for attr in ("mean", "mean_reciprocal", "mean_log", "variance"):
        a, b = getattr(d, attr).item(), getattr(lim, attr).item()
        assert math.isfinite(a)
        assert a == pytest.approx(b, rel=1e-7, abs=1e-9), attr


def test_gig_matches_scipy_geninvgauss():
    nu = torch.tensor([-1.5, 0.3, 2.0, -0.5], dtype=F64)
    delta = torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=F64)
    lam = torch.tensor([1.0, 0.4, 3.0, 0.2], dtype=F64)
    d = GeneralizedInverseGaussian(nu, delta, lam)
    ref = stats.geninvgauss(p=nu.numpy(), b=(lam * delta).numpy(), scale=(delta / lam).numpy())
    x = torch.tensor([0.3, 1.0, 2.5, 11.0], dtype=F64)
    assert np.allclose(d.log_prob(x).numpy(), ref.logpdf(x.numpy()), rtol=1e-12)
    assert np.allclose(d.mean.numpy(), ref.mean(), rtol=1e-12)
    assert np.allclose(d.variance.numpy(), ref.var(), rtol=1e-10)


def test_gig_batch_mixing_cases_matches_scalar_calls():
    params = [(-1250.0, 50.0, 1.0), (3.0, 0.0, 2.0), (-3.0, 2.0, 0.0), (0.5, 2.0, 0.3), (-0.5, 1.0, 1.0)]
    nu, delta, lam = (torch.tensor(p, dtype=F64).reshape(5, 1).expand(5, 2) for p in zip(*params))
    d = GeneralizedInverseGaussian(nu, delta, lam)
    assert d.batch_shape == (5, 2)
    x = torch.full((5, 2), 0.8, dtype=F64)
    lp = d.log_prob(x)
    for i, p in enumerate(params):
        s = gig(*p)
        for attr in ("mean", "mean_reciprocal", "mean_log", "variance"):
            assert torch.allclose(getattr(d, attr)[i], getattr(s, attr).expand(2), rtol=1e-14)
        assert torch.allclose(lp[i], s.log_prob(x[i]), rtol=1e-14)


@pytest.mark.parametrize(
    "nu,delta,lam", [(-1.5, 1.0, 1.0), (0.5, 2.0, 0.3), (0.0, 1.0, 1.0), (-0.5, 0.1, 10.0)]
)
def test_gig_sampler_ks_vs_scipy(nu, delta, lam):
    pyro.set_rng_seed(1)
    x = gig(nu, delta, lam).sample((4000,)).numpy()
    ref = stats.geninvgauss(p=nu, b=lam * delta, scale=delta / lam)
    assert stats.kstest(x, ref.cdf).pvalue > P_MIN


@pytest.mark.parametrize(
    "nu,delta,lam",
    [
        (-1250.0, 50.0, 1.0),
        (1250.0, 1.0, 3.0),
        (-1250.0, 1e-6, 1.0),
        (-1250.0, 5.0, 1e-8),
        (0.0, 1e-6, 1e-6),  # nearly log-uniform over 24 decades
        (1e-3, 1e-100, 1.0),  # near-Gamma with a tiny shape
        (3.0, 0.0, 2.0),  # exact Gamma limit
        (-3.0, 2.0, 0.0),  # exact inverse-gamma limit
    ],
)
def test_gig_sampler_ks_vs_numerical_cdf(nu, delta, lam):
    pyro.set_rng_seed(2)
    pvalue, mass = ks_in_log_space(gig(nu, delta, lam))
    assert mass == pytest.approx(1.0, abs=1e-8)
    assert pvalue > P_MIN


def test_gig_sample_shapes_dtype_device_and_seed(device):
    nu = torch.tensor([[-1250.0, 0.5, 2.0]], dtype=torch.float32, device=device).expand(2, 3)
    delta = torch.tensor([50.0, 1.0, 0.0], dtype=torch.float32, device=device)
    lam = torch.tensor(1.0, dtype=torch.float32, device=device)
    d = GeneralizedInverseGaussian(nu, delta, lam)
    assert d.batch_shape == (2, 3)
    pyro.set_rng_seed(7)
    s1 = d.sample((5,))
    pyro.set_rng_seed(7)
    s2 = d.sample((5,))
    assert s1.shape == (5, 2, 3) and s1.dtype == torch.float32 and s1.device == nu.device
    assert torch.equal(s1, s2) and (s1 > 0).all()
    assert d.sample().shape == (2, 3)
    for attr in ("mean", "mean_reciprocal", "mean_log", "variance", "mode"):
        v = getattr(d, attr)
        assert v.shape == (2, 3) and v.dtype == torch.float32 and v.device == nu.device
    e = d.expand((4, 2, 3))
    assert e.sample().shape == (4, 2, 3) and e.mean.shape == (4, 2, 3)


def test_gig_log_prob_gradcheck():
    nu = torch.tensor([-1250.0, -1.5, 0.7], dtype=F64, requires_grad=True)
    delta = torch.tensor([50.0, 1.0, 2.0], dtype=F64, requires_grad=True)
    lam = torch.tensor([1.0, 0.5, 0.3], dtype=F64, requires_grad=True)
    x = torch.tensor([0.9, 0.4, 5.0], dtype=F64, requires_grad=True)

    def f(nu, delta, lam, x):
        return GeneralizedInverseGaussian(nu, delta, lam).log_prob(x)

    assert torch.autograd.gradcheck(f, (nu, delta, lam, x), eps=1e-6, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize(
    "nu,delta,lam",
    [(1.0, -1.0, 1.0), (1.0, 1.0, -0.5), (0.0, 0.0, 1.0), (-1.0, 0.0, 1.0), (0.0, 1.0, 0.0), (2.0, 1.0, 0.0)]
    + [(-1.0, 0.0, 0.0), (float("nan"), 1.0, 1.0)],
)
def test_gig_argument_validation(nu, delta, lam):
    with pytest.raises(ValueError):
        gig(nu, delta, lam)
