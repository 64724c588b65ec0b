"""LBBNN-LCRT (Skaaret-Lund, Storvik & Hubin 2023, "Sparsifying Bayesian neural networks with latent binary
variables and normalizing flows", arXiv:2305.03395, §4): the mean-field spike-and-slab family of their
Eq. (4) trained with the *local reparametrization trick* — pre-activations, not weights, are sampled.

**Family.**  Identical to :class:`guides.lbbnn.meanfield.MeanFieldLBBNNGuide` (Eq. 4):
``q(γ_ij) = Bern(α_ij)``, ``α = sigmoid(λ)``, ``q(w_ij | γ_ij = 1) = N(μ_ij, σ_ij²)``, ``σ = softplus(ρ)``,
biases ``N(μ_b, σ_b²)``.

**Sampler** (§4, unnumbered equations).  For a layer input ``o`` the pre-activation
``h_j = Σ_i o_i γ_ij w_ij + b_j`` is drawn from the Gaussian with its *exact* first two moments::

    E[h]   = o @ (α ⊙ μ)ᵀ + μ_b,     Var[h] = o² @ (α ⊙ (σ² + (1 - α) μ²))ᵀ + σ_b²

(two matmuls per layer, :func:`lcrt_moments`), one ``ε ~ N(0, 1)`` per datum and unit.  γ is never
relaxed: α gets its gradient through the mean and the variance.  The KL is the analytic spike-and-slab KL
of §3.2 (:func:`zoo.families.lbbnn.prior.spike_slab_kl`) plus the Gaussian bias KL.  The flow variants
(:mod:`guides.flows`) pass a multiplicative ``z`` (Eq. 5): ``μ -> z_i μ_ij``.

**How it fits Pyro (the design choice).**  What LCRT samples (``h``) is not a latent site of the model,
whose sites are the weight-space ``fc{l}.weight.gamma`` / ``fc{l}.weight.slab`` / ``fc{l}.bias``.  We keep
the model untouched and *intercept the architecture's per-layer affine map* with the zoo's one
local-reparameterization messenger, :class:`zoo.ops.local_reparam.LocalReparameterization`:
:class:`LCRTMessenger` builds it with the guide's :meth:`LCRTLinearMixin.lcrt_linear` as the sampler, the
weight-space sites as masked sites, and the guide's per-run cache of moments opened on entry (LCRT mode)
and closed on exit.  :class:`LCRT_ELBO` is ``Trace_ELBO`` run inside that messenger
(:class:`zoo.infer.elbo.HandledELBO`).  In LCRT mode the guide

* emits its weight/bias sites as masked point values (zeros: nothing reads them — the intercepted
  ``linear`` ignores its ``weight``/``bias`` arguments), whose model-side prior scores the messenger masks
  (``fn.mask(False)``: not even evaluated, they are constant in every parameter), and
* adds ``pyro.factor(KL)`` with the analytic KL,

so the loss is exactly ``-(N/B Σ_batch log p(y | h) - KL)`` with ``h`` from the LCRT Gaussian: the paper's
objective.  We chose a messenger over a hand-written ELBO because the rest of the ELBO machinery (plates,
subsample scaling, likelihood latents such as the noise variance, particles) stays Pyro's.

*Without* the messenger (plain ``Trace_ELBO`` — what ``zoo fit``, checkpoint resume, ``Predictive``,
:func:`zoo.infer.predict.predict` and the ArviZ export use) the guide samples the **same q** in weight space:
exact Bernoulli γ (straight-through binary-Concrete gradient, as the mean-field guide) and
``w | γ``; the ELBO is then the exact (not CLT-approximated) ELBO of Eq. (3) for that q.  Hence prediction
and export always see genuine ``(γ, w)`` draws, and a model trained with ``LCRT_ELBO`` predicts through the
same parameters.  ``fit_lcrt`` trains with ``LCRT_ELBO``; ``zoo fit lbbnn --guide lcrt`` (which uses the
guide's ``default_loss()``) does too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from guides.lbbnn.distributions import InclusionConcrete, SlabGivenInclusion
from guides.lbbnn.meanfield import MeanFieldLBBNNGuide
from zoo.core.architectures import MLP, ParamSpec
from zoo.core.model import BayesianModel
from zoo.families.lbbnn.prior import gaussian_kl, spike_slab_kl
from zoo.infer.elbo import HandledELBO
from zoo.infer.loop import FitResult, fit
from zoo.ops.local_reparam import LocalReparameterization, gaussian_preactivation

__all__ = [
    "lcrt_moments",
    "weight_space_sites",
    "LCRTMessenger",
    "LCRT_ELBO",
    "point_site",
    "LCRTLinearMixin",
    "LCRTLBBNNGuide",
    "fit_lcrt",
]


def lcrt_moments(
    o: Tensor,
    loc: Tensor,
    scale: Tensor,
    bias_loc: Tensor | None,
    bias_scale: Tensor | None,
    logit_alpha: Tensor | None = None,
    z: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Exact ``E[h]``, ``Var[h]`` of ``h_j = Σ_i o_i γ_ij w_ij + b_j`` (arXiv:2305.03395 §4; with ``z`` the
    flow version of the same section).

    Weights are stored ``(out, in)``: ``loc``/``scale``/``logit_alpha`` ``(out, in)``, ``o`` ``(..., in)``,
    ``z`` ``(in,)`` (one multiplier per *input* unit, Eq. 5).  ``logit_alpha=None`` is the dense case
    ``α ≡ 1`` (BNN / BNN-FLOW).  Per weight ``E[γw] = α zμ`` and ``Var[γw] = α(σ² + (1 - α) z²μ²)``; two
    matmuls per layer.
    """
    m = loc if z is None else loc * z.unsqueeze(-2)
    s2 = scale**2
    if logit_alpha is None:
        w_mean, w_var = m, s2
    else:
        a = torch.sigmoid(logit_alpha)
        w_mean, w_var = a * m, a * (s2 + (1 - a) * m**2)
    mean = torch.matmul(o, w_mean.transpose(-1, -2))
    var = torch.matmul(o**2, w_var.transpose(-1, -2))
    if bias_loc is not None:
        mean = mean + bias_loc.unsqueeze(-2)
        var = var + (bias_scale**2).unsqueeze(-2)
    return mean, var


def weight_space_sites(architecture: MLP) -> frozenset[str]:
    """The model's weight-space sites of ``architecture`` (``name``, ``name.gamma``, ``name.slab`` per
    parameter): their scores are constants under the LCRT sampler."""
    names: set[str] = set()
    for spec in architecture.param_specs():
        names.update((spec.name, f"{spec.name}.gamma", f"{spec.name}.slab"))
    return frozenset(names)


class LCRTMessenger(LocalReparameterization):
    """:class:`~zoo.ops.local_reparam.LocalReparameterization` for an LCRT-capable guide: while active,
    the architecture's ``linear(h, weight, bias, layer)`` returns ``guide.lcrt_linear(h, layer)``, the guide
    runs in LCRT mode (its ``_lcrt_cache`` is open), and the scores of the weight-space sites
    (:func:`weight_space_sites`; point values in LCRT mode) are masked (module docstring).

    ``guide`` must provide ``lcrt_linear(h, layer)`` and a ``_lcrt_cache`` attribute (``None`` outside
    LCRT mode).  Re-entrant; usable as a context manager or as ``LCRTMessenger(guide, arch)(fn)``.
    """

    def __init__(self, guide: LCRTLinearMixin, architecture: MLP) -> None:
        if not callable(getattr(guide, "lcrt_linear", None)):
            raise TypeError(f"guide must implement lcrt_linear(h, layer), got {type(guide).__name__}")
        if not isinstance(architecture, MLP):
            raise TypeError(f"architecture must be a zoo MLP, got {type(architecture).__name__}")
        super().__init__(
            architecture,
            guide.lcrt_linear,
            weight_space_sites(architecture),
            on_enter=self._open_cache,
            on_exit=self._close_cache,
        )
        self.guide = guide
        self._caches: list = []

    def _open_cache(self) -> None:
        self._caches.append(self.guide._lcrt_cache)
        self.guide._lcrt_cache = {}

    def _close_cache(self) -> None:
        self.guide._lcrt_cache = self._caches.pop()


class LCRT_ELBO(HandledELBO):
    """``Trace_ELBO`` whose guide and model run inside :class:`LCRTMessenger` (pre-activations sampled).

    Particles are drawn sequentially (``vectorize_particles`` is not supported: one ``z``/``ε`` per pass).
    """

    def __init__(self, num_particles: int = 1) -> None:
        super().__init__(num_particles=num_particles, max_plate_nesting=1)

    def handler(self, model: Callable, guide: Callable) -> LCRTMessenger:
        if not isinstance(model, BayesianModel):
            raise TypeError(f"model must be a zoo BayesianModel, got {type(model).__name__}")
        return LCRTMessenger(guide, model.architecture)


def point_site(name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A masked zero value for a site that LCRT does not sample (:class:`LCRTMessenger` masks the model's
    score of it)."""
    zeros = torch.zeros((), dtype=like.dtype, device=like.device).expand(shape)
    return pyro.sample(name, dist.Delta(zeros, event_dim=len(shape)).mask(False))


class LCRTLinearMixin:
    """The intercepted affine map shared by every LCRT-capable guide (LBBNN-LCRT, the z-flow guides).

    During a guide run inside :class:`LCRTMessenger` the guide stores, per layer index, the variational
    moments it needs (``logits`` (``None`` for dense layers, α ≡ 1), ``loc``, ``scale``, ``z``) under
    ``_lcrt_cache[layer]`` and the bias ``(loc, scale)`` under ``_lcrt_cache[("bias", layer)]``.
    """

    _lcrt_cache: dict | None = None

    def default_loss(self) -> LCRT_ELBO:
        """The training objective ``zoo fit`` uses for this guide (read by
        :func:`zoo.experiments.runs.fit_on_dataset`)."""
        return LCRT_ELBO()

    @property
    def lcrt_mode(self) -> bool:
        """True while an :class:`LCRTMessenger` for this guide is active."""
        return self._lcrt_cache is not None

    def layer_moments(self, o: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """``(E[h], Var[h])`` of layer ``layer`` at input ``o`` under the current guide run (LCRT mode)."""
        if not self.lcrt_mode or layer not in self._lcrt_cache:
            raise RuntimeError("layer_moments: the guide has not run inside an LCRTMessenger")
        c = self._lcrt_cache[layer]
        b = self._lcrt_cache.get(("bias", layer), (None, None))
        return lcrt_moments(o, c["loc"], c["scale"], b[0], b[1], logit_alpha=c["logits"], z=c["z"])

    def lcrt_linear(self, h: Tensor, layer: int) -> Tensor:
        """One LCRT draw ``E[h] + sqrt(Var[h]) ε`` of the layer's pre-activation (arXiv:2305.03395 §4;
        the variance floored at :data:`zoo.ops.local_reparam.VAR_FLOOR`)."""
        return gaussian_preactivation(*self.layer_moments(h, layer))


class LCRTLBBNNGuide(LCRTLinearMixin, MeanFieldLBBNNGuide):
    """LBBNN-LCRT guide (arXiv:2305.03395 §4); the family, prediction modes and MPM report of the
    mean-field guide.

    Subclasses may scale the slab means by a multiplicative latent (:meth:`layer_z`, Eq. 5).
    Only the closed-form KL is supported (LCRT never materializes (γ, w), so there is no MC KL).

    :param init_logit: range of the uniform initialization of ``λ`` (the reference code uses
        ``(-15, 10)`` on MNIST, which saturates α; the default keeps the mean-field guide's ``(0, 1)``).
    """

    def __init__(self, model: BayesianModel, init_logit: tuple[float, float] = (0.0, 1.0), **kwargs) -> None:
        if kwargs.get("kl", "closed-form") != "closed-form":
            raise ValueError(f"kl must be 'closed-form' for an LCRT guide, got {kwargs['kl']!r}")
        super().__init__(model, init_logit=init_logit, **kwargs)
        if not isinstance(model.architecture, MLP):
            raise TypeError(f"model.architecture must be a zoo MLP, got {type(model.architecture).__name__}")
        self._lcrt_cache: dict | None = None

    # -- hooks for the flow variants --------------------------------------------------------------------

    def layer_z(self, g: int, spec: ParamSpec) -> Tensor | None:
        """Multiplicative latent of layer ``g`` sampled inside the guide (``None``: no flow)."""
        return None

    def layer_done(
        self, g: int, spec: ParamSpec, z: Tensor | None, gamma: Tensor | None, theta: Tensor | None
    ) -> None:
        """Called after the weight sites of layer ``g`` (the flows add ``-log q(z) + log r`` here)."""

    # -- the guide --------------------------------------------------------------------------------------

    def _logits(self, g: int, spec: ParamSpec) -> Tensor:
        logits = self.inclusion_logits(g, spec)
        return logits.detach() if bool(self.structure_frozen) else logits

    def _layer_sites(self, g: int, spec: ParamSpec, psi: Tensor, s2: Tensor) -> None:
        logits = self._logits(g, spec)
        loc, scale = self.slab_params(spec)
        z = self.layer_z(g, spec)
        zloc = loc if z is None else loc * z.unsqueeze(-2)
        n = len(spec.shape)
        s2_v = s2 if s2.dim() == 0 else s2.reshape(*s2.shape, *([1] * n))
        psi_v = psi if psi.dim() == 0 else psi.reshape(*psi.shape, *([1] * n))
        kl = spike_slab_kl(logits, zloc, scale, psi_v, s2_v).sum((-1, -2))
        if self.lcrt_mode:  # the messenger masks the model's scores of these point values
            point_site(f"{spec.name}.gamma", spec.shape, loc)
            point_site(f"{spec.name}.slab", spec.shape, loc)
            self._lcrt_cache[spec.layer] = {"logits": logits, "loc": loc, "scale": scale, "z": z}
            pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)
            self.layer_done(g, spec, z, None, None)
            return
        qg = InclusionConcrete(logits, self.temperature, self.straight_through).to_event(n)
        gamma = pyro.sample(f"{spec.name}.gamma", qg.mask(False))
        qt = SlabGivenInclusion(gamma, zloc, scale, s2_v.sqrt()).to_event(n)
        theta = pyro.sample(f"{spec.name}.slab", qt.mask(False))
        if not self._prior_masked:  # cancel the model's score (plain Trace_ELBO)
            kl = kl + self.model.prior.log_density(spec, gamma, theta, psi, s2)
        pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)
        self.layer_done(g, spec, z, gamma, theta)

    def _bias_site(self, spec: ParamSpec) -> None:
        if not self.lcrt_mode:
            return super()._bias_site(spec)
        loc, scale = self.slab_params(spec)
        point_site(spec.name, spec.shape, loc)
        kl = gaussian_kl(loc, scale, self.model.prior.bias_scale**2).sum()
        pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)
        self._lcrt_cache[("bias", spec.layer)] = (loc, scale)

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        hyp = self._hyperparameters()
        for g, s in enumerate(self._wspecs):
            self._layer_sites(g, s, *hyp[g])
        for s in self._specs:
            if s.role == "bias":
                self._bias_site(s)
        self._noise_factor()


def fit_lcrt(
    model: BayesianModel,
    guide: LCRTLinearMixin,
    x: Tensor,
    y: Tensor,
    *,
    num_particles: int = 1,
    **fit_kwargs: Any,
) -> FitResult:
    """:func:`zoo.infer.loop.fit` with ``loss=LCRT_ELBO(num_particles)`` (pre-activations sampled)."""
    if "loss" in fit_kwargs:
        raise TypeError("fit_lcrt() sets loss itself; use zoo.infer.loop.fit for another loss")
    return fit(model, guide, x, y, loss=LCRT_ELBO(num_particles), **fit_kwargs)
