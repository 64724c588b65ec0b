"""The fully factorized horseshoe guide, base of every horseshoe family (Ghosh, Yao & Doshi-Velez 2019,
"Model selection in Bayesian neural networks via horseshoe priors", arXiv:1705.10388, §4.1, Eq. 4, Table 1,
Algorithm 1).

Every guide of :mod:`guides.horseshoe` is a :class:`~zoo.core.guide.ClosedFormGuide` over the sample sites
of :class:`zoo.families.horseshoe.prior.HorseshoePrior` (so ``Trace_ELBO``, ``Predictive`` and the zoo's
prediction / export code work unchanged):

* scales: **log-normal** ``q(ln tau^2_kl) = N(mu, s^2)``, likewise ``v_l^2``, ``kappa^2`` and ``c^2`` (Eq. 4);
* auxiliaries ``lam_kl, theta_l, rho_kappa``: ``q = IG(1, rate)`` whose rates are **buffers** set in closed
  form after every gradient step (Eqs. 9-11, Algorithm 1 lines 6-9)::

      rate(lam_kl) = E[1/tau_kl^2] + 1/b0^2 = exp(-mu + s^2/2) + 1/b0^2   (theta: bg, rho: b_kappa)

  — each is the exact coordinate-ascent optimum of the ELBO with everything else fixed;
* noise precision (the paper's prior ``Gamma(6, 6)``, §6 and App. C.1): ``q(gamma) = Gamma(a, b)``, by default
  set by the conjugate natural-gradient step after every gradient step (the paper learns it by gradient:
  ``noise_update="gradient"``; :mod:`guides.horseshoe.noise`);
* weights ``beta`` (Table 1): :class:`HorseshoeGuide` **factorized** ``N(mu_ij, s_ij^2)``; the tied
  (:mod:`guides.horseshoe.tied`), semi-structured (:mod:`guides.horseshoe.semi_structured`) and structured
  (:mod:`guides.horseshoe.structured`) families override the weight factor.

Layout: the prior groups a layer's parameters by unit, so ``beta_l`` has shape ``(K, F)`` (row ``k`` = the
incoming weights and bias of unit ``k``; the paper's ``beta_l`` is its transpose).  The output layer is
``w = kappa beta`` with a factorized (tied: unit-variance) ``q(beta)``.

The guides also provide the paper's fast path — the analytic prior/entropy terms of App. A.2
(:mod:`guides.horseshoe.analytic`) and the local-reparameterization sampler of §4.2.1, Eqs. 7-8
(:mod:`guides.horseshoe.lrt`, used by :class:`guides.horseshoe.lrt.HorseshoeLRTELBO`) — and the pruning rule
of §4.3 (:mod:`guides.horseshoe.pruning`).  Centered priors (``centered=True``) are supported by the
factorized guide only (``q(w) = N(mu, s^2)`` directly on the centered weights).
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.nn import PyroParam
from torch import Tensor

from guides.autoguides import require_prior
from guides.horseshoe.analytic import HorseshoeAnalyticMixin
from guides.horseshoe.closed_forms import LOG_2PIE, auxiliary_rate, lognormal_entropy
from guides.horseshoe.lrt import ANALYTIC_SITE, HorseshoeLRTMixin
from guides.horseshoe.noise import NOISE_UPDATES, HorseshoeNoiseMixin
from guides.horseshoe.pruning import HorseshoePruningMixin
from zoo.core.guide import ClosedFormGuide
from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.families.horseshoe.prior import HorseshoePrior, HSLayer, group_layers
from zoo.ops.transforms import inv_softplus

__all__ = ["HorseshoeGuide"]


def _check_model(model, guide: HorseshoeGuide) -> HorseshoePrior:
    """The model's :class:`HorseshoePrior`, else :class:`~guides.autoguides.IncompatiblePriorError` naming
    the guide family and the prior: every factor of the family (log-normal node and layer scales, the
    closed-form auxiliaries of Eq. 9, the non-centered unit rows) is a factor of the horseshoe's sites."""
    name = "flow" if hasattr(guide, "_init_zflows") else guide.family  # the z-flow subclass keeps family
    require_prior(
        model,
        name,
        type(guide),
        (HorseshoePrior,),
        "a HorseshoePrior (its factors are those of the horseshoe's scale sites and unit rows, Eq. 4)",
    )
    return model.prior


class HorseshoeGuide(
    HorseshoePruningMixin, HorseshoeLRTMixin, HorseshoeAnalyticMixin, HorseshoeNoiseMixin, ClosedFormGuide
):
    """Fully factorized horseshoe guide with closed-form auxiliaries (Eq. 4, Eq. 9, Algorithm 1).

    :param model: a :class:`~zoo.core.model.BayesianModel` with a
        :class:`~zoo.families.horseshoe.prior.HorseshoePrior`.
    :param init_sd: initial standard deviation of every Gaussian factor (tiny, about ``e^-10``: small initial
        variances keep the prior terms from dominating early, Algorithm 1 initialization).
    :param init_scales: ``"unit"`` (default) starts every ``tau_kl`` and ``v_l`` at 1 (log-mean 0), so
        ``w = beta`` starts as a He-initialized network; ``"prior"`` starts ``mu_tau``/``mu_v`` at the log of
        squared ``C+(0, b0)``/``C+(0, bg)`` draws as in the authors' code.  With ``bg = 1e-5`` the
        latter switches every unit off at the start and, at lr 0.005, 5000 steps do not recover (yacht
        split 0, LRT ELBO: all 50 units pruned, test RMSE 15.4 vs 1.3 with ``v = 1``); heavy-tailed
        ``tau`` draws also give huge initial outputs for wide layers (cubic toy, 1000 units).
    :param noise_update: ``"natural"`` (default) sets ``q(gamma)`` by the conjugate natural-gradient step
        after every gradient step; ``"gradient"`` learns it by gradient as the paper does
        (:mod:`guides.horseshoe.noise`).
    """

    family = "factorized"

    def __init__(
        self,
        model: BayesianModel,
        init_sd: float = 4.5e-5,
        init_scales: str = "unit",
        noise_update: str = "natural",
    ) -> None:
        super().__init__()
        prior = _check_model(model, self)
        if init_sd <= 0:
            raise ValueError(f"init_sd must be positive, got {init_sd}")
        if init_scales not in ("prior", "unit"):
            raise ValueError(f"init_scales must be 'prior' or 'unit', got {init_scales!r}")
        if noise_update not in NOISE_UPDATES:
            raise ValueError(f"noise_update must be one of {NOISE_UPDATES}, got {noise_update!r}")
        self.init_scales, self.noise_update = init_scales, noise_update
        if prior.centered and self.family != "factorized":
            raise ValueError(
                f"centered: the {self.family} guide needs the non-centered prior (centered=False)"
            )
        cfg = prior.config()
        self.b0, self.bg, self.b_kappa = cfg["b0"], cfg["bg"], cfg["b_kappa"]
        self.c_a, self.c_b = cfg["c_a"], cfg["c_b"]
        self.regularized, self.centered = cfg["regularized"], cfg["centered"]
        self.layers: list[HSLayer] = group_layers(model.specs)
        self.init_sd = float(init_sd)
        # dtype/device reference that follows ``.to()`` / ``.double()``
        self.register_buffer("ref_zero", torch.zeros((), dtype=prior.b0.dtype, device=prior.b0.device))
        lik = model.likelihood
        self.noise = lik.noise if isinstance(lik, GaussianLikelihood) else None
        conjugate = lik.conjugate_noise or lik.weighted_noise_update
        if self.noise == "gamma" and noise_update == "natural" and not conjugate:
            raise ValueError(
                f"noise_update: the natural-gradient q(gamma) needs a conjugate (Gaussian or Student-t) "
                f"noise update, got {type(lik).__name__}; use noise_update='gradient'"
            )
        self._noise_prior = (float(lik.concentration), float(lik.rate)) if self.noise else None
        for i, layer in enumerate(self.layers):
            self._init_scales(i, layer)
            self._init_layer(i, layer)
        if self.regularized:
            self._lognormal_params("c", self._t(math.log(self.c_b / (self.c_a + 1))))
        self._init_noise()
        with torch.no_grad():
            self.update_auxiliaries()

    # ---------------------------------------------------------------- parameters
    @property
    def _dtype(self) -> torch.dtype:
        return self.ref_zero.dtype

    @property
    def _device(self) -> torch.device:
        return self.ref_zero.device

    def _t(self, value) -> Tensor:
        return torch.as_tensor(value, dtype=self._dtype, device=self._device)

    def _param(self, name: str, init: Tensor) -> None:
        setattr(self, name, PyroParam(init.to(self._dtype).to(self._device), constraints.real))

    def _lognormal_params(self, name: str, mu: Tensor) -> None:
        self._param(f"{name}_mu", mu)
        self._param(f"{name}_sd_raw", inv_softplus(torch.full_like(mu, self.init_sd)))

    def _lognormal(self, name: str) -> tuple[Tensor, Tensor]:
        """``(mu, var)`` of the Gaussian on ``ln x`` for the log-normal factor ``name``."""
        return getattr(self, f"{name}_mu"), F.softplus(getattr(self, f"{name}_sd_raw")) ** 2

    def _init_scales(self, i: int, layer: HSLayer) -> None:
        """``kappa`` (output layer) or ``v_l`` factors and the auxiliaries' rate buffers of layer ``i``."""
        t = self._t
        if layer.output:
            self._lognormal_params(f"l{i}_kappa", t(0.0))
            self.register_buffer(f"l{i}_rho_rate", t(1.0))
            return
        mu_v = t(0.0) if self.init_scales == "unit" else 2 * torch.log(dist.HalfCauchy(t(self.bg)).sample())
        self._lognormal_params(f"l{i}_v", mu_v)
        self.register_buffer(f"l{i}_theta_rate", t(1.0))
        self.register_buffer(f"l{i}_lam_rate", t(1.0).expand(layer.units).clone())

    def _he_rows(self, layer: HSLayer) -> Tensor:
        """He-normal weights, zero biases, as ``(K, F)`` unit rows (Algorithm 1 initialization)."""
        parts = {}
        for s in layer.specs:
            std = math.sqrt(2.0 / s.fan_in) if s.role == "weight" else 0.0
            parts[s.name] = torch.randn(s.shape, dtype=self._dtype, device=self._device) * std
        return layer.join(parts)

    def _init_layer(self, i: int, layer: HSLayer) -> None:
        """Family-specific parameters of layer ``i`` (factorized: loc, sd; ``tau^2`` for hidden layers)."""
        self._param(f"l{i}_loc", self._he_rows(layer))
        self._init_sd(i, layer)
        if not layer.output:
            mu_tau = self._init_mu_tau(layer.units)
            self._lognormal_params(f"l{i}_tau", mu_tau)

    def _init_sd(self, i: int, layer: HSLayer) -> None:
        self._param(f"l{i}_sd_raw", inv_softplus(torch.full((layer.units, layer.fan), self.init_sd)))

    def _beta_sd(self, i: int) -> Tensor:
        return F.softplus(getattr(self, f"l{i}_sd_raw"))

    def _init_mu_tau(self, k: int) -> Tensor:
        if self.init_scales == "unit":
            return torch.zeros(k, dtype=self._dtype, device=self._device)
        return 2 * torch.log(dist.HalfCauchy(self._t(self.b0)).sample((k,)))

    # ---------------------------------------------------------------- family interface
    def _tau_marginal(self, i: int) -> tuple[Tensor, Tensor]:
        """Mean and variance of ``q(ln tau^2_kl)``, shape ``(K,)``."""
        return self._lognormal(f"l{i}_tau")

    def _beta_moments(self, i: int) -> tuple[Tensor, Tensor]:
        """Marginal mean and variance of ``q(beta_l)``, ``(K, F)``."""
        return getattr(self, f"l{i}_loc"), self._beta_sd(i) ** 2

    def _sample_tau2(self, i: int, layer: HSLayer) -> Tensor:
        mu, var = self._tau_marginal(i)
        return pyro.sample(f"{layer.prefix}.tau2", dist.LogNormal(mu, var.sqrt()).to_event(1))

    def _rows_distribution(self, i: int, layer: HSLayer, tau2: Tensor | None) -> dist.Distribution:
        return dist.Normal(getattr(self, f"l{i}_loc"), self._beta_sd(i)).to_event(2)

    def _rows_entropy(self, i: int, layer: HSLayer) -> Tensor:
        """Entropy of ``q(beta_l)`` (and of ``q(tau^2_l)`` for a hidden layer)."""
        h = (torch.log(self._beta_sd(i)) + 0.5 * LOG_2PIE).sum()
        if not layer.output:
            h = h + lognormal_entropy(*self._tau_marginal(i)).sum()
        return h

    def _lrt_hidden(self, i: int, a: Tensor, tau2: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and variance of ``b = beta_k^T a`` given ``tau^2`` (Eq. 7), shapes ``(N, K)``."""
        loc, var = self._beta_moments(i)
        return a @ loc.T, (a * a) @ var.T

    # ---------------------------------------------------------------- sampling (weight space)
    def _sample_auxiliary(self, name: str, rate: Tensor) -> None:
        """``q = IG(1, rate)`` of an auxiliary (a masked point value in LRT mode: its terms are analytic)."""
        if self.lrt_mode:
            self._lrt_point_site(name, rate)
            return
        pyro.sample(name, dist.InverseGamma(torch.ones_like(rate), rate).to_event(rate.dim()))

    def _sample_scales(self, i: int, layer: HSLayer) -> Tensor | None:
        """The scale and auxiliary sites of layer ``i``; returns ``tau^2`` (``None`` for the output layer)."""
        p = layer.prefix
        if layer.output:
            self._sample_auxiliary(f"{p}.rho", getattr(self, f"l{i}_rho_rate"))
            mu, var = self._lognormal(f"l{i}_kappa")
            self._lrt_keep(i, {"kappa2": pyro.sample(f"{p}.kappa2", dist.LogNormal(mu, var.sqrt()))})
            return None
        self._sample_auxiliary(f"{p}.lam", getattr(self, f"l{i}_lam_rate"))
        tau2 = self._sample_tau2(i, layer)
        self._sample_auxiliary(f"{p}.theta", getattr(self, f"l{i}_theta_rate"))
        mu, var = self._lognormal(f"l{i}_v")
        self._lrt_keep(i, {"tau2": tau2, "v2": pyro.sample(f"{p}.v2", dist.LogNormal(mu, var.sqrt()))})
        return tau2

    def _sample_rows(self, i: int, layer: HSLayer, tau2: Tensor | None) -> None:
        site = f"{layer.prefix}.w" if self.centered else f"{layer.prefix}.beta"
        if self.lrt_mode:  # the shadowed linear samples pre-activations; the messenger masks this site
            self._lrt_point_site(site, self.ref_zero.expand(layer.units, layer.fan))
            return
        self._rows_sampled(i, layer, pyro.sample(site, self._rows_distribution(i, layer, tau2)))

    def forward(
        self, x: Tensor | None = None, y: Tensor | None = None, subsample: Tensor | None = None
    ) -> None:
        """Weight-space draw of every site of the prior (and the noise); in LRT mode the scales and the
        pre-activation noise, with point values for the rest and the analytic terms as a factor
        (:mod:`guides.horseshoe.lrt`)."""
        self._lrt_begin()
        if self.regularized:
            mu, var = self._lognormal("c")
            self._lrt_keep("c2", pyro.sample("hs.c2", dist.LogNormal(mu, var.sqrt())))
        for i, layer in enumerate(self.layers):
            self._sample_rows(i, layer, self._sample_scales(i, layer))
            self._lrt_draw_noise(i, x, subsample)
        self._sample_noise()
        if self.lrt_mode:
            pyro.factor(ANALYTIC_SITE, -self.expected_log_prior_plus_entropy(), has_rsample=True)

    def _rows_sampled(self, i: int, layer: HSLayer, rows: Tensor) -> None:
        """Hook after layer ``i``'s weight rows are sampled (the z-flow guide adds its reverse-model term)."""

    # ---------------------------------------------------------------- closed-form step (Algorithm 1)
    def update_auxiliaries(self) -> None:
        """Eq. 9 for every ``lam_kl``, ``theta_l`` and ``rho_kappa`` (lines 6-9 of Algorithm 1)."""
        for i, layer in enumerate(self.layers):
            if layer.output:
                mu, var = self._lognormal(f"l{i}_kappa")
                getattr(self, f"l{i}_rho_rate").copy_(auxiliary_rate(mu, var, self.b_kappa))
            else:
                mu, var = self._tau_marginal(i)
                getattr(self, f"l{i}_lam_rate").copy_(auxiliary_rate(mu, var, self.b0))
                mu, var = self._lognormal(f"l{i}_v")
                getattr(self, f"l{i}_theta_rate").copy_(auxiliary_rate(mu, var, self.bg))

    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """Called by :func:`zoo.infer.loop.fit` after each gradient step: the fixed-point updates of the
        auxiliaries and the natural-gradient step on the noise (:mod:`guides.horseshoe.noise`)."""
        self.update_auxiliaries()
        self.update_noise(model, x, y, subsample)
