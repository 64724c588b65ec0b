"""Mean-field inclusion guide of the latent-binary BNN (Hubin & Storvik 2019, "Variational Inference for
Bayesian Neural Networks under Model and Parameter Uncertainty", arXiv:1903.07594, §4.1-4.2).

**Family** (Eqs. 4.5-4.7): ``q(β, γ) = α N(κ, τ²) + (1-α) δ₀`` per weight with ``τ = softplus(ρ)`` and
``α = sigmoid(ω)`` (§4.2 reparametrizations).  Against the sites of
:class:`zoo.families.lbbnn.prior.SpikeSlabPrior` (``γ`` and the slab value ``θ``, ``β = γ θ``) this is
``q(γ) = Bern(α)`` and ``q(θ | γ) = γ N(κ, τ²) + (1-γ) p(θ)``: the excluded slab values are scored by
their prior, so they cancel exactly (:mod:`guides.lbbnn.distributions`).

**Sampling γ** (Eq. 4.10): binary Concrete ``γ̃ = σ((logit α + logit u)/δ)``, ``u ~ U(0, 1)``.  By default
the *forward* value is the hard indicator ``I(γ̃ > 1/2) = I(u > 1 - α) ~ Bern(α)`` *exactly*, with the
Concrete gradient (straight-through).  Temperature ``δ = 0.5`` (default): the pathwise derivative
``∂γ̃/∂ω = γ̃(1-γ̃)/δ`` has an expectation that hardly depends on δ but a variance that grows like 1/δ; at
the reference code's δ = 1e-3 it is zero except on a window of probability ~δ where it is ~1/δ, so α is
starved of likelihood gradient.  δ = 0.5 gives a smooth, low-variance surrogate, and because the forward
value stays exactly Bernoulli the ELBO *estimate* is unbiased at any δ (only the gradient is a surrogate),
and predictions never see relaxed values.  ``straight_through=False`` gives the paper's relaxed forward
value (Eq. 4.12).

**KL.**  ``kl="closed-form"`` (default, lower variance): the guide's γ/θ sites are masked and a factor
``KL + log p(γ, θ)`` is added, so the ELBO is ``E log p(D | β) - KL`` exactly (the model's
``log p(γ, θ)`` at the sample cancels with the factor's copy; :class:`ClosedFormKL_ELBO` skips both).
``kl="mc"``: the paper's single-sample ``log q - log p`` (Proposition 1, Eq. 4.14).

**Hyperparameters.**  ``"hierarchical"`` priors get mean-field factors ``q(ψ_l) = Beta`` and
``q(σ²_l) = LogNormal``; ``"eb-point"`` priors read the prior's point parameters (optimized on the ELBO
during pre-training, then frozen by :meth:`LBBNNGuide.closed_form_update` after ``prior.eb_steps`` steps,
or explicitly by :func:`guides.lbbnn.training.fit_lbbnn`).

**Training schedule** (Algorithm 1, Table 1): :mod:`guides.lbbnn.training`.  **Prediction** (§4.3):
:meth:`LBBNNGuide.predictive` with the modes of :mod:`guides.lbbnn.predict`;
:meth:`LBBNNGuide.sparsity_report` gives the median-probability-model masks.

The names this module held before the LBBNN guides were split by concept stay importable from it.
"""

from __future__ import annotations

import torch
from pyro.nn import PyroParam
from torch import Tensor

from guides.lbbnn.base import LBBNNGuide, param_attr
from guides.lbbnn.distributions import InclusionConcrete, SlabGivenInclusion
from guides.lbbnn.elbo import ClosedFormKL_ELBO
from guides.lbbnn.predict import PREDICTIVE_MODES
from guides.lbbnn.training import (
    DEFAULT_LRS,
    PAPER_LRS,
    STAGE_LRS,
    fit_lbbnn,
    fit_lbbnn_staged,
    param_group,
    stage_optimizer,
)
from zoo.core.architectures import ParamSpec
from zoo.core.model import BayesianModel

__all__ = [
    "MeanFieldLBBNNGuide",
    # re-exported from guides.lbbnn.{distributions,base,predict,elbo,training}
    "InclusionConcrete",
    "SlabGivenInclusion",
    "LBBNNGuide",
    "PREDICTIVE_MODES",
    "PAPER_LRS",
    "DEFAULT_LRS",
    "param_group",
    "stage_optimizer",
    "fit_lbbnn",
    "fit_lbbnn_staged",
    "STAGE_LRS",
    "ClosedFormKL_ELBO",
]


class MeanFieldLBBNNGuide(LBBNNGuide):
    """Mean-field inclusion guide, Eqs. (4.5)-(4.7): ``α = sigmoid(ω)`` per weight, ``ω ~ U(0, 1)`` at
    initialization as in the paper's reference code (initial α in 0.50-0.73)."""

    def __init__(self, model: BayesianModel, init_logit: tuple[float, float] = (0.0, 1.0), **kwargs) -> None:
        super().__init__(model, **kwargs)
        lo, hi = init_logit
        for s in self._wspecs:
            setattr(self, param_attr(s.name, "omega"), PyroParam(lo + (hi - lo) * torch.rand(s.shape)))

    def inclusion_logits(self, g: int, spec: ParamSpec) -> Tensor:
        return self._p(spec.name, "omega")

    def expected_inclusion(self, g: int, spec: ParamSpec) -> Tensor:
        return torch.sigmoid(self._p(spec.name, "omega"))

    def draw_inclusion_logits(self, g: int, spec: ParamSpec, num: int) -> Tensor:
        return self._p(spec.name, "omega").expand(num, *spec.shape)
