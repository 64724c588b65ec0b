"""Tests for ``zoo.distributions``: the normal–GIG scale mixtures of Table 1 (paper 000; note Sec. 5.6) — the
mixing constructors, the marginal densities, ``NormalGIG`` — and all the distributions inside a Pyro model.

Ground truths: the GIG parameters of Table 1 and the inverse-Gaussian moments of App. E.1, the numerical
mixture integral over the GIG scale, scipy's Student-t, Laplace and normal-inverse-Gaussian densities, and KS
tests of Monte Carlo scale-mixture draws against the marginal CDF.
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from scipy import integrate, special, stats

from zoo.distributions import (
    GeneralizedInverseGaussian,
    NormalGIG,
    PolyaGamma,
    inverse_gamma_mixing,
    laplace_marginal,
    laplace_mixing,
    ngig_marginal_log_prob,
    normal_gamma_marginal_log_prob,
    normal_gamma_mixing,
    normal_inverse_gaussian_marginal_log_prob,
    normal_inverse_gaussian_mixing,
    student_t_marginal,
    student_t_mixing,
)

from .helpers import gig, simpson_exp, t64

pytestmark = pytest.mark.usefixtures("one_torch_thread")

F64 = torch.float64
P_MIN = 1e-3  # KS / goodness-of-fit threshold at a fixed seed


# ----------------------------------------------------------------------------------------------------------
# N-GIG (Table 1)
# ----------------------------------------------------------------------------------------------------------


def test_table1_constructors_use_the_right_gig_parameters():
    st = student_t_mixing(torch.tensor(3.0, dtype=F64), 2.0)
    assert st.nu.item() == -1.5 and st.delta.item() == pytest.approx(2 * math.sqrt(3)) and st.lam.item() == 0
    ig = inverse_gamma_mixing(-2.5, 1.0)
    assert ig.lam.item() == 0.0 and ig.nu.item() == -2.5
    lap = laplace_mixing(torch.tensor(2.0, dtype=F64))
    assert (lap.nu.item(), lap.delta.item(), lap.lam.item()) == (1.0, 0.0, 2.0)
    ng = normal_gamma_mixing(0.3, 1.0)
    assert ng.delta.item() == 0.0 and ng.nu.item() == pytest.approx(0.3)
    nig = normal_inverse_gaussian_mixing(torch.tensor(1.5, dtype=F64), 2.0)
    assert nig.nu.item() == -0.5  # Table 1 prints +1/2; App. E.1 case 3 (inverse Gaussian) is -1/2
    # the inverse-Gaussian moments of App. E.1: E[x] = delta/lam, E[1/x] = lam/delta + 1/delta^2
    assert nig.mean.item() == pytest.approx(1.5 / 2.0, rel=1e-14)
    assert nig.mean_reciprocal.item() == pytest.approx(2.0 / 1.5 + 1 / 1.5**2, rel=1e-14)


NGIG_CASES = [
    ("student_t", (-1.5, 0.8, 0.0)),
    ("laplace", (1.0, 0.0, 1.3)),
    ("normal_gamma", (2.0, 0.0, 0.9)),
    ("normal_gamma_spiky", (0.3, 0.0, 0.9)),
    ("nig", (-0.5, 1.2, 0.7)),
    ("generic", (0.3, 1.2, 0.7)),
    ("large_order", (-30.0, 4.0, 0.5)),
]


@pytest.mark.parametrize("name,params", NGIG_CASES)
def test_ngig_marginal_matches_numerical_mixture_integral(name, params):
    nu, delta, lam = params
    tau = 1.7
    mix = gig(nu, delta, lam)
    ws = [0.3, 2.5, -6.0] + ([0.0] if nu > 0.5 or delta > 0 else [])
    for w in ws:

        def log_integrand(t, w=w):
            x = torch.exp(t)
            return mix.log_prob(x) + t - 0.5 * w * w / (tau * x) - 0.5 * torch.log(2 * math.pi * tau * x)

        ref = simpson_exp(log_integrand, -60.0, 15.0, n=200_001)
        got = ngig_marginal_log_prob(torch.tensor(w, dtype=F64), nu, delta, lam, tau).item()
        assert got == pytest.approx(math.log(ref), abs=1e-8), (name, w)


def test_ngig_marginals_match_named_closed_forms():
    w = torch.linspace(-8.0, 8.0, 33, dtype=F64)
    tau = 2.0
    # Student-t (Table 1 col. 1): df = -2 nu, scale = delta / sqrt(-2 nu)
    lp = ngig_marginal_log_prob(w, -2.5, 1.1, 0.0, tau)
    ref = stats.t(df=5.0, scale=1.1 * math.sqrt(tau) / math.sqrt(5.0)).logpdf(w.numpy())
    assert np.allclose(lp.numpy(), ref, rtol=1e-12)
    st = student_t_marginal(*t64(-2.5, 1.1, tau))
    assert torch.allclose(st.log_prob(w), lp, rtol=1e-12)
    # Laplace (col. 2): scale sqrt(tau) / lam
    lp = ngig_marginal_log_prob(w[w != 0], 1.0, 0.0, 1.3, tau)
    ref = stats.laplace(scale=math.sqrt(tau) / 1.3).logpdf(w[w != 0].numpy())
    assert np.allclose(lp.numpy(), ref, rtol=1e-12)
    assert torch.allclose(laplace_marginal(*t64(1.3, tau)).log_prob(w[w != 0]), lp, rtol=1e-12)
    # NIG (col. 4, nu = -1/2): scipy.stats.norminvgauss(a = lam*delta, b = 0, scale = delta)
    delta, lam = 1.2, 0.7
    lp = normal_inverse_gaussian_marginal_log_prob(w, delta, lam)
    ref = stats.norminvgauss(a=lam * delta, b=0.0, scale=delta).logpdf(w.numpy())
    assert np.allclose(lp.numpy(), ref, rtol=1e-12)
    # ... which differs from the App. E.1 display (lam/pi) e^lam (delta^2+w^2)^(-1/2) K_1(lam/delta sqrt(.))
    r = np.sqrt(delta**2 + w.numpy() ** 2)
    paper = np.log(lam / math.pi) + lam - np.log(r) + np.log(special.kv(1, lam / delta * r))
    assert not np.allclose(paper, ref, rtol=1e-3)
    r1 = np.sqrt(1.0 + w.numpy() ** 2)  # ... except at delta = 1
    paper1 = np.log(lam / math.pi) + lam - np.log(r1) + np.log(special.kv(1, lam * r1))
    assert np.allclose(paper1, normal_inverse_gaussian_marginal_log_prob(w, 1.0, lam).numpy(), rtol=1e-12)
    # normal-gamma (col. 3) at nu = 1 is the Laplace
    lp = normal_gamma_marginal_log_prob(w[w != 0], 1.0, 1.3)
    assert np.allclose(lp.numpy(), stats.laplace(scale=1 / 1.3).logpdf(w[w != 0].numpy()), rtol=1e-12)


@pytest.mark.parametrize(
    "name,mixing,ref_logpdf",
    [
        (
            "student_t",
            lambda: student_t_mixing(torch.tensor(3.0, dtype=F64), 0.5),
            stats.t(df=3, scale=0.5).logpdf,
        ),
        (
            "laplace",
            lambda: laplace_mixing(torch.tensor(1.3, dtype=F64)),
            stats.laplace(scale=1 / 1.3).logpdf,
        ),
        (
            "nig",
            lambda: normal_inverse_gaussian_mixing(torch.tensor(1.2, dtype=F64), 0.7),
            stats.norminvgauss(a=0.84, b=0.0, scale=1.2).logpdf,
        ),
        ("normal_gamma", lambda: normal_gamma_mixing(torch.tensor(2.0, dtype=F64), 0.9), None),
    ],
)
def test_ngig_scale_mixture_samples_match_marginal_cdf(name, mixing, ref_logpdf):
    """Monte Carlo w = sqrt(psi) z, psi from the Table 1 mixing distribution, vs the closed-form marginal.

    scipy's Student-t / Laplace / NIG densities (N-GIG closed form for normal-gamma); KS on a tabulated CDF.
    """
    pyro.set_rng_seed(5)
    mix = mixing()
    w = NormalGIG(mix.nu, mix.delta, mix.lam).sample((6000,)).numpy()
    grid = np.linspace(-400.0, 400.0, 400_001)
    if ref_logpdf is None:
        logpdf = ngig_marginal_log_prob(torch.tensor(grid), mix.nu, mix.delta, mix.lam).numpy()
    else:
        logpdf = ref_logpdf(grid)
    table = integrate.cumulative_trapezoid(np.exp(logpdf), grid, initial=0.0)
    assert table[-1] == pytest.approx(1.0, abs=1e-3)  # Student-t(3) tails beyond +-400 hold ~1e-6
    assert stats.kstest(w, lambda v: np.interp(v, grid, table / table[-1])).pvalue > P_MIN


def test_normal_gig_distribution_interface():
    d = NormalGIG(torch.tensor([-1.5, -0.5], dtype=F64), torch.tensor([1.0, 1.2], dtype=F64), 0.7, tau=2.0)
    assert d.batch_shape == (2,)
    s = d.sample((3,))
    assert s.shape == (3, 2)
    assert torch.allclose(d.variance, 2.0 * d.mixing.mean)
    assert torch.isfinite(d.log_prob(s)).all()
    with pytest.raises(ValueError):
        NormalGIG(1.0, 1.0, 1.0, tau=-1.0)


def test_distributions_work_inside_a_pyro_model():
    """Eqs. (5)-(7) and (8) as a Pyro model: GIG local/global scales, N(0, tau psi) weights, PG latents."""

    def model():
        tau = pyro.sample("tau", GeneralizedInverseGaussian(*t64(-1.5, 1.0, 0.0)))
        with pyro.plate("weights", 6):
            psi = pyro.sample("psi", GeneralizedInverseGaussian(*t64(-0.5, 1.0, 2.0)))
            pyro.sample("w", pyro.distributions.Normal(0.0, torch.sqrt(tau * psi)))
            pyro.sample("omega", PolyaGamma(*t64(1.0, 0.0)))
        pyro.sample("v", NormalGIG(*t64(1.0, 0.0, 1.3)), obs=torch.tensor(0.4, dtype=F64))

    tr = pyro.poutine.trace(model).get_trace()
    tr.compute_log_prob()
    assert tr.nodes["psi"]["value"].shape == (6,) and tr.nodes["omega"]["value"].shape == (6,)
    assert math.isfinite(tr.log_prob_sum().item())
