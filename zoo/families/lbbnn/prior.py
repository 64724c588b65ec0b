"""Spike-and-slab prior of the latent-binary BNN (Hubin & Storvik 2019, "Variational Inference for Bayesian
Neural Networks under Model and Parameter Uncertainty", arXiv:1903.07594, §3).

Every weight ``β_kj`` of a weight tensor ("layer") ``l`` has an inclusion indicator (Eqs. 3.3a-b, 3.4a-d)::

    γ_kj ~ Bernoulli(ψ_l),   β_kj | γ_kj = 1 ~ N(0, σ²_l),   β_kj | γ_kj = 0 = 0,

biases are always included (``b ~ N(0, s_b²)``, as in the paper's reference code, which never drops biases).

**Sites.**  The prior is written in the equivalent *non-degenerate* form ``β = γ ⊙ θ`` with a slab value
``θ_kj ~ N(0, σ²_l)`` for every weight (marginally identical to 3.3a: ``θ`` of an excluded weight is never
used).  Per weight spec ``fc{l}.weight`` it emits ``fc{l}.weight.gamma`` (Bernoulli, event dim 2) and
``fc{l}.weight.slab`` (Normal, event dim 2) and returns ``fc{l}.weight = γ ⊙ θ``; biases are sites
``fc{l}.bias``.  A guide therefore chooses ``q(γ)`` and ``q(θ | γ)``; taking ``q(θ | γ = 0) = p(θ)`` (the
"δ₀-cancellation convention": the excluded slab values are scored by their prior on both sides) makes the
ELBO the spike-and-slab ELBO of Eqs. (4.4)-(4.7).  The Bernoulli pmf is extended to [0, 1] so a relaxed
(binary Concrete, Eq. 4.10) value may be scored, as the paper's estimator (Eq. 4.14) does.

**Hyperprior formulations**, option ``hyper``:

* ``"fixed"``: ``ψ_l`` and ``σ²_l`` are constants (the paper's Appendix D and Bai et al. 2020; closed-form
  KL);
* ``"eb-point"``: ``ψ_l`` and ``σ²_l`` are point parameters (``pyro.param``) optimized on the ELBO during a
  pre-training stage, then :meth:`SpikeSlabPrior.freeze_hyperparameters` copies them into buffers and they
  are never read as parameters again (so the optimizer no longer sees them);
* ``"hierarchical"``: the literal model (3.4b, 3.4d): per-layer global latent sites ``fc{l}.psi ~
  Beta(a_ψ, b_ψ)`` and ``fc{l}.sigma2 ~ InvGamma(a_β, b_β)`` (shape/scale parametrization), which need
  their own guide factors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from pyro.nn import PyroParam
from torch import Tensor
from torch.distributions import Bernoulli, Normal, kl_divergence

from zoo.core.architectures import Architecture, ParamSpec
from zoo.core.prior import Prior
from zoo.core.validation import check_positive, check_positive_int

__all__ = [
    "HYPER_MODES",
    "SpikeSlabPrior",
    "bernoulli_kl",
    "gaussian_kl",
    "spike_slab_kl",
    "weight_specs",
    "group_prefix",
]

HYPER_MODES = ("fixed", "eb-point", "hierarchical")
_EMPTY = torch.Size()
_LOG_2PI = math.log(2 * math.pi)


def weight_specs(specs: Sequence[ParamSpec]) -> list[ParamSpec]:
    """The weight specs (those carrying inclusion indicators), in architecture order."""
    return [s for s in specs if s.role == "weight"]


def group_prefix(spec: ParamSpec) -> str:
    """Site prefix of a weight tensor's layer-level sites: ``"fc0.weight" -> "fc0"``."""
    return spec.name[: -len(".weight")] if spec.name.endswith(".weight") else spec.name


# ---------------------------------------------------------------------------------------------------
# closed-form KL pieces (Eqs. 4.5-4.7 against 3.3a-b), shared by every LBBNN guide
# ---------------------------------------------------------------------------------------------------


def bernoulli_kl(logit_alpha: Tensor, psi: Tensor) -> Tensor:
    """``KL(Bern(α) || Bern(ψ)) = α log(α/ψ) + (1-α) log((1-α)/(1-ψ))`` elementwise, with ``α = σ(ω)``.

    Computed as ``-H(Bern(α)) - E_α[log Bern(γ; ψ)]`` with torch's Bernoulli entropy, which works on the
    logits (``binary_cross_entropy_with_logits``), so saturated logits stay finite.
    """
    alpha = torch.sigmoid(logit_alpha)
    entropy = Bernoulli(logits=logit_alpha, validate_args=False).entropy()
    log1m_psi = torch.log1p(-psi)
    return -entropy - (alpha * (torch.log(psi) - log1m_psi) + log1m_psi)


def gaussian_kl(loc: Tensor, scale: Tensor, prior_var: Tensor) -> Tensor:
    """``KL(N(loc, scale²) || N(0, prior_var))`` elementwise (torch's ``kl_divergence(Normal, Normal)``)."""
    if not torch.is_tensor(prior_var):
        prior_var = torch.tensor(float(prior_var), dtype=loc.dtype, device=loc.device)
    q = Normal(loc, scale, validate_args=False)
    p = Normal(torch.zeros_like(prior_var), prior_var.sqrt(), validate_args=False)
    return kl_divergence(q, p)


def spike_slab_kl(logit_alpha: Tensor, loc: Tensor, scale: Tensor, psi: Tensor, slab_var: Tensor) -> Tensor:
    """Elementwise closed-form ``KL(q(β, γ) || p(β, γ))``::

        α log(α/ψ) + (1-α) log((1-α)/(1-ψ)) + α [log(σ/τ) + (τ² + κ²)/(2σ²) - 1/2]

    for ``q = α N(κ, τ²) + (1-α) δ₀`` (Eqs. 4.5-4.7) and the prior (3.3a-b); the same expression is the
    per-layer KL of Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395, §3.2).  ``loc`` may already
    carry a multiplicative flow variable (their Eq. 5: pass ``κ z``).
    """
    return bernoulli_kl(logit_alpha, psi) + torch.sigmoid(logit_alpha) * gaussian_kl(loc, scale, slab_var)


def _hyper_view(h: Tensor, n: int) -> Tensor:
    """A per-layer hyperparameter (0-dim, or with particle dims) made broadcastable over ``n`` event dims."""
    return h if h.dim() == 0 else h.reshape(*h.shape, *([1] * n))


class InclusionPrior(TorchDistribution):
    """``Bernoulli(ψ)`` with ``ψ`` broadcast (not materialized) over a weight tensor; ``log_prob`` is the pmf
    ``γ logit ψ + log(1 - ψ)`` extended to [0, 1] (so a relaxed γ̃ can be scored, Eq. 4.10)."""

    arg_constraints = {"probs": constraints.unit_interval}
    support = constraints.unit_interval

    def __init__(self, probs: Tensor, batch_shape: torch.Size, validate_args: bool | None = None) -> None:
        self.probs = probs
        super().__init__(torch.Size(batch_shape), validate_args=validate_args)

    def expand(self, batch_shape: Sequence[int], _instance: InclusionPrior | None = None) -> InclusionPrior:
        return InclusionPrior(self.probs, torch.Size(batch_shape))

    def sample(self, sample_shape: torch.Size = _EMPTY) -> Tensor:
        with torch.no_grad():
            return torch.bernoulli(self.probs.expand(self._extended_shape(sample_shape)))

    def log_prob(self, value: Tensor) -> Tensor:
        return value * (torch.log(self.probs) - torch.log1p(-self.probs)) + torch.log1p(-self.probs)


class SpikeSlabPrior(Prior):
    """Spike-and-slab prior with per-layer ``ψ_l``, ``σ²_l`` (see the module docstring).

    :param num_layers: number of weight tensors of the architecture (``MLP.num_layers``); use
        :meth:`for_architecture` to infer it.
    :param inclusion: prior inclusion probability ``ψ`` (``"fixed"``) or its initial value (``"eb-point"``).
    :param slab_var: slab variance ``σ²`` (``"fixed"``) or its initial value (``"eb-point"``).
    :param bias_scale: prior standard deviation of the (always included) biases.
    :param hyper: ``"fixed"``, ``"eb-point"`` or ``"hierarchical"``.
    :param a_psi, b_psi: Beta hyperprior of ``ψ_l`` (``"hierarchical"``; Eq. 3.4d).
    :param a_beta, b_beta: inverse-gamma hyperprior (shape, scale) of ``σ²_l`` (``"hierarchical"``; Eq. 3.4b).
    :param eb_steps: length of the empirical-Bayes pre-training stage in optimizer steps (``"eb-point"``);
        read by the LBBNN guides' stage hook, which freezes the hyperparameters afterwards.
    :param eb_stop_inclusion: the reference code's early stop of pre-training (not in the paper): the stage
        also ends as soon as the first weight layer's ``ψ`` drops below this value (0 = never; the
        reference uses 0.1).  Without it, empirical Bayes on a small data set drives ``ψ`` far below what
        the paper reports (empirical Bayes on the hyperparameters is fragile).
    """

    def __init__(
        self,
        num_layers: int,
        inclusion: float = 0.1,
        slab_var: float = 1.0,
        bias_scale: float = 1.0,
        hyper: str = "fixed",
        a_psi: float = 1.0,
        b_psi: float = 9.0,
        a_beta: float = 2.0,
        b_beta: float = 1.0,
        eb_steps: int = 0,
        eb_stop_inclusion: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_layers = check_positive_int("num_layers", num_layers)
        if hyper not in HYPER_MODES:
            raise ValueError(f"hyper must be one of {HYPER_MODES}, got {hyper!r}")
        inclusion = float(inclusion)
        if not 0.0 < inclusion < 1.0:
            raise ValueError(f"inclusion must lie in (0, 1), got {inclusion!r}")
        self.hyper = hyper
        self.eb_steps = check_positive_int("eb_steps", eb_steps, allow_zero=True)
        eb_stop_inclusion = float(eb_stop_inclusion)
        if not 0.0 <= eb_stop_inclusion < 1.0:
            raise ValueError(f"eb_stop_inclusion must lie in [0, 1), got {eb_stop_inclusion!r}")
        self.eb_stop_inclusion = eb_stop_inclusion
        L = self.num_layers
        self.register_buffer("psi", torch.full((L,), inclusion))
        self.register_buffer("slab_var", torch.full((L,), check_positive("slab_var", slab_var)))
        self.register_buffer("bias_scale", torch.tensor(check_positive("bias_scale", bias_scale)))
        self.register_buffer("a_psi", torch.tensor(check_positive("a_psi", a_psi)))
        self.register_buffer("b_psi", torch.tensor(check_positive("b_psi", b_psi)))
        self.register_buffer("a_beta", torch.tensor(check_positive("a_beta", a_beta)))
        self.register_buffer("b_beta", torch.tensor(check_positive("b_beta", b_beta)))
        self.register_buffer("eb_frozen", torch.tensor(hyper != "eb-point"))
        if hyper == "eb-point":
            self.eb_psi = PyroParam(torch.full((L,), inclusion), constraint=constraints.unit_interval)
            self.eb_slab_var = PyroParam(torch.full((L,), float(slab_var)), constraint=constraints.positive)

    @classmethod
    def for_architecture(cls, architecture: Architecture, **kwargs: Any) -> SpikeSlabPrior:
        """A prior sized for ``architecture`` (one hyperparameter group per weight tensor)."""
        n = len(weight_specs(architecture.param_specs()))
        if n == 0:
            raise ValueError("architecture: it has no weight parameters to put a spike-and-slab prior on")
        return cls(n, **kwargs)

    def config(self) -> dict:
        return {
            "num_layers": self.num_layers,
            "inclusion": [float(v) for v in self.psi],
            "slab_var": [float(v) for v in self.slab_var],
            "bias_scale": float(self.bias_scale),
            "hyper": self.hyper,
            "a_psi": float(self.a_psi),
            "b_psi": float(self.b_psi),
            "a_beta": float(self.a_beta),
            "b_beta": float(self.b_beta),
            "eb_steps": self.eb_steps,
            "eb_stop_inclusion": self.eb_stop_inclusion,
            "eb_frozen": bool(self.eb_frozen),
        }

    # -- hyperparameters --------------------------------------------------------------------------

    @property
    def eb_trainable(self) -> bool:
        """True while ``"eb-point"`` hyperparameters are still optimized (before the freeze)."""
        return self.hyper == "eb-point" and not bool(self.eb_frozen)

    def eb_stage_over(self, step: int) -> bool:
        """Whether the empirical-Bayes stage should end after optimizer step ``step``: ``eb_steps`` reached,
        or the first layer's ``ψ`` below ``eb_stop_inclusion`` (the reference code's rule)."""
        if not self.eb_trainable:
            return False
        if self.eb_steps > 0 and step >= self.eb_steps:
            return True
        return self.eb_stop_inclusion > 0 and float(self.eb_psi[0].detach()) < self.eb_stop_inclusion

    def point_hyperparameters(self) -> tuple[Tensor, Tensor]:
        """``(ψ, σ²)``, shape ``(num_layers,)``, of ``"fixed"``/``"eb-point"`` (parameters until frozen)."""
        if self.hyper == "hierarchical":
            raise ValueError("hyper: the hierarchical prior has no point hyperparameters; sample fc{l}.psi")
        if self.eb_trainable:
            return self.eb_psi, self.eb_slab_var
        return self.psi, self.slab_var

    @torch.no_grad()
    def freeze_hyperparameters(self) -> None:
        """End the empirical-Bayes stage: copy ``ψ``, ``σ²`` into buffers and stop training them."""
        if not self.eb_trainable:
            return
        psi, s2 = self.eb_psi.detach().clone(), self.eb_slab_var.detach().clone()
        self.psi.copy_(psi)
        self.slab_var.copy_(s2)
        self.eb_frozen.fill_(True)

    def hyper_prior(self, kind: str) -> dist.Distribution:
        """The hyperprior of ``ψ_l`` (``kind="psi"``, Beta) or ``σ²_l`` (``kind="sigma2"``, inverse gamma)."""
        if kind == "psi":
            return dist.Beta(self.a_psi, self.b_psi)
        if kind == "sigma2":
            return dist.InverseGamma(self.a_beta, self.b_beta)
        raise ValueError(f"kind must be 'psi' or 'sigma2', got {kind!r}")

    def layer_hyperparameters(self, specs: Sequence[ParamSpec]) -> list[tuple[Tensor, Tensor]]:
        """``[(ψ_l, σ²_l)]`` per weight tensor; samples ``fc{l}.psi``/``fc{l}.sigma2`` if hierarchical."""
        out = []
        if self.hyper == "hierarchical":
            for s in weight_specs(specs):
                p = group_prefix(s)
                out.append(
                    (
                        pyro.sample(f"{p}.psi", self.hyper_prior("psi")),
                        pyro.sample(f"{p}.sigma2", self.hyper_prior("sigma2")),
                    )
                )
            return out
        psi, s2 = self.point_hyperparameters()
        return [(psi[g], s2[g]) for g in range(len(weight_specs(specs)))]

    # -- the distributions of the sites (used by the model and by closed-form guides) ----------------

    def inclusion_dist(self, psi: Tensor, shape: tuple[int, ...]) -> dist.Distribution:
        """``γ ~ Bernoulli(ψ)`` over a weight tensor (event dims = the weight's dims; Eq. 3.3b)."""
        n = len(shape)
        p = _hyper_view(psi, n)
        return InclusionPrior(p, torch.broadcast_shapes(p.shape, shape)).to_event(n)

    def slab_dist(self, slab_var: Tensor, shape: tuple[int, ...]) -> dist.Distribution:
        """``θ ~ N(0, σ²)`` over a weight tensor (the slab of Eq. 3.3a)."""
        n = len(shape)
        scale = _hyper_view(slab_var, n).sqrt()
        bs = torch.broadcast_shapes(scale.shape, shape)
        return dist.Normal(torch.zeros_like(scale), scale).expand(bs).to_event(n)

    def bias_dist(self, spec: ParamSpec) -> dist.Distribution:
        s = self.bias_scale.expand(spec.shape)
        return dist.Normal(torch.zeros_like(s), s).to_event(len(spec.shape))

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        hyp = self.layer_hyperparameters(specs)
        out: dict[str, Tensor] = {}
        for (psi, s2), s in zip(hyp, weight_specs(specs)):
            gamma = pyro.sample(f"{s.name}.gamma", self.inclusion_dist(psi, s.shape))
            theta = pyro.sample(f"{s.name}.slab", self.slab_dist(s2, s.shape))
            out[s.name] = gamma * theta
        for s in specs:
            if s.role == "bias":
                out[s.name] = pyro.sample(s.name, self.bias_dist(s))
            elif s.role != "weight":
                raise ValueError(f"specs: unknown role {s.role!r} of {s.name!r}")
        return out

    def log_density(
        self, spec: ParamSpec, gamma: Tensor, theta: Tensor, psi: Tensor, slab_var: Tensor
    ) -> Tensor:
        """``log p(γ) + log p(θ)`` of one weight tensor, summed over its event dims.

        The sufficient-statistic form of :meth:`inclusion_dist` + :meth:`slab_dist` (``Σγ logit ψ + n log(1-ψ)
        - Σθ²/(2σ²) - n/2 log(2πσ²)``): two reductions instead of elementwise densities, which is what
        closed-form-KL guides use to cancel the model's score exactly (tests/test_lbbnn_elbo.py checks the
        cancellation to 1e-8).
        """
        dims = tuple(range(-len(spec.shape), 0))
        n = spec.numel
        log1m = torch.log1p(-psi)
        lp_gamma = gamma.sum(dims) * (torch.log(psi) - log1m) + n * log1m
        lp_theta = -0.5 * (theta**2).sum(dims) / slab_var - 0.5 * n * (_LOG_2PI + torch.log(slab_var))
        return lp_gamma + lp_theta
