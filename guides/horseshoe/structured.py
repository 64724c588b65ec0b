"""The structured horseshoe family: matrix-normal weight-scale coupling (Ghosh, Yao & Doshi-Velez 2019,
"Model selection in Bayesian neural networks via horseshoe priors", arXiv:1705.10388, §4.1.2, Table 1,
§4.2.1, App. A.1-A.2).

Per hidden layer, with ``F`` per-unit entries and ``K`` units, stack each unit's weights and its own log
scale ``nu_k = ln tau^2_k`` into ``t_k = [beta_k; nu_k]`` (``F + 1`` entries, our row ``k`` = the paper's
column ``k``).  The family is the matrix normal ``MN(M, U, V)`` with ``U = Psi + h h^T`` (``Psi`` diagonal,
``h`` a vector, both ``F + 1``) and ``V`` diagonal (``K``), i.e. independent units with
``t_k ~ N(m_k, V_kk (Psi + h h^T))``: each unit's weights co-vary with its own log-scale.

Sampling follows the exact factorization ``q(nu) q(beta | nu)`` (§4.2.1, App. A.1), which maps one to
one onto the prior's sites ``p.tau2`` and ``p.beta``::

    nu_k ~ N(M_k,nu, V_kk (Psi_nu + h_nu^2))                         (site p.tau2 = exp(nu), log-normal)
    beta_k | nu_k ~ N(M_k,beta + h_beta r_k, V_kk (Psi_beta + s h_beta h_beta^T)),
    r_k = h_nu (nu_k - M_k,nu) / (Psi_nu + h_nu^2),   s = Psi_nu / (Psi_nu + h_nu^2).

Entropy (App. A.2, matrix determinant lemma): ``H = (mn/2) ln(2 pi e) + (m/2) sum ln V + (n/2) ln|U|``,
``ln|U| = ln(1 + h^T Psi^-1 h) + sum ln Psi`` (``m = F + 1``, ``n = K``), plus the Jacobian ``sum_k E[nu_k]``
because the prior density is on ``tau^2``.  After every gradient step ``Psi``, ``V`` and ``h`` are each
projected onto the l2 unit ball, ``x <- x / max(1, ||x||)`` (§4.2.2: the paper restricts them to the unit
ball without saying how; we project; ``Psi`` and ``V`` are then floored at ``sqrt(tiny)`` of the dtype, see
:func:`variance_floor`), and the auxiliaries get the fixed-point update with the marginal
``q(nu_k)``.  The output layer keeps the factorized Gaussian with the ``kappa`` scale (the paper does not
say which family the output layer gets).
"""

from __future__ import annotations

import math

import pyro.distributions as dist
import torch
from torch import Tensor

from guides.horseshoe.factorized import HorseshoeGuide
from zoo.core.model import BayesianModel
from zoo.families.horseshoe.prior import HSLayer
from zoo.ops.expectations import LOG_2PI

__all__ = ["StructuredHorseshoeGuide", "matrix_normal_entropy", "project_unit_ball_", "variance_floor"]


def matrix_normal_entropy(psi: Tensor, h: Tensor, v: Tensor) -> Tensor:
    """Entropy of ``MN(M, Psi + h h^T, diag v)`` over an ``m x n`` matrix (``m = len(psi)``, ``n = len(v)``),
    via the matrix determinant lemma ``|Psi + h h^T| = (1 + h^T Psi^-1 h) |Psi|``."""
    m, n = psi.shape[-1], v.shape[-1]
    logdet_u = torch.log1p((h * h / psi).sum(-1)) + torch.log(psi).sum(-1)
    return 0.5 * m * n * (LOG_2PI + 1.0) + 0.5 * m * torch.log(v).sum(-1) + 0.5 * n * logdet_u


def variance_floor(dtype: torch.dtype) -> float:
    """The smallest entry of ``Psi`` and ``V`` the guide keeps: ``sqrt(tiny)`` of the dtype (about ``1.1e-19``
    in float32, ``1.5e-154`` in float64).

    Why a floor.  Nothing in the objective keeps an entry ``Psi_i`` away from 0 when ``h_i != 0``: by the
    determinant lemma ``|Psi + h h^T| = |Psi| (1 + h^T Psi^-1 h) -> h_i^2 prod_{j != i} Psi_j`` stays
    positive, so the entropy (App. A.2) is bounded as ``ln Psi_i -> -inf`` and Adam, whose step does not
    shrink with the gradient, moves ``ln Psi_i`` down at a constant rate.  On diabetes (default settings)
    the smallest ``ln Psi_i`` falls from -18 to about -88 within ~8000 steps; then ``h_i^2 / Psi_i``
    overflows float32 (max 3.4e38), the entropy's gradient is NaN and so is ``Psi`` after the next Adam
    step.  With ``Psi_i, V_k >= sqrt(tiny)``: ``h_i^2 / Psi_i <= 1 / sqrt(tiny)`` is finite (``|h| <= 1``
    by the projection), the covariances ``V_k Psi_i >= tiny`` are normal numbers, and ``Psi_nu + h_nu^2 >=
    sqrt(tiny)`` keeps ``q(beta | nu)`` (App. A.1) defined.  The clamp is the Euclidean projection onto the
    convex set ``{ln x >= ln floor}``, applied after the unit-ball projection (both sets intersect, since
    ``(F + 1) floor^2 < 1``); it changes the family only where a variance is ``~1e-19`` — numerically zero
    for weights of order one in float32 (resolution 1.2e-7) — and never binds at the initialization
    (``Psi = init_sd^2 sqrt(K) ~ 1e-8``)."""
    return math.sqrt(torch.finfo(dtype).tiny)


def project_unit_ball_(x: Tensor) -> Tensor:
    """In place ``x <- x / max(1, ||x||_2)``."""
    return x.div_(x.norm().clamp_min(1.0))


class StructuredHorseshoeGuide(HorseshoeGuide):
    """Structured family (see the module docstring).  Parameters per hidden layer ``i``: ``l{i}_m``
    ``(K, F+1)`` (last column: the means of ``nu``), ``l{i}_log_psi`` ``(F+1)``, ``l{i}_h`` ``(F+1)``,
    ``l{i}_log_v`` ``(K)``."""

    family = "structured"

    def _init_layer(self, i: int, layer: HSLayer) -> None:
        if layer.output:
            super()._init_layer(i, layer)
            return
        k, f = layer.units, layer.fan
        mu_tau = self._init_mu_tau(k)
        self._param(f"l{i}_m", torch.cat([self._he_rows(layer), mu_tau[:, None]], -1))
        # V on the unit sphere (V_k = 1/sqrt(K)); Psi sets the initial variance init_sd^2.
        self._param(f"l{i}_log_v", torch.full((k,), -0.5 * math.log(k)))
        self._param(f"l{i}_log_psi", torch.full((f + 1,), 2 * math.log(self.init_sd) + 0.5 * math.log(k)))
        self._param(f"l{i}_h", self.init_sd * math.sqrt(math.sqrt(k)) * torch.randn(f + 1))

    def _parts(self, i: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(M, Psi, h, V)`` of hidden layer ``i``."""
        return (
            getattr(self, f"l{i}_m"),
            torch.exp(getattr(self, f"l{i}_log_psi")),
            getattr(self, f"l{i}_h"),
            torch.exp(getattr(self, f"l{i}_log_v")),
        )

    def _tau_marginal(self, i: int) -> tuple[Tensor, Tensor]:
        if self.layers[i].output:
            raise ValueError("layer: the output layer has no tau")
        m, psi, h, v = self._parts(i)
        return m[:, -1], v * (psi[-1] + h[-1] ** 2)

    def _beta_moments(self, i: int) -> tuple[Tensor, Tensor]:
        if self.layers[i].output:
            return super()._beta_moments(i)
        m, psi, h, v = self._parts(i)
        return m[:, :-1], v[:, None] * (psi[:-1] + h[:-1] ** 2)

    def conditional(self, i: int, nu: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``q(beta_k | nu_k)`` of hidden layer ``i`` (App. A.1): ``(loc (..., K, F), cov_factor (K, F, 1),
        cov_diag (K, F))`` with covariance ``cov_diag + cov_factor cov_factor^T``."""
        m, psi, h, v = self._parts(i)
        denom = psi[-1] + h[-1] ** 2
        r = h[-1] * (nu - m[:, -1]) / denom
        s = psi[-1] / denom
        loc = m[:, :-1] + r[..., None] * h[:-1]
        cov_factor = torch.sqrt(v * s)[:, None, None] * h[:-1][None, :, None]
        cov_diag = v[:, None] * psi[:-1][None, :]
        return loc, cov_factor, cov_diag

    def _rows_distribution(self, i: int, layer: HSLayer, tau2: Tensor | None) -> dist.Distribution:
        if layer.output:
            return super()._rows_distribution(i, layer, tau2)
        nu = torch.log(tau2.clamp_min(torch.finfo(tau2.dtype).tiny))
        loc, cov_factor, cov_diag = self.conditional(i, nu)
        return dist.LowRankMultivariateNormal(loc, cov_factor, cov_diag).to_event(1)

    def _rows_entropy(self, i: int, layer: HSLayer) -> Tensor:
        if layer.output:
            return super()._rows_entropy(i, layer)
        m, psi, h, v = self._parts(i)
        return matrix_normal_entropy(psi, h, v) + m[:, -1].sum()

    def _lrt_hidden(self, i: int, a: Tensor, tau2: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. 7 with the exact conditional ``q(beta | nu)`` of App. A.1: mean
        ``a^T M_beta + (a^T h_beta) r``, variance ``(a^T Psi_beta a + s (a^T h_beta)^2) V`` (two inner
        products per row, §4.2.3)."""
        m, psi, h, v = self._parts(i)
        nu = torch.log(tau2.clamp_min(torch.finfo(tau2.dtype).tiny))
        denom = psi[-1] + h[-1] ** 2
        r = h[-1] * (nu - m[:, -1]) / denom
        s = psi[-1] / denom
        ah = a @ h[:-1]
        mean = a @ m[:, :-1].T + ah[..., None] * r
        quad = (a * a) @ psi[:-1] + s * ah * ah
        return mean, quad[..., None] * v

    def project(self) -> None:
        """Project ``Psi``, ``V`` (on their natural scale) and ``h`` onto the l2 unit ball (§4.2.2), then
        ``Psi`` and ``V`` onto ``[floor, inf)`` (:func:`variance_floor`)."""
        for i, layer in enumerate(self.layers):
            if layer.output:
                continue
            for name in (f"l{i}_log_psi", f"l{i}_log_v"):
                raw = getattr(self, f"{name}_unconstrained")
                norm = torch.exp(raw).norm()
                if norm > 1:
                    raw.sub_(torch.log(norm))
                raw.clamp_(min=math.log(variance_floor(raw.dtype)))
            project_unit_ball_(getattr(self, f"l{i}_h_unconstrained"))

    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """Algorithm 1 after each Adam step: unit-ball projection, then the fixed-point updates (and the
        natural-gradient noise step of :mod:`guides.horseshoe.noise`)."""
        self.project()
        super().closed_form_update(model, x, y, subsample)
