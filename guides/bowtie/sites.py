"""The bow-tie CAVI posterior as a Pyro guide (Sheinkman & Wade 2025, arXiv 2411.11132, Eqs. 12–19).

Samples every latent site of :class:`zoo.families.bowtie.model.BowtieModel` from ``q`` so ``Trace_ELBO`` and
``Predictive`` work with the closed-form guide:

* globals (:func:`sample_globals`): GIG scales ``fc{k}.tau``/``fc{k}.psi`` (Eqs. 13–14), the weight rows
  factorized exactly as ``q(b) q(W | b)`` so each site has its own density (Eq. 16), the hidden noise
  variances ``fc{k}.eta2`` and the output noise ``sigma2`` (Eq. 15);
* locals (:func:`sample_locals`), only at the training inputs: ``fc{k}.gamma``, ``fc{k}.omega`` and
  ``fc{k}.a`` (Eqs. 17–19).  There is no plate in the guide
  (:func:`zoo.infer.predict.posterior_samples` cannot export a plate's subsample site): the locals carry the
  data dimension as their only batch dimension and a minibatch is scaled by ``N/B`` by hand, exactly as the
  model's ``plate("data", N, subsample)`` scales the model's sites.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import Tensor

from guides.bowtie.linalg import sym
from guides.bowtie.scales import psi_factor, tau_factor
from guides.bowtie.state import Globals, Hyper, Locals
from zoo.families.bowtie.model import PolyaGamma1
from zoo.families.bowtie.prior import gig_distribution

__all__ = ["sample_globals", "sample_locals"]


def _sample_rows(k: int, m: Tensor, b: Tensor) -> None:
    """``fc{k}.bias ~ q(b)`` then ``fc{k}.weight ~ q(W | b)`` (Gaussian conditioning of each row)."""
    bias = pyro.sample(f"fc{k}.bias", dist.Normal(m[:, 0], b[:, 0, 0].sqrt()).to_event(1))
    gain = b[:, 1:, 0] / b[:, :1, 0]
    cond_mean = m[:, 1:] + gain * (bias - m[:, 0]).unsqueeze(-1)
    cond_cov = sym(b[:, 1:, 1:] - gain.unsqueeze(-1) * b[:, :1, 1:])
    pyro.sample(f"fc{k}.weight", dist.MultivariateNormal(cond_mean, cond_cov).to_event(1))


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
        _sample_rows(k, g.m[k].to(dt), g.B[k].to(dt))
    for k in range(g.num_hidden):
        pyro.sample(f"fc{k}.eta2", dist.InverseGamma(g.alpha[k].to(dt), g.beta[k].to(dt)).to_event(1))
    pyro.sample("sigma2", dist.InverseGamma(g.alpha[-1].to(dt), g.beta[-1].to(dt)))


def sample_locals(loc: Locals, x: Tensor, subsample: Tensor | None) -> None:
    """The local sites at the training inputs ``x`` (rows ``subsample``), in ``x``'s dtype."""
    dt = x.dtype
    n = x.shape[0]
    idx = torch.arange(n, device=x.device) if subsample is None else subsample
    with poutine.scale(scale=1.0 if subsample is None else n / len(idx)):
        h = x if subsample is None else x.index_select(0, idx)
        for k in range(len(loc.rho)):
            sel = [v[k].index_select(0, idx).to(dt) for v in (loc.rho, loc.A, loc.S, loc.t, loc.M)]
            rho, a_par, s, t, mm = sel
            pyro.sample(f"fc{k}.gamma", dist.Bernoulli(probs=rho).to_event(1))
            pyro.sample(f"fc{k}.omega", PolyaGamma1(a_par).to_event(1))
            mean = t + (mm @ h.unsqueeze(-1)).squeeze(-1)
            h = pyro.sample(f"fc{k}.a", dist.MultivariateNormal(mean, scale_tril=torch.linalg.cholesky(s)))
