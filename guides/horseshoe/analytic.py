"""The analytic part of the horseshoe BNN's ELBO: ``E_q[ln p(theta)] + H[q(theta)]``, every term but the
likelihood (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.2 and App. A.2, Eq. 5).

Per factor, with ``q(ln a^2) = N(mu, var)`` for every scale and ``q(lam) = IG(1, rate)`` for every
auxiliary (:mod:`guides.horseshoe.closed_forms`):

* slab ``c^2`` (regularized horseshoe, Eq. 2): ``E[ln IG(c^2 | c_a, c_b)] + H[q(c^2)]``;
* hidden layer: the scale-mixture terms of every ``tau_kl`` and of ``v_l`` (with their entropies and those
  of ``lam_kl``, ``theta_l``), ``E[ln N(beta | 0, I)]`` and the entropy of ``q(beta_l)`` (with
  ``q(tau^2_l)``);
* output layer: the same for ``kappa`` and ``beta_L``;
* noise: ``E[ln Gamma(gamma | 6, 6)] + H[q(gamma)]`` (or the inverse-gamma variance prior).
"""

from __future__ import annotations

import torch
from pyro.nn import pyro_method
from torch import Tensor

from guides.horseshoe.closed_forms import expected_log_half_cauchy_mixture, lognormal_entropy
from zoo.families.horseshoe.prior import HSLayer
from zoo.ops.expectations import (
    LOG_2PI,
    expected_log_gamma,
    expected_log_inverse_gamma,
    gamma_entropy,
    gamma_moments,
)

__all__ = ["HorseshoeAnalyticMixin"]


class HorseshoeAnalyticMixin:
    """``E_q[ln p(theta)] + H[q(theta)]`` in closed form (App. A.2) for a horseshoe guide.

    The host (:class:`guides.horseshoe.factorized.HorseshoeGuide`) provides the family interface
    ``_lognormal(name)``, ``_tau_marginal(i)``, ``_beta_moments(i)``, ``_rows_entropy(i, layer)``,
    ``_noise_params()`` and the attributes ``layers``, ``regularized``, ``centered``, ``noise``, the prior
    constants ``b0, bg, b_kappa, c_a, c_b`` and ``_noise_prior``.
    """

    @pyro_method
    def expected_log_prior_plus_entropy(self) -> Tensor:
        """``E_q[ln p(theta)] + H[q(theta)]``: everything but the likelihood (non-centered priors only)."""
        if self.centered:
            raise ValueError("centered: the analytic ELBO is implemented for the non-centered prior")
        total = self._t(0.0)
        if self.regularized:
            total = total + self._analytic_slab()
        for i, layer in enumerate(self.layers):
            total = total + self._analytic_layer(i, layer)
        return total + self._analytic_noise()

    def _analytic_slab(self) -> Tensor:
        """``E[ln IG(c^2 | c_a, c_b)] + H[q(c^2)]`` (Eq. 2)."""
        mu, var = self._lognormal("c")
        ca, cb = self._t(self.c_a), self._t(self.c_b)
        return expected_log_inverse_gamma(ca, cb, mu, torch.exp(-mu + 0.5 * var)) + lognormal_entropy(mu, var)

    def _analytic_layer(self, i: int, layer: HSLayer) -> Tensor:
        """The scale-mixture terms of layer ``i`` and ``E[ln N(beta | 0, I)] + H[q(beta)]``."""
        if layer.output:
            mu, var = self._lognormal(f"l{i}_kappa")
            rate = getattr(self, f"l{i}_rho_rate")
            total = expected_log_half_cauchy_mixture(mu, var, rate, self.b_kappa) + lognormal_entropy(mu, var)
        else:
            mu, var = self._tau_marginal(i)
            rate = getattr(self, f"l{i}_lam_rate")
            total = expected_log_half_cauchy_mixture(mu, var, rate, self.b0).sum()
            mu, var = self._lognormal(f"l{i}_v")
            rate = getattr(self, f"l{i}_theta_rate")
            total = total + expected_log_half_cauchy_mixture(mu, var, rate, self.bg)
            total = total + lognormal_entropy(mu, var)
        m, v = self._beta_moments(i)
        return total + (-0.5 * LOG_2PI - 0.5 * (m * m + v)).sum() + self._rows_entropy(i, layer)

    def _analytic_noise(self) -> Tensor:
        """``E[ln p(noise)] + H[q(noise)]`` of a Gaussian likelihood's latent (zero without one)."""
        if self.noise == "gamma":
            a, b = self._noise_params()
            e_x, e_log = gamma_moments(a, b)
            a0, b0 = self._noise_prior
            return expected_log_gamma(self._t(a0), self._t(b0), e_x, e_log) + gamma_entropy(a, b)
        if self.noise == "inverse_gamma":
            mu, var = self._lognormal("noise")
            a0, b0 = self._noise_prior
            e_rec = torch.exp(-mu + 0.5 * var)
            e_log_p = expected_log_inverse_gamma(self._t(a0), self._t(b0), mu, e_rec)
            return e_log_p + lognormal_entropy(mu, var)
        return self._t(0.0)
