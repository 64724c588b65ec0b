"""The horseshoe guides' noise factor ``q(gamma)`` (guides.horseshoe.noise): the conjugate natural-gradient
step against a Monte Carlo ground truth, its minibatch scaling, the fit-level result and the paper's
gradient option."""

from __future__ import annotations

import math
import re

import pyro
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import Predictive

from guides.horseshoe.factorized import HorseshoeGuide
from guides.horseshoe.noise import NOISE_FINAL_DRAWS, NOISE_STEP_POWER, expected_squared_error
from guides.horseshoe.structured import StructuredHorseshoeGuide
from zoo.core.architectures import MLP
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.families.horseshoe.prior import HorseshoePrior
from zoo.infer.loop import fit

A0, B0 = 6.0, 6.0


def _problem(n: int = 80, seed: int = 0, noise_sd: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + noise_sd * torch.randn(n, generator=g)
    model = BayesianModel(MLP(2, (8,), 1), HorseshoePrior(), GaussianLikelihood("gamma", A0, B0))
    return model, x, y


def _widen(guide: HorseshoeGuide) -> None:
    """Give the weight rows a visible spread so the squared error varies from draw to draw."""
    with torch.no_grad():
        for name, p in guide.named_parameters():
            if re.fullmatch(r"l\d+_sd_raw_unconstrained", name):  # the weight rows' standard deviations
                p.fill_(math.log(math.expm1(0.3)))


def _final_weights(steps: int) -> torch.Tensor:
    """Weight of each step's estimate in the rate after ``steps`` updates with ``rho_t = t^-kappa``."""
    rho = torch.arange(1, steps + 1, dtype=torch.float64) ** -NOISE_STEP_POWER
    keep = torch.cumprod(torch.flip(1 - rho, [0]), 0)  # prod_{s > t} (1 - rho_s), reversed
    later = torch.cat([torch.flip(keep, [0])[1:], torch.ones(1, dtype=torch.float64)])
    return rho * later


def _mc_expected_sse(model, guide, x, y, draws: int = 4000) -> tuple[float, float]:
    f = Predictive(model, guide=guide, num_samples=draws, return_sites=["f"])(x)["f"][..., 0]
    sse = (y - f).pow(2).sum(-1)
    return float(sse.mean()), float(sse.std())


@pytest.mark.parametrize("subsample", [False, True], ids=["full-batch", "minibatch"])
def test_rate_converges_to_the_closed_form_at_fixed_weights(subsample):
    """Held at fixed q(W), repeated updates give a = a0 + N/2 exactly and b = b0 + E[SSE]/2, E[SSE] from
    4000 independent Predictive draws on all rows.  Tolerance: 4 standard errors of the weighted average
    (the estimator's spread, measured, over the weights' effective sample size) plus the reference's own
    Monte Carlo error; minibatch estimates scaled by N/B must be unbiased for the full-data sum."""
    pyro.set_rng_seed(1)
    model, x, y = _problem()
    guide = HorseshoeGuide(model)
    _widen(guide)
    mean, sd = _mc_expected_sse(model, guide, x, y)

    def batch() -> torch.Tensor | None:
        return torch.randperm(x.shape[0])[:20] if subsample else None

    with torch.no_grad():
        spread = torch.stack([expected_squared_error(guide, model, x, y, batch()) for _ in range(400)]).std()
        steps = 400
        for _ in range(steps):
            guide.update_noise(model, x, y, batch())
    assert float(guide.noise_conc) == pytest.approx(A0 + x.shape[0] / 2, rel=1e-6)
    w = _final_weights(steps)
    ess = float(1.0 / (w * w).sum())
    tol = 4.0 * 0.5 * (float(spread) / math.sqrt(ess) + sd / math.sqrt(4000))
    assert abs(float(guide.noise_rate) - (B0 + 0.5 * mean)) < tol
    if not subsample:  # the weight spread counts: the rate is above the mean network's squared error
        f_mean = Predictive(model, guide=guide, num_samples=4000, return_sites=["f"])(x)["f"][..., 0].mean(0)
        assert B0 + 0.5 * float((y - f_mean).pow(2).sum()) < float(guide.noise_rate) - tol


@pytest.mark.parametrize("heteroscedastic", [False, True], ids=["homoscedastic", "heteroscedastic"])
def test_first_step_is_the_exact_coordinate_optimum(heteroscedastic):
    """rho_1 = 1: one update sets q(gamma) to Gamma(a0 + N/2, b0 + SSE/2) of that step's draw; with
    input-dependent noise sigma^2 exp(g) each squared error is weighted by exp(-g) (GaussianLikelihood)."""
    pyro.set_rng_seed(2)
    pyro.clear_param_store()  # the guide's PyroParams live in the global store: no other test's shapes
    model, x, y = _problem()
    if heteroscedastic:
        lik = GaussianLikelihood("gamma", A0, B0, heteroscedastic=True)
        model = BayesianModel(MLP(2, (8,), lik.network_outputs), HorseshoePrior(), lik)
    guide = HorseshoeGuide(model)
    assert guide.noise_step() == 1.0
    with torch.no_grad():
        pyro.set_rng_seed(5)
        guide.update_noise(model, x, y)
        pyro.set_rng_seed(5)  # the same seed: the same guide draw, replayed through the model by hand
        guide_trace = poutine.trace(guide).get_trace(x, y)
        f = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y).nodes["f"]["value"]
    weight = torch.exp(-f[:, 1]) if heteroscedastic else 1.0
    sse = float(((y - f[:, 0]).pow(2) * weight).sum())
    assert float(guide.noise_rate) == pytest.approx(B0 + 0.5 * sse, rel=1e-6)
    assert guide.noise_step() == pytest.approx(2.0**-NOISE_STEP_POWER)


@pytest.mark.parametrize("family", [HorseshoeGuide, StructuredHorseshoeGuide], ids=lambda c: c.family)
def test_fit_learns_the_noise_level_with_the_natural_step(family):
    """On 400 rows with noise sd 0.3, q(gamma)'s shape is a0 + N/2 and E[sigma^2] is close to 0.09 after
    a short fit; the gradient option, started at the prior, is still far from that shape."""
    pyro.set_rng_seed(0)
    model, x, y = _problem(n=400)
    guide = family(model)
    fit(model, guide, x, y, steps=800, lr=0.02, seed=0)
    a, b = (float(t) for t in guide._noise_params())
    assert a == pytest.approx(A0 + 200, rel=1e-4)
    assert 0.05 < b / (a - 1) < 0.2
    pyro.clear_param_store()
    model, x, y = _problem(n=400)
    grad = family(model, noise_update="gradient")
    fit(model, grad, x, y, steps=800, lr=0.02, seed=0)
    assert float(grad._noise_params()[0].detach()) < 0.5 * (A0 + 200)
    names = {n for n, _ in grad.named_parameters()}
    assert {"noise_conc_raw_unconstrained", "noise_rate_raw_unconstrained"} <= names


def test_after_the_last_step_the_noise_is_the_exact_update_at_the_final_weights():
    """closed_form_finalize: q(gamma)'s rate for prediction is b0 + E[SSE]/2 at the weights the fit returns
    (32 draws; tolerance 4 standard errors of that mean plus the 4000-draw reference's), the running
    average is kept as the training state, and training again starts from it."""
    pyro.set_rng_seed(3)
    model, x, y = _problem(n=200)
    guide = HorseshoeGuide(model)
    fit(model, guide, x, y, steps=300, lr=0.02, seed=0, batch_size=50, progress=False)
    running = float(guide.noise_rate)
    assert float(guide.noise_final) == 1.0
    mean, sd = _mc_expected_sse(model, guide, x, y)
    tol = 4.0 * 0.5 * (sd / math.sqrt(NOISE_FINAL_DRAWS) + sd / math.sqrt(4000))
    assert abs(float(guide._noise_params()[1]) - (B0 + 0.5 * mean)) < tol
    guide.closed_form_begin()
    assert float(guide._noise_params()[1]) == running


def test_noise_update_is_validated():
    model, _, _ = _problem()
    with pytest.raises(ValueError, match="noise_update"):
        HorseshoeGuide(model, noise_update="closed")
