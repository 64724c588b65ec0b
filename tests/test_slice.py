"""Univariate slice sampling (zoo.infer.slice): exact invariance and convergence on targets with known
laws, checked by Kolmogorov-Smirnov tests over many independent coordinates, and its input checks."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from zoo.infer.slice import slice_step

N = 4000


def _gamma_log(x: torch.Tensor) -> torch.Tensor:
    """Gamma(3, rate 2), -inf off the support."""
    return torch.where(x > 0, 2 * x.clamp_min(1e-300).log() - 2 * x, torch.full_like(x, -math.inf))


def _mixture_log(x: torch.Tensor) -> torch.Tensor:
    """0.3 N(-2, 0.7^2) + 0.7 N(2, 1): two modes, four widths of the narrow one apart."""
    a = math.log(0.3) + torch.distributions.Normal(-2.0, 0.7).log_prob(x)
    return torch.logaddexp(a, math.log(0.7) + torch.distributions.Normal(2.0, 1.0).log_prob(x))


def _mixture_cdf(x):
    return 0.3 * stats.norm(-2, 0.7).cdf(x) + 0.7 * stats.norm(2, 1).cdf(x)


def test_one_step_from_exact_draws_keeps_the_law():
    torch.manual_seed(0)
    x = torch.distributions.Gamma(3.0, 2.0).sample((N,)).double()
    y = slice_step(_gamma_log, x, width=0.5)
    assert not torch.equal(x, y)
    assert stats.kstest(y.numpy(), stats.gamma(3, scale=0.5).cdf).pvalue > 1e-3


def test_chains_from_one_point_reach_a_bimodal_target():
    """4000 chains started at 0 (between the modes) reach the mixture, mode weights included (slice
    sampling moves between modes only through the region between them, so they must overlap)."""
    torch.manual_seed(1)
    x = torch.zeros(N, dtype=torch.float64)
    for _ in range(60):
        x = slice_step(_mixture_log, x)
    assert stats.kstest(x.numpy(), _mixture_cdf).pvalue > 1e-3
    share = float((x < 0).double().mean())
    assert abs(share - 0.3) < 4 * math.sqrt(0.3 * 0.7 / N)


def test_independent_entries_and_batch_shapes():
    """Entries with different targets (one location per column) move independently, shape kept."""
    torch.manual_seed(2)
    loc = torch.tensor([-10.0, 0.0, 25.0], dtype=torch.float64)
    x = loc.expand(N, 3).clone()
    for _ in range(3):  # exact draws are invariant: start at the modes, after a few steps N(loc, 1)
        x = slice_step(lambda u: -0.5 * (u - loc).square(), x, width=1.0)
    assert x.shape == (N, 3)
    for j in range(3):
        assert stats.kstest((x[:, j] - loc[j]).numpy(), stats.norm.cdf).pvalue > 1e-3


def test_a_wrong_target_is_detected():
    """The KS check used above has power: draws of N(0, 1) tested against the Gamma law fail."""
    torch.manual_seed(3)
    x = torch.ones(N, dtype=torch.float64)
    for _ in range(10):
        x = slice_step(lambda u: -0.5 * (u - 1.5).square(), x)
    assert stats.kstest(x.numpy(), stats.gamma(3, scale=0.5).cdf).pvalue < 1e-6


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"width": 0.0}, "width"), ({"max_steps": 0}, "max_steps"), ({"max_shrinks": 0}, "max_shrinks")],
)
def test_settings_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        slice_step(_gamma_log, torch.ones(3), **kwargs)


def test_a_start_outside_the_support_is_refused():
    with pytest.raises(ValueError, match="finite"):
        slice_step(_gamma_log, torch.tensor([1.0, -1.0]))
