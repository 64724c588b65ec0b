"""Tests for :func:`zoo.eval.metrics.heldout_noise_scale`: the closed form at one draw, recovery of a known
factor from a simulated mixture (tolerance from the sample size), optimality against
:func:`zoo.eval.metrics.mixture_nll`, and the inputs it must reject."""

import logging
import math

import numpy as np
import pytest

from zoo.eval.metrics import heldout_noise_scale, mixture_nll


def test_one_draw_is_the_closed_form():
    rng = np.random.default_rng(0)
    loc = rng.normal(size=(1, 500))
    scale = rng.uniform(0.5, 2.0, size=(1, 500))
    y = loc[0] + 0.7 * scale[0] * rng.standard_t(5, size=500)
    expected = math.sqrt(np.mean(((y - loc[0]) / scale[0]) ** 2))
    assert heldout_noise_scale(y, loc, scale) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("c0", [0.4, 1.0, 2.5])
def test_recovers_the_factor_a_mixture_was_drawn_with(c0):
    # y_n is drawn from the mixture with the noise scale times c0; the MLE of log c has standard error about
    # 1 / sqrt(2 N) = 0.005 at N = 20000 (the draws' spread of loc is small next to the noise), so 0.03 is
    # six standard errors
    rng = np.random.default_rng(1)
    S, N = 16, 20000
    loc = rng.normal(size=N)[None, :] + 0.1 * rng.normal(size=(S, N))
    scale = rng.uniform(0.8, 1.2, size=(S, 1))
    k = rng.integers(S, size=N)
    y = loc[k, np.arange(N)] + c0 * scale[k, 0] * rng.normal(size=N)
    c = heldout_noise_scale(y, loc, scale)
    assert abs(math.log(c) - math.log(c0)) < 0.03


def test_the_factor_minimizes_the_mixture_nll():
    rng = np.random.default_rng(2)
    loc = rng.normal(size=(8, 300))
    scale = rng.uniform(0.3, 0.6, size=(8, 300))
    y = rng.normal(size=300) * 2.0
    c = heldout_noise_scale(y, loc, scale)
    best = mixture_nll(y, loc, c * scale)
    for f in (0.99, 1.01):
        assert best < mixture_nll(y, loc, f * c * scale)


def test_an_optimum_on_a_bound_is_returned_with_a_warning(caplog):
    loc = np.zeros((1, 50))
    y = np.full(50, 1e-6)
    with caplog.at_level(logging.WARNING, logger="zoo.eval.metrics"):
        c = heldout_noise_scale(y, loc, np.ones((1, 50)))
    assert c == pytest.approx(math.exp(-4.0), rel=1e-3)
    assert "on a bound" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"y": np.array([0.0, np.nan])}, "y"),
        ({"loc": np.zeros((3, 5))}, "loc"),
        ({"scale": -np.ones((3, 1))}, "scale"),
        ({"scale": np.ones((2, 1))}, "scale"),
        ({"log_bounds": (1.0, -1.0)}, "log_bounds"),
        ({"log_bounds": (-np.inf, 1.0)}, "log_bounds"),
    ],
)
def test_rejects_bad_input_naming_the_argument(kwargs, name):
    args = {"y": np.zeros(2), "loc": np.zeros((3, 2)), "scale": np.ones((3, 1))} | kwargs
    with pytest.raises(ValueError, match=name):
        heldout_noise_scale(**args)
