"""The Student-t observation model ``y ~ t_df(f, sigma^2)`` (:class:`StudentTLikelihood`); the Gaussian it
extends is :class:`zoo.core.likelihoods.GaussianLikelihood`, the families' options that choose it are read
by :mod:`zoo.core.likelihood_options`."""

from __future__ import annotations

import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.nn import PyroParam
from torch import Tensor

from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.validation import check_bool, check_positive

__all__ = ["StudentTLikelihood", "check_student_t_df"]


def check_student_t_df(name: str, value: object) -> float:
    """A Student-t likelihood's degrees of freedom: a finite number > 2 (finite predictive variance)."""
    df = check_positive(name, value)
    if not df > 2.0:
        raise ValueError(f"{name} must be > 2 (predictive variance sigma^2 df / (df - 2)), got {value!r}")
    return df


class StudentTLikelihood(GaussianLikelihood):
    r"""``y ~ StudentT(df, f, sigma^2)``: the Gaussian likelihood's model (same noise site, prior and
    ``heteroscedastic`` option) with a location-scale Student-t of fixed ``df`` in place of the normal, i.e.
    ``y_n | lambda_n ~ N(f_n, sigma^2 lambda_n)`` with ``lambda_n ~ IG(df / 2, df / 2)`` marginalized
    (Lange, Little & Taylor 1989, "Robust statistical modeling using the t distribution", JASA 84, §2).

    Robust regression for targets whose errors are heavy-tailed: a few large residuals no longer set one
    noise scale for every row, so the intervals of the bulk are not widened by them (yacht's residual
    resistance, whose squared errors concentrate on the highest Froude numbers).  ``sigma^2`` is the t's
    squared *scale*; the per-draw predictive variance is ``sigma^2 df / (df - 2)``, hence ``df > 2``.

    The noise variance is not conjugate any more, but it is given the mixing variables ``lambda_n``: the
    horseshoe guides' natural-gradient ``q(gamma)`` and the exact refit of a log-normal noise factor after
    the last step (:func:`zoo.infer.noise.refit_noise`) weigh each squared error by ``E[1 / lambda_n]``
    (:meth:`noise_weights`, a fixed point in ``E[precision]``).  ``conjugate_noise = False`` keeps the
    closed forms that need a Gaussian (``blr-cavi``'s CAVI) away from it.

    ``learn_df=True`` makes ``df`` (started at ``df``) a model parameter, ``PyroParam`` constrained to
    ``(2, inf)``, which the fit sets by maximizing the ELBO: a type-II maximum-likelihood (empirical Bayes)
    estimate of the tail weight, as the EM estimate of Lange, Little & Taylor (1989, §3) is for the plain
    model.  Errors close to Gaussian then move it up, heavy tails keep it small.  Use with care: with both
    the scale and ``df`` free the likelihood is unbounded as ``sigma -> 0`` with small ``df`` (Fernández &
    Steel 1999, "Multivariate Student-t regression models: pitfalls and inference", Biometrika 86,
    153–167), and a network that reproduces some rows almost exactly can approach that boundary and stop
    fitting the rest (``mfvi-bnn`` on the energy set); a fixed ``df`` has no such boundary.
    """

    conjugate_noise = False
    weighted_noise_update = True

    def __init__(self, df: float = 4.0, learn_df: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        df = check_student_t_df("df", df)
        self.learn_df = check_bool("learn_df", learn_df)
        if self.learn_df:
            self.df = PyroParam(torch.tensor(df), constraint=constraints.greater_than(2.0))
        else:
            self.register_buffer("df", torch.tensor(df))

    @property
    def predictive_df(self) -> float:
        """The degrees of freedom (the fitted value when learned)."""
        return float(self.df.detach())

    def config(self) -> dict:
        return {**super().config(), "df": self.predictive_df, "learn_df": self.learn_df}

    def distribution(self, f: Tensor, latents: dict[str, Tensor]) -> dist.Distribution:
        scale = self._sigma2(latents, f).sqrt()
        d = dist.StudentT(self.df.to(scale.dtype), self._loc(f), scale)
        return d.to_event(1) if self.out_features > 1 else d

    def noise_weights(self, z: Tensor, precision: Tensor | float | None = None) -> Tensor:
        r"""``E_q[1 / lambda_n] = (df + 1) / (df + E_q[precision] z_n)``: the weight of the squared error
        ``z_n`` in the noise update.

        In the scale mixture of the class docstring, ``y_n | lambda_n ~ N(f_n, lambda_n / precision)`` with
        ``lambda_n ~ IG(df / 2, df / 2)``, the noise precision is conjugate given the ``lambda_n`` and each
        ``1 / lambda_n`` given the precision: mean-field coordinate ascent sets ``q(1 / lambda_n) =
        Gamma((df + 1) / 2, (df + E[precision] z_n) / 2)`` and ``q(precision) = Gamma(a0 + N / 2, b0 + sum_n
        E[1 / lambda_n] z_n / 2)`` (Tipping & Lawrence 2005, "Variational inference for Student-t models",
        Neurocomputing 69; the EM weights of Lange, Little & Taylor 1989, §3, when ``q(precision)`` is a
        point).  The precision's update is therefore a fixed point in ``E[precision]``
        (:func:`zoo.infer.noise.weighted_noise_rate`).  ``precision`` is required.
        """
        if precision is None:
            raise ValueError(
                "precision: a Student-t likelihood's noise update weighs each squared error by "
                "(df + 1) / (df + E[precision] z), so it needs the current E[precision]"
            )
        df = self.df.detach().to(z.dtype)
        return (df + 1.0) / (df + precision * z)

    def predictive_moments(self, f: Tensor, latents: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Per-draw predictive mean and variance, ``sigma^2 df / (df - 2)``."""
        loc, s2 = super().predictive_moments(f, latents)
        df = self.predictive_df
        return loc, s2 * (df / (df - 2.0))
