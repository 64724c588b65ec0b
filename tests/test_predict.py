"""Posterior predictive: closed-form ground truth, chunking invariance, classification, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.experiments.registry import build
from zoo.infer.loop import fit
from zoo.infer.predict import log_likelihood, posterior_samples, predict

from .helpers import blr_data


def _blr_fit(device: torch.device | None = None):
    x, y = (t.to(device) for t in blr_data(n=80, dtype=torch.float64))
    m, g, spec = build("blr-cavi", 3, 1, "regression")
    m, g = m.double(), g.double()
    return fit(m, g, x, y, steps=50, progress=False, device=device), x, y


def test_predictive_moments_match_the_closed_form(device):
    """y* | x ~ E_q: mean x^T m, variance E[sigma^2] + x^T S x (law of total variance)."""
    res, x, _ = _blr_fit(device)
    g = res.guide
    xs = torch.linspace(-2, 2, 7, dtype=torch.float64, device=device).unsqueeze(-1).expand(7, 3).contiguous()
    s = 20000
    p = predict(res, xs, num_samples=s, sample_chunk=5000, seed=0)
    cov = g.scale_tril @ g.scale_tril.T
    mean = xs @ g.m
    e_s2 = g.b / (g.a - 1)
    var = e_s2 + ((xs @ cov) * xs).sum(-1)
    # MC error of the mean of x^T w over s draws: sd sqrt(x^T S x / s)
    se_mean = torch.sqrt(((xs @ cov) * xs).sum(-1) / s)
    assert torch.all((p.mean - mean).abs() < 5 * se_mean + 1e-12)
    assert torch.allclose(p.var, var, rtol=0.05)
    assert p.loc.shape == (s, 7) and p.scale.shape == (s, 7)


def test_chunking_over_data_does_not_change_draws(device):
    res, x, y = _blr_fit(device)
    a = predict(res, x, num_samples=30, sample_chunk=10, data_chunk=1000, seed=4, return_samples=True)
    b = predict(res, x, num_samples=30, sample_chunk=10, data_chunk=7, seed=4, return_samples=True)
    assert torch.equal(a.loc, b.loc) and torch.allclose(a.mean, b.mean) and torch.allclose(a.var, b.var)
    assert not torch.equal(a.loc[:10], a.loc[10:20])  # chunks are different draws
    ll1 = log_likelihood(res, x, y, num_samples=12, sample_chunk=6, data_chunk=1000, seed=1)
    ll2 = log_likelihood(res, x, y, num_samples=12, sample_chunk=6, data_chunk=9, seed=1)
    assert ll1.shape == (12, 80) and torch.allclose(ll1, ll2)


def test_loglik_matches_gaussian_density_and_target_scaling(device):
    res, x, y = _blr_fit(device)
    res.config.update(y_mean=3.0, y_std=2.0)  # pretend the fit was on (y - 3) / 2
    p = predict(res, x[:5], num_samples=4, seed=2)
    ll = log_likelihood(res, x[:5], 3.0 + 2.0 * y[:5], num_samples=4, seed=2)
    expected = torch.distributions.Normal(p.loc, p.scale).log_prob(3.0 + 2.0 * y[:5])
    assert torch.allclose(ll, expected, atol=1e-10)
    assert torch.allclose(p.mean, 3.0 + 2.0 * (x[:5] @ res.guide.m), atol=0.5)


def test_predictive_variance_survives_a_large_target_mean():
    """A float32 fit of targets with mean 1000 and sd 1e-3 (naval's ratio, magnified): the predictive
    variance on the original scale is the standardized one times sd^2, not ``E[f^2] - E[f]^2`` cancelled to
    zero in float32 (which is what it was)."""
    res, x, _ = _blr_fit()
    res.model.float(), res.guide.float()
    xf = x[:9].float()
    plain = predict(res, xf, num_samples=50, seed=3)
    res.config.update(y_mean=1000.0, y_std=1e-3)
    shifted = predict(res, xf, num_samples=50, seed=3)
    assert shifted.mean.dtype == torch.float32 and torch.all(shifted.var > 0)
    torch.testing.assert_close(shifted.var, plain.var * 1e-6, rtol=1e-5, atol=0)


def test_large_input_is_chunked():
    """A 10k x 784 test set with 100 draws: memory is bounded by chunk sizes, output shapes right."""
    m, g, spec = build("mfvi-bnn", 784, 10, "multiclass", hidden=[20])
    x = torch.rand(64, 784)
    y = torch.randint(0, 10, (64,))
    res = fit(m, g, x, y, steps=2, progress=False)
    xt = torch.rand(10_000, 784)
    p = predict(res, xt, num_samples=100, sample_chunk=25, data_chunk=2500, keep_draws=False)
    assert p.probs.shape == (10_000, 10) and p.draw_probs is None
    assert torch.allclose(p.probs.sum(-1), torch.ones(10_000), atol=1e-5)


def test_binary_and_posterior_samples():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, generator=g)
    y = (x[:, 0] > 0).long()
    m, gd, spec = build("mfvi-bnn", 2, 1, "binary", hidden=[4])
    res = fit(m, gd, x, y, steps=100, lr=0.05, progress=False)
    p = predict(res, x, num_samples=10, return_samples=True)
    assert p.probs.shape == (50, 2) and set(p.samples.unique().tolist()) <= {0, 1}
    draws = posterior_samples(res, 9)
    assert draws["fc0.weight"].shape == (9, 4, 2) and draws["fc1.bias"].shape == (9, 1)
    assert not any(k.endswith("_unconstrained") for k in draws)


def test_predict_bad_input(device):
    res, x, y = _blr_fit(device)
    with pytest.raises(ValueError, match="features"):
        predict(res, x[:, :2])
    with pytest.raises(ValueError, match="x"):
        predict(res, x[:, 0])
    with pytest.raises(TypeError, match="x"):
        predict(res, x.cpu().numpy())
    bad = x.clone()
    bad[1, 1] = math.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        predict(res, bad)
    with pytest.raises(ValueError, match="num_samples"):
        predict(res, x, num_samples=0)
    with pytest.raises(ValueError, match="device"):
        predict(res, x.to("meta"))
    with pytest.raises(ValueError, match="rows"):
        log_likelihood(res, x, y[:3])


def test_custom_guide_predictive_gets_kwargs_and_target_scaling():
    from zoo.infer.predict import Predictions

    res, x, _ = _blr_fit()

    class Wrapped(type(res.guide)):
        def predictive(self, model, x, num_samples, mode="a"):
            loc = (x @ self.m).expand(num_samples, -1)
            return Predictions(
                "regression",
                mean=loc[0],
                var=torch.ones(len(x), dtype=x.dtype),
                loc=loc,
                scale=torch.ones_like(loc),
                extras={"mode": mode},
            )

    g = Wrapped(res.model).double()
    g.load_state_dict(res.guide.state_dict())
    res.guide = g
    res.config.update(y_mean=1.0, y_std=3.0)
    p = predict(res, x[:4], num_samples=2, mode="b")
    assert p.extras["mode"] == "b"
    assert torch.allclose(p.mean, 1.0 + 3.0 * (x[:4] @ g.m)) and torch.allclose(
        p.var, torch.full((4,), 9.0, dtype=x.dtype)
    )
    assert torch.allclose(p.scale, torch.full((2, 4), 3.0, dtype=x.dtype))
    with pytest.raises(TypeError, match="unexpected"):
        res.guide = type(res.guide).__mro__[1](res.model).double()
        predict(res, x[:4], mode="b")


def test_posterior_samples_skip_subsample_sites():
    """A subsampled plate records its indices as a sample site (``site_is_subsample``): not a latent."""
    import pyro
    import pyro.distributions as dist

    from zoo.infer.result import FitResult

    m, _, _ = build("mfvi-bnn", 2, 1, "regression", hidden=[3])

    def guide(x, y=None, subsample=None):
        with pyro.plate("locals", 10, subsample_size=4, dim=-1):
            pass
        pyro.sample("z", dist.Normal(0.0, 1.0).expand([3]).to_event(1))

    draws = posterior_samples(FitResult(model=m, guide=guide), 6)
    assert set(draws) == {"z"} and draws["z"].shape == (6, 3)
