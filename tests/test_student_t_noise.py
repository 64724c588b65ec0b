"""The Student-t likelihood's conjugate noise update through its scale-mixture weights
(``StudentTLikelihood.noise_weights``, ``zoo.infer.noise.weighted_noise_rate``) and the horseshoe guides'
natural-gradient ``q(gamma)`` that uses it."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import integrate, optimize, stats

from guides.horseshoe.factorized import HorseshoeGuide
from guides.horseshoe.noise import NOISE_FINAL_DRAWS
from zoo.core.architectures import MLP
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.core.student_t import StudentTLikelihood
from zoo.experiments.registry import build
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.infer.loop import fit
from zoo.infer.noise import (
    NOISE_REFIT_DRAWS,
    lognormal_noise_factor,
    optimal_lognormal,
    refit_noise,
    residual_draws,
    weighted_noise_rate,
)
from zoo.infer.predict import predict

DF = 4.0


def _t_residuals(n: int, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, generator=g, dtype=torch.float64)
    w = torch._standard_gamma(torch.full((n,), DF / 2, dtype=torch.float64), generator=g) / (DF / 2)
    return scale * u / w.sqrt()


def test_weights_are_the_mixing_variables_posterior_means():
    """``E[u | z] = (df + 1) / (df + p z)`` for the inverse variance multiplier ``u = 1 / lambda ~
    Gamma(df/2, df/2)`` and ``y | u ~ N(0, 1 / (p u))``: checked by quadrature of the posterior of ``u``."""
    lik = StudentTLikelihood(df=DF)
    for z, p in ((0.0, 2.0), (0.3, 1.5), (4.0, 0.7), (25.0, 3.0)):

        def dens(lam: float, z: float = z, p: float = p) -> float:
            return stats.gamma.pdf(lam, DF / 2, scale=2 / DF) * math.sqrt(lam) * math.exp(-0.5 * p * lam * z)

        tight = {"epsabs": 0.0, "epsrel": 1e-12, "limit": 200}
        mean = integrate.quad(lambda lam: lam * dens(lam), 0, math.inf, **tight)[0]
        want = mean / integrate.quad(dens, 0, math.inf, **tight)[0]
        got = float(lik.noise_weights(torch.tensor(z, dtype=torch.float64), p))
        assert got == pytest.approx(want, rel=1e-8), (z, p)
    assert GaussianLikelihood().noise_weights(torch.ones(3), 2.0) == 1.0
    with pytest.raises(ValueError, match="precision"):
        lik.noise_weights(torch.ones(3))
    with pytest.raises(ValueError, match="precision"):
        lik.scaled_squared_error(torch.zeros(3, 1), torch.zeros(3))


def test_fixed_point_is_the_maximum_likelihood_t_scale():
    """With ``a = N / 2`` and ``b0 = 0`` the fixed point's ``b / a`` maximizes the Student-t log-likelihood
    of the residuals in the squared scale (known location and df; a bounded 1-d maximization by scipy)."""
    r = _t_residuals(3000, 0.7, seed=3)
    lik = StudentTLikelihood(df=DF)
    a = r.numel() / 2
    b = weighted_noise_rate(lik, r.pow(2)[None], a, 0.0, b=a)
    loglik = lambda log_s2: -stats.t.logpdf(r.numpy(), DF, scale=math.exp(0.5 * log_s2)).sum()  # noqa: E731
    best = optimize.minimize_scalar(loglik, bounds=(-6.0, 2.0), method="bounded", options={"xatol": 1e-10})
    assert b / a == pytest.approx(math.exp(best.x), rel=1e-7)
    assert math.sqrt(b / a) == pytest.approx(0.7, rel=0.05)  # and it estimates the scale that made them


def test_fixed_point_solves_its_equation_from_any_start():
    """Several draws, a proper prior: the returned ``b`` satisfies ``b = b0 + mean_d sum w(a/b) z / 2`` to
    the tolerance, whatever the start; the Gaussian's is ``b0 + mean_d sum z / 2`` at once."""
    z = torch.stack([_t_residuals(200, 0.4, seed=s).pow(2) for s in range(5)])
    lik, a, b0 = StudentTLikelihood(df=DF), 6.0 + 100.0, 6.0
    answers = [weighted_noise_rate(lik, z, a, b0, b=start) for start in (1e-3, 10.0, 1e4)]
    for b in answers:
        rhs = b0 + 0.5 * float((lik.noise_weights(z, a / b) * z).sum()) / z.shape[0]
        assert b == pytest.approx(rhs, rel=1e-9)
        assert b == pytest.approx(answers[0], rel=1e-8)
    gauss = weighted_noise_rate(GaussianLikelihood(), z, a, b0, b=1.0)
    assert gauss == pytest.approx(b0 + 0.5 * float(z.sum()) / 5, rel=1e-12)


def _hs_problem(n: int = 300, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + _t_residuals(n, 0.2, seed).float()
    lik = StudentTLikelihood(DF, noise="gamma", concentration=6.0, rate=6.0)
    model = BayesianModel(MLP(2, (8,), 1), HorseshoePrior(), lik)
    return model, x, y


def test_natural_gradient_steps_reach_the_fixed_point_at_fixed_weights():
    """With the weights held (the guide's initial spread is 4.5e-5, so every draw gives the same residuals),
    the natural-gradient steps on ``q(gamma)`` converge to the solution of the coordinate update that
    :meth:`closed_form_finalize` computes, and ``a = a0 + N / 2`` exactly."""
    torch.manual_seed(0)
    model, x, y = _hs_problem()
    guide = HorseshoeGuide(model)
    with torch.no_grad():
        for _ in range(3000):
            guide.update_noise(model, x, y)
    assert float(guide.noise_conc) == pytest.approx(6.0 + x.shape[0] / 2, rel=1e-6)
    running = float(guide.noise_rate)
    torch.manual_seed(1)
    guide.closed_form_finalize(model, x, y)
    final = float(guide.noise_rate_final)
    torch.manual_seed(1)  # the same draws as the final update
    z = residual_draws(guide, model, x, y, NOISE_FINAL_DRAWS)
    assert float(z.sum((1,)).std() / z.sum((1,)).mean()) < 1e-3  # the draws agree: the weights are held
    want = weighted_noise_rate(model.likelihood, z, float(guide.noise_conc), 6.0, b=1.0)
    assert final == pytest.approx(want, rel=1e-8)
    assert running == pytest.approx(final, rel=1e-3)
    # the t's rate is not the Gaussian's: heavy tails get weights below 1
    assert final < 6.0 + 0.5 * float(z[0].sum()) * 0.95


def test_the_horseshoes_natural_update_takes_a_student_t():
    """``hs-bnn`` and ``reg-hs-bnn`` with ``student_t_df`` fit with their default ``noise_update``; a
    likelihood whose noise has no conjugate update is still refused, naming the option."""
    model, x, y = _hs_problem(120, 1)
    for name in ("hs-bnn", "reg-hs-bnn"):
        m, guide, _ = build(name, 2, 1, "regression", hidden=[8], seed=0, student_t_df=DF)
        assert guide.noise_update == "natural"
        result = fit(m, guide, x, y, steps=60, seed=0, progress=False)
        assert float(guide.noise_final) == 1.0 and math.isfinite(float(guide.noise_rate_final))
        assert predict(result, x[:5], num_samples=4, seed=0).df == DF

    class NonConjugate(GaussianLikelihood):
        conjugate_noise = False

    bad = BayesianModel(MLP(2, (8,), 1), HorseshoePrior(), NonConjugate("gamma", 6.0, 6.0))
    with pytest.raises(ValueError, match="noise_update"):
        HorseshoeGuide(bad)


@pytest.mark.parametrize("name", ["mfvi-bnn", "lbbnn"])
def test_the_refit_after_the_last_step_solves_the_weighted_update(name):
    """After a Student-t fit the log-normal noise factor is the optimum of ``zoo.infer.noise`` with ``S`` the
    weighted sum at the fixed point; under it ``E_q[1 / sigma^2] = A / B``.  Re-running the refit with the
    same random stream reproduces the fitted factor, and a fit with ``noise_refit=False`` keeps the
    training value."""
    x, y = _hs_problem(200, 2)[1:]
    runs = {}
    for refit in (True, False):
        m, g, _ = build(name, 2, 1, "regression", hidden=[8], seed=0, student_t_df=DF)
        runs[refit] = fit(m, g, x, y, steps=150, seed=3, progress=False, noise_refit=refit)
    on = runs[True]
    assert "noise_train" in on.loop_state and "noise_train" not in runs[False].loop_state
    model, guide = on.model, on.guide
    lik = model.likelihood
    a0, b0 = float(lik.concentration), float(lik.rate)
    a = a0 + 0.5 * y.numel()
    loc_mod, loc_name, scale_mod, scale_name = lognormal_noise_factor(guide, model)
    with on.activate():
        fitted = (float(getattr(loc_mod, loc_name).detach()), float(getattr(scale_mod, scale_name).detach()))
        torch.manual_seed(11)
        refit_noise(guide, model, x, y)
        again = (float(getattr(loc_mod, loc_name).detach()), float(getattr(scale_mod, scale_name).detach()))
        torch.manual_seed(11)
        z = residual_draws(guide, model, x, y, NOISE_REFIT_DRAWS)
    b = weighted_noise_rate(lik, z, a, b0, b=1.0)
    m_want, v_want = optimal_lognormal("inverse_gamma", a0, b0, y.numel(), 2.0 * (b - b0))
    assert again[0] == pytest.approx(m_want, rel=1e-6) and again[1] == pytest.approx(
        math.sqrt(v_want), rel=1e-6
    )
    assert math.exp(-again[0] + 0.5 * again[1] ** 2) == pytest.approx(a / b, rel=1e-6)  # E[1/sigma^2]
    assert fitted[1] == pytest.approx(again[1], rel=1e-6)  # the fit's own refit: the same A, another stream
