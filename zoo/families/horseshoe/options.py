"""Options of the horseshoe model builders (registry entries ``hs-bnn`` and ``reg-hs-bnn``) as a validated
config (Ghosh, Yao & Doshi-Velez 2019, "Model selection in Bayesian neural networks via horseshoe priors",
arXiv:1705.10388).

Defaults: ``b0 = 1`` (unstated in the paper; the authors' code), ``bg = 1e-5`` (§6.5), ``b_kappa = 5``,
slab ``c^2 ~ IG(c_a = 2, c_b = 6)`` (§6.4, Eq. 2), noise precision ``Gamma(1, 0.01)``
(:data:`zoo.core.likelihoods.WEAK_NOISE_PRIOR`; the paper's ``Gamma(6, 6)``, §6 and App. C.1, acts like 12
pseudo-observations of variance 1 on standardized targets and is pinned by the ``hs-*`` protocols), ReLU
units, the non-centered parameterization of Eq. 3 (``centered=True`` is kept for the comparison of
§6.2.2, Fig. 7).
"""

from __future__ import annotations

import dataclasses

from zoo.core.architectures import check_activation
from zoo.core.likelihood_options import LikelihoodOptions
from zoo.core.validation import check_positive

__all__ = ["HorseshoeOptions"]

_POSITIVE = ("b0", "bg", "b_kappa", "c_a", "c_b")


@dataclasses.dataclass(frozen=True)
class HorseshoeOptions(LikelihoodOptions):
    """Keyword options of :func:`zoo.families.horseshoe.entry.build_hs` (module docstring).

    ``regularized``: the regularized horseshoe (Eq. 2) with the slab ``c^2 ~ IG(c_a, c_b)``; ``centered``:
    the centered parameterization; ``b0``, ``bg``, ``b_kappa``: the half-Cauchy scales of the unit, layer
    and output-weight scales (Eq. 1); ``noise_concentration``/``noise_rate``: the Gamma prior on the noise
    precision of a regression likelihood (default and the paper's ``Gamma(6, 6)``: module docstring);
    ``activation``: the hidden units' nonlinearity (a key of :data:`zoo.core.architectures.ACTIVATIONS`).
    The likelihood options (``noise_concentration``, ``noise_rate``, ``heteroscedastic``, ``student_t_df``,
    ``student_t_learn_df``) are those of :class:`~zoo.core.likelihood_options.LikelihoodOptions`.
    """

    regularized: bool = False
    centered: bool = False
    b0: float = 1.0
    bg: float = 1e-5
    b_kappa: float = 5.0
    c_a: float = 2.0
    c_b: float = 6.0
    activation: str = "relu"

    def validate(self) -> None:
        super().validate()
        for name in ("regularized", "centered"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name in _POSITIVE:
            check_positive(name, getattr(self, name))
        check_activation(self.activation)
