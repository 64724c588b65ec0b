"""The prior contracts (:func:`check_prior`): sites, shapes, event dims, particles, names, buffers, store.

A zoo prior (:class:`zoo.core.prior.Prior`) emits, for an architecture's
:class:`~zoo.core.architectures.ParamSpec` list, Pyro sample sites and returns ``{spec.name: tensor}``.
The contracts (ids of :data:`zoo.testing.CONTRACTS`) are what the rest of the zoo relies on: guides find
one site per parameter by name (``param-sites``), the vectorized ELBO and the predictive put a particle
plate at ``dim=-2`` (``particles``; the model's only plate is the data plate, so a prior keeps its
structure in event dims, ``event-dims``), autoguides store a site's parameters under its dotted name
(``site-names``), and ``model.to(...)`` moves every hyperparameter (``buffers``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer import Predictive
from torch import Tensor, nn

from zoo.core.architectures import MLP, ParamSpec
from zoo.core.likelihoods import make_likelihood
from zoo.core.model import BayesianModel
from zoo.core.prior import Prior, site_name_clashes
from zoo.testing._util import (
    contract,
    fail,
    guarded_store,
    isolated,
    latent_sites,
    make_data,
    reference_tensor,
)
from zoo.testing.conditionals import conditional_contracts, has_conditionals
from zoo.testing.config import KitConfig, kit_config

__all__ = ["check_prior", "prior_contracts", "model_particles", "DERIVED_DRAWS"]

#: independent prior draws that a parameter without its own site must vary over
DERIVED_DRAWS = 64


def check_prior(
    prior: Prior,
    *,
    in_features: int = 3,
    hidden: Sequence[int] = (4,),
    task: str = "regression",
    device: str | torch.device | None = None,
    config: KitConfig | Mapping | None = None,
    **settings: Any,
) -> None:
    """Check every prior contract of ``prior`` on ``MLP(in_features, hidden, out)`` with the default
    likelihood of ``task`` (``out`` = 1, or 3 classes for ``"multiclass"``).

    :param config: a :class:`~zoo.testing.config.KitConfig` (or mapping) of sizes and tolerances, updated by
        keyword ``settings`` as in :func:`~zoo.testing.check_guide` (``check_prior(p, gibbs_chains=500)``);
        an unknown keyword is a ``TypeError`` naming it.

    Returns ``None`` when every contract holds; raises ``AssertionError("[contract-id] ...")`` naming the
    first broken one.  Bad arguments are a ``TypeError``/``ValueError`` naming them before any check runs.
    ``prior`` itself is not changed (the checks run on a copy) and neither are Pyro's parameter store nor
    the random streams.
    """
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a zoo Prior (zoo.core.prior.Prior), got {type(prior).__name__}")
    cfg = kit_config(config, {**settings, "device": device})
    out = 3 if task == "multiclass" else 1
    arch = MLP(in_features, hidden, out)  # validates in_features / hidden
    likelihood = make_likelihood(task, out)  # validates task
    dev = cfg.torch_device
    with guarded_store(f"check_prior({type(prior).__name__})"), isolated(cfg.seed, dev):
        with contract("runs", f"copying {type(prior).__name__} and moving it to {dev}"):
            prior = copy.deepcopy(prior).to(dev)
        prior_contracts(prior, arch.param_specs(), cfg)
        if has_conditionals(prior):
            conditional_contracts(copy.deepcopy(prior), arch.param_specs(), cfg)
        with contract("runs", "composing the prior into a BayesianModel"):
            model = BayesianModel(arch, prior, likelihood).to(dev)
        model_particles(model, cfg)


def _trace(prior: Prior, specs: Sequence[ParamSpec], plate: tuple[str, int] | None = None):
    """``(trace, params)`` of one ``sample_params`` call (inside ``pyro.plate(name, size, dim=-2)``)."""
    with torch.no_grad():
        if plate is None:
            trace = poutine.trace(prior.sample_params).get_trace(specs)
        else:
            with pyro.plate(plate[0], plate[1], dim=-2):
                trace = poutine.trace(prior.sample_params).get_trace(specs)
    return trace, trace.nodes["_RETURN"]["value"]


def prior_contracts(prior: Prior, specs: Sequence[ParamSpec], cfg: KitConfig) -> None:
    """Every contract of ``prior`` on ``specs`` that needs no model (see :func:`check_prior`)."""
    name = type(prior).__name__
    with contract("runs", f"{name}.sample_params(specs)"):
        trace, params = _trace(prior, specs)
    _check_values(params, specs)
    _check_sites(prior, specs, trace, params)
    _check_event_dims(trace)
    _check_names(trace, specs)
    with contract("particles", f"{name}.sample_params under a particle plate"):
        _check_particles(prior, specs, cfg.particles)
    with contract("buffers", f"{name} moved to float64"):
        _check_buffers(prior, specs, cfg.torch_device)


def _check_values(params: object, specs: Sequence[ParamSpec]) -> None:
    if not isinstance(params, Mapping):
        fail("param-values", f"sample_params returned a {type(params).__name__}, not {{spec.name: tensor}}")
    names = [s.name for s in specs]
    missing, extra = [n for n in names if n not in params], sorted(set(params) - set(names))
    if missing or extra:
        fail(
            "param-values", f"sample_params returned no value for {missing} and values for non-specs {extra}"
        )
    for s in specs:
        v = params[s.name]
        if not torch.is_tensor(v) or tuple(v.shape) != tuple(s.shape):
            got = tuple(v.shape) if torch.is_tensor(v) else type(v).__name__
            fail(
                "param-values",
                f"{s.name}: sample_params returned {got}, expected a tensor of shape {s.shape}",
            )
        if not v.is_floating_point() or not bool(torch.isfinite(v).all()):
            fail("param-values", f"{s.name}: the returned value is not a finite floating tensor ({v.dtype})")


def _check_sites(prior: Prior, specs: Sequence[ParamSpec], trace, params: Mapping[str, Tensor]) -> None:
    sites = latent_sites(trace)
    for s in specs:
        site = sites.get(s.name)
        if site is None:
            _check_derived(prior, specs, s)
            continue
        event = tuple(site["fn"].event_shape)
        if event != tuple(s.shape):
            fail(
                "param-sites",
                f"{s.name}: its site has event shape {event}, the spec's shape is {s.shape}: declare the "
                f"parameter's dims as event dims (.to_event({len(s.shape)}))",
            )
        if not torch.equal(params[s.name], site["value"]):
            fail(
                "param-sites",
                f"{s.name}: sample_params returns a value other than its site's; return the site's value, so "
                "that a guide's draw is the network's parameter",
            )


def _check_derived(prior: Prior, specs: Sequence[ParamSpec], s: ParamSpec) -> None:
    """A parameter without its own site must be a random, deterministic function of the prior's sites."""
    hint = f"emit pyro.sample({s.name!r}, <distribution>.to_event({len(s.shape)})) and return its value"
    trace, params = _trace(prior, specs, ("_kit_draws", DERIVED_DRAWS))
    with torch.no_grad():
        replayed = poutine.replay(prior.sample_params, trace=trace)(specs)
    v = params[s.name]
    if not torch.equal(replayed[s.name], v):
        fail(
            "param-sites",
            f"{s.name}: there is no sample site {s.name!r} and its value is not a deterministic function of "
            f"the prior's sample sites (replaying them gives another value): {hint}",
        )
    if v.dim() <= len(s.shape) or not bool((v != v[:1]).any()):
        fail(
            "param-sites",
            f"{s.name}: there is no sample site {s.name!r} and its value is the same in {DERIVED_DRAWS} "
            f"independent prior draws (a constant, not a random parameter): {hint}",
        )


def _check_event_dims(trace) -> None:
    for name, site in latent_sites(trace).items():
        batch = tuple(site["fn"].batch_shape)
        if batch != ():
            fail(
                "event-dims",
                f"site {name!r} has batch shape {batch}: a prior keeps its structure in event dims "
                "(.to_event(...)); the model's one plate is the data plate (max_plate_nesting = 1)",
            )


def _check_names(trace, specs: Sequence[ParamSpec]) -> None:
    names = [n for n, site in trace.nodes.items() if site["type"] == "sample"]
    clashes = site_name_clashes(names)
    if clashes:
        a, b = clashes[0]
        fail(
            "site-names",
            f"site {b!r} is named after the site {a!r} plus a dot: autoguides keep parameters under dotted "
            f"names, so {a!r} cannot also hold {b!r}; name it by layer ({a.split('.')[0]!r}.<name>)",
        )
    spec_names = {s.name for s in specs}
    bare = [n for n in names if n not in spec_names and "." not in n]
    if bare:
        fail(
            "site-names",
            f"site {bare[0]!r} is not namespaced: name a layer's latents '<layer>.<name>' (e.g. 'fc0.tau') "
            "and prior-wide ones '<prior>.<name>' (e.g. 'hs.c2'), so priors and likelihoods can coexist",
        )


def _check_particles(prior: Prior, specs: Sequence[ParamSpec], k: int) -> None:
    trace, params = _trace(prior, specs, ("particles", k))
    for name, site in latent_sites(trace).items():
        batch = tuple(site["fn"].batch_shape)
        if batch != (k, 1):
            fail(
                "particles",
                f'inside pyro.plate("particles", {k}, dim=-2) site {name!r} has batch shape {batch}, '
                f"expected ({k}, 1)",
            )
    for s in specs:
        shape = tuple(params[s.name].shape)
        if shape != (k, 1, *s.shape):
            fail(
                "particles",
                f'inside pyro.plate("particles", {k}, dim=-2) parameter {s.name!r} has shape {shape}, '
                f"expected {(k, 1, *s.shape)}: broadcast over leading sample dims (index with [..., None], "
                "never reshape or expand to the spec's shape)",
            )


def _plain_tensors(module: nn.Module) -> list[str]:
    """Tensor attributes of ``module`` and its children that are neither buffers nor parameters."""
    return [
        f"{prefix + '.' if prefix else ''}{attr}"
        for prefix, sub in module.named_modules()
        for attr, value in vars(sub).items()
        if torch.is_tensor(value)
    ]


def _check_buffers(prior: Prior, specs: Sequence[ParamSpec], device: torch.device) -> None:
    plain = _plain_tensors(prior)
    if plain:
        fail(
            "buffers",
            f"{type(prior).__name__} holds plain tensor attribute(s) {plain}, which .to(...) does not move: "
            "register hyperparameters with self.register_buffer(name, tensor)",
        )
    moved = copy.deepcopy(prior).to(torch.float64)
    trace, params = _trace(moved, specs)
    values = {n: site["value"] for n, site in latent_sites(trace).items()}
    values.update({f"returned {k}": v for k, v in params.items()})
    for name, v in values.items():
        if v.is_floating_point() and (v.dtype != torch.float64 or v.device.type != device.type):
            fail(
                "buffers",
                f"after {type(prior).__name__}.to(torch.float64) {name!r} is {v.dtype} on {v.device}: build "
                "every distribution from registered buffers (torch.zeros_like(self.scale), not 0.0)",
            )


def model_particles(model: BayesianModel, cfg: KitConfig) -> None:
    """``[particles]``: the model's prior predictive under ``Predictive(parallel=True)`` (a particle plate
    at ``dim=-2``) gives ``f`` of shape ``(K, N, out)``."""
    k, ref = cfg.particles, reference_tensor(model)
    n_classes = getattr(model.likelihood, "out_features", 1)
    x, _ = make_data(model.architecture.in_features, model.task, n_classes, cfg.n_data, cfg.seed, ref)
    with contract("particles", "Predictive(model, parallel=True) from the prior"):
        with pyro.get_param_store().scope(), torch.no_grad():
            f = Predictive(model, num_samples=k, parallel=True, return_sites=["f"])(x)["f"]
    expected = (k, cfg.n_data, model.architecture.out_features)
    if tuple(f.shape) != expected:
        fail("particles", f"Predictive(model, num_samples={k}, parallel=True) gives f of shape "
             f"{tuple(f.shape)}, expected {expected}")  # fmt: skip
