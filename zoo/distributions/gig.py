r"""Generalized inverse Gaussian distribution and stable modified-Bessel-K numerics.

Parameterization (Sheinkman & Wade (2025), App. E.1, used by Eqs. (6), (7), (13), (14))
-------------------------------------------------------------------------
``GeneralizedInverseGaussian(nu, delta, lam)`` has density, for :math:`x > 0`,

.. math::

    p(x \mid \nu, \delta, \lambda) = \frac{(\lambda/\delta)^{\nu}}{2 K_\nu(\lambda\delta)}
        \, x^{\nu - 1} \exp\!\Big(-\tfrac12\big(\delta^2 / x + \lambda^2 x\big)\Big),

with :math:`\nu \in \mathbb{R}`, :math:`\delta \ge 0`, :math:`\lambda \ge 0` and :math:`K_\nu` the modified
Bessel function of the second kind.  In the common :math:`(p, a, b)` form this is
``(p, a, b) = (nu, lam**2, delta**2)``; in ``scipy.stats.geninvgauss`` it is
``p = nu, b = lam * delta, scale = delta / lam``.  The boundary cases are proper and handled *exactly*
(closed forms, no Bessel functions):

* ``delta == 0`` (needs ``nu > 0``, ``lam > 0``): Gamma(shape ``nu``, rate ``lam**2 / 2``) -- the Laplace / NG
  columns of Table 1;
* ``lam == 0`` (needs ``nu < 0``, ``delta > 0``): InverseGamma(shape ``-nu``, scale ``delta**2 / 2``) -- the
  Student-t column of Table 1, and every q(tau), q(psi) of the paper's experiments.

Moments used by CAVI (Sheinkman & Wade (2025) App. E.1; :mod:`zoo.distributions.gig_moments`), with
:math:`z = \lambda\delta`, :math:`R_\nu(z) = K_{\nu+1}(z) / K_\nu(z)`:

* :math:`E[x] = (\delta/\lambda) R_\nu(z)`,
* :math:`E[1/x] = (\lambda/\delta) R_\nu(z) - 2\nu/\delta^2 = (\lambda/\delta) / R_{\nu-1}(z)` (the second
  form is used: it has no cancellation),
* :math:`E[\log x] = \log(\delta/\lambda) + \partial_\nu \log K_\nu(z)`.

Numerics of :math:`K_\nu` (:mod:`zoo.distributions.bessel`)
------------------------------------------------------------
q(tau_l) has order :math:`\hat\nu = \nu - D_l D_{l-1}/2` (about -1250 for a 50x50 layer, Eq. (13)), where
:math:`K_\nu` over/underflows.  Everything is therefore done in log space, in float64 on the CPU:

* :math:`|\nu| \ge 20`: the uniform (Debye / Olver) asymptotic expansion, DLMF 10.41.4, with 12 correction
  terms :math:`u_k(p)` generated exactly from the recurrence DLMF 10.41.10.  Its relative error is below 1e-15
  for :math:`|\nu| \ge 20` uniformly in :math:`x > 0` (checked against mpmath).  The expansion is
  differentiated analytically in :math:`\nu`, and :math:`\log K_{\nu+1} - \log K_\nu` is formed without
  cancellation.
* :math:`|\nu| < 20`: ``scipy.special.kve`` (AMOS).  Where it overflows (tiny ``x``), and for
  :math:`\partial_\nu \log K_\nu`, the integral :math:`K_\nu(x) = \tfrac12\int_{\mathbb R} e^{\nu t - x\cosh
  t}\,dt` is evaluated with the trapezoidal rule, centred on the saddle point :math:`t^* =
  \operatorname{asinh}(\nu/x)`. The integrand is entire, so the rule converges geometrically;
  :math:`\partial_\nu \log K_\nu = E_w[t]` under the normalized integrand (no finite differences).

Sampling (:mod:`zoo.distributions.gig_sampling`) uses Devroye's (2014) rejection algorithm for the
log-concave density of :math:`\log x`, vectorized in torch, so it runs on the parameters' device, is seeded
by torch's RNG (``pyro.set_rng_seed``), and works for any order (including +-1250) and for tiny
``delta * lam``.  Boundary cases sample from Gamma / InverseGamma.

The Bessel numerics live in :mod:`zoo.distributions.bessel_np` (float64 numpy kernels) and
:mod:`zoo.distributions.bessel` (torch front ends); this module keeps the distribution class and re-exports
the Bessel functions.  For parameters on a GPU the moments, the log-normalizer and the entropy are computed
in torch on the device instead (:mod:`zoo.distributions.bessel_torch`, saddle-point trapezoid quadrature of
:math:`K_\nu(z) = \tfrac12\int e^{\nu t - z\cosh t} dt`, tested equal to the numpy kernels), so a CAVI
sweep on CUDA never copies to the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Number

import numpy as np
import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints
from torch.distributions.utils import broadcast_all

from zoo.distributions.bessel import bessel_k_ratio, log_bessel_k, log_bessel_k_dnu, log_bessel_k_ratio, np64
from zoo.distributions.bessel_torch import gig_moment_torch, log_k
from zoo.distributions.gig_moments import (
    gamma_log_normalizer,
    gig_cases,
    gig_moment_np,
    inverse_gamma_log_normalizer,
)
from zoo.distributions.gig_sampling import sample_gig

_EMPTY_SHAPE = torch.Size()

__all__ = [
    "GeneralizedInverseGaussian",
    "bessel_k_ratio",
    "log_bessel_k",
    "log_bessel_k_dnu",
    "log_bessel_k_ratio",
]


class GeneralizedInverseGaussian(TorchDistribution):
    r"""GIG(nu, delta, lam) in the parameterization of Sheinkman & Wade (2025), App. E.1 (priors Eqs.
    (6)-(7), posteriors
    (13)-(14)).

    .. math::

        p(x \mid \nu, \delta, \lambda) = \frac{(\lambda/\delta)^{\nu}}{2 K_\nu(\lambda\delta)}
            x^{\nu-1} \exp\!\big(-\tfrac12(\delta^2/x + \lambda^2 x)\big), \qquad x > 0.

    Args:
        nu: order :math:`\nu \in \mathbb{R}`.
        delta: :math:`\delta \ge 0` (``delta**2`` multiplies ``1/x``); ``delta = 0`` is the Gamma(nu, rate
            lam^2/2) limit and needs ``nu > 0``, ``lam > 0``.
        lam: :math:`\lambda \ge 0` (``lam**2`` multiplies ``x``); ``lam = 0`` is the InverseGamma(-nu,
            delta^2/2) limit and needs ``nu < 0``, ``delta > 0``.

    Equivalent forms: ``(p, a, b) = (nu, lam**2, delta**2)``; ``scipy.stats.geninvgauss(p=nu, b=lam*delta,
    scale=delta/lam)``.

    Beyond ``mean``/``variance``/``log_prob``/``sample``/``entropy`` it exposes the CAVI moments of App. E.1:
    :attr:`mean_reciprocal` (E[1/x]) and :attr:`mean_log` (E[log x]).  Moments are computed in float64 with
    the stable Bessel numerics of this module (finite at orders like -1250), returned in the parameters' dtype
    and device, and are not differentiable; ``log_prob`` is differentiable in the value and all parameters.
    """

    arg_constraints = {
        "nu": constraints.real,
        "delta": constraints.nonnegative,
        "lam": constraints.nonnegative,
    }
    support = constraints.positive
    has_rsample = False

    def __init__(
        self,
        nu: float | torch.Tensor,
        delta: float | torch.Tensor,
        lam: float | torch.Tensor,
        validate_args: bool | None = None,
    ) -> None:
        self.nu, self.delta, self.lam = broadcast_all(nu, delta, lam)
        if all(isinstance(a, Number) for a in (nu, delta, lam)):
            batch_shape = torch.Size()
        else:
            batch_shape = self.nu.shape
        super().__init__(batch_shape, validate_args=validate_args)
        if self._validate_args:
            self._check_boundary()

    def _check_boundary(self) -> None:
        nu, delta, lam = self.nu, self.delta, self.lam
        if bool(((delta == 0) & (lam == 0)).any()):
            raise ValueError("GeneralizedInverseGaussian: delta and lam cannot both be 0 (improper)")
        if bool(((delta == 0) & ~(nu > 0)).any()):
            raise ValueError("GeneralizedInverseGaussian: delta = 0 (Gamma limit) requires nu > 0")
        if bool(((lam == 0) & ~(nu < 0)).any()):
            raise ValueError("GeneralizedInverseGaussian: lam = 0 (inverse-gamma limit) requires nu < 0")
        if not bool(torch.isfinite(nu).all() & torch.isfinite(delta).all() & torch.isfinite(lam).all()):
            raise ValueError("GeneralizedInverseGaussian: parameters must be finite")

    def expand(
        self, batch_shape: Sequence[int], _instance: GeneralizedInverseGaussian | None = None
    ) -> GeneralizedInverseGaussian:
        new = self._get_checked_instance(GeneralizedInverseGaussian, _instance)
        batch_shape = torch.Size(batch_shape)
        new.nu = self.nu.expand(batch_shape)
        new.delta = self.delta.expand(batch_shape)
        new.lam = self.lam.expand(batch_shape)
        super(GeneralizedInverseGaussian, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    # ---------------------------------------------------------------- helpers
    def _np_params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np64(self.nu), np64(self.delta), np64(self.lam)

    def _to_tensor(self, arr: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(arr), dtype=self.nu.dtype, device=self.nu.device).reshape(
            self.batch_shape
        )

    def _moments_np(self, what: str) -> np.ndarray:
        return gig_moment_np(what, *self._np_params())

    def _moment(self, what: str) -> torch.Tensor:
        """Moment ``what`` in the parameters' dtype and device: the numpy/scipy kernels on the CPU, the torch
        quadrature of :mod:`zoo.distributions.bessel_torch` elsewhere (no device-to-host copy)."""
        if self.nu.device.type == "cpu":
            return self._to_tensor(self._moments_np(what))
        out = gig_moment_torch(what, self.nu, self.delta, self.lam)
        return out.to(self.nu.dtype).reshape(self.batch_shape)

    # ---------------------------------------------------------------- moments
    @property
    def mean(self) -> torch.Tensor:
        r""":math:`E[x] = (\delta/\lambda) K_{\nu+1}(\lambda\delta)/K_\nu(\lambda\delta)` (App. E.1); inf if
        undefined."""
        return self._moment("mean")

    @property
    def mean_reciprocal(self) -> torch.Tensor:
        r"""E[1/x] (App. E.1): :math:`(\lambda/\delta) K_{\nu+1}/K_\nu - 2\nu/\delta^2`.

        Evaluated as :math:`(\lambda/\delta) K_{\nu-1}/K_\nu`, which has no cancellation."""
        return self._moment("recip")

    @property
    def mean_log(self) -> torch.Tensor:
        r""":math:`E[\log x] = \log(\delta/\lambda) + \partial_\nu \log K_\nu(\lambda\delta)`.

        Digamma forms at the Gamma / inverse-gamma limits (App. E.1 cases 1-2)."""
        return self._moment("log")

    @property
    def variance(self) -> torch.Tensor:
        r""":math:`(\delta/\lambda)^2 [K_{\nu+2}/K_\nu - (K_{\nu+1}/K_\nu)^2]`; inf if undefined."""
        return self._moment("var")

    @property
    def mode(self) -> torch.Tensor:
        nu, delta, lam = self.nu, self.delta, self.lam
        lam2 = lam * lam
        safe_lam2 = torch.where(lam2 > 0, lam2, torch.ones_like(lam2))
        general = ((nu - 1.0) + torch.sqrt((nu - 1.0) ** 2 + lam2 * delta * delta)) / safe_lam2
        # lam = 0: inverse-gamma mode delta^2 / (2 (1 - nu))
        return torch.where(lam2 > 0, general, delta * delta / (2.0 * (1.0 - nu)))

    def log_normalizer(self) -> torch.Tensor:
        r"""log of :math:`\int x^{\nu-1} e^{-(\delta^2/x + \lambda^2 x)/2} dx = 2 (\delta/\lambda)^\nu
        K_\nu(\lambda\delta)` (``lgamma`` forms at the limits).  Differentiable in the parameters."""
        nu, delta, lam = self.nu, self.delta, self.lam
        gamma, invgamma, general = gig_cases(delta, lam)
        one = torch.ones_like(nu)
        d_s = torch.where(general, delta, one)
        l_s = torch.where(general, lam, one)
        bessel = log_bessel_k if nu.device.type == "cpu" else log_k
        log_gen = math.log(2.0) + bessel(nu, d_s * l_s) + nu * (torch.log(d_s) - torch.log(l_s))
        log_gam = gamma_log_normalizer(torch.where(gamma, nu, one), torch.where(gamma, lam, one))
        log_ig = inverse_gamma_log_normalizer(
            torch.where(invgamma, nu, -one), torch.where(invgamma, delta, one)
        )
        return torch.where(general, log_gen, torch.where(gamma, log_gam, log_ig))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        nu, delta, lam = self.nu, self.delta, self.lam
        return (
            (nu - 1.0) * torch.log(value)
            - 0.5 * (delta * delta / value + lam * lam * value)
            - self.log_normalizer()
        )

    def entropy(self) -> torch.Tensor:
        r""":math:`H = \log Z - (\nu - 1) E[\log x] + \tfrac12(\delta^2 E[1/x] + \lambda^2 E[x])`."""
        nu, delta, lam = self.nu, self.delta, self.lam
        zero = torch.zeros_like(nu)
        e_rec = torch.where(delta > 0, delta**2 * self._moment("recip"), zero)
        e_x = torch.where(lam > 0, lam**2 * self._moment("mean"), zero)
        log_z = self.log_normalizer().detach()
        return log_z - (nu - 1.0) * self._moment("log") + 0.5 * (e_rec + e_x)

    def sample(self, sample_shape: torch.Size = _EMPTY_SHAPE) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            flat = [p.expand(shape).to(torch.float64).reshape(-1) for p in (self.nu, self.delta, self.lam)]
            return sample_gig(*flat).reshape(shape).to(self.nu.dtype)
