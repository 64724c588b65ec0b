"""Closed-form ELBOs against Monte Carlo: the ``closed-form-elbo`` contract.

A guide may know its ELBO, or part of it, exactly.  The zoo's guides say so in two ways:

* ``closed_form_elbo(model, x, y)`` (:class:`zoo.core.guide.ClosedFormGuide`) returns the whole ELBO
  ``E_q[log p(y, θ) - log q(θ)]`` (``None``: not available) — e.g. the conjugate linear-regression CAVI
  guide (Ormerod & Wand 2010, The American Statistician 64(2), Algorithm 1) and the bow-tie CAVI guide
  (Sheinkman & Wade 2025, arXiv:2411.11132, App. B);
* ``expected_log_prior_plus_entropy()`` returns every term but the likelihood,
  ``E_q[log p(θ)] + H[q(θ)]`` (a ``ValueError`` says the guide's configuration has none) — the horseshoe
  guides (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.2 and App. A.2).

Both are expectations under ``q`` of the sum of the model's and the guide's log densities, which
``Trace_ELBO`` estimates by Monte Carlo.  With ``S`` independent draws ``e_s`` (one vectorized particle
each), the estimate ``ē`` has standard error ``sd(e) / sqrt(S)``; the contract holds when
``|ē - exact| <= tolerance_se * se`` (plus float round-off), e.g. 5 standard errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pyro
import torch
from pyro import poutine
from pyro.poutine.util import prune_subsample_sites
from torch import Tensor

from zoo.core.model import BayesianModel
from zoo.testing._util import contract, fail
from zoo.testing.config import KitConfig

__all__ = ["analytic_elbo", "elbo_draws", "check_closed_form"]


def analytic_elbo(model: BayesianModel, guide: Callable, x: Tensor, y: Tensor) -> tuple[str, float] | None:
    """``("elbo", value)``, ``("prior", value)`` (everything but the likelihood) or ``None``."""
    whole = getattr(guide, "closed_form_elbo", None)
    if callable(whole):
        value = whole(model, x, y)
        if value is not None:
            return "elbo", float(value)
    part = getattr(guide, "expected_log_prior_plus_entropy", None)
    if callable(part):
        try:
            value = part()
        except (ValueError, NotImplementedError):  # this configuration of the guide has no closed form
            return None
        return "prior", float(value)
    return None


def _per_particle(log_prob: Tensor, c: int) -> Tensor:
    """Sum a site's log-density over every dim but the particle dim (``-2``); shape ``(c,)``."""
    if log_prob.dim() < 2:
        return log_prob.sum().expand(c)
    lp = log_prob.sum(-1)
    return lp.reshape(-1, lp.shape[-1]).sum(0).expand(c)


def elbo_draws(
    model: BayesianModel,
    guide: Callable,
    x: Tensor,
    y: Tensor,
    n: int,
    chunk: int,
    *,
    likelihood: bool = True,
) -> Tensor:
    """``n`` independent single-draw ELBO estimates ``log p(y, θ_s) - log q(θ_s)`` (the terms of
    ``Trace_ELBO``), drawn ``chunk`` at a time under a particle plate at ``dim=-2``; without
    ``likelihood`` the model's observed sites are left out (``log p(θ_s) - log q(θ_s)``)."""
    out = []
    for start in range(0, n, chunk):
        c = min(chunk, n - start)
        with pyro.plate("_kit_particles", c, dim=-2):
            g_tr = poutine.trace(guide).get_trace(x, y)
            m_tr = poutine.trace(poutine.replay(model, trace=g_tr)).get_trace(x, y)
        g_tr, m_tr = prune_subsample_sites(g_tr), prune_subsample_sites(m_tr)
        g_tr.compute_log_prob()
        m_tr.compute_log_prob()
        total = torch.zeros(c, dtype=torch.float64, device=x.device)
        for site in m_tr.nodes.values():
            if site["type"] == "sample" and (likelihood or not site["is_observed"]):
                total = total + _per_particle(site["log_prob"], c).double()
        for site in g_tr.nodes.values():
            if site["type"] == "sample":
                total = total - _per_particle(site["log_prob"], c).double()
        out.append(total)
    return torch.cat(out)


def check_closed_form(model: BayesianModel, guide: Callable, x: Tensor, y: Tensor, cfg: KitConfig) -> None:
    """``[closed-form-elbo]`` (see the module docstring); nothing to check for a guide without one.  Run
    inside the fit's parameter-store scope."""
    with contract("closed-form-elbo", f"the closed-form ELBO of {type(guide).__name__}"):
        found = analytic_elbo(model, guide, x, y)
    if found is None:
        return
    kind, exact = found
    what = "closed_form_elbo" if kind == "elbo" else "expected_log_prior_plus_entropy"
    with contract("closed-form-elbo", f"Monte Carlo draws of the ELBO of {type(guide).__name__}"):
        draws = elbo_draws(model, guide, x, y, cfg.mc_particles, cfg.mc_chunk, likelihood=kind == "elbo")
    if not bool(torch.isfinite(draws).all()) or not math.isfinite(exact):
        fail("closed-form-elbo", f"{what} = {exact} or a Monte Carlo draw of it is not finite")
    mean, se = float(draws.mean()), float(draws.std() / math.sqrt(len(draws)))
    tol = cfg.tolerance_se * se + 1e-5 * max(1.0, abs(exact))
    if not abs(mean - exact) <= tol:
        fail(
            "closed-form-elbo",
            f"{type(guide).__name__}.{what} = {exact:.6g} but Monte Carlo over {len(draws)} draws gives "
            f"{mean:.6g} ± {se:.3g} (standard error): off by {abs(mean - exact) / max(se, 1e-300):.1f} "
            f"standard errors, more than the tolerance of {cfg.tolerance_se:g}",
        )
