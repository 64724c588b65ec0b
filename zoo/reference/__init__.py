"""Reference ("gold-standard") posteriors that approximate inference is scored against.

* :mod:`zoo.reference.enumeration` computes the exact posterior of the linear spike-and-slab regression (the
  zoo's LBBNN without hidden layers) by enumerating every model, over the variance grids of
  :mod:`zoo.reference.quadrature`; :mod:`zoo.reference.exact_draws` draws independently from it.
* :mod:`zoo.reference.instances` pins the named reference instances (model, options, data, sampler, seeds);
  :mod:`zoo.reference.compute` computes one (NUTS through :func:`zoo.infer.mcmc.fit_nuts`, or enumeration)
  and :mod:`zoo.reference.store` stores it atomically after the quality gate.
* :mod:`zoo.reference.quantities` draws the symmetry-invariant quantities a reference stores from any fit, and
  :mod:`zoo.reference.score` fits a guide on an instance's data and scores it with :mod:`zoo.eval.scores`;
  :mod:`zoo.reference.headline` gives its headline score (W2(y)/sd or total variation) and the reference's
  own Monte Carlo floor.

``zoo reference list | compute NAME | score SPEC --instance NAME`` is the command line
(:mod:`zoo.experiments.reference_cli`).  The exact-posterior modules are a lower layer (they never import
``zoo.families``, ``zoo.experiments`` or ``guides``); ``compute`` and ``score`` import the registry lazily.
"""

from zoo.reference.enumeration import (
    MAX_COLUMNS,
    EnumerationResult,
    SpikeSlabLinear,
    enumerate_spike_slab,
)
from zoo.reference.exact_draws import ExactDraws, sample_spike_slab
from zoo.reference.instances import INSTANCES, DataSpec, ReferenceInstance, SamplerSettings, get_instance
from zoo.reference.store import GateError, check_gate, load_reference, save_reference

__all__ = [
    "MAX_COLUMNS",
    "EnumerationResult",
    "SpikeSlabLinear",
    "enumerate_spike_slab",
    "ExactDraws",
    "sample_spike_slab",
    "INSTANCES",
    "DataSpec",
    "ReferenceInstance",
    "SamplerSettings",
    "get_instance",
    "GateError",
    "check_gate",
    "load_reference",
    "save_reference",
]
