"""Structured mean-field CAVI for the bow-tie BNN (Sheinkman & Wade 2025, arXiv 2411.11132, §3.1, App. A).

Family (Eq. 12 and the factorization it induces), all parameters registered buffers in float64:

* ``q(tau_l) = GIG(nu_glob - D_l D_{l-1}/2, dtau_l, lam_glob)`` (Eq. 13), ``q(psi) = GIG(nu_loc - 1/2, dpsi,
  lam_loc)`` per weight (Eq. 14) — :mod:`guides.bowtie.scales`;
* ``q(eta^2_{l,d}) = IG(alpha, beta)`` per hidden unit, one ``IG`` for the output noise ``sigma2`` (Eq. 15) —
  :mod:`guides.bowtie.noise`;
* ``q(b_{l,d}, W_{l,d}) = N(m_{l,d}, B_{l,d})`` per row, full covariance, bias first (Eq. 16) —
  :mod:`guides.bowtie.weights`;
* ``q(omega_{n,l,d}) = PG(1, A_{n,l,d})`` (Eq. 17), ``q(gamma_{n,l,d}) = Bern(rho_{n,l,d})`` (Eq. 18) and
  ``q(a_n) = prod_l N(a_{n,l} | t_{n,l} + M_{n,l} a_{n,l-1}, S_{n,l})``, jointly Gaussian across layers
  (Eq. 19) — :mod:`guides.bowtie.activations`.

One sweep (Algorithm 1 order), every update vectorized over data points and units with batched Cholesky
factorizations: ``tau``, ``psi``; ``eta``; ``omega``; ``q(a)`` by the backward recursion; then per hidden
layer the weights and gates; the output weights; optionally the EM step for ``delta_glob`` (§3.2, App. E.2,
IG case).  The ELBO (:mod:`guides.bowtie.elbo`, App. B) is exact at every point and non-decreasing after
every single factor update.

Prediction (§3.5, Eqs. 22–26; :mod:`guides.bowtie.predict`): test-point locals are fitted with the globals
fixed (no ``y`` term; the gate of layer ``l + 1`` enters ``S_{*,l}``) until the prediction ELBO (App. B.2)
changes by less than ``predict_tol``; the closed-form mean and variance are returned with per-draw
locations/scales from the Monte Carlo scheme of Eq. (25).  :meth:`BowtieCAVIGuide.sparsity_report`
implements Bayesian-FDR edge selection and node pruning (§3.4, :mod:`guides.bowtie.pruning`).

Distributed CAVI (``nproc > 1``, :mod:`zoo.infer.distributed`): the global updates need the data only
through sums over points (Eq. 15's residual sums, Eq. 16's Gram matrices and cross terms, the local ELBO
terms of App. B), so each rank sweeps its own rows' locals and the sums are all-reduced; the sweep equals the
single-process sweep up to rounding.  The per-datapoint factors are split by :meth:`shard_rows` and
collected by :meth:`gather_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from guides.autoguides import incompatible
from guides.bowtie.activations import (
    fit_local_loop,
    forward_init_locals,
    update_activations,
    update_omega,
    update_rho,
)
from guides.bowtie.buffers import BowtieGuideState
from guides.bowtie.elbo import global_elbo, local_elbo
from guides.bowtie.init import initial_state
from guides.bowtie.linalg import F64
from guides.bowtie.moments import Moments, forward_moments
from guides.bowtie.noise import blend_beta, noise_factors
from guides.bowtie.options import BowtieGuideOptions
from guides.bowtie.predict import as_predictions, monte_carlo_draws, predictive_moments
from guides.bowtie.pruning import sparsity_report
from guides.bowtie.scales import em_delta_glob, update_psi, update_tau
from guides.bowtie.sites import sample_globals, sample_locals
from guides.bowtie.state import Hyper, Locals, as_float64
from guides.bowtie.weights import blend_rows, update_weights, weight_natural
from zoo.core.config import resolve
from zoo.core.sparsity import SparsityReport
from zoo.core.validation import check_positive_int, check_probability
from zoo.experiments.ensemble import combine_predictions
from zoo.families.bowtie.model import BowtieModel
from zoo.families.bowtie.prior import GaussianBowtiePrior
from zoo.infer.distributed import data_count, data_sum
from zoo.infer.predict import Predictions

__all__ = ["BowtieCAVIGuide", "BowtieGuideOptions", "ensemble_predictions"]


class BowtieCAVIGuide(BowtieGuideState):
    """Closed-form structured mean-field CAVI guide of the bow-tie BNN (module docstring).

    Args:
        model: a :class:`zoo.families.bowtie.model.BowtieModel`.
        options: a :class:`~guides.bowtie.options.BowtieGuideOptions` (or a mapping); keyword arguments
            (``em=True``, ``beta_rule="textbook"``, ...) set or override its fields.
    """

    uses_gradients = False
    #: distributed CAVI (:mod:`zoo.infer.distributed`): every data sum of a sweep goes through ``data_sum``
    data_parallel = True

    def __init__(
        self, model: BowtieModel, options: BowtieGuideOptions | Mapping | None = None, **kwargs
    ) -> None:
        if not isinstance(model, BowtieModel):
            raise incompatible(
                model,
                "cavi",
                BowtieCAVIGuide,
                "a zoo.families.bowtie.model.BowtieModel with an NGIGPrior or GaussianBowtiePrior: every "
                f"update is conjugate only through the bow-tie units' Pólya-Gamma augmentation (got a "
                f"{type(model).__name__})",
            )
        unknown = sorted(set(kwargs) - set(BowtieGuideOptions.field_names()))
        if unknown:
            raise TypeError(f"BowtieCAVIGuide got unexpected keyword argument(s) {unknown}")
        opts = resolve(BowtieGuideOptions, options, kwargs)
        gaussian = isinstance(model.prior, GaussianBowtiePrior)
        if opts.em and (gaussian or float(model.prior.lam_glob) != 0.0):
            raise ValueError(
                "em: the closed-form EM step (App. E.2) is implemented for the N-GIG prior with an IG "
                "global scale (lam_glob = 0) only"
            )
        super().__init__(model, float(opts.init_cov))
        self.options, self.gaussian = opts, gaussian
        self.em, self.init, self.beta_rule = bool(opts.em), opts.init, opts.beta_rule
        self.init_cov, self.local_init_cov = float(opts.init_cov), float(opts.local_init_cov)
        self.predict_tol, self.predict_max_iters = float(opts.predict_tol), int(opts.predict_max_iters)
        self.forgetting_rate = float(opts.forgetting_rate)
        self.svi_local_iters, self.svi_local_tol = int(opts.svi_local_iters), float(opts.svi_local_tol)

    def _update_scales(self, hyp: Hyper) -> None:
        """Eqs. (13) then (14) (no-op under the Gaussian prior)."""
        if not hyp.gaussian:
            self._store_layers("dtau", update_tau(hyp, self.q))
            self._store_layers("dpsi", update_psi(hyp, self.q))

    def _em_step(self, model: BowtieModel) -> None:
        """§3.2 / App. E.2 (IG): ``delta_glob^2 = 2 alpha (L+1) / sum_l E[1/tau_l]``."""
        delta = em_delta_glob(Hyper.from_model(model), self.q)
        model.prior.set_glob_delta(delta.to(model.prior.delta_glob.dtype), self.num_hidden)

    # ------------------------------------------------------------------ CAVI (Algorithm 1)
    def sweep(
        self, model: BowtieModel, x: Tensor, y: Tensor, callback: Callable[[str], None] | None = None
    ) -> None:
        """One CAVI sweep in the order of Algorithm 1; ``callback(name)`` runs after every factor update."""
        cb = callback if callback is not None else (lambda name: None)
        x, y = as_float64(x, y)
        hyp, loc, nh = Hyper.from_model(model), self.train_locals, self.num_hidden
        if not hyp.gaussian:
            self._store_layers("dtau", update_tau(hyp, self.q))
        cb("tau")
        if not hyp.gaussian:
            self._store_layers("dpsi", update_psi(hyp, self.q))
        cb("psi")
        mom = forward_moments(x, loc)  # the eta update leaves the locals unchanged: one forward pass for both
        self._store_noise(*noise_factors(hyp, self.q, loc, mom, y, data_count(x.shape[0])))
        cb("eta")
        update_omega(hyp.temp, self.q, loc, mom)
        self._store_locals(loc)
        cb("omega")
        update_activations(hyp.temp, self.q, loc, y)
        self._store_locals(loc)
        cb("a")
        mom = forward_moments(x, loc)
        for k in range(nh):
            self._store_row(k, *update_weights(hyp, self.q, loc, mom, y, k))
            cb(f"W{k}")
            update_rho(hyp.temp, self.q, loc, mom, k)
            self._store_locals(loc)
            cb(f"rho{k}")
        self._store_row(nh, *update_weights(hyp, self.q, loc, mom, y, nh))
        cb(f"W{nh}")
        if self.em:
            self._em_step(model)
            cb("em")

    def elbo(self, model: BowtieModel, x: Tensor, y: Tensor) -> float:
        """The exact ELBO (App. B) at the current parameters, in nats (sum over data, full KL)."""
        x, y = as_float64(x, y)
        hyp, g, loc = Hyper.from_model(model), self.q, self.train_locals
        local = data_sum(local_elbo(hyp, g, loc, forward_moments(x, loc), y).sum())
        return float(global_elbo(hyp, g) + local)

    def initialize(self, model: BowtieModel, x: Tensor, y: Tensor) -> None:
        """Data-driven random initialization (Algorithm 3, App. D.1; :mod:`guides.bowtie.init`)."""
        model.resolve_data_priors(x, y)
        x, y = as_float64(x, y)
        hyp = Hyper.from_model(model)
        values, loc = initial_state(hyp, x, y, self.init, self.init_cov, self.local_init_cov)
        for name, value in values.items():
            self._set(name, value)
        self._store_locals(loc)
        self.initialized.fill_(True)
        self._train_x = x

    # ------------------------------------------------------------------ ClosedFormGuide API
    def closed_form_update(
        self, model: BowtieModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """One CAVI sweep (full batch), or one SVI iteration of §3.3 on the minibatch ``subsample``."""
        if y is None:
            raise ValueError("y is required for a closed-form update")
        if not self._holds_rows(x):
            self.initialize(model, x, y)
        if subsample is not None:
            self.svi_update(model, x, y, subsample)
            return
        self.sweep(model, x, y)
        self._train_x = x.to(F64)

    def svi_update(self, model: BowtieModel, x: Tensor, y: Tensor, subsample: Tensor) -> float:
        """One stochastic-VI iteration (§3.3, App. C): forward-pass locals of the minibatch, exact
        ``tau``/``psi`` updates, local CAVI on the minibatch until its ELBO converges, intermediate globals
        from Eqs. (15)–(16) with sums scaled by ``N/|S|``, blended with step ``l_t = (2 + t)^{-kappa}``
        (Eq. 21, ``t`` from 0): natural parameters of ``q(b, W)`` linearly, ``beta`` by ``beta_rule``.
        Returns the noisy ELBO estimate (global part + ``N/|S|`` x minibatch local part), also reported by
        :meth:`closed_form_elbo`."""
        if subsample.dim() != 1 or len(subsample) == 0:
            raise ValueError("subsample must be a non-empty 1-d tensor of row indices")
        x, y = as_float64(x, y)
        xb, yb = x.index_select(0, subsample), y.index_select(0, subsample)
        scale = x.shape[0] / data_count(len(subsample))  # the global minibatch under data parallelism
        step = (2.0 + float(self.svi_step)) ** (-self.forgetting_rate)
        hyp = Hyper.from_model(model)
        loc = forward_init_locals(hyp.temp, self.q, xb, self.local_init_cov)
        self._update_scales(hyp)
        fit_local_loop(hyp, self.q, xb, yb, loc, self.svi_local_tol, self.svi_local_iters)
        mom, g = forward_moments(xb, loc), self.q
        alphas, betas = noise_factors(hyp, g, loc, mom, yb, x.shape[0], scale)
        for k in range(self.num_hidden + 1):
            nat = weight_natural(hyp, g, loc, mom, yb, k, scale)
            self._store_row(k, *blend_rows(g.B[k], g.m[k], *nat, step))
        self._store_noise(alphas, blend_beta(g.beta, betas, step, self.beta_rule))
        self.svi_step += 1
        if self.em:
            self._em_step(model)
        hyp, g = Hyper.from_model(model), self.q
        mom = forward_moments(xb, loc)
        self._svi_elbo = float(global_elbo(hyp, g) + scale * data_sum(local_elbo(hyp, g, loc, mom, yb).sum()))
        return self._svi_elbo

    def refresh_locals(self, model: BowtieModel, x: Tensor, y: Tensor) -> float:
        """Refit and store the training locals with the globals fixed (local CAVI with the ``y`` term, from
        the forward-pass initialization) — after SVI, whose locals live only per minibatch.  Returns the
        ELBO."""
        x, y = as_float64(x, y)
        hyp = Hyper.from_model(model)
        loc = forward_init_locals(hyp.temp, self.q, x, self.local_init_cov)
        fit_local_loop(hyp, self.q, x, y, loc, self.svi_local_tol, self.svi_local_iters)
        self._store_locals(loc)
        self._train_x = x
        return self.elbo(model, x, y)

    def closed_form_elbo(
        self, model: BowtieModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> float:
        if subsample is not None and self._svi_elbo is not None:
            return self._svi_elbo
        return self.elbo(model, x, y)

    # ------------------------------------------------------------------ prediction (§3.4–3.5)
    def fit_locals(self, model: BowtieModel, x: Tensor) -> tuple[Locals, Moments, dict]:
        """Test-point ``q(a_*), q(gamma_*), q(omega_*)`` with the globals fixed (Eqs. 23–24, Eq. 19 without
        the ``y`` term) from the deterministic forward pass, until the prediction ELBO (App. B.2) changes by
        less than ``predict_tol`` relatively (at most ``predict_max_iters`` sweeps)."""
        if not bool(self.initialized):
            raise RuntimeError("the guide has not been fitted yet (no closed_form_update was run)")
        x = x.to(F64)
        hyp, g = Hyper.from_model(model), self.q
        loc = forward_init_locals(hyp.temp, g, x, self.local_init_cov)
        it, cur = fit_local_loop(hyp, g, x, None, loc, self.predict_tol, self.predict_max_iters)
        return loc, forward_moments(x, loc), {"predict_iters": it, "predict_elbo": cur}

    def predictive(
        self, model: BowtieModel, x: Tensor, num_samples: int = 100, mask: dict[str, Tensor] | None = None
    ) -> Predictions:
        """Closed-form predictive mean (Eq. 26) and variance, plus ``num_samples`` Monte Carlo draws (Eq. 25).
        ``mask`` (e.g. ``sparsity_report(model).masks``): predict with the pruned network (:meth:`pruned`),
        test-time local updates included."""
        num_samples = check_positive_int("num_samples", num_samples)
        if mask is not None:
            with self.pruned(mask):
                return self.predictive(model, x, num_samples)
        with torch.no_grad():
            loc, mom, info = self.fit_locals(model, x)
            mean, var = predictive_moments(self.q, mom)
            locs, scales, samples = monte_carlo_draws(self.q, loc, x, num_samples)
        values = {"mean": mean, "var": var, "loc": locs, "scale": scales, "samples": samples}
        return as_predictions(values, x.dtype, self.widths[-1] == 1, info)

    def sparsity_report(self, model: BowtieModel, alpha: float = 0.01) -> SparsityReport:
        """Bayesian-FDR edge selection at level ``alpha`` (0.01 in the paper) and iterated node pruning (§3.4,
        :mod:`guides.bowtie.pruning`)."""
        g = self.q
        return sparsity_report(g.m, g.B, check_probability("alpha", alpha))

    # ------------------------------------------------------------------ Pyro guide (Trace_ELBO / Predictive)
    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        """Samples every latent site of the model from ``q`` (:mod:`guides.bowtie.sites`), the local ones in
        the model's ``plate("data", N, subsample)``, so any Pyro ELBO accepts the guide.  The local sites
        are emitted only at the training inputs; at any other ``x`` (``Predictive``, the zoo's generic
        ``log_likelihood``) the guide gives the globals and the model draws the test-point locals from its own
        conditional ``p(a_*, gamma_*, omega_* | theta, x_*)``, i.e. the exact predictive under ``q(theta)``
        (:meth:`predictive` instead implements the paper's test-time local CAVI, §3.5)."""
        sample_globals(Hyper.from_model(self._model_ref), self.q, x.dtype)
        loc = self._locals_for(x)
        if loc is not None:
            sample_locals(loc, x, subsample)


def ensemble_predictions(members: list[Predictions], elbos: list[float], zeta: float = 0.1) -> Predictions:
    """ELBO-weighted ensemble of K variational approximations (§3.5):
    :func:`zoo.experiments.ensemble.combine_predictions` (kept here under the paper's name)."""
    return combine_predictions(members, elbos, zeta)
