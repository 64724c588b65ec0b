"""Per-weight hierarchical priors of the collapsed variational bounds of Tomczak, Swaroop, Foong & Turner
2021 ("Collapsed Variational Bounds for Bayesian Neural Networks", NeurIPS 34; OpenReview ykN3tbJ0qmX).

Equation numbers are the paper's appendix (App. B).  Three hierarchies, one hyper-latent set per scalar
network parameter (weights and biases alike: App. B derives every bound "for an individual coordinate"):

* ``"cm"`` (collapsed mean, App. B step I):  ``w ~ N(mu_p, gamma)``, ``mu_p ~ N(0, alpha)``, written
  through ``alpha_reg = gamma / (alpha + gamma)`` (Eq. 28); ``gamma = gamma_scale / fan_in`` (Table 4).
* ``"cv"`` (collapsed variance, Table 5's CV-MF-VI; its derivation is not in the appendix): ``w ~ N(0,
  1/tau_p)``, ``tau_p ~ Gamma(alpha, beta)`` (shape, rate); the CMV results with ``delta = 1``.
* ``"cmv"`` (collapsed mean and variance, App. B, Normal-Gamma): ``w ~ N(mu_p, 1/tau_p)``,
  ``mu_p | tau_p ~ N(0, 1/(t tau_p))``, ``tau_p ~ Gamma(alpha, beta)``, with ``delta = t / (1 + t)``.

The prior has two *parameterizations of the same distribution over the weights*:

* marginal (``hierarchical=False``, the default): only the weight sites are emitted, with the exact
  marginal prior (CM: ``N(0, gamma/alpha_reg)``; CV/CMV: ``w | tau ~ N(0, 1/(delta tau))``, i.e. a
  Student-t with ``2 alpha`` degrees of freedom and scale ``sqrt(beta / (alpha delta))``).  Used with the
  collapsed-bound guide (:class:`guides.collapsed.bound.CollapsedBoundGuide`), whose objective never sees
  the hyper-latents;
* hierarchical (``hierarchical=True``): the hyper-latents are explicit sites named after the paper's
  ``mu_p`` and ``tau_p`` and prefixed by their parameter, ``"<spec>_mu_p"`` and ``"<spec>_tau_p"`` (e.g.
  ``"fc0.weight_mu_p"``: layer-namespaced, and never ``"fc0.weight.mu_p"``, which Pyro's autoguides cannot
  hold next to ``"fc0.weight"``), before the weight site (used with
  :class:`guides.collapsed.bound.HierarchicalCollapsedGuide`; :func:`hyper_site`).

The module also holds the closed-form math shared by both guides: the per-weight penalties that replace
the KL (Eq. 29; for CMV the exact constant ``½ log delta + ½`` of the integrated Eq. 65 instead of Eq. 74's
``log delta``; CV = CMV with ``delta = 1``), the optimal hyper-posteriors ``q*`` (Eqs. 19, 36, 50) and
the hyper-parameters that maximize the bound (empirical Bayes on the collapsed bound; App. A remarks
that the bound's constants make ``alpha_reg`` learnable).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.prior import ExactScaleConditionals, Prior
from zoo.core.validation import check_positive, check_probability

__all__ = [
    "KINDS",
    "HYPER_LATENTS",
    "CollapsedPrior",
    "hyper_site",
    "penalty_cm",
    "penalty_cmv",
    "penalty_cv",
    "optimal_q_mu_cm",
    "optimal_q_tau",
    "optimal_q_mu_cmv",
    "optimal_alpha_reg",
    "optimal_delta",
]

KINDS = ("cm", "cv", "cmv")

#: the hyper-latents of the hierarchical form, in the paper's notation (prior mean ``mu_p``, precision
#: ``tau_p``; Tomczak et al. 2021, App. B)
HYPER_LATENTS = ("mu_p", "tau_p")


def hyper_site(spec: ParamSpec | str, latent: str) -> str:
    """Site name of hyper-latent ``latent`` (``"mu_p"`` or ``"tau_p"``) of the parameter ``spec``:
    ``"<spec>_<latent>"``, e.g. ``hyper_site("fc0.weight", "tau_p") == "fc0.weight_tau_p"``."""
    if latent not in HYPER_LATENTS:
        raise ValueError(f"latent must be one of {HYPER_LATENTS}, got {latent!r}")
    name = spec.name if isinstance(spec, ParamSpec) else spec
    if not isinstance(name, str):
        raise TypeError(f"spec must be a ParamSpec or a site name, got {type(spec).__name__}")
    return f"{name}_{latent}"


# --------------------------------------------------------------------------------------------------
# Closed forms (per scalar parameter; every function broadcasts).  ``var`` is sigma_q^2.
# --------------------------------------------------------------------------------------------------


def penalty_cm(mu: Tensor, var: Tensor, gamma: Tensor | float, alpha_reg: Tensor | float) -> Tensor:
    """CM penalty (negative of the per-weight term of Eq. 29), elementwise.

    ``P = ½[(alpha_reg mu² + var)/gamma + log gamma − log alpha_reg − log var − 1]``
    ``= KL(N(mu,var) || N(0,gamma)) − ½(1−alpha_reg) mu²/gamma − ½ log alpha_reg`` (Eq. 29 rearranged).
    Gradients: ``dP/dmu = alpha_reg mu / gamma``, ``dP/dvar = 1/(2 gamma) − 1/(2 var)``.
    """
    gamma = torch.as_tensor(gamma, dtype=mu.dtype, device=mu.device)
    alpha_reg = torch.as_tensor(alpha_reg, dtype=mu.dtype, device=mu.device)
    return 0.5 * ((alpha_reg * mu**2 + var) / gamma + gamma.log() - alpha_reg.log() - var.log() - 1.0)


def penalty_cmv(
    mu: Tensor, var: Tensor, alpha: Tensor | float, beta: Tensor | float, delta: Tensor | float
) -> Tensor:
    """CMV penalty ``P = −R_CMV`` with the exact constant (Eq. 65 integrated; Eq. 74 as printed has
    ``log delta`` instead of ``½ log delta + ½``, which only shifts the value), elementwise::

        R = −(alpha+½) log(beta + (delta mu² + var)/2) + ½ log var + log Γ(alpha+½) − log Γ(alpha)
            + alpha log beta + ½ log delta + ½.

    Gradients: ``dP/dmu = delta mu E[tau]``, ``dP/dvar = ½ E[tau] − 1/(2 var)`` with
    ``E[tau] = (alpha+½) / (beta + (delta mu² + var)/2)`` (Eqs. 66-67).
    """
    alpha = torch.as_tensor(alpha, dtype=mu.dtype, device=mu.device)
    beta = torch.as_tensor(beta, dtype=mu.dtype, device=mu.device)
    delta = torch.as_tensor(delta, dtype=mu.dtype, device=mu.device)
    r = (
        -(alpha + 0.5) * torch.log(beta + 0.5 * (delta * mu**2 + var))
        + 0.5 * var.log()
        + torch.lgamma(alpha + 0.5)
        - torch.lgamma(alpha)
        + alpha * beta.log()
        + 0.5 * delta.log()
        + 0.5
    )
    return -r


def penalty_cv(mu: Tensor, var: Tensor, alpha: Tensor | float, beta: Tensor | float) -> Tensor:
    """CV penalty: the CMV penalty with ``delta = 1`` (``t → ∞`` pins ``mu_p`` at 0)."""
    return penalty_cmv(mu, var, alpha, beta, 1.0)


def optimal_q_mu_cm(mu: Tensor, gamma: Tensor | float, alpha_reg: Tensor | float) -> tuple[Tensor, Tensor]:
    """``q*(mu_p) = N(alpha/(alpha+gamma) mu_q, alpha gamma/(alpha+gamma))`` (Eq. 19) as (loc, var).

    With ``alpha_reg = gamma/(alpha+gamma)``: loc ``(1−alpha_reg) mu_q``, var ``(1−alpha_reg) gamma``.
    """
    gamma = torch.as_tensor(gamma, dtype=mu.dtype, device=mu.device)
    one_minus = 1.0 - torch.as_tensor(alpha_reg, dtype=mu.dtype, device=mu.device)
    return one_minus * mu, (one_minus * gamma).expand_as(mu).clone()


def optimal_q_tau(
    mu: Tensor, var: Tensor, alpha: Tensor | float, beta: Tensor | float, delta: Tensor | float
) -> tuple[Tensor, Tensor]:
    """``q*(tau_p) = Gamma(alpha + ½, beta + ½(var + delta mu²))`` (Eq. 50; CV: ``delta = 1``) as
    (concentration, rate)."""
    alpha = torch.as_tensor(alpha, dtype=mu.dtype, device=mu.device)
    beta = torch.as_tensor(beta, dtype=mu.dtype, device=mu.device)
    delta = torch.as_tensor(delta, dtype=mu.dtype, device=mu.device)
    rate = beta + 0.5 * (var + delta * mu**2)
    return (alpha + 0.5).expand_as(rate).clone(), rate


def optimal_q_mu_cmv(mu: Tensor, delta: Tensor | float) -> tuple[Tensor, Tensor]:
    """``q*(mu_p | tau) = N(mu_q/(1+t), 1/((1+t) tau))`` (Eq. 36) as (loc, precision factor ``1+t``),
    with ``1 + t = 1/(1 − delta)``."""
    one_minus = 1.0 - torch.as_tensor(delta, dtype=mu.dtype, device=mu.device)
    return one_minus * mu, (1.0 / one_minus).expand_as(mu).clone()


def optimal_alpha_reg(mu: Tensor, gamma: Tensor | float) -> Tensor:
    """Bound-maximizing shared ``alpha_reg`` for a group of ``D`` weights with fixed ``gamma`` (setting the
    ``log alpha_reg`` derivative of the summed Eq. 29 penalty to zero):
    ``alpha_reg* = min(1, gamma D / Σ_d mu_d²)`` (the penalty is convex in ``log alpha_reg``)."""
    gamma = torch.as_tensor(gamma, dtype=mu.dtype, device=mu.device)
    ss = (mu**2).sum()
    d = mu.numel()
    return torch.clamp(gamma * d / ss.clamp_min(torch.finfo(mu.dtype).tiny), max=1.0)


def optimal_delta(
    mu: Tensor,
    var: Tensor,
    alpha: Tensor | float,
    beta: Tensor | float,
    *,
    lower: float = 1e-6,
    upper: float = 1.0,
    iters: int = 60,
) -> Tensor:
    """Bound-maximizing shared ``delta`` of CMV for a group of weights, by bisection.

    ``d/d log delta Σ_d R_d = D/2 − (alpha+½) Σ_d delta mu_d²/2 / (beta + (delta mu_d² + var_d)/2)`` is
    decreasing in ``delta``, so the bound is unimodal in ``delta``; the root is found on
    ``[lower, upper]`` (clipped at the ends).  Needs the exact ``½ log delta`` constant (not Eq. 74's).
    """
    alpha = torch.as_tensor(alpha, dtype=mu.dtype, device=mu.device)
    beta = torch.as_tensor(beta, dtype=mu.dtype, device=mu.device)
    m2, c = 0.5 * mu.reshape(-1) ** 2, beta + 0.5 * var.reshape(-1)
    d = mu.numel()

    def slope(log_delta: Tensor) -> Tensor:
        dl = log_delta.exp()
        return 0.5 * d - (alpha + 0.5) * (dl * m2 / (c + dl * m2)).sum()

    lo = torch.tensor(math.log(lower), dtype=mu.dtype, device=mu.device)
    hi = torch.tensor(math.log(upper), dtype=mu.dtype, device=mu.device)
    if slope(hi) >= 0:
        return hi.exp()
    if slope(lo) <= 0:
        return lo.exp()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if slope(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (0.5 * (lo + hi)).exp()


# --------------------------------------------------------------------------------------------------
# The prior
# --------------------------------------------------------------------------------------------------


class CollapsedPrior(ExactScaleConditionals, Prior):
    """Per-weight CM / CV / CMV hierarchical prior (Tomczak et al. 2021, App. B; module docstring).

    :param kind: ``"cm"``, ``"cv"`` or ``"cmv"``.
    :param gamma_scale: CM: ``gamma = gamma_scale / fan_in`` (Table 4: 20 for the MNIST MLP, 1 for the
        CNNs), or ``gamma = gamma_scale`` with ``fan_in_scaling=False``.  Biases use their layer's gamma.
    :param alpha_reg: CM: ``gamma/(alpha+gamma)`` in ``(0, 1]`` (Table 4: 0.05 MLP, 0.025/0.2 CNN).
    :param alpha, beta: CV/CMV: Gamma shape and rate of ``tau_p`` (Table 4: 0.5, 0.01).
    :param delta: CMV: ``t/(1+t)`` in ``(0, 1)`` (Table 4: 0.1 MLP/LeNet, 0.5/0.3 large CNNs).
    :param num_layers: if given, ``alpha_reg`` (CM) / ``delta`` (CMV) are stored per layer (a buffer of
        this length, indexed by ``ParamSpec.layer``), which hyper-parameter learning needs.
    :param learn_hyper: learn ``alpha_reg`` (CM) or ``delta`` (CMV) per layer by maximizing the collapsed
        bound (gamma, alpha, beta stay fixed - gamma and alpha_reg are not jointly identifiable: with
        ``alpha + gamma`` fixed the bound is maximal at ``alpha_reg = 1``).  Off by default; read by the
        guides, requires ``num_layers``; not for CV.
    :param hierarchical: emit the hyper-latent sites ``"<spec>_mu_p"`` / ``"<spec>_tau_p"``
        (:func:`hyper_site`) before each parameter (True), or only the parameters under their exact marginal
        prior (False).  Both forms build; the collapsed-bound guides set the form they need.

    The hyper-latents have exact full conditionals given the weights (:mod:`zoo.families.collapsed.gibbs`),
    drawn between NUTS transitions by :func:`zoo.infer.mcmc.fit_nuts` with ``gibbs=True``.
    """

    conditionals_module = "zoo.families.collapsed.gibbs"

    def __init__(
        self,
        kind: str = "cmv",
        *,
        gamma_scale: float = 1.0,
        alpha_reg: float = 0.05,
        alpha: float = 0.5,
        beta: float = 0.01,
        delta: float = 0.1,
        fan_in_scaling: bool = True,
        num_layers: int | None = None,
        learn_hyper: bool = False,
        hierarchical: bool = False,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if num_layers is not None and (isinstance(num_layers, bool) or int(num_layers) < 1):
            raise ValueError(f"num_layers must be a positive int or None, got {num_layers!r}")
        if learn_hyper and kind == "cv":
            raise ValueError(
                "learn_hyper: CV has no identifiable scalar hyper-parameter to learn (alpha_reg and delta "
                "are CM's and CMV's)"
            )
        if learn_hyper and num_layers is None:
            raise ValueError("learn_hyper=True needs num_layers (per-layer alpha_reg / delta)")
        self.kind = kind
        self.fan_in_scaling = bool(fan_in_scaling)
        self.learn_hyper = bool(learn_hyper)
        self.hierarchical = bool(hierarchical)
        self.num_layers = None if num_layers is None else int(num_layers)
        shape = () if num_layers is None else (int(num_layers),)
        self.register_buffer("gamma_scale", torch.tensor(check_positive("gamma_scale", gamma_scale)))
        self.register_buffer(
            "alpha_reg", torch.full(shape, check_probability("alpha_reg", alpha_reg, allow_one=True))
        )
        self.register_buffer("alpha", torch.tensor(check_positive("alpha", alpha)))
        self.register_buffer("beta", torch.tensor(check_positive("beta", beta)))
        self.register_buffer("delta", torch.full(shape, check_probability("delta", delta)))

    def config(self) -> dict:
        def val(t: Tensor) -> list[float] | float:
            return t.tolist() if t.dim() else float(t)

        return {
            "kind": self.kind,
            "gamma_scale": float(self.gamma_scale),
            "alpha_reg": val(self.alpha_reg),
            "alpha": float(self.alpha),
            "beta": float(self.beta),
            "delta": val(self.delta),
            "fan_in_scaling": self.fan_in_scaling,
            "num_layers": self.num_layers,
            "learn_hyper": self.learn_hyper,
            "hierarchical": self.hierarchical,
        }

    # ---- per-spec hyper-parameters ----
    def _per_layer(self, buf: Tensor, spec: ParamSpec) -> Tensor:
        if buf.dim() == 0:
            return buf
        if spec.layer >= buf.shape[0]:
            raise ValueError(
                f"specs: layer {spec.layer} of {spec.name!r} but the prior has {buf.shape[0]} layers"
            )
        return buf[spec.layer]

    def gamma_for(self, spec: ParamSpec) -> Tensor:
        """CM fixed variance ``gamma`` of ``spec`` (Table 4: ``c / N_in``; biases share their layer's)."""
        return self.gamma_scale / spec.fan_in if self.fan_in_scaling else self.gamma_scale

    def alpha_reg_for(self, spec: ParamSpec) -> Tensor:
        return self._per_layer(self.alpha_reg, spec)

    def delta_for(self, spec: ParamSpec) -> Tensor:
        """``delta`` of ``spec``: CMV's (per layer if learned) and 1 for CV."""
        if self.kind == "cv":
            return torch.ones_like(self.alpha)
        return self._per_layer(self.delta, spec)

    def set_layer_hyper(self, layer: int, value: Tensor) -> None:
        """Write a learned ``alpha_reg`` (CM) / ``delta`` (CMV) of ``layer`` (used by the guides)."""
        buf = self.alpha_reg if self.kind == "cm" else self.delta
        if buf.dim() == 0:
            raise ValueError("num_layers: per-layer hyper-parameters need CollapsedPrior(num_layers=...)")
        buf[layer] = value.to(buf.dtype)

    # ---- the closed forms for one spec ----
    def penalty(self, spec: ParamSpec, mu: Tensor, var: Tensor) -> Tensor:
        """Elementwise penalty replacing ``KL(q(w)||p(w))`` for ``spec``'s entries (Eq. 29; CMV: Eq. 74)."""
        if self.kind == "cm":
            return penalty_cm(mu, var, self.gamma_for(spec), self.alpha_reg_for(spec))
        return penalty_cmv(mu, var, self.alpha, self.beta, self.delta_for(spec))

    def marginal(self, spec: ParamSpec) -> dist.Distribution:
        """Exact marginal prior of the entries of ``spec`` (hyper-latents integrated out)."""
        n = len(spec.shape)
        if self.kind == "cm":
            scale = (self.gamma_for(spec) / self.alpha_reg_for(spec)).sqrt()
            base = dist.Normal(torch.zeros_like(scale), scale)
        else:
            scale = (self.beta / (self.alpha * self.delta_for(spec))).sqrt()
            base = dist.StudentT(2.0 * self.alpha, torch.zeros_like(scale), scale)
        return base.expand(spec.shape).to_event(n)

    def _sample_hierarchical(self, spec: ParamSpec) -> Tensor:
        n = len(spec.shape)
        if self.kind == "cm":
            gamma, a_reg = self.gamma_for(spec), self.alpha_reg_for(spec)
            if float(a_reg) >= 1.0:
                raise ValueError("alpha_reg: the hierarchical CM prior needs alpha_reg < 1 (alpha > 0)")
            alpha_var = gamma * (1.0 - a_reg) / a_reg  # inverse of alpha_reg = gamma / (alpha + gamma)
            mu_p = pyro.sample(
                hyper_site(spec, "mu_p"),
                dist.Normal(torch.zeros_like(alpha_var), alpha_var.sqrt()).expand(spec.shape).to_event(n),
            )
            return pyro.sample(spec.name, dist.Normal(mu_p, gamma.sqrt()).to_event(n))
        tau = pyro.sample(
            hyper_site(spec, "tau_p"), dist.Gamma(self.alpha, self.beta).expand(spec.shape).to_event(n)
        )
        if self.kind == "cv":
            return pyro.sample(spec.name, dist.Normal(torch.zeros_like(tau), tau.rsqrt()).to_event(n))
        delta = self.delta_for(spec)
        t = delta / (1.0 - delta)
        mu_p = pyro.sample(
            hyper_site(spec, "mu_p"), dist.Normal(torch.zeros_like(tau), (t * tau).rsqrt()).to_event(n)
        )
        return pyro.sample(spec.name, dist.Normal(mu_p, tau.rsqrt()).to_event(n))

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        if self.hierarchical:
            return {s.name: self._sample_hierarchical(s) for s in specs}
        return {s.name: pyro.sample(s.name, self.marginal(s)) for s in specs}
