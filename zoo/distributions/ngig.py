r"""Normal–GIG (N-GIG) shrinkage priors of Sheinkman & Wade (2025) (Sec. 2.2, Eqs. (5)-(7), Table 1, App.
E.1).

A weight is a Gaussian scale mixture :math:`w \mid \psi \sim N(0, \tau\psi)`, :math:`\psi \sim
\mathrm{GIG}(\nu, \delta, \lambda)` (Eq. (5)-(6); ``tau`` is the layer's global scale, held fixed as in Table
1). With the GIG parameterization of :mod:`zoo.distributions.gig`, the special cases of Table 1 are:

* Student-t marginal: InverseGamma(``-nu``, ``delta**2 / 2``) mixing, ``nu < 0, delta > 0, lam = 0`` --
  :func:`student_t_mixing` (marginal parameters) or :func:`inverse_gamma_mixing` (paper parameters);
* Laplace marginal (Bayesian lasso): Exponential(rate ``lam**2 / 2``) mixing, ``nu = 1, delta = 0`` --
  :func:`laplace_mixing`;
* normal-gamma (NG): Gamma(``nu``, rate ``lam**2 / 2``) mixing, ``delta = 0`` -- :func:`normal_gamma_mixing`;
* normal-inverse-Gaussian (NIG): inverse-Gaussian mixing, **nu = -1/2**, ``delta, lam > 0`` --
  :func:`normal_inverse_gaussian_mixing`.

Erratum: Table 1 prints ``nu = 1/2`` for NIG; the inverse-Gaussian special case of the GIG is ``nu = -1/2``
(App. E.1, case 3), which is what :func:`normal_inverse_gaussian_mixing` uses.  The App. E.1 display of the
NIG marginal, :math:`(\lambda/\pi) e^{\lambda} (\delta^2 + w^2)^{-1/2} K_1((\lambda/\delta)\sqrt{\delta^2 +
w^2})`, is only right for ``delta = 1``; the correct density (derived below, equal to
``scipy.stats.norminvgauss(a=lam*delta, b=0, scale=delta)``) is :math:`(\lambda\delta/\pi) e^{\lambda\delta}
(\delta^2 + w^2)^{-1/2} K_1(\lambda\sqrt{\delta^2 + w^2})`.  The horseshoe is *not* in this class as used by
the paper (Discussion), so there is no horseshoe constructor.

For every member the marginal has the closed form (a symmetric generalized hyperbolic density)

.. math::

    p(w) = \frac{(\lambda/\delta)^\nu}{K_\nu(\lambda\delta)\sqrt{2\pi}}
        \Big(\frac{\delta^2 + w^2}{\lambda^2}\Big)^{(\nu - 1/2)/2} K_{\nu-1/2}\big(\lambda\sqrt{\delta^2 +
        w^2}\big)

(for ``tau = 1``), from :math:`\int_0^\infty x^{\mu-1} e^{-(a/x + b x)/2} dx = 2 (a/b)^{\mu/2}
K_\mu(\sqrt{ab})`; at ``lam = 0`` it is the Student-t with ``df = -2 nu`` and scale ``delta / sqrt(-2 nu)``;
at ``delta = 0`` the variance-gamma (normal-gamma) density.  :class:`NormalGIG` packages it as a distribution
over ``w``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from pyro.distributions import Laplace, StudentT, TorchDistribution
from torch.distributions import constraints
from torch.distributions.utils import broadcast_all

from zoo.distributions.bessel import log_bessel_k
from zoo.distributions.gig import GeneralizedInverseGaussian
from zoo.distributions.gig_moments import gig_cases

_EMPTY_SHAPE = torch.Size()

__all__ = [
    "NormalGIG",
    "inverse_gamma_mixing",
    "laplace_marginal",
    "laplace_mixing",
    "ngig_marginal_log_prob",
    "ngig_mixing",
    "normal_gamma_marginal_log_prob",
    "normal_gamma_mixing",
    "normal_inverse_gaussian_marginal_log_prob",
    "normal_inverse_gaussian_mixing",
    "student_t_marginal",
    "student_t_mixing",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _t(x, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if like is not None:
        return torch.as_tensor(x, dtype=like.dtype, device=like.device)
    return torch.as_tensor(x, dtype=torch.get_default_dtype())


# ------------------------------------------------------------------------------------------ mixing
# distributions


def ngig_mixing(
    nu: float | torch.Tensor,
    delta: float | torch.Tensor,
    lam: float | torch.Tensor,
    validate_args: bool | None = None,
) -> GeneralizedInverseGaussian:
    r"""The local/global scale prior :math:`\mathrm{GIG}(\nu, \delta, \lambda)` of Eqs. (6)-(7)."""
    return GeneralizedInverseGaussian(nu, delta, lam, validate_args=validate_args)


def inverse_gamma_mixing(
    nu: float | torch.Tensor, delta: float | torch.Tensor, validate_args: bool | None = None
) -> GeneralizedInverseGaussian:
    r"""Table 1, Student-t column: :math:`\nu < 0`, :math:`\delta > 0`, :math:`\lambda = 0`, i.e.
    InverseGamma(:math:`-\nu`, :math:`\delta^2/2`); the marginal is Student-t with ``df = -2 nu`` and scale
    ``delta / sqrt(-2 nu)`` (App. E.1, case 1; ``nu = -1.5`` gives 3 dof, the authors' default)."""
    nu, delta = broadcast_all(nu, delta)
    return GeneralizedInverseGaussian(nu, delta, torch.zeros_like(delta), validate_args=validate_args)


def student_t_mixing(
    df: float | torch.Tensor, scale: float | torch.Tensor = 1.0, validate_args: bool | None = None
) -> GeneralizedInverseGaussian:
    r"""Table 1, Student-t column, parameterized by the marginal.

    ``nu = -df/2``, ``delta = scale * sqrt(df)``, ``lam = 0``, so that ``w = sqrt(psi) z`` is
    Student-t(df, 0, scale)."""
    df, scale = broadcast_all(df, scale)
    return inverse_gamma_mixing(-0.5 * df, scale * torch.sqrt(df), validate_args=validate_args)


def laplace_mixing(
    lam: float | torch.Tensor, validate_args: bool | None = None
) -> GeneralizedInverseGaussian:
    r"""Table 1, Laplace column: ``nu = 1, delta = 0`` -- Exponential(rate ``lam**2 / 2``) mixing, giving the
    Bayesian-lasso marginal Laplace(0, ``1/lam``) (App. E.1, case 2)."""
    lam = _t(lam)
    return GeneralizedInverseGaussian(
        torch.ones_like(lam), torch.zeros_like(lam), lam, validate_args=validate_args
    )


def normal_gamma_mixing(
    nu: float | torch.Tensor, lam: float | torch.Tensor, validate_args: bool | None = None
) -> GeneralizedInverseGaussian:
    r"""Table 1, NG column: ``delta = 0``, Gamma(shape ``nu``, rate ``lam**2 / 2``) mixing (``nu > 0``)."""
    nu, lam = broadcast_all(nu, lam)
    return GeneralizedInverseGaussian(nu, torch.zeros_like(lam), lam, validate_args=validate_args)


def normal_inverse_gaussian_mixing(
    delta: float | torch.Tensor, lam: float | torch.Tensor, validate_args: bool | None = None
) -> GeneralizedInverseGaussian:
    r"""Table 1, NIG column *with the erratum applied*.

    ``nu = -1/2`` (not the printed ``+1/2``), i.e. the inverse Gaussian with mean ``delta / lam`` and shape
    ``delta**2`` (App. E.1, case 3)."""
    delta, lam = broadcast_all(delta, lam)
    return GeneralizedInverseGaussian(torch.full_like(delta, -0.5), delta, lam, validate_args=validate_args)


# ------------------------------------------------------------------------------------------ marginals of w


def _general_marginal(x: torch.Tensor, nu, delta, lam, general: torch.Tensor) -> torch.Tensor:
    """``delta > 0, lam > 0``: the symmetric generalized hyperbolic density (module docstring)."""
    one = torch.ones_like(x)
    d_s = torch.where(general, delta, one)
    l_s = torch.where(general, lam, one)
    r2 = d_s * d_s + x * x
    return (
        nu * (torch.log(l_s) - torch.log(d_s))
        - log_bessel_k(nu, l_s * d_s)
        - _HALF_LOG_2PI
        + 0.5 * (nu - 0.5) * (torch.log(r2) - 2.0 * torch.log(l_s))
        + log_bessel_k(nu - 0.5, l_s * torch.sqrt(r2))
    )


def _variance_gamma_marginal(x: torch.Tensor, nu, lam, gamma: torch.Tensor) -> torch.Tensor:
    """``delta = 0``: Gamma(nu, lam^2/2) mixing (normal-gamma / variance-gamma); ``+inf`` at ``x = 0`` when
    ``nu <= 1/2``."""
    one = torch.ones_like(x)
    nu_g = torch.where(gamma, nu, one)
    l_g = torch.where(gamma, lam, one)
    log_beta = torch.log(0.5 * l_g * l_g)
    nonzero = x != 0
    ax = torch.where(nonzero, x.abs(), one)
    log_ng = (
        nu_g * log_beta
        - torch.lgamma(nu_g)
        - _HALF_LOG_2PI
        + math.log(2.0)
        + (nu_g - 0.5) * (torch.log(ax) - torch.log(l_g))
        + log_bessel_k(nu_g - 0.5, l_g * ax)
    )
    nu_h = torch.where(nu_g > 0.5, nu_g, one)
    log_ng0 = (
        nu_h * log_beta
        - torch.lgamma(nu_h)
        - _HALF_LOG_2PI
        + torch.lgamma(nu_h - 0.5)
        - (nu_h - 0.5) * log_beta
    )
    log_ng0 = torch.where(nu_g > 0.5, log_ng0, torch.full_like(log_ng0, math.inf))
    return torch.where(nonzero, log_ng, log_ng0)


def _student_t_marginal(x: torch.Tensor, nu, delta, invgamma: torch.Tensor) -> torch.Tensor:
    """``lam = 0``: InverseGamma(-nu, delta^2/2) mixing, Student-t(df -2 nu, scale delta / sqrt(-2 nu))."""
    one = torch.ones_like(x)
    nu_i = torch.where(invgamma, nu, -one)
    d_i = torch.where(invgamma, delta, one)
    df = -2.0 * nu_i
    return StudentT(df, torch.zeros_like(x), d_i / torch.sqrt(df), validate_args=False).log_prob(x)


def ngig_marginal_log_prob(
    w: float | torch.Tensor,
    nu: float | torch.Tensor,
    delta: float | torch.Tensor,
    lam: float | torch.Tensor,
    tau: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    r"""Closed-form :math:`\log \int N(w \mid 0, \tau\psi)\, \mathrm{GIG}(\psi \mid \nu, \delta, \lambda)\,
    d\psi`.

    Valid for every proper GIG including the boundary cases ``lam = 0`` (Student-t) and ``delta = 0``
    (variance-gamma; ``+inf`` at ``w = 0`` when ``nu <= 1/2``).  Differentiable (uses :func:`log_bessel_k`).
    """
    w, nu, delta, lam, tau = broadcast_all(w, nu, delta, lam, tau)
    x = w / torch.sqrt(tau)
    gamma, invgamma, general = gig_cases(delta, lam)
    log_gen = _general_marginal(x, nu, delta, lam, general)
    log_ng = _variance_gamma_marginal(x, nu, lam, gamma)
    log_st = _student_t_marginal(x, nu, delta, invgamma)
    out = torch.where(general, log_gen, torch.where(gamma, log_ng, log_st))
    return out - 0.5 * torch.log(tau)


def normal_inverse_gaussian_marginal_log_prob(
    w: float | torch.Tensor,
    delta: float | torch.Tensor,
    lam: float | torch.Tensor,
    tau: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    r"""NIG marginal (Table 1, column 4 with ``nu = -1/2``): :math:`\log[(\lambda\delta/\pi) e^{\lambda\delta}
    (\delta^2 + w^2)^{-1/2} K_1(\lambda\sqrt{\delta^2 + w^2})]` for ``tau = 1``
    (``scipy.stats.norminvgauss(a=lam*delta, b=0, scale=delta)``)."""
    w, delta, lam, tau = broadcast_all(w, delta, lam, tau)
    return ngig_marginal_log_prob(w, torch.full_like(w, -0.5), delta, lam, tau)


def normal_gamma_marginal_log_prob(
    w: float | torch.Tensor,
    nu: float | torch.Tensor,
    lam: float | torch.Tensor,
    tau: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    r"""Normal-gamma marginal (Table 1, column 3): for ``tau = 1``,
    :math:`\frac{\lambda^{2\nu}}{2^{\nu}\Gamma(\nu)} \frac{2}{\sqrt{2\pi}} (|w|/\lambda)^{\nu-1/2}
    K_{\nu-1/2}(\lambda|w|)`."""
    w, nu, lam, tau = broadcast_all(w, nu, lam, tau)
    return ngig_marginal_log_prob(w, nu, torch.zeros_like(w), lam, tau)


def student_t_marginal(
    nu: float | torch.Tensor, delta: float | torch.Tensor, tau: float | torch.Tensor = 1.0
) -> StudentT:
    r"""Student-t marginal of the inverse-gamma mixture (Table 1, column 1; App. E.1 case 1).

    ``StudentT(df = -2 nu, loc = 0, scale = delta * sqrt(tau) / sqrt(-2 nu))``."""
    nu, delta, tau = broadcast_all(nu, delta, tau)
    df = -2.0 * nu
    return StudentT(df, torch.zeros_like(df), delta * torch.sqrt(tau) / torch.sqrt(df))


def laplace_marginal(lam: float | torch.Tensor, tau: float | torch.Tensor = 1.0) -> Laplace:
    r"""Laplace marginal of the exponential mixture (Table 1, column 2): ``Laplace(0, sqrt(tau) / lam)``."""
    lam, tau = broadcast_all(lam, tau)
    return Laplace(torch.zeros_like(lam), torch.sqrt(tau) / lam)


class NormalGIG(TorchDistribution):
    r"""Marginal prior of one weight under Eqs. (5)-(6) with the global scale fixed: :math:`w =
    \sqrt{\tau\psi}\,\varepsilon`, :math:`\psi \sim \mathrm{GIG}(\nu, \delta, \lambda)`, :math:`\varepsilon
    \sim N(0, 1)`.  ``log_prob`` is the closed form :func:`ngig_marginal_log_prob`; ``sample`` draws the scale
    mixture; ``variance = tau * E[psi]``."""

    arg_constraints = {
        "nu": constraints.real,
        "delta": constraints.nonnegative,
        "lam": constraints.nonnegative,
        "tau": constraints.positive,
    }
    support = constraints.real
    has_rsample = False

    def __init__(
        self,
        nu: float | torch.Tensor,
        delta: float | torch.Tensor,
        lam: float | torch.Tensor,
        tau: float | torch.Tensor = 1.0,
        validate_args: bool | None = None,
    ) -> None:
        self.nu, self.delta, self.lam, self.tau = broadcast_all(nu, delta, lam, tau)
        self.mixing = GeneralizedInverseGaussian(self.nu, self.delta, self.lam, validate_args=validate_args)
        super().__init__(self.nu.shape, validate_args=validate_args)

    def expand(self, batch_shape: Sequence[int], _instance: NormalGIG | None = None) -> NormalGIG:
        new = self._get_checked_instance(NormalGIG, _instance)
        batch_shape = torch.Size(batch_shape)
        new.nu = self.nu.expand(batch_shape)
        new.delta = self.delta.expand(batch_shape)
        new.lam = self.lam.expand(batch_shape)
        new.tau = self.tau.expand(batch_shape)
        new.mixing = self.mixing.expand(batch_shape)
        super(NormalGIG, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> torch.Tensor:
        m = self.mixing.mean
        return torch.where(torch.isfinite(m), torch.zeros_like(m), torch.full_like(m, math.nan))

    @property
    def variance(self) -> torch.Tensor:
        return self.tau * self.mixing.mean

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return ngig_marginal_log_prob(value, self.nu, self.delta, self.lam, self.tau)

    def sample(self, sample_shape: torch.Size = _EMPTY_SHAPE) -> torch.Tensor:
        with torch.no_grad():
            psi = self.mixing.sample(sample_shape)
            eps = torch.randn_like(psi)
            return torch.sqrt(self.tau * psi) * eps
