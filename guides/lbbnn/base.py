"""Shared machinery of the LBBNN guides (Hubin & Storvik 2019, arXiv:1903.07594, §4).

Slab and bias factors ``N(κ, τ²)`` with ``τ = softplus(ρ)`` (§4.2 reparametrizations), hyperparameter
factors, the two KL treatments (closed form or the paper's single-sample ``log q - log p``, Proposition 1,
Eq. 4.14), the stage hook of Algorithm 1, and the median-probability-model sparsity report (§4.3).
Subclasses choose how the inclusion logits ``logit α`` are produced.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroParam
from torch import Tensor

from guides.autoguides import require_prior
from guides.lbbnn.distributions import InclusionConcrete, SlabGivenInclusion
from guides.lbbnn.elbo import ClosedFormKL_ELBO
from guides.lbbnn.predict import LBBNNPredictionMixin
from zoo.core.architectures import ParamSpec
from zoo.core.guide import ClosedFormGuide
from zoo.core.model import BayesianModel
from zoo.core.sparsity import SparsityReport
from zoo.core.validation import check_positive
from zoo.families.lbbnn.prior import SpikeSlabPrior, gaussian_kl, group_prefix, spike_slab_kl, weight_specs

__all__ = ["LBBNNGuide", "KL_MODES", "param_attr", "init_slab_params", "init_noise_factor", "find_noise_site"]

KL_MODES = ("closed-form", "mc")

#: registry names of the LBBNN guide classes, for the prior-compatibility message
_GUIDE_NAMES = {
    "MeanFieldLBBNNGuide": "mean-field",
    "MVNLBBNNGuide": "mvn",
    "LCRTLBBNNGuide": "lcrt",
    "LBBNNFlowGuide": "flow",
}


def param_attr(name: str, what: str) -> str:
    """The attribute name of a guide parameter: ``("fc0.weight", "loc") -> "fc0_weight_loc"``."""
    return f"{name.replace('.', '_')}_{what}"


def init_slab_params(
    module: PyroModule, specs: Iterable[ParamSpec], init_scale: float, init_rho: tuple[float, float]
) -> None:
    """``{name}_loc ~ U(-init_scale, init_scale)`` and ``{name}_rho ~ U(init_rho)`` per spec, in order."""
    lo, hi = init_rho
    for s in specs:
        loc = (torch.rand(s.shape) * 2 - 1) * init_scale
        rho = lo + (hi - lo) * torch.rand(s.shape)
        setattr(module, param_attr(s.name, "loc"), PyroParam(loc))
        setattr(module, param_attr(s.name, "rho"), PyroParam(rho))


def find_noise_site(model: BayesianModel) -> str | None:
    """The likelihood's noise site (``"sigma2"`` or ``"precision"``) of a regression model, else ``None``."""
    lik = model.likelihood
    if getattr(lik, "task", None) != "regression" or getattr(lik, "noise", "fixed") == "fixed":
        return None
    return "sigma2" if lik.noise == "inverse_gamma" else "precision"


def init_noise_factor(module: PyroModule, model: BayesianModel) -> str | None:
    """A LogNormal factor (``noise_loc``, ``noise_scale``) for the model's noise site; returns the site."""
    site = find_noise_site(model)
    if site is not None:
        module.noise_loc = PyroParam(torch.tensor(math.log(0.1 if site == "sigma2" else 10.0)))
        module.noise_scale = PyroParam(torch.tensor(0.1), constraints.positive)
    return site


class LBBNNGuide(LBBNNPredictionMixin, ClosedFormGuide):
    """Shared machinery of the LBBNN guides: slab and bias factors, hyperparameter factors, the KL
    treatment, the stage hook, prediction modes and the MPM sparsity report.

    Subclasses define how the inclusion logits are produced (:meth:`inclusion_logits`, sampled inside the
    guide, possibly with auxiliary sites) and their expectation ``E[α]`` (:meth:`expected_inclusion`).
    The model is never changed by a guide: guides see it only through the sites
    ``fc{l}.weight.gamma``, ``fc{l}.weight.slab``, ``fc{l}.bias``, the hyperparameter sites and
    :class:`SpikeSlabPrior`'s public methods (``layer_hyperparameters``-style reads, ``log_density``,
    :func:`spike_slab_kl`), which is what the LCRT/flow guides of Skaaret-Lund et al. (2023) need as well.
    """

    uses_gradients = True

    def __init__(
        self,
        model: BayesianModel,
        kl: str = "closed-form",
        temperature: float = 0.5,
        straight_through: bool = True,
        init_scale: float = 0.2,
        init_rho: tuple[float, float] = (-5.0, -4.0),
    ) -> None:
        super().__init__()
        if not isinstance(model, BayesianModel):
            raise TypeError(f"model must be a zoo BayesianModel, got {type(model).__name__}")
        require_prior(
            model,
            _GUIDE_NAMES.get(type(self).__name__, type(self).__name__),
            type(self),
            (SpikeSlabPrior,),
            "a SpikeSlabPrior (q(γ) and q(θ | γ) are factors of its inclusion and slab sites)",
        )
        if kl not in KL_MODES:
            raise ValueError(f"kl must be one of {KL_MODES}, got {kl!r}")
        self.kl = kl
        self.temperature = check_positive("temperature", temperature)
        self.straight_through = bool(straight_through)
        self._model = (model,)  # a plain reference, not a submodule: the guide's state is its own
        self._specs = list(model.specs)
        self._wspecs = weight_specs(self._specs)
        self.register_buffer("step", torch.tensor(0))
        self.register_buffer("structure_frozen", torch.tensor(False))
        init_slab_params(self, self._specs, init_scale, init_rho)
        if model.prior.hyper == "hierarchical":
            self._init_hyper_factors(model.prior)
        self._noise_site = init_noise_factor(self, model)

    def _init_hyper_factors(self, prior: SpikeSlabPrior) -> None:
        """``q(ψ_l) = Beta`` (concentration 100 at the prior mean) and ``q(σ²_l) = LogNormal`` (at the
        inverse-gamma mode) per weight tensor."""
        a, b = float(prior.a_psi), float(prior.b_psi)
        conc = 100.0
        mode = float(prior.b_beta) / (float(prior.a_beta) + 1)
        positive = constraints.positive
        for s in self._wspecs:
            p = group_prefix(s)
            setattr(self, param_attr(p, "psi_a"), PyroParam(torch.tensor(conc * a / (a + b)), positive))
            setattr(self, param_attr(p, "psi_b"), PyroParam(torch.tensor(conc * b / (a + b)), positive))
            setattr(self, param_attr(p, "sigma2_loc"), PyroParam(torch.tensor(math.log(mode))))
            setattr(self, param_attr(p, "sigma2_scale"), PyroParam(torch.tensor(0.1), positive))

    @property
    def model(self) -> BayesianModel:
        return self._model[0]

    def _p(self, name: str, what: str) -> Tensor:
        return getattr(self, param_attr(name, what))

    def slab_params(self, spec: ParamSpec) -> tuple[Tensor, Tensor]:
        """``(κ, τ)`` of a weight or bias spec (``τ = softplus(ρ)``, §4.2)."""
        return self._p(spec.name, "loc"), F.softplus(self._p(spec.name, "rho"))

    # -- subclass interface ---------------------------------------------------------------------------

    def inclusion_logits(self, g: int, spec: ParamSpec) -> Tensor:  # pragma: no cover - abstract
        """Sample (inside the guide) and return the inclusion logits ``logit α`` of weight tensor ``g``."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement inclusion_logits() (abstract interface)"
        )

    def expected_inclusion(self, g: int, spec: ParamSpec) -> Tensor:  # pragma: no cover - abstract
        """``E_q[α]`` of weight tensor ``g`` (deterministic)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement expected_inclusion() (abstract interface)"
        )

    def draw_inclusion_logits(self, g: int, spec: ParamSpec, num: int) -> Tensor:  # pragma: no cover
        """``num`` draws of ``logit α`` (shape ``(num, *spec.shape)``) for prediction, no Pyro sites."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement draw_inclusion_logits() (abstract interface)"
        )

    # -- the guide ------------------------------------------------------------------------------------

    def _hyperparameters(self) -> list[tuple[Tensor, Tensor]]:
        prior = self.model.prior
        if prior.hyper != "hierarchical":
            psi, s2 = prior.point_hyperparameters()
            return [(psi[g], s2[g]) for g in range(len(self._wspecs))]
        out = []
        for s in self._wspecs:
            p = group_prefix(s)
            psi = pyro.sample(f"{p}.psi", dist.Beta(self._p(p, "psi_a"), self._p(p, "psi_b")))
            s2 = pyro.sample(
                f"{p}.sigma2", dist.LogNormal(self._p(p, "sigma2_loc"), self._p(p, "sigma2_scale"))
            )
            out.append((psi, s2))
        return out

    # -- the closed-form KL without the cancelling prior scores (ClosedFormKL_ELBO) -------------------

    _prior_masked = False

    def closed_form_sites(self) -> frozenset[str]:
        """Model sites whose score this guide replaces by a closed-form KL factor (empty for ``kl="mc"``)."""
        if self.kl != "closed-form":
            return frozenset()
        names = {s.name for s in self._specs if s.role == "bias"}
        for s in self._wspecs:
            names.update((f"{s.name}.gamma", f"{s.name}.slab"))
        return frozenset(names)

    @contextlib.contextmanager
    def prior_scores_masked(self) -> Iterator[None]:
        """While active, the guide's KL factors omit ``+ log p`` (the model's scores of
        :meth:`closed_form_sites` are masked by :class:`ClosedFormKL_ELBO`)."""
        prev, self._prior_masked = self._prior_masked, True
        try:
            yield
        finally:
            self._prior_masked = prev

    def default_loss(self) -> ClosedFormKL_ELBO | None:
        """The objective ``zoo fit`` uses: :class:`ClosedFormKL_ELBO` with the closed-form KL, else ``None``
        (``Trace_ELBO``)."""
        return ClosedFormKL_ELBO() if self.kl == "closed-form" else None

    def _maybe_mask(self, d: dist.Distribution) -> dist.Distribution:
        return d.mask(False) if self.kl == "closed-form" else d

    def _weight_sites(self, spec: ParamSpec, logits: Tensor, psi: Tensor, s2: Tensor) -> Tensor:
        loc, scale = self.slab_params(spec)
        if bool(self.structure_frozen):
            logits = logits.detach()
        n = len(spec.shape)
        qg = InclusionConcrete(logits, self.temperature, self.straight_through).to_event(n)
        gamma = pyro.sample(f"{spec.name}.gamma", self._maybe_mask(qg))
        s2_v = s2 if s2.dim() == 0 else s2.reshape(*s2.shape, *([1] * n))
        qt = SlabGivenInclusion(gamma, loc, scale, s2_v.sqrt()).to_event(n)
        theta = pyro.sample(f"{spec.name}.slab", self._maybe_mask(qt))
        if self.kl == "closed-form":
            psi_v = psi if psi.dim() == 0 else psi.reshape(*psi.shape, *([1] * n))
            kl = spike_slab_kl(logits, loc, scale, psi_v, s2_v).sum((-1, -2))
            if not self._prior_masked:  # cancel the model's score of (γ, θ) under plain Trace_ELBO
                kl = kl + self.model.prior.log_density(spec, gamma, theta, psi, s2)
            pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)
        return gamma

    def _bias_site(self, spec: ParamSpec) -> None:
        prior = self.model.prior
        loc, scale = self.slab_params(spec)
        n = len(spec.shape)
        b = pyro.sample(spec.name, self._maybe_mask(dist.Normal(loc, scale).to_event(n)))
        if self.kl == "closed-form":
            kl = gaussian_kl(loc, scale, prior.bias_scale**2).sum()
            if not self._prior_masked:
                kl = kl + prior.bias_dist(spec).log_prob(b)
            pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)

    def _noise_factor(self) -> None:
        if self._noise_site is not None:
            pyro.sample(self._noise_site, dist.LogNormal(self.noise_loc, self.noise_scale))

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        hyp = self._hyperparameters()
        for g, s in enumerate(self._wspecs):
            psi, s2 = hyp[g]
            self._weight_sites(s, self.inclusion_logits(g, s), psi, s2)
        for s in self._specs:
            if s.role == "bias":
                self._bias_site(s)
        self._noise_factor()

    # -- stage hook (called by zoo.infer.loop after every gradient step) -------------------------------

    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """Count steps and end the empirical-Bayes stage after ``prior.eb_steps`` steps (Algorithm 1) or
        once the prior's early-stop rule fires (:meth:`SpikeSlabPrior.eb_stage_over`)."""
        self.step += 1
        prior = self.model.prior
        if prior.eb_stage_over(int(self.step)):
            prior.freeze_hyperparameters()

    def freeze_structure(self) -> None:
        """Post-training (Algorithm 1's last stage): inclusion parameters stop receiving gradient; γ is
        still sampled."""
        self.structure_frozen.fill_(True)
        self.model.prior.freeze_hyperparameters()

    # -- summaries ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def inclusion_probs(self) -> dict[str, Tensor]:
        """``E_q[α]`` per weight site (the marginal posterior inclusion probabilities, §4.3)."""
        with pyro.get_param_store().scope():
            return {s.name: self.expected_inclusion(g, s).detach() for g, s in enumerate(self._wspecs)}

    def sparsity_report(self, model: BayesianModel | None = None, threshold: float = 0.5) -> SparsityReport:
        """Median-probability-model masks ``E α > threshold`` (§4.3) with mean inclusion per layer."""
        probs = self.inclusion_probs()
        masks = {k: v > threshold for k, v in probs.items()}
        extras = {
            "mean_inclusion": {k: float(v.mean()) for k, v in probs.items()},
            "threshold": float(threshold),
        }
        return SparsityReport(masks, extras)
