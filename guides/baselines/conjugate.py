"""Mean-field CAVI for Bayesian linear regression with unknown noise — the loop's ground truth.

Model (a zoo :class:`~zoo.core.model.BayesianModel`: ``MLP(d, hidden=(), 1, bias=False)`` under a
``GaussianPrior(weight_scale=s0)`` and ``GaussianLikelihood(noise="inverse_gamma", a0, b0)``)::

    w ~ N(0, s0^2 I_d),   sigma2 ~ IG(a0, b0),   y_n | w, sigma2 ~ N(x_n^T w, sigma2).

Family ``q(w) q(sigma2)`` with ``q(w) = N(m, S)``, ``q(sigma2) = IG(a, b)``.  Coordinate updates
(Bishop 2006, *Pattern Recognition and Machine Learning*, §10.1.3; Ormerod & Wand 2010, "Explaining
Variational Approximations", The American Statistician 64, Algorithm 1)::

    S = (E[1/sigma2] X^T X + I / s0^2)^{-1},   m = E[1/sigma2] S X^T y,
    a = a0 + N/2,                              b = b0 + (||y - X m||^2 + tr(X^T X S)) / 2,

with ``E[1/sigma2] = a / b``.  Each update is the exact optimum of the ELBO in its block, so the ELBO
is non-decreasing and the iteration converges to the mean-field fixed point.  All parameters are
buffers (closed form only): the guide has ``uses_gradients = False``.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from guides.autoguides import incompatible
from zoo.core.architectures import MLP
from zoo.core.gaussian import GaussianPrior
from zoo.core.guide import ClosedFormGuide
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.infer.distributed import data_count, data_sum
from zoo.ops.expectations import (
    LOG_2PI,
    expected_log_inverse_gamma,
    expected_log_normal,
    gaussian_entropy_tril,
    inverse_gamma_entropy,
    inverse_gamma_moments,
)

__all__ = ["LinearRegressionCAVIGuide"]


def _check_model(model: BayesianModel) -> tuple[GaussianPrior, GaussianLikelihood]:
    arch = getattr(model, "architecture", None)
    ok = (
        isinstance(arch, MLP)
        and arch.hidden == ()
        and not arch.bias
        and arch.out_features == 1
        and isinstance(getattr(model, "prior", None), GaussianPrior)
        and isinstance(getattr(model, "likelihood", None), GaussianLikelihood)
        and model.likelihood.noise == "inverse_gamma"
        and model.likelihood.conjugate_noise
    )
    if not ok:
        raise incompatible(
            model,
            "cavi",
            LinearRegressionCAVIGuide,
            "the conjugate model BayesianModel(MLP(d, (), 1, bias=False), GaussianPrior, "
            "GaussianLikelihood(noise='inverse_gamma')): the Normal-inverse-gamma updates exist for it only",
        )
    return model.prior, model.likelihood


class LinearRegressionCAVIGuide(ClosedFormGuide):
    """Mean-field CAVI guide ``q(w) q(sigma2)`` of Bayesian linear regression (module docstring).

    Usage::

        model, guide, _ = zoo.experiments.registry.build("blr-cavi", d, 1, "regression")
        fit(model, guide, x, y, steps=200, tol=1e-10, batch_size=None)
    """

    uses_gradients = False
    #: data parallel (:mod:`zoo.infer.distributed`): ``X^T X``, ``X^T y``, ``N`` and the expected residual
    #: sum of squares are all-reduced over the ranks' rows; there are no per-datapoint factors
    data_parallel = True

    def __init__(self, model: BayesianModel) -> None:
        super().__init__()
        _check_model(model)
        d = model.architecture.in_features
        ref = model.prior.weight_scale
        self.register_buffer("m", torch.zeros(d, dtype=ref.dtype, device=ref.device))
        self.register_buffer("scale_tril", torch.eye(d, dtype=ref.dtype, device=ref.device))
        self.register_buffer("a", model.likelihood.concentration.clone())
        self.register_buffer("b", model.likelihood.rate.clone())

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        q_w = dist.MultivariateNormal(self.m, scale_tril=self.scale_tril)
        pyro.sample("fc0.weight", q_w.expand((1,)).to_event(1))
        pyro.sample("sigma2", dist.InverseGamma(self.a, self.b))

    def _stats(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return data_sum(x.T @ x), data_sum(x.T @ y), data_sum(y @ y)

    def shard_rows(self, model: BayesianModel, x: Tensor, y: Tensor, rows: slice) -> None:
        """Nothing to split: every factor is global (the data-parallel protocol of
        :mod:`zoo.infer.distributed`)."""

    def gather_rows(self, n: int) -> None:
        """Nothing to collect (see :meth:`shard_rows`)."""

    def expected_sq_residual(self, x: Tensor, y: Tensor) -> Tensor:
        """``E_q ||y - X w||^2 = ||y - X m||^2 + tr(X S X^T)``."""
        r = y - x @ self.m
        xl = x @ self.scale_tril
        return r @ r + (xl * xl).sum()

    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        if subsample is not None:
            raise ValueError("subsample: LinearRegressionCAVIGuide runs full-batch CAVI (batch_size=None)")
        if y is None:
            raise ValueError("y is required for a closed-form update")
        prior, lik = _check_model(model)
        s0sq = prior.weight_scale**2
        xtx, xty, _ = self._stats(x, y)
        e_prec = self.a / self.b
        precision = e_prec * xtx + torch.eye(x.shape[1], dtype=x.dtype, device=x.device) / s0sq
        chol_prec = torch.linalg.cholesky(precision)
        # S = P^{-1}; its Cholesky factor is L^{-T} for P = L L^T (lower-triangularized below).
        eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
        l_inv = torch.linalg.solve_triangular(chol_prec, eye, upper=False)
        cov = l_inv.T @ l_inv
        self.scale_tril.copy_(torch.linalg.cholesky(cov))
        self.m.copy_(e_prec * torch.cholesky_solve(xty.unsqueeze(-1), chol_prec).squeeze(-1))
        self.a.copy_(lik.concentration + 0.5 * data_count(x.shape[0]))
        self.b.copy_(lik.rate + 0.5 * data_sum(self.expected_sq_residual(x, y)))

    def closed_form_elbo(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> float:
        prior, lik = _check_model(model)
        n = data_count(x.shape[0])
        _, e_prec, e_log_s2 = inverse_gamma_moments(self.a, self.b)
        sq = data_sum(self.expected_sq_residual(x, y))
        loglik = -0.5 * n * (LOG_2PI + e_log_s2) - 0.5 * e_prec * sq
        second = self.m**2 + (self.scale_tril**2).sum(-1)
        log_pw = expected_log_normal(second, prior.weight_scale**2).sum()
        log_ps2 = expected_log_inverse_gamma(lik.concentration, lik.rate, e_log_s2, e_prec)
        entropy = gaussian_entropy_tril(self.scale_tril) + inverse_gamma_entropy(self.a, self.b)
        return float(loglik + log_pw + log_ps2 + entropy)
