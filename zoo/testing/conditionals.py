"""The ``conditionals`` contract: a prior's exact scale conditionals (the Gibbs block of NUTS within Gibbs,
:mod:`zoo.infer.mcmc_gibbs`) must leave its own joint prior invariant.

A prior that declares ``conditional_sites(specs)`` and ``draw_conditionals(specs, values)``
(:class:`zoo.core.prior.ExactScaleConditionals`) promises exact draws of those sites from their full
conditionals given every other site.  Geweke's (2004, JASA 99, §3) successive-conditional test checks the
promise without knowing the prior's marginals: ``chains`` independent chains start at exact joint prior
draws and alternate "every other site given the scales" (the prior's own ``sample_params`` conditioned on
them) with one ``draw_conditionals`` sweep.  After ``sweeps`` iterations each chain's state is again an
exact prior draw if, and only if (for the statistics compared), the conditionals are right; its sites
are compared with ``chains`` fresh independent prior draws by two-sample Kolmogorov-Smirnov tests on two
statistics per site (its first entry and the mean of its entries), at a Bonferroni-corrected level.  The
chains are vectorized in ``pyro.plate("chains", chains, dim=-2)`` (the ``particles`` contract), so the
conditionals receive the leading batch dimensions they must broadcast over.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import pyro
import torch
from pyro import poutine
from scipy import stats
from torch import Tensor

from zoo.core.architectures import MLP, ParamSpec
from zoo.core.prior import Prior
from zoo.testing._util import contract, fail, guarded_store, isolated, latent_sites
from zoo.testing.config import KitConfig, kit_config

__all__ = ["check_conditionals", "conditional_contracts", "has_conditionals"]

#: the prior forms the Gibbs block works in (:func:`zoo.infer.mcmc.fit_nuts` with ``gibbs=True``)
GIBBS_FORMS = {"hierarchical": True, "centered": True}


def has_conditionals(prior: object) -> bool:
    """Whether ``prior`` declares exact scale conditionals (``conditional_sites``, ``draw_conditionals``)."""
    return all(callable(getattr(prior, n, None)) for n in ("conditional_sites", "draw_conditionals"))


def check_conditionals(
    prior: Prior,
    *,
    in_features: int = 3,
    hidden: Sequence[int] = (4,),
    config: KitConfig | Mapping | None = None,
    **settings: object,
) -> dict[str, float]:
    """Check the ``conditionals`` contract of ``prior`` on ``MLP(in_features, hidden, 1)``'s specs (module
    docstring); ``settings``: :class:`KitConfig` fields (``gibbs_chains``, ``gibbs_sweeps``,
    ``gibbs_level``, ``seed``).  Returns the p-value of each compared statistic; raises
    ``AssertionError("[conditionals] ...")`` naming the sites whose draws drift from the prior.
    ``TypeError`` if ``prior`` is not a zoo prior with conditionals."""
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a zoo Prior (zoo.core.prior.Prior), got {type(prior).__name__}")
    if not has_conditionals(prior):
        raise TypeError(
            f"prior: {type(prior).__name__} declares no exact conditionals (conditional_sites / "
            "draw_conditionals; zoo.core.prior.ExactScaleConditionals)"
        )
    cfg = kit_config(config, {"device": None, **settings})
    specs = MLP(in_features, hidden, 1).param_specs()
    with guarded_store(f"check_conditionals({type(prior).__name__})"), isolated(cfg.seed, cfg.torch_device):
        return conditional_contracts(copy.deepcopy(prior).to(cfg.torch_device), specs, cfg)


def _draw(prior: Prior, specs: Sequence[ParamSpec], n: int, given: Mapping[str, Tensor] | None = None):
    """Every latent site of ``n`` joint prior draws (``(n, 1, *event)``), or of ``n`` draws of the other
    sites given the values ``given``."""
    fn = prior.sample_params if given is None else poutine.condition(prior.sample_params, data=dict(given))
    with torch.no_grad(), pyro.plate("chains", n, dim=-2):
        trace = poutine.trace(fn).get_trace(specs)
    return {k: site["value"] for k, site in latent_sites(trace).items()}


def _statistics(values: Mapping[str, Tensor], n: int) -> dict[str, Tensor]:
    out = {}
    for name, v in values.items():
        flat = v.reshape(n, -1).double().cpu()
        out[f"{name}[0]"] = flat[:, 0]
        if flat.shape[1] > 1:
            out[f"{name} mean"] = flat.mean(1)
    return out


def conditional_contracts(prior: Prior, specs: Sequence[ParamSpec], cfg: KitConfig) -> dict[str, float]:
    """The ``conditionals`` contract of ``prior`` (already a copy the check may change) on ``specs``."""
    name = type(prior).__name__
    n = cfg.gibbs_chains
    with contract("conditionals", f"{name}: setting the Gibbs form and listing conditional_sites"):
        for attr, value in GIBBS_FORMS.items():
            if isinstance(getattr(prior, attr, None), bool):
                setattr(prior, attr, value)
        sites = list(prior.conditional_sites(specs))
    with contract("conditionals", f"{name}: sampling the prior and running draw_conditionals"):
        reference = _draw(prior, specs, n)
        state = _draw(prior, specs, n)
        unknown = sorted(set(sites) - set(state))
        if unknown or not sites:
            fail("conditionals", f"conditional_sites names {unknown or 'no site'}: not sites of the prior")
        for _ in range(cfg.gibbs_sweeps):
            scales = {s: state[s] for s in sites}
            others = _draw(prior, specs, n, given=scales)
            new = prior.draw_conditionals(specs, {**others, **scales})
            for s in sites:
                if s not in new or tuple(new[s].shape) != tuple(scales[s].shape):
                    got = tuple(new[s].shape) if s in new else "nothing"
                    want = tuple(scales[s].shape)
                    fail("conditionals", f"draw_conditionals returned {got} for {s!r}, expected shape {want}")
            state = {**others, **{s: new[s] for s in sites}}
    ref, got = _statistics(reference, n), _statistics(state, n)
    pvalues = {k: float(stats.ks_2samp(got[k].numpy(), ref[k].numpy()).pvalue) for k in ref}
    level = cfg.gibbs_level / len(pvalues)
    bad = {k: p for k, p in pvalues.items() if p < level}
    if bad:
        worst = ", ".join(f"{k} (p = {p:.1e})" for k, p in sorted(bad.items(), key=lambda kv: kv[1]))
        fail(
            "conditionals",
            f"{name}: after {cfg.gibbs_sweeps} sweeps of draw_conditionals from exact prior draws, {worst} "
            f"no longer follow the prior (two-sample KS over {n} chains, level {cfg.gibbs_level:g} "
            "Bonferroni-corrected): a conditional is not the exact full conditional of its site",
        )
    return pvalues
