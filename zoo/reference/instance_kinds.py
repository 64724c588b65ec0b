"""The kinds of reference instance in :data:`zoo.reference.instances.INSTANCES`: one constructor per kind
and the network and sampler settings the kinds share.

* :func:`exact_instance`: the linear spike-and-slab regression, whose posterior is enumerated exactly
  (:mod:`zoo.reference.enumeration`);
* :func:`nuts_instance`: any registry model sampled with NUTS (Hoffman & Gelman 2014, arXiv:1111.4246,
  through :func:`zoo.infer.mcmc.fit_nuts`), and its special cases: :func:`linear_instance` (the prior on a
  network without hidden layer, all training rows), :func:`tanh_net_instance` and
  :func:`gauss_tanh_instance` (3 tanh units), :func:`hs_tanh_instance` (a horseshoe on tanh units, dense mass
  matrix) and :func:`one_unit_instance` (one tanh unit, NUTS within Gibbs, :mod:`zoo.infer.mcmc_gibbs`, or
  plain NUTS on the marginal prior).

Why each kind exists — which posteriors pass the gate with which settings — is told in the module docstring
and the comments of :mod:`zoo.reference.instances`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zoo.core.likelihoods import IG2_NOISE_OPTIONS
from zoo.families.baselines.options import MFVI_UNSCALED
from zoo.reference.spec import DataSpec, ReferenceInstance, SamplerSettings

__all__ = [
    "WIDTH",
    "TANH",
    "TANH_NOTE",
    "HS_SAMPLER",
    "LINEAR_SAMPLER",
    "LINEAR_NOTE",
    "nuts_instance",
    "exact_instance",
    "linear_instance",
    "tanh_net_instance",
    "hs_tanh_instance",
    "one_unit_instance",
    "gauss_tanh_instance",
]

#: the hidden widths of the 3-unit networks
WIDTH = (3,)
#: the builder option of tanh hidden units (no rescaling ridge between a unit's incoming and outgoing weights)
TANH = {"activation": "tanh"}
#: the note of a 3-tanh-unit instance; ``{}``: which rows it keeps
TANH_NOTE = "hidden 3, tanh units; {}"
#: every prior with a hierarchical form is sampled in its marginal form (:func:`zoo.infer.mcmc.fit_nuts`'s
#: default: the horseshoe without its inverse-gamma auxiliaries, the collapsed priors with their per-weight
#: hyper-latents integrated out); the horseshoe also needs a dense mass matrix for the ridge between its
#: global and local scales, and smaller steps to run free of divergences
HS_SAMPLER = SamplerSettings(target_accept=0.95, full_mass=True)

#: the linear instances (no hidden layer) of the families whose network references fail the gate: a
#: regression on all training rows, where the prior acts on the weights directly and NUTS mixes (pilot
#: chains: step sizes 0.1-0.2, no divergences, 0.02-0.07 CPU-s per iteration)
LINEAR_SAMPLER = SamplerSettings(target_accept=0.9)
#: the note of a linear instance; ``{}``: the prior's name, then how many training rows
LINEAR_NOTE = "linear (no hidden layer): the {} prior on the weights of a linear regression; all {} rows"


def nuts_instance(name: str, model: str, data: DataSpec, note: str, **kw: Any) -> ReferenceInstance:
    """A NUTS instance of registry ``model`` on ``data``; ``kw``: other :class:`ReferenceInstance` fields."""
    return ReferenceInstance(name=name, model=model, method="nuts", data=data, note=note, **kw)


def exact_instance(name: str, data: DataSpec, note: str) -> ReferenceInstance:
    """The linear spike-and-slab (``lbbnn`` without hidden layers, fixed inclusion 0.25, slab variance 1,
    noise variance ``IG(2, 0.5)`` as when the stored references were computed)."""
    return ReferenceInstance(
        name=name,
        model="lbbnn",
        method="enumeration",
        data=data,
        hidden=(),
        options={"hyper": "fixed", "inclusion": 0.25, "slab_var": 1.0, **IG2_NOISE_OPTIONS},
        draws=1000,
        note=note,
    )


def linear_instance(
    name: str, model: str, dataset: str, prior: str, n_train: int, scored: tuple[str, ...] = ()
) -> ReferenceInstance:
    """A ``*-linear`` instance: ``model``'s prior on a network without hidden layer, all training rows."""
    note = LINEAR_NOTE.format(prior, f"{n_train} training")
    return nuts_instance(
        name, model, DataSpec(dataset), note, hidden=(), sampler=LINEAR_SAMPLER, scored=scored
    )


def tanh_net_instance(
    name: str, model: str, data: DataSpec, rows: str, options: dict[str, Any], target_accept: float = 0.95
) -> ReferenceInstance:
    """A ``*-tanh`` instance: ``model`` with ``options`` on a network with 3 tanh units, target acceptance
    .95 by default (the comment at ``reghs-cubic-tanh``)."""
    sampler = SamplerSettings(target_accept=target_accept)
    note = TANH_NOTE.format(rows)
    return nuts_instance(name, model, data, note, hidden=WIDTH, sampler=sampler, options={**options, **TANH})


def hs_tanh_instance(
    name: str,
    data: DataSpec,
    note: str,
    hidden: tuple[int, ...] = (2,),
    options: dict[str, Any] | None = None,
    model: str = "hs-bnn",
    **sampler: Any,
) -> ReferenceInstance:
    """A horseshoe (``hs-bnn``, or ``model``; the paper's scales unless ``options`` change them) on tanh
    units, dense mass matrix, target acceptance .99; ``sampler``: :class:`SamplerSettings` fields that
    differ."""
    settings = dataclasses.replace(HS_SAMPLER, **{"target_accept": 0.99, **sampler})
    return nuts_instance(
        name, model, data, note, hidden=hidden, sampler=settings, options={**TANH, **(options or {})}
    )


def one_unit_instance(
    name: str, model: str, data: DataSpec, rows: str, gibbs: bool = True, **sampler: Any
) -> ReferenceInstance:
    """A ``*-tanh-w1`` instance: ``model``'s own prior on one tanh unit, 4 chains of 500 warm-up iterations
    and 700 draws: one unit leaves no choice of which units are on (:mod:`zoo.reference.instances`).  NUTS
    within Gibbs at target acceptance .95, or (``gibbs=False``) plain NUTS on the prior's marginal form (the
    collapsed priors' hyper-latents integrated out, the horseshoe's inverse-gamma auxiliaries left out) with
    a dense mass matrix at target acceptance .99; ``sampler``: :class:`SamplerSettings` fields that differ."""
    if gibbs:
        base = SamplerSettings(target_accept=0.95, samples=700, jit_compile=False, gibbs=True)
    else:
        base = SamplerSettings(target_accept=0.99, samples=700, full_mass=True)
    how = "NUTS within Gibbs" if gibbs else "NUTS on the marginal prior, dense mass"
    how += ", sampled centered" if sampler.get("centered") else ""
    note = f"hidden 1, tanh unit, {how}; {rows}"
    settings = dataclasses.replace(base, **sampler)
    return nuts_instance(name, model, data, note, hidden=(1,), sampler=settings, options=TANH)


def gauss_tanh_instance(
    name: str, data: DataSpec, rows: str, target_accept: float = 0.95
) -> ReferenceInstance:
    """A ``gauss-*-tanh`` instance: the published Gaussian prior (``MFVI_UNSCALED``) on 3 tanh units."""
    return tanh_net_instance(name, "mfvi-bnn", data, rows, MFVI_UNSCALED, target_accept)
