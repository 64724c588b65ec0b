"""Distributions for the bow-tie / N-GIG models of Sheinkman & Wade (2025) (Sheinkman & Wade).

* :class:`PolyaGamma` -- PG(b, c) (Sec. 2.3, Eqs. (8)-(9), (17)) with closed-form, c -> 0-safe moments.
* :class:`GeneralizedInverseGaussian` -- GIG(nu, delta, lam) in the App. E.1 parameterization
  (density prop. to x^(nu-1) exp(-(delta^2/x + lam^2 x)/2)), with the CAVI moments E[x], E[1/x], E[log x]
  (Eqs. (13)-(14)) stable at orders like -1250 and exact Gamma / inverse-gamma limits.
* N-GIG constructors for the Table 1 special cases (Student-t, Laplace, normal-gamma,
  normal-inverse-Gaussian with
  the corrected nu = -1/2) and their closed-form marginals.
* :func:`log_bessel_k`, :func:`bessel_k_ratio` (K_{nu+1}/K_nu) and friends: log-space Bessel-K numerics
  (:mod:`zoo.distributions.bessel`, float64 kernels in :mod:`zoo.distributions.bessel_np`); GIG moments and
  sampling in :mod:`zoo.distributions.gig_moments` and :mod:`zoo.distributions.gig_sampling`.
"""

from zoo.distributions.bessel import bessel_k_ratio, log_bessel_k, log_bessel_k_dnu, log_bessel_k_ratio
from zoo.distributions.gig import GeneralizedInverseGaussian
from zoo.distributions.ngig import (
    NormalGIG,
    inverse_gamma_mixing,
    laplace_marginal,
    laplace_mixing,
    ngig_marginal_log_prob,
    ngig_mixing,
    normal_gamma_marginal_log_prob,
    normal_gamma_mixing,
    normal_inverse_gaussian_marginal_log_prob,
    normal_inverse_gaussian_mixing,
    student_t_marginal,
    student_t_mixing,
)
from zoo.distributions.polya_gamma import PolyaGamma, log_cosh, polya_gamma_mean, polya_gamma_variance

__all__ = [
    "GeneralizedInverseGaussian",
    "NormalGIG",
    "PolyaGamma",
    "bessel_k_ratio",
    "inverse_gamma_mixing",
    "laplace_marginal",
    "laplace_mixing",
    "log_bessel_k",
    "log_bessel_k_dnu",
    "log_bessel_k_ratio",
    "log_cosh",
    "ngig_marginal_log_prob",
    "ngig_mixing",
    "normal_gamma_marginal_log_prob",
    "normal_gamma_mixing",
    "normal_inverse_gaussian_marginal_log_prob",
    "normal_inverse_gaussian_mixing",
    "polya_gamma_mean",
    "polya_gamma_variance",
    "student_t_marginal",
    "student_t_mixing",
]
