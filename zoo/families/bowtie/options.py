"""Options of the bow-tie model builder (registry entry ``bowtie``) as a validated config.

Sheinkman & Wade 2025 (arXiv 2411.11132): temperature ``T`` of the stochastic-ReLU gate (§2.1), the N-GIG
prior of Eqs. (5)–(7) (global ``tau`` and local ``psi`` GIG scales, bias scale ``s_0``, App. D.1 scaling), the
inverse-gamma output and hidden-layer noise priors (§2.4), and the Gaussian-prior ablation (GVBNN, Tables 2
and 4).  ``None`` hyperparameters are resolved from the data by an OLS fit (the authors' code defaults).
"""

from __future__ import annotations

import dataclasses

from zoo.core.architectures import check_activation
from zoo.core.config import Config
from zoo.core.likelihood_options import LikelihoodOptions
from zoo.core.validation import check_positive, check_real
from zoo.families.bowtie.prior import check_gig_params

__all__ = ["BowtieOptions", "NGIGOptions"]


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")


@dataclasses.dataclass(frozen=True)
class BowtieOptions(Config):
    """Keyword options of :func:`zoo.families.bowtie.entry.build_bowtie` (module docstring).

    ``nu``/``delta``/``lam`` ``_glob`` and ``_loc`` are the GIG parameters of the global and local scales
    (Eqs. 6–7; defaults: inverse-gamma, Student-t(3) marginals); ``delta_glob`` and ``bias_scale`` (``s_0``)
    ``None``: from the data.  ``noise_concentration``/``noise_rate``: ``IG(alpha_0, beta_0)`` of the output
    noise (``noise_rate=None``: from the data); ``hidden_noise_*``: ``IG(alpha_0^h, beta_0^h)`` of the hidden
    units.  ``gaussian_prior=True``: the GVBNN ablation (Gaussian weights with the N-GIG prior's mean
    variance; the ``nu``/``lam`` options are then unused).
    """

    temperature: float = 0.1
    nu_glob: float = -1.5
    delta_glob: float | None = None
    lam_glob: float = 0.0
    nu_loc: float = -1.5
    delta_loc: float = 1.0
    lam_loc: float = 0.0
    bias_scale: float | None = None
    scale_with_architecture: bool = True
    noise_concentration: float = 2.0
    noise_rate: float | None = None
    hidden_noise_concentration: float = 2.0
    hidden_noise_rate: float = 1e-4
    gaussian_prior: bool = False

    def validate(self) -> None:
        _check_bool("gaussian_prior", self.gaussian_prior)
        _check_bool("scale_with_architecture", self.scale_with_architecture)
        check_positive("temperature", self.temperature)
        for name in ("noise_concentration", "hidden_noise_concentration", "hidden_noise_rate"):
            check_positive(name, getattr(self, name))
        for name in ("noise_rate", "bias_scale"):
            if getattr(self, name) is not None:
                check_positive(name, getattr(self, name))
        if self.gaussian_prior:
            check_positive("delta_loc", self.delta_loc)
            if self.delta_glob is not None:
                check_positive("delta_glob", self.delta_glob)
            return
        glob = [check_real(n, getattr(self, n)) for n in ("nu_glob", "lam_glob")]
        delta_glob = 1.0 if self.delta_glob is None else check_real("delta_glob", self.delta_glob)
        check_gig_params("nu_glob/delta_glob/lam_glob", glob[0], delta_glob, glob[1])
        loc = [check_real(n, getattr(self, n)) for n in ("nu_loc", "delta_loc", "lam_loc")]
        check_gig_params("nu_loc/delta_loc/lam_loc", *loc)


@dataclasses.dataclass(frozen=True)
class NGIGOptions(LikelihoodOptions):
    """Keyword options of the ``ngig-bnn`` builder (:mod:`zoo.families.bowtie.ngig_mlp`): the N-GIG prior of
    Eqs. (5)–(7) on a deterministic ReLU MLP.

    ``nu``/``delta``/``lam`` ``_glob`` and ``_loc``: the GIG parameters of the global and local scales
    (defaults: inverse-gamma, Student-t(3) marginals, the authors' code); ``bias_scale``: ``s_0``;
    ``scale_with_architecture``: App. D.1 (``delta_glob / sqrt(L)``, ``delta_loc / sqrt(fan_in)``; with the
    defaults the prior variance of a weight is ``E[tau] E[psi] = 1 / fan_in``).  No data-dependent
    defaults: the targets are standardized, as for ``mfvi-bnn``.  ``noise_concentration``/``noise_rate``:
    the inverse-gamma prior of a regression likelihood's noise variance (``mfvi-bnn``'s default,
    :data:`zoo.core.likelihoods.WEAK_NOISE_PRIOR`).  ``activation``: the hidden units' nonlinearity (a key
    of :data:`zoo.core.architectures.ACTIVATIONS`; the paper's network is ReLU, the reference instance
    ``ngig-cubic-tanh`` uses ``tanh``, whose units have no rescaling symmetry).
    The likelihood options (``noise_concentration``, ``noise_rate``, ``heteroscedastic``, ``student_t_df``,
    ``student_t_learn_df``) are those of :class:`~zoo.core.likelihood_options.LikelihoodOptions`.
    """

    nu_glob: float = -1.5
    delta_glob: float = 1.0
    lam_glob: float = 0.0
    nu_loc: float = -1.5
    delta_loc: float = 1.0
    lam_loc: float = 0.0
    bias_scale: float = 1.0
    scale_with_architecture: bool = True
    activation: str = "relu"

    def validate(self) -> None:
        super().validate()
        _check_bool("scale_with_architecture", self.scale_with_architecture)
        check_activation(self.activation)
        check_positive("bias_scale", check_real("bias_scale", self.bias_scale))
        glob = [check_real(n, getattr(self, n)) for n in ("nu_glob", "delta_glob", "lam_glob")]
        check_gig_params("nu_glob/delta_glob/lam_glob", *glob)
        loc = [check_real(n, getattr(self, n)) for n in ("nu_loc", "delta_loc", "lam_loc")]
        check_gig_params("nu_loc/delta_loc/lam_loc", *loc)
