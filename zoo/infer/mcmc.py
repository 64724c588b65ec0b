"""NUTS on the zoo's own models: :func:`fit_nuts` runs Pyro's ``NUTS``/``MCMC`` on the *same*
:class:`~zoo.core.model.BayesianModel` object the variational guides fit, so a NUTS posterior is a reference
for exactly that model.

The No-U-Turn sampler (Hoffman & Gelman 2014, "The No-U-Turn Sampler", JMLR 15, arXiv:1111.4246,
Algorithms 3 and 6: dual-averaging step size towards ``target_accept``; here Pyro's multinomial variant with
a diagonal mass matrix adapted during warm-up, as in Stan) runs ``chains`` independent chains of
``warmup + samples`` iterations each.  Chain ``k`` is seeded from ``(seed, k)`` only, so a chain gives the
same draws whether the chains run in parallel worker processes (``spawn``, one per core up to ``chains``)
or one after the other.  Worker processes are started with ``spawn``: a script that calls :func:`fit_nuts`
at top level needs the ``if __name__ == "__main__":`` guard (or ``parallel=False``): for a script without
one the chains run sequentially, with a warning that says why (:func:`unguarded_main_script`), as they do
if the workers cannot start.

What :func:`fit_nuts` returns is a :class:`~zoo.infer.mcmc_result.NUTSResult` (a
:class:`~zoo.infer.result.FitResult`): its guide replays the posterior draws, so
:func:`zoo.infer.predict.predict`, checkpoints and the run folder of ``zoo fit`` work unchanged; the raw draws
per chain are ``result.samples`` (``{site: (chain, draw, *shape)}``), the per-draw sampler statistics
(``lp``, ``diverging``, ``energy``, ``acceptance_rate``, ``step_size``, ``tree_depth``, ``n_steps``;
:mod:`zoo.infer.mcmc_stats`) ``result.guide.stats`` and the convergence diagnostics (divergences, R-hat,
bulk/tail ESS; :mod:`zoo.infer.mcmc_export`) ``result.diagnostics``.  ``zoo.load`` (or :func:`load_nuts`)
reads a saved NUTS fit back as a ``NUTSResult``, and ``result.to_inference_data`` exports it to ArviZ with
``(chain, draw)`` dims.

Refused with a ``ValueError`` naming the model: discrete latent sites (LBBNN inclusion indicators, the
bow-tie's stochastic activations; NUTS needs a differentiable density) and latents inside the ``"data"``
plate (per-datapoint locals cannot be replayed at new inputs).  Models whose prior has both a marginal and a
hierarchical form (``prior.hierarchical``: the collapsed CM/CV/CMV priors, whose per-weight hyper-latents
integrate out, the horseshoe, whose half-Cauchy scales are inverse-gamma mixtures, and the N-GIG prior with
inverse-gamma local scales, whose weights are then Student-t) are sampled in the
marginal form unless ``hierarchical=True``: the posterior of the weights and scales is the same, and the
marginal form's geometry is far easier (on the 2-2-1 binary toy the hierarchical CM form left one of four
chains in another mode, R-hat 2.7 on the predictive probabilities; the horseshoe's auxiliaries forced step
sizes near 3e-3 with every trajectory at the depth limit).  NUTS runs on the CPU, in the data's
floating-point type (the model's buffers are converted to it).

``gibbs=True`` (``zoo fit --inference nuts --gibbs``) samples NUTS within Gibbs (:mod:`zoo.infer.mcmc_gibbs`):
each iteration, one NUTS transition of the weights given the prior's scales, then an exact draw of the
scales from their full conditionals.  It is for priors that provide those conditionals (the horseshoe,
plain and regularized — the latter's by slice sampling: :mod:`zoo.families.horseshoe.gibbs`; the N-GIG
prior: :mod:`zoo.families.bowtie.gibbs`; the collapsed priors' hyper-latents:
:mod:`zoo.families.collapsed.gibbs`), whose heavy-tailed scales NUTS alone explores slowly: on two tanh
units on the cubic toy NUTS alone reached a bulk ESS of 268 for the horseshoe's shrinkage factors in
4 x 2500 draws, with 13 divergences; within Gibbs, 4 x 700 draws reach 2473 with none (the reference
``hs-cubic-tanh-gibbs``).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import pyro
import torch
from pyro import poutine
from torch import Tensor

from zoo.core.config import Config, resolve
from zoo.core.validation import (
    check_bool,
    check_mapping,
    check_optional,
    check_positive_int,
    check_probability,
)
from zoo.infer.checkpoint import load_nuts
from zoo.infer.mcmc_chains import INIT_STRATEGIES, run_chains
from zoo.infer.mcmc_export import convergence_summary
from zoo.infer.mcmc_gibbs import conditional_sites
from zoo.infer.mcmc_result import NUTSResult, PosteriorDrawsGuide
from zoo.infer.mcmc_spawn import refuse_in_worker_bootstrap, sequential_if_unguarded, unguarded_main_script

__all__ = [
    "NUTSConfig",
    "INIT_STRATEGIES",
    "fit_nuts",
    "check_nuts_model",
    "unguarded_main_script",
    "NUTSResult",
    "load_nuts",
]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class NUTSConfig(Config):
    """Settings of :func:`fit_nuts`.

    ``chains``: independent chains; ``warmup``: adaptation iterations per chain (discarded); ``samples``:
    kept draws per chain; ``target_accept``: the dual-averaging target acceptance probability (Hoffman &
    Gelman 2014, §3.2); ``max_tree_depth``: at most ``2**max_tree_depth`` leapfrog steps per iteration;
    ``jit_compile``: trace the potential energy with the PyTorch JIT (on by default: 1.2-3x less CPU
    time per chain on every continuous zoo family, compilation included); ``seed``: chain ``k`` is seeded from
    ``(seed, k)``; ``init``: a key of :data:`INIT_STRATEGIES` (Pyro's initial values; ``"uniform"``: uniform
    in ``(-2, 2)`` on the unconstrained scale); ``progress``: progress bar; ``parallel``: run the chains in
    worker processes (``None``: when ``chains > 1`` and more than one core is available, one process per
    core); ``threads``: torch threads per chain (``None``: the caller's ``torch.get_num_threads()``);
    ``hierarchical``: sample a prior that has a hierarchical form (``prior.hierarchical``) in that form
    (default: its marginal form; module docstring); ``centered``: sample a prior with a centered /
    non-centered choice (``prior.centered``, the horseshoe's) in the centered (``True``) or non-centered
    (``False``) parameterization — the same posterior of weights and scales, another geometry
    (Papaspiliopoulos, Roberts & Sköld 2007) — or as built (``None``);
    ``full_mass``: adapt a dense mass matrix during warm-up (Pyro's ``full_mass=True``) instead of a diagonal
    one — for small networks whose posterior is strongly correlated (a few dozen parameters: its cost is
    quadratic in their number) it replaces long trajectories at tiny step sizes;
    ``gibbs``: NUTS within Gibbs (:mod:`zoo.infer.mcmc_gibbs`): NUTS transitions of the weights alternate
    with exact draws of the prior's scales from their full conditionals, the prior sampled in its
    hierarchical form (``hierarchical`` is then taken as ``True``; ``jit_compile=True`` is refused) and
    centered unless ``centered=False`` asks NUTS to move the standardized weights (priors with a
    ``reparameterize`` map: the horseshoe's) — for priors that provide the conditionals (the horseshoe's,
    N-GIG's, the collapsed priors');
    ``interweave``: with ``gibbs``, follow each sweep of exact conditional draws with ancillary moves of
    the scales (the weights rescaled with them; :mod:`zoo.infer.interweave`, Yu & Meng 2011) — for priors
    that provide them (the horseshoe's, N-GIG's);
    ``metadata``: plain data recorded in ``result.config`` (e.g. the target standardization
    ``y_mean``/``y_std`` that ``predict`` undoes).
    """

    chains: int = 4
    warmup: int = 500
    samples: int = 500
    target_accept: float = 0.8
    max_tree_depth: int = 10
    jit_compile: bool = True
    seed: int = 0
    init: str = "uniform"
    progress: bool = True
    parallel: bool | None = None
    threads: int | None = None
    hierarchical: bool = False
    centered: bool | None = None
    full_mass: bool = False
    gibbs: bool = False
    interweave: bool = False
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.metadata, Mapping):
            object.__setattr__(self, "metadata", dict(self.metadata))
        super().__post_init__()

    def validate(self) -> None:
        check_positive_int("chains", self.chains)
        check_positive_int("warmup", self.warmup, allow_zero=True)
        check_positive_int("samples", self.samples)
        check_probability("target_accept", self.target_accept)
        check_positive_int("max_tree_depth", self.max_tree_depth)
        check_positive_int("seed", self.seed, allow_zero=True)
        for name in ("jit_compile", "progress", "hierarchical", "full_mass", "gibbs", "interweave"):
            check_bool(name, getattr(self, name))
        if self.interweave and not self.gibbs:
            raise ValueError("interweave=True needs gibbs=True (it interleaves with the Gibbs sweep)")
        if self.gibbs and self.jit_compile:
            raise ValueError(
                "gibbs=True needs jit_compile=False (the NUTS block's target changes with the scales), "
                f"got jit_compile={self.jit_compile}"
            )
        check_optional("parallel", self.parallel, check_bool)
        check_optional("centered", self.centered, check_bool)
        check_optional("threads", self.threads, check_positive_int)
        if not isinstance(self.init, str) or self.init not in INIT_STRATEGIES:
            raise ValueError(f"init must be one of {sorted(INIT_STRATEGIES)}, got {self.init!r}")
        check_mapping("metadata", self.metadata)
        clash = sorted(set(self.metadata) & set(self.field_names()))
        if clash:
            raise ValueError(f"metadata: keys {clash} are NUTSConfig fields; set them as fields")

    def record(self) -> dict[str, Any]:
        """The flat dict kept as ``result.config``: ``inference: "nuts"``, the fields, the metadata."""
        out = self.to_dict()
        meta = out.pop("metadata")
        return {"inference": "nuts", **out, **meta}


# --------------------------------------------------------------------------------------------------
# What NUTS can sample
# --------------------------------------------------------------------------------------------------


def _model_name(model: torch.nn.Module, spec: Mapping | None) -> str:
    return str(spec["model"]) if spec and "model" in spec else type(model).__name__


def _looks_discrete(fn: Any, values: list[Tensor]) -> bool:
    """A site is discrete if its support says so, or if every value of several independent prior draws is
    a small integer (a continuous law puts probability zero on that; this catches Bernoulli laws whose pmf is
    extended to [0, 1] for relaxations, such as the LBBNN inclusion prior)."""
    support = getattr(fn, "support", None)
    if getattr(support, "is_discrete", False) or getattr(fn, "has_enumerate_support", False):
        return True
    v = torch.stack([t.detach().reshape(-1).double() for t in values])
    return bool(torch.all(v == v.round()) and torch.all(v.abs() < 2**20))


def _latent_sites(model: torch.nn.Module, x: Tensor, y: Tensor, draws: int = 3) -> dict[str, list]:
    """``{site: [site, [value per draw]]}`` of the model's latent sample sites over ``draws`` prior draws."""
    sites: dict[str, list] = {}
    with torch.no_grad(), pyro.get_param_store().scope():
        for _ in range(draws):
            trace = poutine.trace(model).get_trace(x, y)
            for name, site in trace.nodes.items():
                if site["type"] != "sample" or site["is_observed"] or site["infer"].get("_do_not_trace"):
                    continue
                if type(site["fn"]).__name__ == "_Subsample":
                    continue
                sites.setdefault(name, [site, []])[1].append(site["value"])
    return sites


def check_nuts_model(model: torch.nn.Module, x: Tensor, y: Tensor, name: str | None = None) -> list[str]:
    """The latent sites NUTS would sample; ``ValueError`` naming the model (``name``) and the sites if any
    is discrete or local to the ``"data"`` plate (see the module docstring)."""
    name = name or type(model).__name__
    sites = _latent_sites(model, x[:2], y[:2])
    discrete = [s for s, (site, vals) in sites.items() if _looks_discrete(site["fn"], vals)]
    if discrete:
        raise ValueError(
            f"model: {name} has discrete latent sites {discrete}; NUTS needs a continuous, differentiable "
            "posterior (fit this model with one of its variational guides)"
        )
    local = [s for s, (site, _) in sites.items() if any(f.name == "data" for f in site["cond_indep_stack"])]
    if local:
        raise ValueError(
            f"model: {name} has per-datapoint latent sites {local} inside the 'data' plate; fit_nuts samples "
            "global latents only (their draws are replayed at new inputs)"
        )
    if not sites:
        raise ValueError(f"model: {name} has no latent sites to sample")
    return list(sites)


def _set_form(model: torch.nn.Module, attr: str, value: bool | None) -> bool | None:
    """Switch a prior's boolean form ``attr`` (``"hierarchical"``, ``"centered"``) to ``value`` (``None``:
    keep it); returns the form sampled, ``None`` for a prior without that choice."""
    prior = getattr(model, "prior", None)
    if prior is None or not isinstance(getattr(prior, attr, None), bool):
        return None
    if value is not None:
        setattr(prior, attr, value)
    return getattr(prior, attr)


# --------------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------------


def _training_data(data: Any, spec: Mapping | None) -> tuple[Tensor, Tensor, dict]:
    """``(x, y, metadata)`` from an ``(x, y)`` pair or a zoo :class:`~zoo.data.Dataset` (its training split,
    regression targets standardized as ``zoo fit`` does, the standardization recorded)."""
    from zoo.data import Dataset

    if isinstance(data, Dataset):
        from zoo.data.tensors import fit_tensors
        from zoo.experiments.registry import get_entry

        defaults = get_entry(spec["model"]).fit_defaults if spec and "model" in spec else {}
        cpu = torch.device("cpu")
        x, y, _, _, extra = fit_tensors(data, cpu, standardize_y=bool(defaults.get("standardize_y", True)))
        return x, y, {**extra, "dataset": data.name}
    if isinstance(data, tuple | list) and len(data) == 2:
        return data[0], data[1], {}
    raise TypeError(f"data must be a zoo Dataset or an (x, y) pair, got {type(data).__name__}")


def _check_xy(model: torch.nn.Module, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    from zoo.infer.loop import check_data

    if y is None:
        raise ValueError("y: NUTS needs the training targets (got None)")
    check_data(x, y, getattr(model, "task", None))
    expected = getattr(getattr(model, "architecture", None), "in_features", None)
    if isinstance(expected, int) and x.shape[1] != expected:
        raise ValueError(f"x has {x.shape[1]} features (columns) but the model expects {expected}")
    likelihood = getattr(model, "likelihood", None)
    if likelihood is not None and hasattr(likelihood, "validate_targets"):
        likelihood.validate_targets(y)
    y = y.to(x.dtype) if y.is_floating_point() else y
    return x.detach().cpu(), y.detach().cpu()


def _stack_chains(chains: list[dict]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """``(samples {site: (C, D, *shape)}, stats {name: (C, D)})`` from the per-chain results; the stats are
    ``lp``, ``diverging`` and the sampler statistics of :mod:`zoo.infer.mcmc_stats`."""
    names = list(chains[0]["samples"])
    samples = {n: torch.stack([c["samples"][n] for c in chains]) for n in names}
    lp = torch.stack([c["lp"] for c in chains])
    diverging = torch.zeros(lp.shape, dtype=torch.bool)
    for k, c in enumerate(chains):
        diverging[k, c["divergences"]] = True
    extra = {n: torch.stack([c["stats"][n] for c in chains]) for n in chains[0].get("stats", {})}
    return samples, {"lp": lp, "diverging": diverging, **extra}


def _chain_facts(chains: list[dict]) -> list[dict]:
    keys = (
        "accept_rate",
        "mean_accept_prob",
        "step_size",
        "seconds",
        "cpu_seconds",
        "num_divergences",
        "seed",
    )
    return [{k: c[k] for k in keys} for c in chains]


def _nuts_spec(spec: Mapping | None, forms: dict[str, bool | None]) -> dict | None:
    if spec is None:
        return None
    guide = f"{PosteriorDrawsGuide.__module__}.{PosteriorDrawsGuide.__qualname__}"
    out = copy.deepcopy(dict(spec))
    return {**out, "guide_class": guide, "inference": "nuts", "nuts": dict(forms)}


def fit_nuts(
    model: torch.nn.Module,
    data: Any,
    config: NUTSConfig | Mapping[str, Any] | None = None,
    *,
    spec: Mapping | None = None,
    **settings: Any,
) -> NUTSResult:
    """Sample the posterior of ``model`` given ``data`` with NUTS (see the module docstring).

    ``data``: an ``(x, y)`` pair or a zoo ``Dataset`` (training split; regression targets standardized, the
    standardization recorded so that ``predict`` reports the original scale).  Settings come from
    ``config`` (a :class:`NUTSConfig` or a mapping) updated by keywords (``fit_nuts(m, (x, y), chains=2)``).
    ``spec``: the registry spec (default: the one a registry-built model carries), recorded so checkpoints
    rebuild the model.  Every argument is checked before any sampling starts.

    Parallel chains run in ``spawn`` worker processes, which re-run the main script's top-level code: a
    script needs the ``if __name__ == "__main__":`` guard, else the chains run one after the other (with a
    warning saying so).

    Usage::

        if __name__ == "__main__":  # needed for parallel chains (spawned workers import this script)
            model, _, spec = zoo.registry.build("mfvi-bnn", d, 1, "regression", hidden=[10])
            result = fit_nuts(model, (x, y), NUTSConfig(chains=4, warmup=500, samples=500))
            result.diagnostics["rhat_max"], result.samples["sigma2"].shape  # (4, 500)
            result.predict(x_test).mean
    """
    refuse_in_worker_bootstrap()
    cfg = resolve(NUTSConfig, config, settings)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a zoo model (a torch.nn.Module), got {type(model).__name__}")
    spec = spec if spec is not None else getattr(model, "_zoo_spec", None)
    x, y, meta = _training_data(data, spec)
    x, y = _check_xy(model, x, y)
    model.to(device="cpu", dtype=x.dtype)  # float64 data: the model's buffers follow (as its device does)
    forms = {"hierarchical": _set_form(model, "hierarchical", True if cfg.gibbs else cfg.hierarchical)}
    gibbs_centered = True if cfg.centered is None else cfg.centered
    forms["centered"] = _set_form(model, "centered", gibbs_centered if cfg.gibbs else cfg.centered)
    if cfg.gibbs:
        conditional_sites(model)  # a prior without exact conditionals: ValueError before any sampling
        if forms["centered"] is False and not model.prior.can_reparameterize:
            raise ValueError(
                f"centered=False: the prior {type(model.prior).__name__} has no map between its centered "
                "and non-centered weights (reparameterize); sample it centered within Gibbs"
            )
        if cfg.interweave and not model.prior.can_interweave:
            raise ValueError(
                f"interweave: the prior {type(model.prior).__name__} has no ancillary moves of its scales; "
                "sample it with interweave=False"
            )
    check_nuts_model(model, x, y, _model_name(model, spec))
    t0 = time.perf_counter()
    chains = run_chains(model, x, y, sequential_if_unguarded(cfg))
    wall = time.perf_counter() - t0
    samples, stats = _stack_chains(chains)
    diagnostics = convergence_summary(samples, stats["diverging"])
    logger.info(
        "NUTS %s: %d chains x %d draws in %.1f s; %d divergences, max R-hat %.3f, min bulk ESS %.0f",
        _model_name(model, spec),
        cfg.chains,
        cfg.samples,
        wall,
        diagnostics["divergences"],
        diagnostics["rhat_max"],
        diagnostics["ess_bulk_min"],
    )
    return NUTSResult(
        model=model,
        guide=PosteriorDrawsGuide(samples, stats=stats),
        steps=cfg.chains * (cfg.warmup + cfg.samples),
        wall_time=wall,
        seed=cfg.seed,
        config={**cfg.record(), **meta, "hierarchical_form": forms["hierarchical"]},
        device=torch.device("cpu"),
        converged=bool(diagnostics["rhat_max"] < 1.01) if math.isfinite(diagnostics["rhat_max"]) else False,
        loop_state={"nuts": {"diagnostics": diagnostics, "chains": _chain_facts(chains)}},
        spec=_nuts_spec(spec, forms),
        example=(x[:2].clone(), y[:2].clone()),
    )
