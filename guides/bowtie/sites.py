"""The bow-tie CAVI posterior as a Pyro guide (Sheinkman & Wade 2025, arXiv 2411.11132, Eqs. 12–19).

Samples every latent site of :class:`zoo.families.bowtie.model.BowtieModel` from ``q`` so ``Trace_ELBO`` and
``Predictive`` work with the closed-form guide:

* globals (:func:`sample_globals`): GIG scales ``fc{k}.tau``/``fc{k}.psi`` (Eqs. 13–14), the weight rows
  factorized exactly as ``q(W) q(b | W)`` so each site has its own density (Eq. 16), the hidden noise
  variances ``fc{k}.eta2`` and the output noise ``sigma2`` (Eq. 15);
* locals (:func:`sample_locals`), only at the training inputs: ``fc{k}.gamma``, ``fc{k}.omega`` and
  ``fc{k}.a`` (Eqs. 17–19), inside the same ``pyro.plate("data", N, subsample=...)`` as the model, so their
  batch dimension is the plate's, every ELBO of Pyro (``Trace_ELBO``, ``TraceMeanField_ELBO``, vectorized
  particles) accepts them, and a minibatch is scaled by ``N/B`` by the plate exactly as the model's sites.

``TraceMeanField_ELBO`` needs the closed-form KLs of the non-reparameterized factors
(:mod:`guides.bowtie.kl`, registered on import) and, as for any guide with discrete latents (the gates),
Pyro's validation turned off (``pyro.validation_enabled(False)``): with validation on it refuses every
non-reparameterized guide site.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from guides.bowtie import kl as _kl  # noqa: F401  (registers the KLs TraceMeanField_ELBO needs)
from guides.bowtie.linalg import F64, chol, sym
from guides.bowtie.scales import psi_factor, tau_factor
from guides.bowtie.state import Globals, Hyper, Locals
from zoo.families.bowtie.model import PolyaGamma1
from zoo.families.bowtie.prior import gig_distribution

__all__ = ["sample_globals", "sample_locals"]


def _sample_rows(k: int, m: Tensor, b: Tensor, dt: torch.dtype) -> None:
    """``fc{k}.weight ~ q(W)`` then ``fc{k}.bias ~ q(b | W)`` (Gaussian conditioning of each row, bias first
    in ``m``/``b``, float64), in the model's site order (weight, then bias) so that ``TraceMeanField_ELBO``
    can verify its mean-field ordering."""
    cov_w = sym(b[:, 1:, 1:])
    w = pyro.sample(f"fc{k}.weight", dist.MultivariateNormal(m[:, 1:].to(dt), cov_w.to(dt)).to_event(1))
    gain = torch.cholesky_solve(b[:, 1:, :1], chol(cov_w)).squeeze(-1)  # B_ww^{-1} B_wb, (D, D_prev)
    cond_var = (b[:, 0, 0] - (b[:, 0, 1:] * gain).sum(-1)).clamp_min(torch.finfo(F64).tiny)
    cond_mean = m[:, 0].to(dt) + ((w - m[:, 1:].to(dt)) * gain.to(dt)).sum(-1)
    pyro.sample(f"fc{k}.bias", dist.Normal(cond_mean, cond_var.sqrt().to(dt)).to_event(1))


def _sample_scales(hyp: Hyper, g: Globals, k: int, dt: torch.dtype) -> None:
    for site, params in (("tau", tau_factor(hyp, g, k)), ("psi", psi_factor(hyp, g, k))):
        _, _, _, nu_hat, delta_hat, lam = params
        q = gig_distribution(*(v.to(dt) for v in (nu_hat, delta_hat, lam)))
        pyro.sample(f"fc{k}.{site}", q if site == "tau" else q.to_event(2))


def sample_globals(hyp: Hyper, g: Globals, dt: torch.dtype) -> None:
    """Every global site of the model, in ``dt``."""
    for k in range(g.num_hidden + 1):
        if not hyp.gaussian:
            _sample_scales(hyp, g, k, dt)
        _sample_rows(k, g.m[k], g.B[k], dt)
    for k in range(g.num_hidden):
        pyro.sample(f"fc{k}.eta2", dist.InverseGamma(g.alpha[k].to(dt), g.beta[k].to(dt)).to_event(1))
    pyro.sample("sigma2", dist.InverseGamma(g.alpha[-1].to(dt), g.beta[-1].to(dt)))


def sample_locals(loc: Locals, x: Tensor, subsample: Tensor | None) -> None:
    """The local sites at the training inputs ``x`` (rows ``subsample``), in ``x``'s dtype, in the model's
    data plate (:class:`zoo.families.bowtie.model.BowtieModel`)."""
    dt = x.dtype
    with pyro.plate("data", x.shape[0], subsample=subsample, device=x.device) as idx:  # idx on x.device
        h = x if subsample is None else x.index_select(0, idx)
        for k in range(len(loc.rho)):
            sel = [v[k].index_select(0, idx).to(dt) for v in (loc.rho, loc.A, loc.S, loc.t, loc.M)]
            rho, a_par, s, t, mm = sel
            pyro.sample(f"fc{k}.gamma", dist.Bernoulli(probs=rho).to_event(1))
            pyro.sample(f"fc{k}.omega", PolyaGamma1(a_par).to_event(1))
            mean = t + (mm @ h.unsqueeze(-1)).squeeze(-1)
            h = pyro.sample(f"fc{k}.a", dist.MultivariateNormal(mean, scale_tril=torch.linalg.cholesky(s)))
