"""Options of the collapsed-bound builders (registry entries ``cm-bnn``, ``cv-bnn``, ``cmv-bnn``) as a
validated config.

Tomczak, Swaroop, Foong & Turner 2021, "Collapsed Variational Bounds for Bayesian Neural Networks"
(NeurIPS 34; OpenReview ykN3tbJ0qmX).  Defaults follow Table 4 ("MLP MNIST" row except ``gamma``):
CM ``alpha_reg = 0.05`` and ``gamma = gamma_scale / N_in`` with ``gamma_scale = 1`` (the ``1/N_in`` of four of
the five rows; the MNIST-MLP row's ``20/N_in`` is ``gamma_scale=20``); CV/CMV Gamma shape ``alpha = 0.5``
and rate ``beta = 0.01``; CMV ``delta = t/(1+t) = 0.1`` (App. B, Normal-Gamma prior).  The regression
likelihood's noise variance has the prior ``IG(noise_concentration, noise_rate)``, as ``mfvi-bnn``.
"""

from __future__ import annotations

import dataclasses

from zoo.core.architectures import check_activation
from zoo.core.likelihood_options import LikelihoodOptions
from zoo.core.likelihoods import IG2_NOISE_OPTIONS
from zoo.core.validation import check_bool, check_positive, check_probability

__all__ = ["CollapsedOptions", "COLLAPSED_IG2_NOISE"]

#: the regression noise prior the committed ``collapsed-uci`` rows were run with (``sigma^2 ~ IG(2, 0.5)``,
#: the zoo's default before issue 17), pinned by that protocol
COLLAPSED_IG2_NOISE = dict(IG2_NOISE_OPTIONS)


@dataclasses.dataclass(frozen=True)
class CollapsedOptions(LikelihoodOptions):
    """Keyword options of :func:`zoo.families.collapsed.entry.build_collapsed` (module docstring).

    ``gamma_scale``, ``alpha_reg`` (in ``(0, 1]``): CM; ``alpha``, ``beta``: CV/CMV; ``delta`` (in
    ``(0, 1)``): CMV; ``fan_in_scaling``: ``gamma = gamma_scale / fan_in`` (else ``gamma_scale``);
    ``learn_hyper``: learn ``alpha_reg`` (CM) / ``delta`` (CMV) per layer by maximizing the bound (not for
    CV, which the prior rejects); ``noise_concentration``/``noise_rate``: the regression noise prior on the
    standardized targets' variance, ``IG(noise_concentration, noise_rate)`` (default
    :data:`zoo.core.likelihoods.WEAK_NOISE_PRIOR`, ``IG(1, 0.01)``: Tomczak et al. 2021 state no noise
    prior; the zoo's earlier ``IG(2, 0.5)`` acts as four pseudo-observations of variance 0.25 and doubled
    the noise variance on yacht, and stays pinned as :data:`COLLAPSED_IG2_NOISE` by ``collapsed-uci``);
    ``activation``: the hidden units' nonlinearity (a key of :data:`zoo.core.architectures.ACTIVATIONS`;
    the reference instances use ``tanh``, as for ``mfvi-bnn``).
    The likelihood options (``noise_concentration``, ``noise_rate``, ``heteroscedastic``, ``student_t_df``,
    ``student_t_learn_df``) are those of :class:`~zoo.core.likelihood_options.LikelihoodOptions`.
    """

    gamma_scale: float = 1.0
    alpha_reg: float = 0.05
    alpha: float = 0.5
    beta: float = 0.01
    delta: float = 0.1
    fan_in_scaling: bool = True
    learn_hyper: bool = False
    activation: str = "relu"

    def validate(self) -> None:
        super().validate()
        for name in ("fan_in_scaling", "learn_hyper"):
            check_bool(name, getattr(self, name))
        for name in ("gamma_scale", "alpha", "beta"):
            check_positive(name, getattr(self, name))
        check_probability("alpha_reg", self.alpha_reg, allow_one=True)
        check_probability("delta", self.delta)
        check_activation(self.activation)
