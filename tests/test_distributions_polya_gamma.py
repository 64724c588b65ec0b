"""Tests for ``zoo.distributions``: the Pólya–Gamma distribution of paper 000 Sec. 2.3, Eqs. (8)-(9).

Ground truths: the closed-form mean and variance (Eq. (9), in 50-digit mpmath, with the ``c -> 0`` limits
``b/4`` and ``b/24``), a multi-precision (mpmath) alternating series for ``PG(b, 0)``, quadrature of the
density (normalization and mean), the ``polyagamma`` package's density, the analytic derivative of the
tilted density in ``c``, and moments and KS tests of the sampler.
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from scipy import integrate, stats

from zoo.distributions import PolyaGamma, polya_gamma_mean, polya_gamma_variance

pytestmark = pytest.mark.usefixtures("one_torch_thread")

F64 = torch.float64
P_MIN = 1e-3  # KS / goodness-of-fit threshold at a fixed seed


def pg0_logpdf_mp(x, b):
    """log PG(x | b, 0) from the alternating small-x series (J*(b) / 4) in multi-precision (mpmath)."""
    mp = pytest.importorskip("mpmath")
    dps = int(40 + (math.pi**2 * x / 2 + 10 * math.log10(1 + b) + 5) / 2.3 * 1.3)
    with mp.workdps(dps):
        x, b = mp.mpf(x), mp.mpf(b)
        y = 4 * x
        total, n = mp.mpf(0), 0
        while True:
            term = (
                (-1) ** n
                * mp.exp(mp.loggamma(n + b) - mp.loggamma(n + 1))
                * (2 * n + b)
                / mp.sqrt(2 * mp.pi * y**3)
                * mp.exp(-((2 * n + b) ** 2) / (2 * y))
            )
            total += term
            if n > 5 and abs(term) < abs(total) * mp.mpf(10) ** (-30) and (2 * n + b) ** 2 / (2 * y) > 10:
                break
            n += 1
        return float(mp.log(4 * 2**b / mp.gamma(b) * total))


# ----------------------------------------------------------------------------------------------------------
# Pólya–Gamma
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [0.0, 1e-8, -1e-8, 1e-3, 0.3, 5.0, -5.0, 50.0, 800.0])
def test_pg_mean_and_variance_closed_forms(c):
    mp = pytest.importorskip("mpmath")
    b = torch.tensor([1.0, 2.5], dtype=F64)
    ct = torch.full_like(b, c)
    mean, var = polya_gamma_mean(b, ct), polya_gamma_variance(b, ct)
    assert torch.isfinite(mean).all() and torch.isfinite(var).all()
    with mp.workdps(50):
        cm = mp.mpf(c)
        if c == 0:
            m_ref, v_ref = mp.mpf(1) / 4, mp.mpf(1) / 24
        else:
            m_ref = mp.tanh(cm / 2) / (2 * cm)  # Eq. (9)
            v_ref = (mp.sinh(cm) - cm) / (4 * cm**3 * mp.cosh(cm / 2) ** 2)
    assert torch.allclose(mean, b * float(m_ref), rtol=1e-14)
    assert torch.allclose(var, b * float(v_ref), rtol=1e-12)
    if abs(c) < 1e-6:  # c -> 0 limits b/4 and b/24 (note Sec. 5.3)
        assert torch.allclose(mean, b / 4, rtol=1e-12) and torch.allclose(var, b / 24, rtol=1e-12)
    d = PolyaGamma(b, ct)
    assert torch.equal(d.mean, mean) and torch.equal(d.variance, var)


def test_pg_mean_gradient_finite_at_zero():
    c = torch.tensor([0.0, 1e-9, 2.0], dtype=F64, requires_grad=True)
    (polya_gamma_mean(1.0, c).sum() + polya_gamma_variance(1.0, c).sum()).backward()
    assert torch.isfinite(c.grad).all()
    assert c.grad[0].item() == 0.0


@pytest.mark.parametrize(
    "b,x",
    [(1.0, 0.05), (1.0, 0.3), (1.0, 3.0), (1.0, 12.0), (1.0, 40.0), (0.3, 2.0), (2.5, 6.0)]
    + [(10.0, 12.0), (50.0, 12.5), (50.0, 25.0), (50.0, 4.0), (200.0, 50.0), (200.0, 90.0)],
)
def test_pg_log_prob_matches_multiprecision_series(b, x):
    ref = pg0_logpdf_mp(x, b)
    got = PolyaGamma(torch.tensor(b, dtype=F64)).log_prob(torch.tensor(x, dtype=F64)).item()
    assert math.isfinite(got)
    assert got == pytest.approx(ref, rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("b,c", [(1.0, 0.0), (1.0, 3.0), (2.5, -2.0), (0.4, 0.5), (50.0, 10.0)])
def test_pg_log_prob_normalizes_and_has_right_mean(b, c):
    d = PolyaGamma(torch.tensor(b, dtype=F64), torch.tensor(c, dtype=F64))
    m, sd = d.mean.item(), math.sqrt(d.variance.item())
    # integrate in t = log x (the left tail exp(-b^2 / 8x) is extremely thin)
    lo, hi = math.log(m) - 12.0, math.log(m + 60 * sd + 20.0)
    t = torch.linspace(lo, hi, 20_001, dtype=F64)
    lp = d.log_prob(torch.exp(t)).numpy()
    total = integrate.simpson(np.exp(lp + t.numpy()), x=t.numpy())
    first = integrate.simpson(np.exp(lp + 2 * t.numpy()), x=t.numpy())
    assert total == pytest.approx(1.0, abs=1e-9)
    assert first == pytest.approx(m, rel=1e-9)


@pytest.mark.parametrize("b,c", [(1.0, 0.0), (1.0, 4.5), (3.3, -2.0), (0.5, 0.0)])
def test_pg_sampler_goodness_of_fit(b, c):
    pyro.set_rng_seed(3)
    n = 20_000
    d = PolyaGamma(torch.tensor(b, dtype=F64), torch.tensor(c, dtype=F64))
    x = d.sample((n,)).numpy()
    # moments within 5 standard errors of the closed forms (Eq. (9))
    m, v = d.mean.item(), d.variance.item()
    assert abs(x.mean() - m) < 5 * math.sqrt(v / n)
    m4 = np.mean((x - x.mean()) ** 4)
    assert abs(x.var() - v) < 5 * math.sqrt((m4 - x.var() ** 2) / n)
    # KS against the CDF of our density (cumulative integral of exp(log_prob))
    grid = np.linspace(1e-6, x.max() + 5 * math.sqrt(v), 20_001)
    dens = np.exp(d.log_prob(torch.tensor(grid, dtype=F64)).numpy())
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0.0)
    assert cdf[-1] == pytest.approx(1.0, abs=1e-5)
    assert stats.kstest(x, lambda v_: np.interp(v_, grid, cdf / cdf[-1])).pvalue > P_MIN


def test_pg_shapes_dtype_device_and_seed(device):
    b = torch.tensor([[1.0], [2.0], [0.5]], dtype=torch.float32, device=device)
    c = torch.tensor([0.0, 3.0], dtype=torch.float32, device=device)
    d = PolyaGamma(b, c)
    assert d.batch_shape == (3, 2) and d.has_rsample is False
    pyro.set_rng_seed(11)
    s1 = d.sample((4,))
    pyro.set_rng_seed(11)
    s2 = d.sample((4,))
    s3 = d.sample((4,))
    assert s1.shape == (4, 3, 2) and s1.dtype == torch.float32 and s1.device == b.device
    assert torch.equal(s1, s2) and not torch.equal(s2, s3) and (s1 > 0).all()
    assert d.sample().shape == (3, 2)
    assert PolyaGamma(1.0, 0.0).sample((7,)).shape == (7,)
    lp = d.log_prob(s1)
    assert lp.shape == (4, 3, 2) and lp.device == b.device and torch.isfinite(lp).all()
    assert d.mean.shape == (3, 2) and d.variance.device == b.device
    assert d.expand((5, 3, 2)).sample().shape == (5, 3, 2)


def test_pg_log_prob_matches_package_and_tilt():
    polyagamma = pytest.importorskip("polyagamma")
    x = np.array([0.05, 0.2, 0.7, 1.5])
    for b, c in [(1.0, 0.0), (2.0, 3.0), (0.7, -1.5)]:
        got = PolyaGamma(torch.tensor(b, dtype=F64), torch.tensor(c, dtype=F64)).log_prob(torch.tensor(x))
        ref = polyagamma.polyagamma_pdf(x, h=b, z=c, return_log=True)
        assert np.allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_pg_log_prob_differentiable_in_c():
    c = torch.tensor(1.3, dtype=F64, requires_grad=True)
    x = torch.tensor(0.2, dtype=F64)
    PolyaGamma(torch.tensor(1.0, dtype=F64), c).log_prob(x).backward()
    # d/dc [b log cosh(c/2) - c^2 x / 2] = (b/2) tanh(c/2) - c x
    assert c.grad.item() == pytest.approx(0.5 * math.tanh(0.65) - 1.3 * 0.2, rel=1e-12)


@pytest.mark.parametrize("b", [0.0, -1.0, float("nan")])
def test_pg_argument_validation(b):
    with pytest.raises(ValueError):
        PolyaGamma(torch.tensor(b), torch.tensor(0.0))
    with pytest.raises(ValueError):
        PolyaGamma(1.0, 0.0).log_prob(torch.tensor(-0.5))
