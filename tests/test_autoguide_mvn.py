"""The ``mvn`` autoguide evaluates the density of its own draws from their noise
(:class:`guides.autoguides.OwnDrawMultivariateNormal`): exact where ``torch``'s triangular solve loses the
value to rounding, identical otherwise, and the same ELBO and ELBO gradients as Pyro's own guide."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoMultivariateNormal as PyroMVN

from guides.autoguides import AUTOGUIDES, AutoMultivariateNormal, OwnDrawMultivariateNormal
from zoo.experiments.registry import build

F64 = torch.float64


def _ill_conditioned(d: int = 60) -> torch.Tensor:
    """A lower-triangular factor with condition number ~1e18 (unit-scale off-diagonals, a diagonal from
    1e-3 to 1e-1): what the guide's factor became on yacht before the fix."""
    gen = torch.Generator().manual_seed(0)
    off = torch.tril(torch.randn(d, d, generator=gen, dtype=F64), -1) * 1.4
    return off + torch.diag(torch.logspace(-3, -1, d, dtype=F64))


def test_own_draw_density_is_exact_where_the_solve_is_not() -> None:
    """At its own float32 draw the density equals the float64 value from the noise; torch's solve does not
    (NaN or off by orders of magnitude) — the reason for the class."""
    tril = _ill_conditioned()
    assert float(torch.linalg.cond(tril)) > 1e15
    q = OwnDrawMultivariateNormal(torch.zeros(60), scale_tril=tril.float())
    torch.manual_seed(1)
    z = q.rsample()
    eps = q._own_draw[1].double()
    d = z.shape[-1]
    want = (
        -0.5 * (eps**2).sum() - tril.float().double().diagonal().log().sum() - 0.5 * d * math.log(2 * math.pi)
    )
    assert float(q.log_prob(z)) == pytest.approx(float(want), rel=1e-5)
    naive = float(dist.MultivariateNormal(torch.zeros(60), scale_tril=tril.float()).log_prob(z))
    assert not math.isfinite(naive) or abs(naive - float(want)) > 1.0


def test_other_values_and_batches_match_torch() -> None:
    """A value that is not the latest draw (and every draw of a batch of draws, through a copy) gets torch's
    density; draws have the right shape and law (mean and covariance of 20 000 draws)."""
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(3, 3, generator=gen, dtype=F64)
    cov = a @ a.T + 0.5 * torch.eye(3, dtype=F64)
    loc = torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    q = OwnDrawMultivariateNormal(loc, covariance_matrix=cov)
    ref = dist.MultivariateNormal(loc, covariance_matrix=cov)
    torch.manual_seed(3)
    z = q.rsample((20000,))
    assert z.shape == (20000, 3)
    torch.testing.assert_close(q.log_prob(z), ref.log_prob(z))  # own draws, well conditioned: the same
    torch.testing.assert_close(q.log_prob(z.clone()), ref.log_prob(z))  # not the own draw: torch's path
    x = torch.randn(5, 3, dtype=F64)
    torch.testing.assert_close(q.log_prob(x), ref.log_prob(x))
    # Monte Carlo: the mean within 5 standard errors, the covariance within 5 % (n = 20 000)
    se = (cov.diagonal() / 20000).sqrt()
    assert ((z.mean(0) - loc).abs() < 5 * se).all()
    torch.testing.assert_close(torch.cov(z.T), cov, rtol=0.05, atol=0.05)


def _refuse(self, value):
    raise AssertionError("the triangular-solve density was used")


def test_guide_has_the_same_elbo_and_gradients_as_pyros(monkeypatch) -> None:
    """On a small ``mfvi-bnn`` in float64 the zoo's ``mvn`` guide and Pyro's give the same single-sample ELBO
    and the same gradient for every parameter (same seed, same parameter values); the zoo's never calls the
    triangular-solve density during the ELBO (its latent's density comes from the noise)."""
    assert AUTOGUIDES["mvn"] is AutoMultivariateNormal
    x = torch.randn(8, 2, dtype=F64)
    y = x[:, 0] - 0.5 * x[:, 1]
    model, _, _ = build("mfvi-bnn", 2, 1, "regression", hidden=(3,))
    model = model.to(F64)
    out = []
    for cls in (AutoMultivariateNormal, PyroMVN):
        pyro.clear_param_store()
        guide = cls(model)
        guide(x, y)  # set up the parameters
        with torch.no_grad():
            gen = torch.Generator().manual_seed(4)
            guide.loc.copy_(torch.randn(guide.loc.shape, generator=gen, dtype=F64) * 0.3)
            guide.scale = torch.rand(guide.loc.shape, generator=gen, dtype=F64) * 0.2 + 0.05
            guide.scale_tril = torch.eye(guide.loc.shape[0], dtype=F64) + 0.1 * torch.tril(
                torch.randn(guide.loc.shape[0], guide.loc.shape[0], generator=gen, dtype=F64), -1
            )
        params = [p for _, p in sorted(guide.named_parameters())]
        torch.manual_seed(5)
        with monkeypatch.context() as patch:
            if cls is AutoMultivariateNormal:
                patch.setattr(dist.MultivariateNormal, "log_prob", _refuse)
            loss = Trace_ELBO().differentiable_loss(model, guide, x, y)
        grads = torch.autograd.grad(loss, params)
        out.append((loss.detach(), grads))
    torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-10, atol=1e-10)
    for a, b in zip(out[0][1], out[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
