"""Exact conditional draws of the N-GIG prior's scales given the weights: the Gibbs block of NUTS within Gibbs
(:func:`zoo.infer.mcmc.fit_nuts` with ``gibbs=True``, :mod:`zoo.infer.mcmc_gibbs`).

In the hierarchical form of :class:`~zoo.families.bowtie.prior.NGIGPrior` (Sheinkman & Wade 2025,
arXiv:2411.11132, Eqs. 5-7, with the App. D.1 scaling of ``delta``) the GIG family is conjugate to the
Gaussian weights.  With ``GIG(nu, delta, lam)`` the density ``∝ x^{nu-1} exp(-(delta^2/x + lam^2 x)/2)``
(App. E.1) and ``n_l`` the number of entries of the weight matrix ``W_l``::

    psi_{l,ij} | W, tau_l ~ GIG(nu_loc - 1/2,     sqrt(delta_loc,l^2 + W_ij^2 / tau_l),       lam_loc)
    tau_l | W, psi        ~ GIG(nu_glob - n_l/2,  sqrt(delta_glob^2 + sum_ij W_ij^2 / psi_ij), lam_glob)

drawn in that order (the new ``psi`` in the second line): one systematic-scan Gibbs sweep, which leaves
the joint posterior invariant.  With ``lam = 0`` (every experiment of the paper) both are inverse-gamma;
:func:`~zoo.families.bowtie.prior.gig_distribution` picks the exact law.  Biases (``N(0, s_0^2)``) have no
scale and stay in the NUTS block.

:func:`interweave_scales` adds the ancillary half of an interweaving sweep (:mod:`zoo.infer.interweave`,
Yu & Meng 2011): each layer's global scale ``tau_l`` is redrawn with ``z = W_l / sqrt(tau_l psi_l)`` held
fixed, from its prior ``GIG(nu_glob, delta_glob, lam_glob)`` times the likelihood of the rescaled weights,
so the whole layer can grow or shrink in one move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.families.bowtie.prior import NGIGPrior, gig_distribution
from zoo.infer.interweave import LogLikelihood, ancillary_log_scale

__all__ = ["scale_sites", "draw_scales", "interweave_scales"]


def _weights(prior: NGIGPrior, specs: Sequence[ParamSpec]) -> list[ParamSpec]:
    if not isinstance(prior, NGIGPrior):
        raise TypeError(f"prior must be an NGIGPrior, got {type(prior).__name__}")
    return [s for s in specs if s.role != "bias"]


def scale_sites(prior: NGIGPrior, specs: Sequence[ParamSpec]) -> list[str]:
    """The names of the scale sites :func:`draw_scales` draws, in draw order."""
    out = []
    for s in _weights(prior, specs):
        p = s.name.rsplit(".", 1)[0]
        out += [f"{p}.psi", f"{p}.tau"]
    return out


def draw_scales(
    prior: NGIGPrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """One Gibbs sweep over the scales (module docstring) given ``values`` (the current value of every site;
    the weights ``fc{l}.weight`` included).  Leading batch dimensions (independent chains) broadcast."""
    num_hidden = max(s.layer for s in specs)
    out: dict[str, Tensor] = {}
    for s in _weights(prior, specs):
        p = s.name.rsplit(".", 1)[0]
        w2 = values[s.name].square()
        if tuple(w2.shape[w2.dim() - len(s.shape) :]) != tuple(s.shape):
            raise ValueError(f"values[{s.name!r}] must end in shape {tuple(s.shape)}, got {tuple(w2.shape)}")
        tau = values[f"{p}.tau"][..., None, None]
        nu, delta, lam = prior.loc_params(s.fan_in)
        psi = gig_distribution(nu - 0.5, (delta**2 + w2 / tau).sqrt(), lam.expand_as(w2)).sample()
        out[f"{p}.psi"] = psi
        nu_g, delta_g, lam_g = prior.glob_params(num_hidden)
        rate = delta_g**2 + (w2 / psi).sum((-2, -1))
        out[f"{p}.tau"] = gig_distribution(nu_g - s.numel / 2, rate.sqrt(), lam_g.expand_as(rate)).sample()
    return out


def interweave_scales(
    prior: NGIGPrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor], log_lik: LogLikelihood
) -> dict[str, Tensor]:
    """The ancillary move of every layer's ``tau_l`` (module docstring), layer by layer: new values of the
    sites ``fc{l}.tau`` and ``fc{l}.weight``.  ``log_lik(values)``: the data's log-likelihood given every
    site's value (one value per chain when ``values`` carry leading chain dimensions)."""
    num_hidden = max(s.layer for s in specs)
    nu, delta, lam = prior.glob_params(num_hidden)

    def log_prior(u: Tensor) -> Tensor:  # log GIG(e^u; nu, delta, lam) + u (App. E.1)
        return nu * u - 0.5 * (delta**2 * (-u).exp() + lam**2 * u.exp())

    cur = dict(values)
    names: list[str] = []
    for s in _weights(prior, specs):
        p = s.name.rsplit(".", 1)[0]

        def moved(u: Tensor, p: str = p, name: str = s.name) -> dict[str, Tensor]:
            ratio = (u.exp() / cur[f"{p}.tau"]).sqrt()[..., None, None]
            return {**cur, f"{p}.tau": u.exp(), name: cur[name] * ratio}

        cur.update(moved(ancillary_log_scale(cur[f"{p}.tau"].log(), log_prior, moved, log_lik)))
        names += [f"{p}.tau", s.name]
    return {n: cur[n] for n in names}
