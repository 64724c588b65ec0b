"""The torch GIG moments / log K (zoo.distributions.bessel_torch) against the float64 numpy/scipy kernels
and scipy.stats.geninvgauss, over a grid of orders (up to |nu| = 1250, Eq. 13's regime) and arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from zoo.distributions.bessel import log_bessel_k
from zoo.distributions.bessel_np import dlogk_np, log_ratio_np, logk_np
from zoo.distributions.bessel_torch import gig_moment_torch, log_k, quadrature_moments
from zoo.distributions.gig import GeneralizedInverseGaussian
from zoo.distributions.gig_moments import MOMENTS, gig_moment_np

NUS = np.array([-1250, -300, -60, -20.5, -19.9, -3.3, -1.5, -0.5, 0, 0.3, 0.7, 1, 2.5, 19.5, 25, 300, 1250.0])
ZS = np.array([1e-8, 1e-6, 1e-3, 0.05, 0.5, 1, 3, 10, 50, 1e3])
GRID = np.meshgrid(NUS, ZS, indexing="ij")


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


def test_quadrature_equals_numpy_kernels_over_grid():
    n, z = GRID
    q = {k: v.numpy() for k, v in quadrature_moments(torch.tensor(n), torch.tensor(z)).items()}
    assert _rel(q["log_k"], logk_np(n, z)) < 1e-12
    assert _rel(q["log_ratio"], log_ratio_np(n, z)) < 1e-12  # log K_{nu+1}/K_nu
    assert _rel(q["log_inv_ratio"], -log_ratio_np(n - 1.0, z)) < 1e-12  # log K_{nu-1}/K_nu
    assert _rel(q["dlogk"], dlogk_np(n, z)) < 1e-12
    rel_var = np.expm1(log_ratio_np(n + 1.0, z) - log_ratio_np(n, z))  # R_{nu+1}/R_nu - 1
    np.testing.assert_allclose(q["rel_var"], rel_var, rtol=1e-9)


def _params() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The general grid plus the Gamma (delta = 0) and inverse-gamma (lam = 0) limits of App. E.1,
    including orders where a moment does not exist (inf)."""
    n, z = GRID
    nu = list(n.ravel()) + [0.5, 1.0, 2.5, 3.0, -0.5, -1.0, -1.5, -2.5, -1250.0]
    delta = list(np.sqrt(z.ravel())) + [0.0] * 4 + [0.7, 1.3, 2.0, 0.2, 5.0]
    lam = list(np.sqrt(z.ravel())) + [0.6, 1.0, 2.0, 0.1] + [0.0] * 5
    return tuple(torch.tensor(v, dtype=torch.float64) for v in (nu, delta, lam))


@pytest.mark.parametrize("what", MOMENTS)
def test_gig_moments_torch_equal_numpy(what):
    nu, delta, lam = _params()
    got = gig_moment_torch(what, nu, delta, lam).numpy()
    want = gig_moment_np(what, nu.numpy(), delta.numpy(), lam.numpy())
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    assert fin.sum() > 150
    tol = 1e-9 if what == "var" else 1e-11
    atol = 1e-14 if what == "log" else 0.0  # E[log x] = 0 exactly at nu = 0, delta = lam
    np.testing.assert_allclose(got[fin], want[fin], rtol=tol, atol=atol)


def test_gig_moments_against_scipy_geninvgauss():
    """Independent ground truth: scipy's geninvgauss(p=nu, b=lam*delta, scale=delta/lam)."""
    for nu, delta, lam in [(-0.5, 1.3, 0.7), (2.5, 0.4, 2.0), (-30.0, 3.0, 0.2), (0.0, 1.0, 1.0)]:
        ref = stats.geninvgauss(p=nu, b=lam * delta, scale=delta / lam)
        t = [torch.tensor(v, dtype=torch.float64) for v in (nu, delta, lam)]
        np.testing.assert_allclose(float(gig_moment_torch("mean", *t)), ref.mean(), rtol=1e-9)
        np.testing.assert_allclose(float(gig_moment_torch("var", *t)), ref.var(), rtol=1e-8)
        recip = ref.expect(lambda x: 1.0 / x)
        np.testing.assert_allclose(float(gig_moment_torch("recip", *t)), recip, rtol=1e-7)


def test_log_k_gradients_match_the_numpy_autograd_function():
    n = torch.tensor([-1250.0, -20.5, -0.5, 0.3, 2.5, 60.0], dtype=torch.float64, requires_grad=True)
    z = torch.tensor([3.0, 0.5, 1e-4, 10.0, 1.0, 200.0], dtype=torch.float64, requires_grad=True)
    g_torch = torch.autograd.grad(log_k(n, z).sum(), (n, z))
    g_np = torch.autograd.grad(log_bessel_k(n, z).sum(), (n, z))
    for a, b in zip(g_torch, g_np):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_gig_distribution_uses_torch_off_cpu_and_agrees(monkeypatch):
    """The class dispatches by device; forcing the torch path on the CPU gives the numpy path's values."""
    nu, delta, lam = _params()
    d = GeneralizedInverseGaussian(nu, delta, lam)
    want = {k: getattr(d, k) for k in ("mean", "mean_reciprocal", "mean_log", "variance")}
    want["entropy"] = d.entropy()
    calls = []

    def forced(self, what):
        calls.append(what)
        return gig_moment_torch(what, self.nu, self.delta, self.lam).to(self.nu.dtype)

    monkeypatch.setattr(GeneralizedInverseGaussian, "_moment", forced)
    for name, value in want.items():
        got = d.entropy() if name == "entropy" else getattr(d, name)
        fin = torch.isfinite(value)
        assert torch.equal(fin, torch.isfinite(got)), name
        torch.testing.assert_close(got[fin], value[fin], rtol=1e-9, atol=1e-12, msg=name)
    assert set(calls) == set(MOMENTS)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gig_moments_on_cuda_equal_cpu():
    nu, delta, lam = _params()
    cpu = GeneralizedInverseGaussian(nu, delta, lam)
    gpu = GeneralizedInverseGaussian(nu.cuda(), delta.cuda(), lam.cuda())
    for name in ("mean", "mean_reciprocal", "mean_log", "variance"):
        a, b = getattr(cpu, name), getattr(gpu, name)
        assert b.device.type == "cuda"
        fin = torch.isfinite(a)
        torch.testing.assert_close(b.cpu()[fin], a[fin], rtol=1e-9, atol=1e-12, msg=name)
    torch.testing.assert_close(gpu.log_normalizer().cpu(), cpu.log_normalizer(), rtol=1e-11, atol=1e-9)
