"""Variational families of the latent-binary BNN (paper 001, note ``001_lbbnn.md`` §2) and its schedule.

**Mean-field inclusion guide** (Eqs. 4.5-4.7): ``q(β, γ) = α N(κ, τ²) + (1-α) δ₀`` per weight with
``τ = softplus(ρ)`` and ``α = sigmoid(ω)`` (§4.2 reparametrizations).  Against the sites of
:class:`zoo.families.lbbnn.prior.SpikeSlabPrior` (``γ`` and the slab value ``θ``, ``β = γ θ``) this is
``q(γ) = Bern(α)`` and ``q(θ | γ) = γ N(κ, τ²) + (1-γ) p(θ)``: the excluded slab values are scored by
their prior, so they cancel exactly (the δ₀-cancellation convention of note §2.6).

**Sampling γ** (Eq. 4.10): binary Concrete ``γ̃ = σ((logit α + logit u)/δ)``, ``u ~ U(0, 1)``.  By default
the *forward* value is the hard indicator ``I(γ̃ > 1/2) = I(u > 1 - α) ~ Bern(α)`` *exactly*, with the
Concrete gradient (straight-through).  Temperature ``δ = 0.5`` (default): the pathwise derivative
``∂γ̃/∂ω = γ̃(1-γ̃)/δ`` has an expectation that hardly depends on δ but a variance that grows like 1/δ; at
the reference code's δ = 1e-3 it is zero except on a window of probability ~δ where it is ~1/δ, so α is
starved of likelihood gradient (note §2.4, §5.1.1).  δ = 0.5 is the upper end of the note's range [0.1, 0.5]:
a smooth, low-variance surrogate, and because the forward value stays exactly Bernoulli the ELBO
*estimate* is unbiased at any δ (only the gradient is a surrogate), and predictions never see relaxed
values (note §5.1.10).  ``straight_through=False`` gives the paper's relaxed forward value (Eq. 4.12).

**KL.**  ``kl="closed-form"`` (default; note §2.6, lower variance): the guide's γ/θ sites are masked and a
factor ``KL + log p(γ, θ)`` is added, so the ELBO is ``E log p(D | β) - KL`` exactly (the model's
``log p(γ, θ)`` at the sample cancels with the factor's copy).  ``kl="mc"``: the paper's single-sample
``log q - log p`` (Proposition 1, Eq. 4.14).

**Hyperparameters.**  ``"hierarchical"`` priors get mean-field factors ``q(ψ_l) = Beta`` and
``q(σ²_l) = LogNormal``; ``"eb-point"`` priors read the prior's point parameters (optimized on the ELBO
during pre-training, then frozen by :meth:`LBBNNGuide.closed_form_update` after ``prior.eb_steps`` steps,
or explicitly by :func:`fit_lbbnn`).

**Training schedule** (Algorithm 1, Table 1): :func:`fit_lbbnn` runs pre-training (empirical Bayes),
main training and optional post-training (structure frozen: α fixed, γ still sampled, note §2.8) through
:func:`zoo.infer.loop.fit`/:func:`~zoo.infer.loop.resume`, with a fresh ``pyro.optim.Adam`` per stage whose
arguments are a callable of the parameter name (per-group learning rates, the diagonal matrix A).

**Prediction** (§4.3, note §3.1): :meth:`LBBNNGuide.predictive` with ``mode`` ``"bma"`` (Eq. 4.15, hard γ),
``"mean"`` (posterior-mean model ``E[α] κ``), ``"mpm"`` (median probability model ``γ = I(E α > 0.5)``,
β sampled: "MED SIM") and ``"mpm-mean"`` ("MED MEA"); :meth:`LBBNNGuide.sparsity_report` gives the MPM masks.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from numbers import Number

import pyro
import pyro.distributions as dist
import pyro.optim
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from pyro.infer import Trace_ELBO
from pyro.nn import PyroParam
from pyro.poutine.messenger import Messenger
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.guide import ClosedFormGuide
from zoo.core.model import BayesianModel
from zoo.core.sparsity import SparsityReport
from zoo.core.validation import check_positive, check_positive_int
from zoo.families.lbbnn.prior import SpikeSlabPrior, gaussian_kl, group_prefix, spike_slab_kl, weight_specs
from zoo.infer.loop import FitResult, fit, resume
from zoo.infer.optim import FusedPyroOptim
from zoo.infer.predict import Predictions

__all__ = [
    "InclusionConcrete",
    "SlabGivenInclusion",
    "LBBNNGuide",
    "MeanFieldLBBNNGuide",
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

PREDICTIVE_MODES = ("bma", "mean", "mpm", "mpm-mean")
KL_MODES = ("closed-form", "mc")
_EMPTY = torch.Size()


def _softplus_inv(v: float) -> float:
    return v + math.log(-math.expm1(-v))


class InclusionConcrete(TorchDistribution):
    """``q(γ) = Bernoulli(σ(logits))`` sampled with the binary Concrete relaxation (Eq. 4.10).

    ``rsample`` returns the hard value ``I(logits + logit u > 0)`` with the Concrete gradient when
    ``straight_through`` (default), else the relaxed value ``σ((logits + logit u)/δ)``.  ``log_prob`` is the
    Bernoulli pmf ``γ log α + (1-γ) log(1-α)``, extended to [0, 1] for relaxed values (note §2.5).
    """

    arg_constraints = {"logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, logits: Tensor, temperature: float, straight_through: bool = True, validate_args=None):
        self.logits = logits
        self.temperature = float(temperature)
        self.straight_through = bool(straight_through)
        super().__init__(logits.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return InclusionConcrete(
            self.logits.expand(torch.Size(batch_shape)), self.temperature, self.straight_through
        )

    def rsample(self, sample_shape=_EMPTY) -> Tensor:
        shape = self._extended_shape(sample_shape)
        tiny = torch.finfo(self.logits.dtype).tiny
        u = torch.rand(shape, dtype=self.logits.dtype, device=self.logits.device).clamp(tiny, 1 - 1e-7)
        z = self.logits + (torch.log(u) - torch.log1p(-u))
        soft = torch.sigmoid(z / self.temperature)
        if not self.straight_through:
            return soft
        hard = (z > 0).to(soft.dtype)
        return hard + (soft - soft.detach())

    def log_prob(self, value: Tensor) -> Tensor:
        return value * F.logsigmoid(self.logits) + (1 - value) * F.logsigmoid(-self.logits)

    @property
    def mean(self) -> Tensor:
        return torch.sigmoid(self.logits)


class SlabGivenInclusion(TorchDistribution):
    """``q(θ | γ) = γ N(loc, scale²) + (1 - γ) N(0, prior_scale²)`` scored as
    ``γ log N(θ; loc, scale) + (1-γ) log N(θ; 0, prior_scale)``.

    ``rsample`` draws ``loc + scale ε`` for every entry: an excluded entry's value never reaches the network
    (``β = γ θ``) and its score equals the model's prior score, so the two cancel for any value.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, gamma: Tensor, loc: Tensor, scale: Tensor, prior_scale: Tensor, validate_args=None):
        self.gamma, self.loc, self.scale, self.prior_scale = torch.broadcast_tensors(
            gamma, loc, scale, prior_scale
        )
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        s = torch.Size(batch_shape)
        return SlabGivenInclusion(
            self.gamma.expand(s), self.loc.expand(s), self.scale.expand(s), self.prior_scale.expand(s)
        )

    def rsample(self, sample_shape=_EMPTY) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * eps

    def log_prob(self, value: Tensor) -> Tensor:
        q = dist.Normal(self.loc, self.scale).log_prob(value)
        p = dist.Normal(torch.zeros_like(self.prior_scale), self.prior_scale).log_prob(value)
        return self.gamma * q + (1 - self.gamma) * p


def _pname(name: str, what: str) -> str:
    return f"{name.replace('.', '_')}_{what}"


class LBBNNGuide(ClosedFormGuide):
    """Shared machinery of the LBBNN guides: slab and bias factors, hyperparameter factors, the KL
    treatment, the stage hook, prediction modes and the MPM sparsity report.

    Subclasses define how the inclusion logits are produced (:meth:`inclusion_logits`, sampled inside the
    guide, possibly with auxiliary sites) and their expectation ``E[α]`` (:meth:`expected_inclusion`).
    The model is never changed by a guide: guides see it only through the sites
    ``fc{l}.weight.gamma``, ``fc{l}.weight.slab``, ``fc{l}.bias``, the hyperparameter sites and
    :class:`SpikeSlabPrior`'s public methods (``layer_hyperparameters``-style reads, ``log_density``,
    :func:`spike_slab_kl`), which is what the LCRT/flow guides of paper 003 need as well.
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
        if not isinstance(model.prior, SpikeSlabPrior):
            raise TypeError(f"model.prior must be a SpikeSlabPrior, got {type(model.prior).__name__}")
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
        lo, hi = init_rho
        for s in self._specs:
            loc = (torch.rand(s.shape) * 2 - 1) * init_scale
            rho = lo + (hi - lo) * torch.rand(s.shape)
            setattr(self, _pname(s.name, "loc"), PyroParam(loc))
            setattr(self, _pname(s.name, "rho"), PyroParam(rho))
        prior = model.prior
        if prior.hyper == "hierarchical":
            a, b = float(prior.a_psi), float(prior.b_psi)
            conc = 100.0
            for s in self._wspecs:
                p = group_prefix(s)
                setattr(
                    self,
                    _pname(p, "psi_a"),
                    PyroParam(torch.tensor(conc * a / (a + b)), constraints.positive),
                )
                setattr(
                    self,
                    _pname(p, "psi_b"),
                    PyroParam(torch.tensor(conc * b / (a + b)), constraints.positive),
                )
                mode = float(prior.b_beta) / (float(prior.a_beta) + 1)
                setattr(self, _pname(p, "sigma2_loc"), PyroParam(torch.tensor(math.log(mode))))
                setattr(self, _pname(p, "sigma2_scale"), PyroParam(torch.tensor(0.1), constraints.positive))
        self._noise_site = self._find_noise_site(model)
        if self._noise_site is not None:
            self.noise_loc = PyroParam(torch.tensor(math.log(0.1 if self._noise_site == "sigma2" else 10.0)))
            self.noise_scale = PyroParam(torch.tensor(0.1), constraints.positive)

    # -- construction helpers ------------------------------------------------------------------------

    @staticmethod
    def _find_noise_site(model: BayesianModel) -> str | None:
        lik = model.likelihood
        if getattr(lik, "task", None) != "regression" or getattr(lik, "noise", "fixed") == "fixed":
            return None
        return "sigma2" if lik.noise == "inverse_gamma" else "precision"

    @property
    def model(self) -> BayesianModel:
        return self._model[0]

    def _p(self, name: str, what: str) -> Tensor:
        return getattr(self, _pname(name, what))

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
    def prior_scores_masked(self):
        """While active, the guide's KL factors omit ``+ log p`` (the model's scores of
        :meth:`closed_form_sites` are masked by :class:`ClosedFormKL_ELBO`)."""
        prev, self._prior_masked = self._prior_masked, True
        try:
            yield
        finally:
            self._prior_masked = prev

    def default_loss(self):
        """The objective ``zoo fit`` uses: :class:`ClosedFormKL_ELBO` with the closed-form KL, else ``None``
        (``Trace_ELBO``)."""
        return ClosedFormKL_ELBO() if self.kl == "closed-form" else None

    def _maybe_mask(self, d: dist.Distribution) -> dist.Distribution:
        return d.mask(False) if self.kl == "closed-form" else d

    def _weight_sites(self, spec: ParamSpec, logits: Tensor, psi: Tensor, s2: Tensor) -> Tensor:
        prior = self.model.prior
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
                kl = kl + prior.log_density(spec, gamma, theta, psi, s2)
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

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        hyp = self._hyperparameters()
        for g, s in enumerate(self._wspecs):
            psi, s2 = hyp[g]
            self._weight_sites(s, self.inclusion_logits(g, s), psi, s2)
        for s in self._specs:
            if s.role == "bias":
                self._bias_site(s)
        if self._noise_site is not None:
            pyro.sample(self._noise_site, dist.LogNormal(self.noise_loc, self.noise_scale))

    # -- stage hook (called by zoo.infer.loop after every gradient step) -------------------------------

    def closed_form_update(self, model, x: Tensor, y: Tensor | None, subsample: Tensor | None = None) -> None:
        """Count steps and end the empirical-Bayes stage after ``prior.eb_steps`` steps (Algorithm 1) or
        once the prior's early-stop rule fires (:meth:`SpikeSlabPrior.eb_stage_over`)."""
        self.step += 1
        prior = self.model.prior
        if prior.eb_stage_over(int(self.step)):
            prior.freeze_hyperparameters()

    def freeze_structure(self) -> None:
        """Post-training (note §2.8): inclusion parameters stop receiving gradient; γ is still sampled."""
        self.structure_frozen.fill_(True)
        self.model.prior.freeze_hyperparameters()

    # -- summaries ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def inclusion_probs(self) -> dict[str, Tensor]:
        """``E_q[α]`` per weight site (the marginal posterior inclusion probabilities, §2.2)."""
        with pyro.get_param_store().scope():
            return {s.name: self.expected_inclusion(g, s).detach() for g, s in enumerate(self._wspecs)}

    def sparsity_report(self, model=None, threshold: float = 0.5) -> SparsityReport:
        """Median-probability-model masks ``E α > threshold`` (§4.3) with mean inclusion per layer."""
        probs = self.inclusion_probs()
        masks = {k: v > threshold for k, v in probs.items()}
        extras = {
            "mean_inclusion": {k: float(v.mean()) for k, v in probs.items()},
            "threshold": float(threshold),
        }
        return SparsityReport(masks, extras)

    # -- prediction -------------------------------------------------------------------------------------

    def __getattr__(self, name: str):
        # ``predictive`` exists for classification only: regression falls back to zoo.infer.predict's generic
        # path, which knows the fit's target standardization (hard γ draws come from the ST sampler).
        if name == "predictive":
            if self.model.likelihood.task == "regression":
                raise AttributeError("predictive")
            return self._predictive
        return super().__getattr__(name)

    def draw_networks(self, num: int, mode: str = "bma", threshold: float = 0.5) -> dict[str, Tensor]:
        """``num`` weight-space networks ``{param name: (num, *shape)}`` under prediction ``mode``
        (:data:`PREDICTIVE_MODES`): ``"bma"`` draws ``γ ~ Bern(α)`` and the slab (full model averaging,
        Eq. 4.15), ``"mpm"`` keeps ``γ = I(E α > threshold)`` and draws the slab; ``"mean"``/``"mpm-mean"``
        return one deterministic network (leading dim 1)."""
        if mode not in PREDICTIVE_MODES:
            raise ValueError(f"mode must be one of {PREDICTIVE_MODES}, got {mode!r}")
        return self._draw_params(check_positive_int("num", num), mode, float(threshold))

    @torch.no_grad()
    def _draw_params(self, num: int, mode: str, threshold: float) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for g, s in enumerate(self._wspecs):
            loc, scale = self.slab_params(s)
            if mode in ("mean", "mpm-mean"):
                a = self.expected_inclusion(g, s)
                w = (a * loc) if mode == "mean" else (a > threshold).to(loc.dtype) * loc
                out[s.name] = w.unsqueeze(0)
                continue
            theta = loc + scale * torch.randn((num, *s.shape), dtype=loc.dtype, device=loc.device)
            if mode == "mpm":
                gamma = (self.expected_inclusion(g, s) > threshold).to(loc.dtype)
            else:
                gamma = torch.bernoulli(torch.sigmoid(self.draw_inclusion_logits(g, s, num)))
            out[s.name] = gamma * theta
        for s in self._specs:
            if s.role == "bias":
                loc, scale = self.slab_params(s)
                if mode in ("mean", "mpm-mean"):
                    out[s.name] = loc.unsqueeze(0)
                else:
                    out[s.name] = loc + scale * torch.randn(
                        (num, *s.shape), dtype=loc.dtype, device=loc.device
                    )
        return out

    @torch.no_grad()
    def _predictive(
        self,
        model,
        x: Tensor,
        num_samples: int = 10,
        mode: str = "bma",
        threshold: float = 0.5,
        sample_chunk: int = 10,
    ) -> Predictions:
        """Model-averaged class probabilities (Eq. 4.15) under prediction ``mode`` (see module docstring).

        ``"mean"``/``"mpm-mean"`` are single deterministic networks (``num_samples`` ignored).  Draws are
        shared across all rows of ``x`` (one network per draw).  ``extras`` holds the per-draw density.
        """
        if mode not in PREDICTIVE_MODES:
            raise ValueError(f"mode must be one of {PREDICTIVE_MODES}, got {mode!r}")
        num_samples = check_positive_int("num_samples", num_samples)
        lik = model.likelihood
        arch = model.architecture
        if mode in ("mean", "mpm-mean"):
            num_samples = 1
        draws = []
        with pyro.get_param_store().scope():
            for start in range(0, num_samples, sample_chunk):
                c = min(sample_chunk, num_samples - start)
                params = self._draw_params(c, mode, threshold)
                params = {k: v.to(x.dtype) for k, v in params.items()}
                f = arch(x, params)
                if f.dim() == 2:  # a single network: align_particles dropped the draw dim
                    f = f.unsqueeze(0)
                p = lik.probs(f)
                if lik.task == "binary":
                    p = torch.stack([1 - p, p], -1) if p.shape[-1] != 2 else p
                draws.append(p)
        draw_probs = torch.cat(draws, 0)
        samples = torch.distributions.Categorical(probs=draw_probs).sample()
        return Predictions(
            lik.task, probs=draw_probs.mean(0), draw_probs=draw_probs, samples=samples, extras={"mode": mode}
        )


class MeanFieldLBBNNGuide(LBBNNGuide):
    """Mean-field inclusion guide, Eqs. (4.5)-(4.7): ``α = sigmoid(ω)`` per weight, ``ω ~ U(0, 1)`` at
    initialization as in the reference code (initial α in 0.50-0.73, note §2.8)."""

    def __init__(self, model: BayesianModel, init_logit: tuple[float, float] = (0.0, 1.0), **kwargs) -> None:
        super().__init__(model, **kwargs)
        lo, hi = init_logit
        for s in self._wspecs:
            setattr(self, _pname(s.name, "omega"), PyroParam(lo + (hi - lo) * torch.rand(s.shape)))

    def inclusion_logits(self, g: int, spec: ParamSpec) -> Tensor:
        return self._p(spec.name, "omega")

    def expected_inclusion(self, g: int, spec: ParamSpec) -> Tensor:
        return torch.sigmoid(self._p(spec.name, "omega"))

    def draw_inclusion_logits(self, g: int, spec: ParamSpec, num: int) -> Tensor:
        return self._p(spec.name, "omega").expand(num, *spec.shape)


class _MaskSites(Messenger):
    """Skips the scores of the named sample sites (their distributions become ``.mask(False)``)."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__()
        self.names = names

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.names:
            msg["fn"] = msg["fn"].mask(False)


class ClosedFormKL_ELBO(Trace_ELBO):
    """``Trace_ELBO`` for an LBBNN guide with the closed-form KL (note §2.6) that skips work which cancels.

    Under plain ``Trace_ELBO`` the guide's factor is ``KL + log p(γ, θ)`` so that it cancels the model's
    score ``log p(γ, θ)`` of the sampled weights (the model is never changed by a guide).  Here the model's
    scores of :meth:`LBBNNGuide.closed_form_sites` are masked and the guide adds the KL alone
    (:meth:`LBBNNGuide.prior_scores_masked`): the same estimate and gradient, without computing two
    weight-sized log-densities and their backward passes per step.  Guides without
    ``closed_form_sites`` run as under ``Trace_ELBO``.
    """

    def _get_trace(self, model, guide, args, kwargs):
        sites = getattr(guide, "closed_form_sites", None)
        names = sites() if callable(sites) else frozenset()
        if not names:
            return super()._get_trace(model, guide, args, kwargs)
        with _MaskSites(names), guide.prior_scores_masked():
            return super()._get_trace(model, guide, args, kwargs)


# ---------------------------------------------------------------------------------------------------
# training schedule: Algorithm 1 with Table 1's per-group step sizes
# ---------------------------------------------------------------------------------------------------

#: Table 1 (LBBNN-GP-MF / -MVN) step sizes per stage; groups: slab (κ, ρ, biases, noise), omega (ω),
#: xi (ξ), sigma (Σ factors and the auxiliary reverse model), psi (a_ψ, b_ψ / ψ), slab_var (a_β, b_β / σ²).
PAPER_LRS: dict[str, dict[str, float]] = {
    "pretrain": {"slab": 1e-4, "xi": 0.1, "omega": 0.1, "sigma": 0.1, "psi": 1e-3, "slab_var": 1e-5},
    "train": {"slab": 1e-4, "xi": 0.01, "omega": 1e-4, "sigma": 1e-4, "psi": 0.0, "slab_var": 0.0},
    "posttrain": {"slab": 1e-4, "xi": 0.0, "omega": 0.0, "sigma": 0.0, "psi": 0.0, "slab_var": 0.0},
}

#: Short-run defaults (a documented deviation, note §5.3: raise the κ/ρ step size for short runs and keep a
#: high-lr phase for ω, note §5.1.5).
DEFAULT_LRS: dict[str, dict[str, float]] = {
    "pretrain": {"slab": 1e-2, "xi": 0.1, "omega": 0.1, "sigma": 0.05, "psi": 1e-2, "slab_var": 1e-2},
    "train": {"slab": 1e-2, "xi": 0.01, "omega": 0.01, "sigma": 0.01, "psi": 0.0, "slab_var": 0.0},
    "posttrain": {"slab": 1e-3, "xi": 0.0, "omega": 0.0, "sigma": 0.0, "psi": 0.0, "slab_var": 0.0},
}

_GROUP_SUFFIXES = (
    ("omega", "omega"),
    ("_xi", "xi"),
    ("scale_tril", "sigma"),
    ("cov_factor", "sigma"),
    ("cov_diag", "sigma"),
    ("reverse", "sigma"),
    ("eb_psi", "psi"),
    ("psi_a", "psi"),
    ("psi_b", "psi"),
    ("eb_slab_var", "slab_var"),
    ("sigma2_loc", "slab_var"),
    ("sigma2_scale", "slab_var"),
)


def param_group(param_name: str) -> str:
    """The Table-1 group of an LBBNN parameter name (``slab`` for κ, ρ, biases and anything else)."""
    for key, group in _GROUP_SUFFIXES:
        if key in param_name:
            return group
    return "slab"


def stage_optimizer(
    lrs: Mapping[str, float], betas: tuple[float, float] = (0.9, 0.999)
) -> pyro.optim.PyroOptim:
    """A fresh Adam (:class:`zoo.infer.optim.FusedPyroOptim`, one param group per learning rate) whose
    per-parameter arguments are a callable of the parameter name."""
    table = {k: float(v) for k, v in lrs.items()}
    for k, v in table.items():
        if not (isinstance(v, Number) and v >= 0):
            raise ValueError(f"lrs[{k!r}] must be a non-negative number, got {v!r}")

    def args(module_name, param_name=None):
        name = param_name if param_name is not None else module_name
        group = param_group(str(name))
        if group not in table:
            raise ValueError(f"lrs: no learning rate for parameter group {group!r} (parameter {name!r})")
        return {"lr": table[group], "betas": betas}

    return FusedPyroOptim(torch.optim.Adam, args)


def fit_lbbnn(
    model: BayesianModel,
    guide: LBBNNGuide,
    x: Tensor,
    y: Tensor,
    *,
    pretrain_steps: int,
    train_steps: int,
    posttrain_steps: int = 0,
    lrs: Mapping[str, Mapping[str, float]] | None = None,
    batch_size: int | None = 100,
    seed: int = 0,
    progress: bool = False,
    **fit_kwargs,
) -> FitResult:
    """Algorithm 1 with the three stages of §2.8: pre-training (empirical Bayes for ``"eb-point"``
    priors), main training with the hyperparameters frozen, optional post-training with the structure
    frozen.  Each stage gets a fresh optimizer (the reference code re-creates Adam, note §5.1.9)."""
    if not isinstance(guide, LBBNNGuide):
        raise TypeError(f"guide must be an LBBNNGuide, got {type(guide).__name__}")
    lrs = dict(DEFAULT_LRS if lrs is None else lrs)
    for stage in ("pretrain", "train", "posttrain"):
        if stage not in lrs:
            raise ValueError(f"lrs must have a {stage!r} entry")
    pretrain_steps = check_positive_int("pretrain_steps", pretrain_steps, allow_zero=True)
    train_steps = check_positive_int("train_steps", train_steps, allow_zero=True)
    posttrain_steps = check_positive_int("posttrain_steps", posttrain_steps, allow_zero=True)
    schedule = {"pretrain": pretrain_steps, "train": train_steps, "posttrain": posttrain_steps}
    config = {**dict(fit_kwargs.pop("config", None) or {}), "schedule": schedule}
    callbacks = tuple(fit_kwargs.pop("callbacks", ()))  # e.g. a time budget: it spans all three stages
    result = fit(
        model,
        guide,
        x,
        y,
        steps=pretrain_steps,
        optimizer=stage_optimizer(lrs["pretrain"]),
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        config=config,
        callbacks=callbacks,
        **fit_kwargs,
    )
    model.prior.freeze_hyperparameters()
    result.optim = stage_optimizer(lrs["train"])
    resume(result, x, y, train_steps, progress=progress, callbacks=callbacks)
    if posttrain_steps:
        guide.freeze_structure()
        result.optim = stage_optimizer(lrs["posttrain"])
        resume(result, x, y, posttrain_steps, progress=progress, callbacks=callbacks)
    return result


#: named step-size tables for :func:`fit_lbbnn_staged` (``stage_lrs="paper"`` / ``"short"``)
STAGE_LRS = {"paper": PAPER_LRS, "short": DEFAULT_LRS}


def fit_lbbnn_staged(
    model: BayesianModel,
    guide,
    x: Tensor,
    y: Tensor,
    *,
    steps: int,
    lr: float | None = None,
    optimizer: str | None = None,
    stage_lrs: str | Mapping[str, Mapping[str, float]] | None = None,
    pretrain_steps: int | None = None,
    **fit_kwargs,
) -> FitResult:
    """The ``lbbnn`` registry entry's fit function (``zoo.experiments.runs.fit_on_dataset`` passes ``fit_options``).

    ``stage_lrs=None``: one optimizer at ``lr`` for every parameter (:func:`zoo.infer.loop.fit`, what
    ``zoo fit`` does).  Otherwise Algorithm 1 through :func:`fit_lbbnn` with per-group step sizes
    ``"paper"`` (Table 1), ``"short"`` (:data:`DEFAULT_LRS`) or an explicit table: ``pretrain_steps``
    (default: the prior's ``eb_steps``) of pre-training, then ``steps - pretrain_steps`` of main training;
    ``lr`` and ``optimizer`` are then unused (post-training is the caller's, see ``posttrain_steps`` of
    :func:`zoo.experiments.runs.fit_on_dataset`)."""
    if stage_lrs is None:
        kw = {} if optimizer is None else {"optimizer": optimizer}
        return fit(model, guide, x, y, steps=steps, lr=1e-2 if lr is None else lr, **kw, **fit_kwargs)
    if isinstance(stage_lrs, str):
        if stage_lrs not in STAGE_LRS:
            raise ValueError(f"stage_lrs must be one of {tuple(STAGE_LRS)} or a table, got {stage_lrs!r}")
        stage_lrs = STAGE_LRS[stage_lrs]
    steps = check_positive_int("steps", steps)
    pre = int(getattr(model.prior, "eb_steps", 0)) if pretrain_steps is None else pretrain_steps
    pre = min(check_positive_int("pretrain_steps", pre, allow_zero=True), steps)
    return fit_lbbnn(
        model, guide, x, y, pretrain_steps=pre, train_steps=steps - pre, lrs=stage_lrs, **fit_kwargs
    )
