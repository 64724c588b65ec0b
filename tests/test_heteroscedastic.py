"""The heteroscedastic Gaussian likelihood ``y ~ N(f, sigma^2 exp(g))`` (zoo.core.likelihoods) and
``mfvi-bnn``'s ``heteroscedastic`` option."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.poutine as poutine
import pytest
import torch
from scipy import stats

from zoo.core.likelihoods import GaussianLikelihood
from zoo.eval.diagnostics import to_inference_data
from zoo.experiments.registry import build
from zoo.infer.loop import fit
from zoo.infer.noise import refit_noise
from zoo.infer.predict import predict


def _fg(n: int, out: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2 * out, generator=g, dtype=torch.float64), torch.randn(
        n, out, generator=g, dtype=torch.float64
    )


@pytest.mark.parametrize("out", [1, 2])
def test_density_is_the_hand_computed_normal(out):
    f, y = _fg(7, out)
    lik = GaussianLikelihood(heteroscedastic=True, out_features=out)
    assert lik.network_outputs == 2 * out and lik.config()["heteroscedastic"] is True
    sigma2 = torch.tensor(0.3, dtype=torch.float64)
    yy = y[:, 0] if out == 1 else y
    got = lik.log_likelihood(f, yy, {"sigma2": sigma2}).numpy()
    sd = np.sqrt(0.3 * np.exp(f[:, out:].numpy()))
    want = stats.norm.logpdf(y.numpy(), f[:, :out].numpy(), sd).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    loc, var = lik.predictive_moments(f, {"sigma2": sigma2})
    np.testing.assert_allclose(var.numpy().reshape(-1), (sd**2).reshape(-1), rtol=1e-12)
    np.testing.assert_allclose(loc.numpy().reshape(-1), f[:, :out].numpy().reshape(-1))


def test_the_likelihood_is_conjugate_in_sigma2_with_weighted_squared_errors():
    """sum_n log N(y_n | f_n, s exp(g_n)) = C - (N / 2) log s - S / (2 s), S = sum r^2 exp(-g): the
    inverse-gamma update of sigma^2 only needs :meth:`scaled_squared_error`."""
    f, y = _fg(11, 1, seed=3)
    lik = GaussianLikelihood(heteroscedastic=True)
    s_weighted = float(lik.scaled_squared_error(f, y[:, 0]))
    r2, g = (y[:, 0] - f[:, 0]) ** 2, f[:, 1]
    assert s_weighted == pytest.approx(float((r2 * torch.exp(-g)).sum()), rel=1e-12)
    total = [
        float(lik.log_likelihood(f, y[:, 0], {"sigma2": torch.tensor(s, dtype=torch.float64)}).sum())
        for s in (0.2, 1.7)
    ]
    want = -5.5 * (math.log(1.7) - math.log(0.2)) - 0.5 * s_weighted * (1 / 1.7 - 1 / 0.2)
    assert total[1] - total[0] == pytest.approx(want, rel=1e-10)
    # homoscedastic: the plain sum of squares, one output column
    hom = GaussianLikelihood()
    assert hom.network_outputs == 1
    assert float(hom.scaled_squared_error(f[:, :1], y[:, 0])) == pytest.approx(float(r2.sum()), rel=1e-12)


def test_bad_options_are_refused_before_training():
    with pytest.raises(TypeError, match="heteroscedastic"):
        GaussianLikelihood(heteroscedastic=1)
    with pytest.raises(TypeError, match="heteroscedastic"):
        build("mfvi-bnn", 2, 1, "regression", hidden=[4], heteroscedastic="yes")
    with pytest.raises(ValueError, match="heteroscedastic"):
        build("mfvi-bnn", 2, 1, "binary", hidden=[4], heteroscedastic=True)


def _two_regimes(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y = sin(2x) + e, sd(e) = 0.05 for x < 0 and 0.5 for x > 0."""
    g = torch.Generator().manual_seed(seed)
    x = 2 * torch.rand(n, 1, generator=g) - 1
    sd = torch.where(x[:, 0] < 0, 0.05, 0.5)
    return x, torch.sin(2 * x[:, 0]) + sd * torch.randn(n, generator=g), sd


def _fit_two_regimes(heteroscedastic: bool):
    x, y, _ = _two_regimes(600, 0)
    model, guide, _ = build(
        "mfvi-bnn", 1, 1, "regression", hidden=[16], seed=0, heteroscedastic=heteroscedastic
    )
    return fit(model, guide, x, y, steps=2500, lr=1e-2, seed=0, progress=False)


@pytest.fixture(scope="module")
def two_regime_fits():
    return {h: _fit_two_regimes(h) for h in (True, False)}


def test_mfvi_learns_the_noise_of_each_regime(two_regime_fits):
    """On fresh data: the heteroscedastic fit's noise sd is near 0.05 and 0.5 in the two halves (0.07 and 0.54
    measured) and its 95 % intervals cover about 95 % in each (.973, .922); the homoscedastic fit over-covers
    the quiet half and under-covers the loud one (1.0, .868)."""
    x, y, sd = _two_regimes(2000, 1)
    quiet = x[:, 0] < 0
    cover = {}
    for het, result in two_regime_fits.items():
        pred = predict(result, x, num_samples=200, seed=0)
        assert pred.scale.shape == (200, 2000)
        noise_sd = pred.scale.pow(2).mean(0).sqrt()
        z = ((y - pred.mean) / pred.var.sqrt()).abs()
        cover[het] = [float((z[m] <= 1.96).float().mean()) for m in (quiet, ~quiet)]
        if het:
            # the homoscedastic fit's single sd is 0.38; the smooth noise head overshoots near x = 0
            assert 0.04 < float(noise_sd[quiet].median()) < 0.1
            assert float(noise_sd[~quiet].median()) == pytest.approx(0.5, rel=0.2)
    # about 1000 points per half: a binomial standard error of 0.007 at 0.95; the margin allows VI's bias
    assert all(0.9 <= c <= 0.99 for c in cover[True]), cover
    assert cover[False][0] > 0.995 and cover[False][1] < 0.9, cover


def test_noise_refit_uses_the_weighted_squared_errors(two_regime_fits):
    """After the fit, q(sigma^2)'s median is (b0 + S / 2) / A exp(1 / (2A)) with S = E_q[sum r^2 exp(-g)],
    here estimated by hand from 400 guide draws (not through zoo.infer.noise)."""
    result = two_regime_fits[True]
    x, y, _ = _two_regimes(600, 0)
    lik = result.model.likelihood
    with result.activate(), torch.no_grad():
        draws = []
        for _ in range(400):
            tr = poutine.trace(result.guide).get_trace(x, y)
            f = poutine.trace(poutine.replay(result.model, trace=tr)).get_trace(x, y).nodes["f"]["value"]
            draws.append(float(((y - f[:, 0]) ** 2 * torch.exp(-f[:, 1])).sum()))
        median = float(result.guide.median()["sigma2"])
    a = float(lik.concentration) + 0.5 * y.numel()
    s = np.array(draws)
    want = (float(lik.rate) + 0.5 * s.mean()) / a * math.exp(0.5 / a)
    # four standard errors of the difference of two Monte Carlo estimates of S (32 draws in the fit, 400 here)
    tol = 4 * 0.5 * s.std() * math.sqrt(1 / 32 + 1 / 400) / a * math.exp(0.5 / a)
    assert median == pytest.approx(want, abs=tol)
    with result.activate():
        assert refit_noise(result.guide, result.model, x, y) is not None


def test_arviz_export_holds_pointwise_log_likelihood(two_regime_fits):
    result = two_regime_fits[True]
    x, y, _ = _two_regimes(50, 2)
    idata = to_inference_data(result, train=(x, y), num_samples=20)
    ll = idata.log_likelihood["obs"].values
    assert ll.shape[-1] == 50 and np.isfinite(ll).all()
    pyro.clear_param_store()


@pytest.mark.parametrize("name", ["hs-bnn", "reg-hs-bnn", "cm-bnn", "cv-bnn", "cmv-bnn", "ngig-bnn", "lbbnn"])
def test_every_gaussian_regression_family_takes_the_option(name):
    """Two outputs per target, a finite fit, and a predictive noise that varies over the inputs; without the
    option one output and one noise level."""
    x, y, _ = _two_regimes(200, 3)
    for het in (True, False):
        model, guide, _ = build(name, 1, 1, "regression", hidden=[8], seed=0, heteroscedastic=het)
        assert model.architecture.out_features == (2 if het else 1)
        result = fit(model, guide, x, y, steps=150, seed=0, progress=False)
        scale = predict(result, x[:20], num_samples=8, seed=0).scale
        assert torch.isfinite(scale).all()
        spread = scale.max(1).values / scale.min(1).values  # per draw, over 20 inputs
        if het:  # the LBBNN's spike can switch the noise head off in a draw: the mean over draws
            assert float(spread.mean()) > 1.05
        else:
            assert float(spread.max()) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="heteroscedastic"):
        build(name, 1, 2, "multiclass", hidden=[4], heteroscedastic=True)


def test_fit_refit_and_predict_on_the_device(device):
    """The heteroscedastic path on ``device``: training, the weighted noise refit, predictive draws whose
    scale is ``sqrt(sigma^2 exp(g))`` per point, and pointwise log-likelihoods that match those draws."""
    from zoo.infer.predict import log_likelihood

    x, y, _ = _two_regimes(120, 4)
    x, y = x.to(device), y.to(device)
    model, guide, _ = build("mfvi-bnn", 1, 1, "regression", hidden=[8], seed=0, heteroscedastic=True)
    result = fit(model, guide, x, y, steps=100, seed=0, progress=False, device=device)
    assert result.loop_state.get("noise_train") is not None  # the refit ran
    pred = predict(result, x[:6], num_samples=5, seed=1)
    assert pred.scale.device.type == device.type and pred.scale.shape == (5, 6)
    ll = log_likelihood(result, x[:6], y[:6], num_samples=5, seed=1)
    want = torch.distributions.Normal(pred.loc, pred.scale).log_prob(y[:6])
    assert torch.allclose(ll, want, atol=1e-4)
