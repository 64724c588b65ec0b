"""Guides for the collapsed variational bounds of Tomczak, Swaroop, Foong & Turner 2021 ("Collapsed
Variational Bounds for Bayesian Neural Networks", NeurIPS 34; OpenReview ykN3tbJ0qmX), two equivalent ways.

Both fit a mean-field Gaussian ``q(w_d) = N(mu_d, sigma_d^2)`` over every weight and bias (locations at
LeCun-normal draws, biases at 0, ``log sigma^2`` at ``init_logvar = -7``, Table 4) by gradient steps,
with the model's :class:`~zoo.families.collapsed.prior.CollapsedPrior`.  Any other latent site of the
model (e.g. the Gaussian likelihood's ``sigma2``) gets an :class:`~pyro.infer.autoguide.AutoNormal` factor.

* :class:`CollapsedBoundGuide` (the default): the collapsed bound
  ``L* = E_q log p(D|W) − Σ_d P(mu_d, sigma_d^2)`` (App. B, Eq. 29; CMV: Eq. 74) *directly*.  The prior
  is put in its marginal parameterization; the guide adds the factor ``P + log p(w) − log q(w)`` so that under
  ``Trace_ELBO`` the model's Monte Carlo ``log p(w) − log q(w)`` cancels exactly (same draw) and the
  loss is ``−E_q log p(D|W) + Σ P`` (plus the ordinary ELBO terms of the other latents).  Works with
  :func:`zoo.infer.loop.fit` (default ``Trace_ELBO``), prediction, checkpoints and ArviZ export.
* :class:`HierarchicalCollapsedGuide` (the CAVI view): the prior is put in its
  hierarchical parameterization and the guide adds the hyper-latent factors ``q(mu_p, tau_p)`` (sites
  ``"<spec>_mu_p"``, ``"<spec>_tau_p"``, :func:`~zoo.families.collapsed.prior.hyper_site`), held as
  buffers at their analytic optimum ``q*`` given ``q(w)`` (Eqs. 19, 36, 50) and reset in
  :meth:`~HierarchicalCollapsedGuide.closed_form_update` after each gradient step.  Since the update
  runs right after every step, ``q(theta) = q*(q(w))`` at every gradient evaluation, and since ``q*``
  maximizes the ELBO over ``q(theta)`` (Eq. 17) the envelope theorem makes the expected gradient equal to
  the collapsed bound's; the estimator only has extra Monte Carlo noise from the hyper-latents.

Both optionally learn ``alpha_reg`` (CM) / ``delta`` (CMV) per layer by maximizing the bound
(:func:`~zoo.families.collapsed.prior.optimal_alpha_reg`, :func:`~zoo.families.collapsed.prior.optimal_delta`)
in ``closed_form_update`` when the prior has ``learn_hyper=True``.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroParam
from torch import Tensor

from guides.autoguides import init_to_lecun, require_prior
from zoo.core.architectures import ParamSpec
from zoo.core.guide import ClosedFormGuide
from zoo.core.model import BayesianModel
from zoo.families.collapsed.prior import (
    HYPER_LATENTS,
    CollapsedPrior,
    hyper_site,
    optimal_alpha_reg,
    optimal_delta,
    optimal_q_mu_cm,
    optimal_q_mu_cmv,
    optimal_q_tau,
)

__all__ = ["CollapsedBoundGuide", "HierarchicalCollapsedGuide", "PENALTY_SITE"]

PENALTY_SITE = "_collapsed_penalty"


def _key(spec: ParamSpec) -> str:
    return spec.name.replace(".", "_")


class _CollapsedBase(ClosedFormGuide):
    """Mean-field Gaussian weights + AutoNormal for the remaining latents + hyper-parameter learning."""

    _hierarchical: bool = False

    def __init__(self, model: BayesianModel, init_logvar: float = -7.0, init_seed: int = 0) -> None:
        super().__init__()
        require_prior(
            model,
            "hierarchical" if self._hierarchical else "collapsed",
            type(self),
            (CollapsedPrior,),
            "a CollapsedPrior (the closed-form penalties and q* exist for the per-weight CM/CV/CMV "
            "hyperpriors of App. B only)",
        )
        prior = model.prior
        if not math.isfinite(float(init_logvar)):
            raise ValueError(f"init_logvar must be finite, got {init_logvar!r}")
        prior.hierarchical = self._hierarchical
        self.specs: list[ParamSpec] = list(model.specs)
        self._weight_sites = {s.name for s in self.specs}
        ref = prior.alpha
        gen = torch.Generator().manual_seed(int(init_seed))
        self._init: dict[str, tuple[Tensor, Tensor]] = {}
        for s in self.specs:
            if s.role == "weight":
                loc = torch.randn(s.shape, generator=gen, dtype=torch.float64) / math.sqrt(s.fan_in)
            else:
                loc = torch.zeros(s.shape, dtype=torch.float64)
            loc = loc.to(dtype=ref.dtype, device=ref.device)
            logvar = torch.full(s.shape, float(init_logvar), dtype=ref.dtype, device=ref.device)
            self._init[s.name] = (loc, logvar)
            setattr(self, f"{_key(s)}_loc", PyroParam(loc.clone()))
            setattr(self, f"{_key(s)}_logvar", PyroParam(logvar.clone()))
        hide = set(self._weight_sites) | {hyper_site(n, h) for n in self._weight_sites for h in HYPER_LATENTS}
        self.rest = AutoNormal(
            poutine.block(model, hide=sorted(hide)), init_loc_fn=init_to_lecun, init_scale=1e-2
        )

    # ---- variational parameters ----
    def loc_var(self, spec: ParamSpec) -> tuple[Tensor, Tensor]:
        """``(mu_q, sigma_q^2)`` of ``spec``, read from the active param store (e.g. a fit's
        ``result.activate()`` scope): entering the module's Pyro context syncs the PyroParams with it."""
        with self._pyro_context:
            loc, logvar = getattr(self, f"{_key(spec)}_loc"), getattr(self, f"{_key(spec)}_logvar")
        return loc, logvar.exp()

    def _sample_weights(self) -> dict[str, tuple[Tensor, dist.Distribution]]:
        out = {}
        for s in self.specs:
            loc, var = self.loc_var(s)
            q = dist.Normal(loc, var.sqrt()).to_event(len(s.shape))
            out[s.name] = (pyro.sample(s.name, q), q)
        return out

    def collapsed_penalty(self, model: BayesianModel) -> Tensor:
        """``Σ_d P(mu_d, sigma_d^2)``: the closed-form term replacing the KL in the collapsed bound."""
        prior: CollapsedPrior = model.prior
        total = None
        for s in self.specs:
            p = prior.penalty(s, *self.loc_var(s)).sum()
            total = p if total is None else total + p
        return total

    # ---- hyper-parameter learning (empirical Bayes on the collapsed bound) ----
    def _update_hyper(self, prior: CollapsedPrior) -> None:
        if not prior.learn_hyper:
            return
        layers = sorted({s.layer for s in self.specs})
        for layer in layers:
            group = [s for s in self.specs if s.layer == layer]
            mus = torch.cat([self.loc_var(s)[0].reshape(-1) for s in group])
            if prior.kind == "cm":
                gammas = {float(prior.gamma_for(s)) for s in group}
                if len(gammas) != 1:
                    raise ValueError("gamma_scale: alpha_reg learning needs one gamma per layer")
                value = optimal_alpha_reg(mus, prior.gamma_for(group[0]))
            else:
                var = torch.cat([self.loc_var(s)[1].reshape(-1) for s in group])
                upper = 1.0 - 1e-6
                value = optimal_delta(mus, var, prior.alpha, prior.beta, upper=upper)
            prior.set_layer_hyper(layer, value)

    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        self._update_hyper(model.prior)


class CollapsedBoundGuide(_CollapsedBase):
    """The collapsed bound directly: see the module docstring.

    The guide keeps a reference to the model's prior so it can add ``P + log p(w) − log q(w)``.
    """

    _hierarchical = False

    def __init__(self, model: BayesianModel, init_logvar: float = -7.0, init_seed: int = 0) -> None:
        super().__init__(model, init_logvar, init_seed)
        self._prior = [model.prior]  # a list: not registered as a submodule (the model owns it)

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        prior: CollapsedPrior = self._prior[0]
        draws = self._sample_weights()
        self.rest(x, y, subsample)
        log_factor = None
        for s in self.specs:
            w, q = draws[s.name]
            loc, var = self.loc_var(s)
            term = prior.penalty(s, loc, var).sum() + prior.marginal(s).log_prob(w) - q.log_prob(w)
            log_factor = term if log_factor is None else log_factor + term
        pyro.factor(PENALTY_SITE, log_factor, has_rsample=True)


class HierarchicalCollapsedGuide(_CollapsedBase):
    """Hierarchical model + closed-form optimal hyper-posteriors as buffers (the CAVI view).

    Buffers per spec (``<spec>`` with dots as underscores): CM ``<spec>_mu_loc``, ``<spec>_mu_var``
    (Eq. 19); CV ``<spec>_tau_conc``, ``<spec>_tau_rate`` (Eq. 50 with ``delta = 1``); CMV additionally
    ``<spec>_mu_loc``, ``<spec>_mu_prec`` (``1 + t``, Eq. 36).
    """

    _hierarchical = True

    def __init__(self, model: BayesianModel, init_logvar: float = -7.0, init_seed: int = 0) -> None:
        super().__init__(model, init_logvar, init_seed)
        self._prior = [model.prior]
        prior: CollapsedPrior = model.prior
        for s in self.specs:
            loc, logvar = self._init[s.name]
            for name, value in self._optimum(prior, s, loc, logvar.exp()).items():
                self.register_buffer(f"{_key(s)}_{name}", value.detach().clone())

    @staticmethod
    def _optimum(prior: CollapsedPrior, s: ParamSpec, loc: Tensor, var: Tensor) -> dict[str, Tensor]:
        if prior.kind == "cm":
            m, v = optimal_q_mu_cm(loc, prior.gamma_for(s), prior.alpha_reg_for(s))
            return {"mu_loc": m, "mu_var": v}
        conc, rate = optimal_q_tau(loc, var, prior.alpha, prior.beta, prior.delta_for(s))
        out = {"tau_conc": conc, "tau_rate": rate}
        if prior.kind == "cmv":
            m, prec = optimal_q_mu_cmv(loc, prior.delta_for(s))
            out.update(mu_loc=m, mu_prec=prec)
        return out

    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """Learn the hyper-parameters (if enabled), then set every ``q(mu_p, tau_p)`` to its optimum."""
        self._update_hyper(model.prior)
        with torch.no_grad():
            for s in self.specs:
                loc, var = self.loc_var(s)
                for name, value in self._optimum(model.prior, s, loc, var).items():
                    getattr(self, f"{_key(s)}_{name}").copy_(value)

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        # Weights first (the same draws as CollapsedBoundGuide under the same seed), then the rest,
        # then the hyper-latents.
        self._sample_weights()
        self.rest(x, y, subsample)
        kind = self._prior[0].kind
        for s in self.specs:
            k, n = _key(s), len(s.shape)
            if kind == "cm":
                loc, var = getattr(self, f"{k}_mu_loc"), getattr(self, f"{k}_mu_var")
                pyro.sample(hyper_site(s, "mu_p"), dist.Normal(loc, var.sqrt()).to_event(n))
                continue
            tau = pyro.sample(
                hyper_site(s, "tau_p"),
                dist.Gamma(getattr(self, f"{k}_tau_conc"), getattr(self, f"{k}_tau_rate")).to_event(n),
            )
            if kind == "cmv":
                loc, prec = getattr(self, f"{k}_mu_loc"), getattr(self, f"{k}_mu_prec")
                pyro.sample(hyper_site(s, "mu_p"), dist.Normal(loc, (prec * tau).rsqrt()).to_event(n))
