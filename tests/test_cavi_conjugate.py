"""The training loop on a conjugate ground truth: Bayesian linear regression with unknown noise.

The mean-field fixed point is computed independently here (a scalar root-find in E[1/sigma^2] on the
eigenbasis of X^T X, numpy/scipy), then compared with what ``zoo.infer.loop.fit`` reaches through the
guide's closed-form updates.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pyro.infer import Trace_ELBO
from scipy.optimize import brentq

from guides.baselines.conjugate import LinearRegressionCAVIGuide
from zoo.experiments.registry import build
from zoo.infer.loop import fit

from .helpers import blr_data, blr_model

S0, A0, B0 = 2.0, 2.0, 1.0


def mean_field_fixed_point(x: np.ndarray, y: np.ndarray, s0: float, a0: float, b0: float):
    n, d = x.shape
    xtx, xty = x.T @ x, x.T @ y
    a = a0 + n / 2

    def parts(e):
        cov = np.linalg.inv(e * xtx + np.eye(d) / s0**2)
        m = e * cov @ xty
        r = y - x @ m
        return m, cov, b0 + 0.5 * (r @ r + np.trace(xtx @ cov))

    e = brentq(lambda e: e - a / parts(e)[2], 1e-8, 1e8, xtol=1e-15, rtol=1e-15)
    m, cov, b = parts(e)
    return m, cov, a, b


def test_cavi_reaches_the_mean_field_fixed_point(device):
    x, y = blr_data(device=device)
    model = blr_model(s0=S0, a0=A0, b0=B0).double()
    guide = LinearRegressionCAVIGuide(model)
    res = fit(model, guide, x, y, steps=200, tol=1e-14, patience=2, progress=False, device=device)
    m, cov, a, b = mean_field_fixed_point(x.cpu().numpy(), y.cpu().numpy(), S0, A0, B0)
    got_cov = (guide.scale_tril @ guide.scale_tril.T).cpu().numpy()
    np.testing.assert_allclose(guide.m.cpu().numpy(), m, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_cov, cov, rtol=0, atol=1e-6)
    assert abs(float(guide.a) - a) < 1e-6
    assert abs(float(guide.b) - b) < 1e-6 * max(1.0, b)
    assert res.converged and res.steps < 200


def test_cavi_elbo_never_decreases(device):
    x, y = blr_data(n=40, d=5, seed=3, device=device)
    model = blr_model(d=5, s0=S0, a0=A0, b0=B0).double()
    guide = LinearRegressionCAVIGuide(model)
    res = fit(model, guide, x, y, steps=50, progress=False, device=device)
    e = np.asarray(res.elbo)
    assert np.all(np.diff(e) >= -1e-9 * np.abs(e[1:])), np.diff(e).min()
    assert e[-1] > e[0]


def test_closed_form_elbo_matches_monte_carlo_trace_elbo(device):
    """Same model, same guide: Pyro's MC ELBO agrees with the closed form within MC error."""
    x, y = blr_data(device=device)
    model = blr_model(s0=S0, a0=A0, b0=B0).double()
    guide = LinearRegressionCAVIGuide(model)
    res = fit(model, guide, x, y, steps=20, progress=False, device=device)
    n_part = 4000
    with res.activate(), torch.no_grad():
        losses = torch.tensor(
            [
                Trace_ELBO(num_particles=n_part, vectorize_particles=True, max_plate_nesting=1).loss(
                    model, guide, x, y
                )
                for _ in range(5)
            ]
        )
    # five independent estimates of the mean of n_part draws: tolerance from their spread
    mc, se = float(-losses.mean()), float(losses.std() / math.sqrt(5))
    assert abs(mc - res.elbo[-1]) < 5 * se + 1e-3, (mc, res.elbo[-1], se)


def test_guide_rejects_wrong_model_and_minibatches():
    from .helpers import mlp_model

    with pytest.raises(TypeError, match="model"):
        LinearRegressionCAVIGuide(mlp_model())
    x, y = blr_data()
    model = blr_model().double()
    guide = LinearRegressionCAVIGuide(model)
    with pytest.raises(ValueError, match="subsample"):
        fit(model, guide, x, y, steps=2, batch_size=10, progress=False)


def test_registry_entry_blr_cavi():
    x, y = blr_data(dtype=torch.float32)
    model, guide, spec = build("blr-cavi", 3, 1, "regression", weight_scale=S0)
    res = fit(model, guide, x, y, steps=30, progress=False)
    m, _, _, _ = mean_field_fixed_point(x.double().numpy(), y.double().numpy(), S0, 2.0, 1.0)
    np.testing.assert_allclose(guide.m.numpy(), m, atol=1e-4)
    assert spec["guide"] == "cavi" and res.steps == 30


# ---------------------------------------------------------------------------------------------------------
# zoo.ops.expectations: the entropies are torch.distributions' own, equal to the closed forms
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entropies_equal_the_closed_forms_in_value_and_gradient(dtype):
    from zoo.ops.expectations import gamma_entropy, gaussian_entropy_tril, inverse_gamma_entropy

    g = torch.Generator().manual_seed(0)
    a = (0.05 + 5 * torch.rand(30, generator=g, dtype=dtype)).requires_grad_()
    b = (0.05 + 5 * torch.rand(30, generator=g, dtype=dtype)).requires_grad_()
    closed = {
        gamma_entropy: lambda a, b: a - torch.log(b) + torch.lgamma(a) + (1 - a) * torch.digamma(a),
        inverse_gamma_entropy: lambda a, b: a + torch.log(b) + torch.lgamma(a) - (1 + a) * torch.digamma(a),
    }
    for fn, ref in closed.items():
        got, want = fn(a, b), ref(a, b)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        grads = torch.autograd.grad(got.sum(), (a, b)), torch.autograd.grad(want.sum(), (a, b))
        for x, y in zip(*grads):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    m = torch.randn(3, 5, 5, generator=g, dtype=dtype)
    tril = torch.linalg.cholesky(m @ m.mT + torch.eye(5, dtype=dtype)).requires_grad_()
    want = 0.5 * 5 * (1 + math.log(2 * math.pi)) + torch.diagonal(tril, dim1=-2, dim2=-1).log().sum(-1)
    got = gaussian_entropy_tril(tril)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(gaussian_entropy_tril(tril[0]), want[0], rtol=0, atol=0)
    (g_got,), (g_want,) = torch.autograd.grad(got.sum(), tril), torch.autograd.grad(want.sum(), tril)
    torch.testing.assert_close(g_got, g_want, rtol=0, atol=0)
    # the Gamma/IG entropies are the differential entropies of the distributions (Monte Carlo check)
    d = torch.distributions.Gamma(
        torch.tensor(2.5, dtype=torch.float64), torch.tensor(0.7, dtype=torch.float64)
    )
    draws = d.sample((200_000,))
    mc = float(-d.log_prob(draws).mean())
    assert mc == pytest.approx(float(gamma_entropy(d.concentration, d.rate)), abs=5e-3)


# ---------------------------------------------------------------------------------------------------------
# builder options as config objects (mfvi-bnn, blr-cavi)
# ---------------------------------------------------------------------------------------------------------


def test_baseline_options_defaults_validation_and_builders():
    from zoo.experiments.registry import get_entry
    from zoo.families.baselines.entry import _blr_build, _mfvi_build
    from zoo.families.baselines.options import BLROptions, MFVIOptions

    assert get_entry("mfvi-bnn").options is MFVIOptions and get_entry("blr-cavi").options is BLROptions
    assert MFVIOptions().to_dict() == {
        "weight_scale": 1.0,
        "bias_scale": 1.0,
        "fan_in_scaling": None,
        "noise_concentration": 1.0,
        "noise_rate": 0.01,
        "hierarchical_scale": False,
        "activation": "relu",
        "heteroscedastic": False,
        "student_t_df": None,
        "student_t_learn_df": False,
    }
    tanh = _mfvi_build(1, 1, "regression", (3,), activation="tanh")
    x = torch.linspace(-2, 2, 7).unsqueeze(-1)
    w0, b0 = torch.randn(3, 1), torch.randn(3)
    w1, b1 = torch.randn(1, 3), torch.randn(1)
    want = (torch.tanh(x @ w0.T + b0) @ w1.T + b1).squeeze(-1)
    params = {"fc0.weight": w0, "fc0.bias": b0, "fc1.weight": w1, "fc1.bias": b1}
    got = tanh.architecture.forward(x, params).squeeze(-1)
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="activation"):
        MFVIOptions(activation="swish")
    # fan_in_scaling None: on unless the hierarchical prior (which has its own fan-in factor)
    assert MFVIOptions().scaled and not MFVIOptions(hierarchical_scale=True).scaled
    assert not MFVIOptions(fan_in_scaling=False).scaled
    assert _mfvi_build(3, 1, "regression", (4,)).prior.config()["fan_in_scaling"] is True
    assert BLROptions().to_dict() == {"weight_scale": 1.0, "noise_concentration": 2.0, "noise_rate": 1.0}
    for field, value, err in [
        ("weight_scale", -1.0, ValueError),
        ("bias_scale", 0.0, ValueError),
        ("noise_rate", float("inf"), ValueError),
        ("fan_in_scaling", 1, TypeError),
    ]:
        with pytest.raises(err, match=field):
            MFVIOptions(**{field: value})
    with pytest.raises(ValueError, match="noise_concentration"):
        BLROptions(noise_concentration=0.0)
    # the keyword form, an options object and a mapping build the same model
    for m in (
        _mfvi_build(3, 1, "regression", (4,), weight_scale=0.5, fan_in_scaling=True),
        _mfvi_build(3, 1, "regression", (4,), MFVIOptions(weight_scale=0.5, fan_in_scaling=True)),
        _mfvi_build(3, 1, "regression", (4,), {"weight_scale": 0.5}, fan_in_scaling=True),
    ):
        assert m.prior.config() == {"weight_scale": 0.5, "bias_scale": 1.0, "fan_in_scaling": True}
        assert float(m.likelihood.rate) == pytest.approx(0.01)
    blr = _blr_build(3, 1, "regression", (), BLROptions(noise_rate=2.0))
    assert float(blr.likelihood.rate) == 2.0 and float(blr.prior.weight_scale) == 1.0
    with pytest.raises(ValueError, match="no_such"):
        _mfvi_build(3, 1, "regression", (4,), no_such=1)
    with pytest.raises(ValueError, match="weight_scale"):
        build("blr-cavi", 3, 1, "regression", weight_scale=-2.0)
    with pytest.raises(ValueError, match="bias_scale"):
        build("blr-cavi", 3, 1, "regression", bias_scale=2.0)  # an mfvi-bnn option, not blr-cavi's
