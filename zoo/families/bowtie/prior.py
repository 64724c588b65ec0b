"""Normal–generalized-inverse-Gaussian (N-GIG) shrinkage prior and the bow-tie noise hyperprior (Sheinkman
& Wade (2025)).

Sheinkman & Wade 2025 (arXiv 2411.11132).  Weights of layer ``l`` (sites ``fc{l}.weight``; paper layer
``l + 1``) follow the global–local prior

* Eq. (5):  ``W_{l,d,d'} | tau_l, psi_{l,d,d'} ~ N(0, tau_l psi_{l,d,d'})``;
* Eq. (6):  ``psi_{l,d,d'} ~ GIG(nu_loc, delta_loc_l, lam_loc)``  (site ``fc{l}.psi``, event shape
  ``(out, in)``);
* Eq. (7):  ``tau_l ~ GIG(nu_glob, delta_glob_l, lam_glob)``  (site ``fc{l}.tau``, one per weight matrix,
  the output layer included: the products of §2.4 run to ``L + 1``, not ``L`` as printed);
* biases ``b_{l,d} ~ N(0, s_0^2)`` (§2.4).

GIG densities are those of App. E.1; ``lam = 0`` is the inverse-gamma ``IG(-nu, delta^2/2)`` limit (Student-t
marginals, every experiment of the paper) and is handled in closed form with torch's ``InverseGamma``;
``delta = 0`` is the Gamma limit; otherwise :class:`zoo.distributions.gig.GeneralizedInverseGaussian` is used.

Architecture scaling (the App. D.1 formula): ``delta_glob <- delta_glob / sqrt(L)`` with ``L`` the number of
hidden layers, and ``delta_loc_l <- delta_loc / sqrt(D_{l-1})`` (fan-in, as in the D.1 formula, not the
``D_l`` of the §2.2 prose).  :class:`BowtieNoisePrior` holds the hidden-layer noise variances
``eta^2_{l,d} ~ IG(alpha_0^h, beta_0^h)`` (sites ``fc{l}.eta2``; §2.4).  The helpers below (log-normalizer,
``E[1/x]``, ``E[x]`` of a GIG) are shared by the prior and the CAVI guide :mod:`guides.bowtie.cavi`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.prior import ExactScaleConditionals, Prior
from zoo.core.validation import check_positive
from zoo.distributions import GeneralizedInverseGaussian
from zoo.distributions.gig_moments import inverse_gamma_log_normalizer
from zoo.ops.expectations import inverse_gamma_moments

__all__ = [
    "NGIGPrior",
    "GaussianBowtiePrior",
    "BowtieNoisePrior",
    "gig_distribution",
    "gig_log_normalizer",
    "gig_mean_reciprocal",
    "gig_mean",
    "check_gig_params",
]


def check_gig_params(name: str, nu: float, delta: float, lam: float) -> None:
    """``ValueError`` (naming ``name``) unless ``(nu, delta, lam)`` is a proper GIG (App. E.1): finite ``nu``,
    ``delta, lam >= 0``, the inverse-gamma limit ``lam = 0`` with ``nu < 0, delta > 0`` and the Gamma limit
    ``delta = 0`` with ``nu > 0, lam > 0``."""
    if delta < 0 or lam < 0 or not math.isfinite(nu):
        raise ValueError(f"{name}: GIG needs finite nu, delta >= 0, lam >= 0; got ({nu}, {delta}, {lam})")
    if lam == 0 and not (nu < 0 and delta > 0):
        raise ValueError(f"{name}: the inverse-gamma limit lam = 0 needs nu < 0 and delta > 0 (App. E.1)")
    if delta == 0 and not (nu > 0 and lam > 0):
        raise ValueError(f"{name}: the Gamma limit delta = 0 needs nu > 0 and lam > 0 (App. E.1)")


def gig_distribution(nu: Tensor, delta: Tensor, lam: Tensor) -> dist.Distribution:
    """``GIG(nu, delta, lam)`` of App. E.1 as a Pyro distribution (exact IG / Gamma limits)."""
    nu, delta, lam = torch.broadcast_tensors(nu, delta, lam)
    if bool((lam == 0).all()):
        return dist.InverseGamma(-nu, 0.5 * delta * delta)
    if bool((delta == 0).all()):
        return dist.Gamma(nu, 0.5 * lam * lam)
    return GeneralizedInverseGaussian(nu, delta, lam)


def gig_log_normalizer(nu: Tensor, delta: Tensor, lam: Tensor) -> Tensor:
    """``log int x^{nu-1} exp(-(delta^2/x + lam^2 x)/2) dx = log(2 (delta/lam)^nu K_nu(lam delta))``.

    Minus the ``log Z`` of the ELBO (App. B); the IG limit is ``lgamma(-nu) + nu log(delta^2/2)``.
    """
    nu, delta, lam = torch.broadcast_tensors(nu, delta, lam)
    if bool((lam == 0).all()):
        return inverse_gamma_log_normalizer(nu, delta)
    return GeneralizedInverseGaussian(nu, delta, lam).log_normalizer()


def gig_mean_reciprocal(nu: Tensor, delta: Tensor, lam: Tensor) -> Tensor:
    """``E[1/x]`` (App. E.1); IG limit ``-2 nu / delta^2``; general case through stable Bessel ratios."""
    nu, delta, lam = torch.broadcast_tensors(nu, delta, lam)
    if bool((lam == 0).all()):
        return -2.0 * nu / (delta * delta)
    return GeneralizedInverseGaussian(nu, delta, lam).mean_reciprocal


def gig_mean(nu: Tensor, delta: Tensor, lam: Tensor) -> Tensor:
    """``E[x]`` (App. E.1); IG limit ``delta^2 / (2(-nu - 1))`` (``inf`` for ``nu >= -1``)."""
    nu, delta, lam = torch.broadcast_tensors(nu, delta, lam)
    if bool((lam == 0).all()):
        return inverse_gamma_moments(-nu, 0.5 * delta * delta)[0]
    return GeneralizedInverseGaussian(nu, delta, lam).mean


class NGIGPrior(ExactScaleConditionals, Prior):
    """N-GIG global–local shrinkage prior, Eqs. (5)–(7), with App. D.1 architecture scaling.

    Args:
        nu_glob, delta_glob, lam_glob: GIG of the per-layer global scale ``tau_l`` (Eq. 7); defaults give
            ``IG(1.5, delta^2/2)``, i.e. Student-t with 3 dof (the authors' code defaults).
        nu_loc, delta_loc, lam_loc: GIG of the per-weight local scales ``psi`` (Eq. 6).
        bias_scale: ``s_0``, sd of the Gaussian bias prior.
        scale_with_architecture: apply App. D.1 (``delta_glob / sqrt(L)``, ``delta_loc / sqrt(fan_in)``).

    Forms.  ``hierarchical`` (``True``, the default, what every guide fits) emits the local scales as
    sites ``fc{l}.psi``.  With inverse-gamma local scales (``lam_loc = 0``, every experiment of the paper)
    ``psi`` integrates out in closed form: ``W | tau ~ N(0, tau psi)`` with ``psi ~ IG(a, b)``,
    ``a = -nu_loc``, ``b = delta_loc^2 / 2``, is ``W | tau ~ Student-t_{2a}(0, sqrt(tau b / a))`` (a
    normal scale mixture with ``1/psi ~ Gamma(a, b)``; Eq. 5 with Eq. 6 integrated).  So
    ``hierarchical = False`` emits the weights from that marginal and no ``psi`` sites: the same posterior
    of the weights and global scales in half the dimensions, as :func:`zoo.infer.mcmc.fit_nuts` samples
    the other families' priors that have both forms (it samples this form by default).  It does not make
    NUTS mix on a network: on ``ngig-cubic-tanh`` one-chain pilots of either form ran at step sizes
    0.003-0.012 with bulk ESS of the unit norms 2-29 in 300 draws.  For a GIG with ``lam_loc > 0`` the
    marginal is not in closed form and ``hierarchical`` is ``None`` (no choice).
    """

    conditionals_module = "zoo.families.bowtie.gibbs"

    def __init__(
        self,
        nu_glob: float = -1.5,
        delta_glob: float = 1.0,
        lam_glob: float = 0.0,
        nu_loc: float = -1.5,
        delta_loc: float = 1.0,
        lam_loc: float = 0.0,
        bias_scale: float = 1.0,
        scale_with_architecture: bool = True,
    ) -> None:
        super().__init__()
        check_gig_params("nu_glob/delta_glob/lam_glob", float(nu_glob), float(delta_glob), float(lam_glob))
        check_gig_params("nu_loc/delta_loc/lam_loc", float(nu_loc), float(delta_loc), float(lam_loc))
        for name, v in (("nu_glob", nu_glob), ("nu_loc", nu_loc)):
            self.register_buffer(name, torch.tensor(float(v)))
        for name, v in (
            ("delta_glob", delta_glob),
            ("lam_glob", lam_glob),
            ("delta_loc", delta_loc),
            ("lam_loc", lam_loc),
        ):
            self.register_buffer(name, torch.tensor(float(v)))
        self.register_buffer("bias_scale", torch.tensor(check_positive("bias_scale", bias_scale)))
        self.scale_with_architecture = bool(scale_with_architecture)
        self.hierarchical: bool | None = True if float(lam_loc) == 0 else None

    def config(self) -> dict:
        keys = ("nu_glob", "delta_glob", "lam_glob", "nu_loc", "delta_loc", "lam_loc", "bias_scale")
        return {k: float(getattr(self, k)) for k in keys} | {
            "scale_with_architecture": self.scale_with_architecture
        }

    @staticmethod
    def _num_hidden(specs: Sequence[ParamSpec]) -> int:
        return max(s.layer for s in specs)

    def glob_params(self, num_hidden: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(nu, delta, lam)`` of every ``tau_l`` (App. D.1: ``delta_glob / sqrt(L)``)."""
        delta = self.delta_glob
        if self.scale_with_architecture and num_hidden > 0:
            delta = delta / math.sqrt(num_hidden)
        return self.nu_glob, delta, self.lam_glob

    def set_glob_delta(self, delta_effective: Tensor, num_hidden: int) -> None:
        """Store an EM estimate (§3.2, App. E.2) of the *effective* ``delta_glob`` (after D.1 scaling)."""
        scale = math.sqrt(num_hidden) if (self.scale_with_architecture and num_hidden > 0) else 1.0
        self.delta_glob.copy_(torch.as_tensor(delta_effective * scale, dtype=self.delta_glob.dtype))

    def loc_params(self, fan_in: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(nu, delta, lam)`` of the local scales of a layer with ``fan_in`` inputs (App. D.1)."""
        delta = self.delta_loc / math.sqrt(fan_in) if self.scale_with_architecture else self.delta_loc
        return self.nu_loc, delta, self.lam_loc

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        num_hidden = self._num_hidden(specs)
        out: dict[str, Tensor] = {}
        for s in specs:
            if s.role == "bias":
                b = self.bias_scale
                out[s.name] = pyro.sample(
                    s.name, dist.Normal(torch.zeros_like(b), b).expand(s.shape).to_event(1)
                )
                continue
            prefix = s.name.rsplit(".", 1)[0]
            tau = pyro.sample(f"{prefix}.tau", gig_distribution(*self.glob_params(num_hidden)))
            if self.hierarchical is False:
                out[s.name] = pyro.sample(s.name, self._marginal(tau, s))
                continue
            psi = pyro.sample(
                f"{prefix}.psi", gig_distribution(*self.loc_params(s.fan_in)).expand(s.shape).to_event(2)
            )
            scale = (tau[..., None, None] * psi).sqrt()
            out[s.name] = pyro.sample(s.name, dist.Normal(torch.zeros_like(scale), scale).to_event(2))
        return out

    def _marginal(self, tau: Tensor, spec: ParamSpec) -> dist.Distribution:
        """``W | tau`` with the inverse-gamma ``psi`` integrated out: ``t_{2a}(0, sqrt(tau b / a))``."""
        nu, delta, _ = self.loc_params(spec.fan_in)
        a, b = -nu, 0.5 * delta * delta
        scale = (tau[..., None, None] * b / a).sqrt().expand(*tau.shape, *spec.shape)
        return dist.StudentT(2.0 * a, torch.zeros_like(scale), scale).to_event(2)


class GaussianBowtiePrior(Prior):
    """Gaussian weight prior for the bow-tie network — the GVBNN ablation of Sheinkman & Wade (2025)
    (Tables 2 and 4,
    "Gaussian priors"; the paper does not report their variance).

    ``W_{l,d,d'} ~ N(0, v_l)`` with ``v_l = (delta_glob^2 / L) (delta_loc^2 / D_{l-1})`` under the App. D.1
    scaling (``delta_glob^2 delta_loc^2`` without it) and ``b ~ N(0, s_0^2)``.  ``v_l`` is the mean
    prior variance ``E[tau] E[psi]`` of the default N-GIG prior (IG(3/2, delta^2/2) global and local scales
    have mean ``delta^2``), so VBNN and GVBNN differ only in the shrinkage, not in the prior scale.
    ``delta_glob`` and ``s_0`` are resolved from the data as for :class:`NGIGPrior` (the model's ``auto``
    options)."""

    def __init__(
        self,
        delta_glob: float = 1.0,
        delta_loc: float = 1.0,
        bias_scale: float = 1.0,
        scale_with_architecture: bool = True,
    ) -> None:
        super().__init__()
        for name, v in (("delta_glob", delta_glob), ("delta_loc", delta_loc), ("bias_scale", bias_scale)):
            self.register_buffer(name, torch.tensor(check_positive(name, v)))
        self.scale_with_architecture = bool(scale_with_architecture)

    def config(self) -> dict:
        return {k: float(getattr(self, k)) for k in ("delta_glob", "delta_loc", "bias_scale")} | {
            "scale_with_architecture": self.scale_with_architecture,
            "gaussian": True,
        }

    def weight_variance(self, num_hidden: int, fan_in: int) -> Tensor:
        """``v_l`` of a layer with ``fan_in`` inputs in a network with ``num_hidden`` hidden layers."""
        g, loc = self.delta_glob**2, self.delta_loc**2
        if self.scale_with_architecture:
            g = g / max(num_hidden, 1)
            loc = loc / fan_in
        return g * loc

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        num_hidden = max(s.layer for s in specs)
        out: dict[str, Tensor] = {}
        for s in specs:
            scale = self.bias_scale if s.role == "bias" else self.weight_variance(num_hidden, s.fan_in).sqrt()
            d = dist.Normal(torch.zeros_like(scale), scale).expand(s.shape).to_event(len(s.shape))
            out[s.name] = pyro.sample(s.name, d)
        return out


class BowtieNoisePrior(PyroModule):
    """Hidden-layer noise variances ``eta^2_{l,d} ~ IG(alpha_0^h, beta_0^h)`` (§2.4; sites ``fc{l}.eta2``).

    Defaults ``alpha_0^h = 2``, ``beta_0^h = 1e-4`` are the authors' current code values: most mass on
    small
    ``eta^2`` so each unit stays close to a ReLU.
    """

    def __init__(self, concentration: float = 2.0, rate: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("concentration", torch.tensor(check_positive("concentration", concentration)))
        self.register_buffer("rate", torch.tensor(check_positive("rate", rate)))

    def config(self) -> dict:
        return {"concentration": float(self.concentration), "rate": float(self.rate)}

    def sample(self, widths: Sequence[int]) -> list[Tensor]:
        """One ``fc{l}.eta2`` site of event shape ``(D_l,)`` per hidden layer ``l`` (widths of hidden
        layers)."""
        return [
            pyro.sample(
                f"fc{k}.eta2",
                dist.InverseGamma(self.concentration, self.rate).expand((int(w),)).to_event(1),
            )
            for k, w in enumerate(widths)
        ]
