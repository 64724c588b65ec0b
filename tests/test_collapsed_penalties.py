"""Collapsed variational bounds (Tomczak, Swaroop, Foong & Turner 2021, NeurIPS; issue 7), the math: the CM,
CV and CMV penalties, their identities and limits (CM with ``alpha_reg = 1`` is a Gaussian KL, CV is CMV with
``delta = 1``, CMV tends to CM as ``alpha, beta -> inf``), their gradients and no-data optima, the optimal
hyper-parameters ``alpha_reg*`` / ``delta*`` and the closed-form ``q*(tau)``. Ground truths: the maximum over
``q(theta)`` of App. B, Eq. 17 by 1-D and 2-D quadrature (which also shows Eq. 74 as printed to be off by a
constant), torch's Gaussian KL, a dense grid search of the summed penalty, and the Gamma density against the
normalized unnormalized posterior of ``tau`` on a grid.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from zoo.families.collapsed.prior import (
    optimal_alpha_reg,
    optimal_delta,
    optimal_q_tau,
    penalty_cm,
    penalty_cmv,
    penalty_cv,
)

D64 = torch.float64


def _t(v):
    return torch.tensor(v, dtype=D64)


# ------------------------------------------------------------------------------------------------
# Ground truth by quadrature: R = log ∫ p(theta) exp(E_q log p(w|theta)) dtheta + H[q]
# (the maximum over q(theta) of App. B, Eq. 17)
# ------------------------------------------------------------------------------------------------


def _entropy(var):
    return 0.5 * math.log(2 * math.pi * math.e * var)


def _quad_cm(mu, var, gamma, alpha_reg):
    alpha = gamma * (1 - alpha_reg) / alpha_reg
    c = alpha / (alpha + gamma) * mu
    sd = math.sqrt(alpha * gamma / (alpha + gamma))

    def f(m):
        e_log = -0.5 * math.log(2 * math.pi * gamma) - ((mu - m) ** 2 + var) / (2 * gamma)
        return math.exp(stats.norm.logpdf(m, 0.0, math.sqrt(alpha)) + e_log)

    val, _ = integrate.quad(f, c - 30 * sd, c + 30 * sd, epsabs=0, epsrel=1e-12, limit=200)
    return math.log(val) + _entropy(var)


def _log_gamma_pdf(tau, a, b):
    return a * math.log(b) - special.gammaln(a) + (a - 1) * math.log(tau) - b * tau


def _quad_cv(mu, var, a, b):
    def f(u):  # tau = exp(u)
        tau = math.exp(u)
        e_log = 0.5 * math.log(tau / (2 * math.pi)) - 0.5 * tau * (mu**2 + var)
        return math.exp(_log_gamma_pdf(tau, a, b) + u + e_log)

    val, _ = integrate.quad(f, -60, 30, epsabs=0, epsrel=1e-12, limit=400)
    return math.log(val) + _entropy(var)


def _quad_cmv(mu, var, a, b, delta):
    """2-D quadrature: adaptive over u = log tau, a 2001-point trapezoid rule (spectrally accurate for this
    Gaussian integrand) over mu_p within ±14 sd of its conditional optimum."""
    t = delta / (1 - delta)
    z = np.linspace(-14.0, 14.0, 2001)

    def inner(tau):
        c, sd = mu / (1 + t), 1 / math.sqrt((1 + t) * tau)
        m = c + sd * z
        e_log = 0.5 * math.log(tau / (2 * math.pi)) - 0.5 * tau * ((mu - m) ** 2 + var)
        return integrate.trapezoid(np.exp(stats.norm.logpdf(m, 0.0, 1 / math.sqrt(t * tau)) + e_log), m)

    def f(u):
        tau = math.exp(u)
        return math.exp(_log_gamma_pdf(tau, a, b) + u) * inner(tau)

    val, _ = integrate.quad(f, -40, 25, epsabs=0, epsrel=1e-11, limit=200)
    return math.log(val) + _entropy(var)


CASES = [(0.3, 0.02, 0.5, 0.01, 0.1), (-1.2, 0.4, 2.0, 0.7, 0.5), (0.05, 1e-3, 0.5, 0.01, 0.9)]


@pytest.mark.parametrize("mu,var,gamma,alpha_reg", [(0.3, 0.02, 0.05, 0.05), (-1.5, 0.3, 0.5, 0.4)])
def test_cm_penalty_matches_quadrature(mu, var, gamma, alpha_reg):
    p = penalty_cm(_t(mu), _t(var), gamma, alpha_reg)
    assert float(-p) == pytest.approx(_quad_cm(mu, var, gamma, alpha_reg), abs=1e-8)


@pytest.mark.parametrize("mu,var,a,b,delta", CASES)
def test_cv_and_cmv_penalties_match_quadrature(mu, var, a, b, delta):
    assert float(-penalty_cv(_t(mu), _t(var), a, b)) == pytest.approx(_quad_cv(mu, var, a, b), abs=1e-7)
    exact = _quad_cmv(mu, var, a, b, delta)
    r = -float(penalty_cmv(_t(mu), _t(var), a, b, delta))
    assert r == pytest.approx(exact, abs=1e-6)
    # Eq. 74 as printed carries log(delta) instead of ½ log(delta) + ½: off by a constant only.
    printed = r - (0.5 * math.log(delta) + 0.5) + math.log(delta)
    assert abs(printed - exact) > 1e-3
    assert printed - exact == pytest.approx(0.5 * math.log(delta) - 0.5, abs=1e-6)


def test_penalty_identities_and_cmv_to_cm_limit():
    g = torch.Generator().manual_seed(3)
    mu = torch.randn(50, generator=g, dtype=D64)
    var = torch.rand(50, generator=g, dtype=D64) * 0.5 + 1e-3
    gamma = 0.2
    kl = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, var.sqrt()), torch.distributions.Normal(_t(0.0), _t(gamma).sqrt())
    )
    torch.testing.assert_close(penalty_cm(mu, var, gamma, 1.0), kl, rtol=0, atol=1e-12)
    # P_CM = KL(q || N(0, alpha + gamma)) + ½ var (1/gamma − 1/(alpha+gamma))  (Eq. 29 rearranged)
    a_reg = 0.1
    big = gamma / a_reg
    kl_big = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, var.sqrt()), torch.distributions.Normal(_t(0.0), _t(big).sqrt())
    )
    torch.testing.assert_close(
        penalty_cm(mu, var, gamma, a_reg), kl_big + 0.5 * var * (1 / gamma - 1 / big), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(penalty_cv(mu, var, 0.5, 0.01), penalty_cmv(mu, var, 0.5, 0.01, 1.0))
    # CMV -> CM: alpha, beta -> inf with beta/alpha = gamma, delta = alpha_reg (Eq. 74 vs Eq. 29)
    errs = []
    for alpha in (1e2, 1e4, 1e6):
        d = penalty_cmv(mu, var, alpha, gamma * alpha, a_reg) - penalty_cm(mu, var, gamma, a_reg)
        errs.append(float(d.abs().max()))
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-5 and errs[0] > 1e-3


def test_penalty_gradients_and_no_data_optima():
    mu, var = _t(0.7).requires_grad_(), _t(0.05).requires_grad_()
    a, b, delta = 0.5, 0.01, 0.1
    gm, gv = torch.autograd.grad(penalty_cmv(mu, var, a, b, delta), (mu, var))
    mu, var = mu.detach(), var.detach()
    e_tau = (a + 0.5) / (b + 0.5 * (delta * mu**2 + var))
    assert float(gm) == pytest.approx(float(delta * mu * e_tau), rel=1e-12)
    assert float(gv) == pytest.approx(float(0.5 * e_tau - 0.5 / var), rel=1e-12)
    # no-data optimum of the variance: CMV var = (beta + delta mu²/2)/alpha; CM var = gamma (Eqs. 74, 29)
    v_star = _t((b + delta * 0.7**2 / 2) / a).requires_grad_()
    (gv,) = torch.autograd.grad(penalty_cmv(_t(0.7), v_star, a, b, delta), v_star)
    assert abs(float(gv)) < 1e-10
    m0, v0 = _t(0.0).requires_grad_(), _t(0.3).requires_grad_()
    assert all(abs(float(x)) < 1e-12 for x in torch.autograd.grad(penalty_cm(m0, v0, 0.3, 0.05), (m0, v0)))


def test_optimal_hyperparameters_maximize_the_bound():
    g = torch.Generator().manual_seed(0)
    mu = 0.4 * torch.randn(200, generator=g, dtype=D64)
    var = 0.01 + 0.02 * torch.rand(200, generator=g, dtype=D64)
    gamma = 0.02
    grid = torch.linspace(0.01, 1.0, 20000, dtype=D64)
    tot = penalty_cm(mu, var, gamma, grid[:, None]).sum(1)
    a_star = float(optimal_alpha_reg(mu, gamma))
    assert a_star == pytest.approx(float(grid[tot.argmin()]), abs=1e-4)
    assert float(optimal_alpha_reg(1e-3 * mu, gamma)) == 1.0  # clipped: Σmu² < gamma D
    tot_d = penalty_cmv(mu, var, 0.5, 0.01, grid[:-1, None]).sum(1)
    d_star = float(optimal_delta(mu, var, 0.5, 0.01))
    assert d_star == pytest.approx(float(grid[tot_d.argmin()]), abs=1e-4)
    assert 0.01 < d_star < 0.99


def test_q_tau_matches_conjugate_update_by_brute_force():
    """q*(tau) ∝ p(tau) exp(E_q log N(w|0,1/tau)): compare the Gamma(conc, rate) density with the normalized
    unnormalized posterior on a grid (CV = CMV with delta = 1)."""
    mu, var, a, b = 0.4, 0.03, 0.5, 0.01
    conc, rate = optimal_q_tau(_t(mu), _t(var), a, b, 1.0)
    taus = np.linspace(0.05, 60, 4000)
    log_un = (a - 1) * np.log(taus) - b * taus + 0.5 * np.log(taus) - 0.5 * taus * (mu**2 + var)
    dens = np.exp(log_un - log_un.max())
    dens /= integrate.trapezoid(dens, taus)
    ref = stats.gamma(float(conc), scale=1 / float(rate)).pdf(taus)
    ref /= integrate.trapezoid(ref, taus)
    assert np.max(np.abs(dens - ref)) < 1e-3 * ref.max()
