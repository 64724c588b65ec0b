"""The prior contract.

A prior is a :class:`~pyro.nn.PyroModule` that, given an architecture's
:class:`~zoo.core.architectures.ParamSpec` list, emits Pyro sample sites and returns a
``{spec.name: tensor}`` dictionary of network parameters (each with the spec's shape, possibly with
leading sample dims).  It may add any latent sites it needs
beyond the weights (global/local scales, inclusion indicators, auxiliaries) — their names must be
prefixed by the layer (``"fc0.tau2"``) so several priors can coexist.  No site may be named after another
site plus a dot (``"fc0.weight.s2"`` next to ``"fc0.weight"``): Pyro's autoguides store a site's
parameters under its dotted name, so one name cannot be both a tensor and a folder.
:class:`~zoo.core.model.BayesianModel` checks this when it is built (:func:`check_site_names`);
:mod:`zoo.testing` checks the whole contract.

Hyperparameters live in registered buffers, so ``model.to(device)`` moves them.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence

import pyro
import torch
from pyro import poutine
from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.meta import PyroModuleABCMeta

__all__ = ["Prior", "ExactScaleConditionals", "site_name_clashes", "check_site_names"]


class Prior(PyroModule, metaclass=PyroModuleABCMeta):
    """Base class of every prior (see the module docstring for the contract); an ``abc`` abstract class.

    Subclasses implement :meth:`sample_params`; :meth:`config` (constructor arguments as plain data,
    shown in exports and checkpoint specs) defaults to ``{}``.
    """

    @abc.abstractmethod
    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        """Emit the prior's sample sites for ``specs`` and return ``{spec.name: value}``."""

    def config(self) -> dict:
        """Constructor arguments (plain data), for checkpoints and the registry."""
        return {}


class ExactScaleConditionals:
    """Mixin of a prior whose scales have exact full conditionals given the weights (NUTS within Gibbs,
    :mod:`zoo.infer.mcmc_gibbs`).  ``conditionals_module`` names a module with ``scale_sites(prior, specs)``
    (the scale sites, in draw order) and ``draw_scales(prior, specs, values)`` (one Gibbs sweep given the
    current value of every site); optionally ``interweave_scales(prior, specs, values, log_lik)``: the
    ancillary (non-centered) moves of the scales that interleave with that sweep
    (:mod:`zoo.infer.interweave`), and ``reparameterize(prior, specs, values, centered)``: the weights in
    the centered or the non-centered parameterization given the scales (for a NUTS block that moves the
    non-centered weights)."""

    conditionals_module: str = ""

    def conditional_sites(self, specs: Sequence[ParamSpec]) -> list[str]:
        """The scale sites with exact full conditionals, in draw order."""
        return importlib.import_module(self.conditionals_module).scale_sites(self, specs)

    def draw_conditionals(
        self, specs: Sequence[ParamSpec], values: Mapping[str, Tensor]
    ) -> dict[str, Tensor]:
        """One exact Gibbs sweep over the scales given ``values``."""
        return importlib.import_module(self.conditionals_module).draw_scales(self, specs, values)

    @property
    def can_interweave(self) -> bool:
        """Whether the prior has ancillary moves of its scales (``interweave_scales``)."""
        return hasattr(importlib.import_module(self.conditionals_module), "interweave_scales")

    def interweave(
        self,
        specs: Sequence[ParamSpec],
        values: Mapping[str, Tensor],
        log_lik: Callable[[Mapping[str, Tensor]], Tensor],
    ) -> dict[str, Tensor]:
        """The ancillary moves of the scales given ``values`` and the log-likelihood ``log_lik``: new values
        of the scales and of the weights they rescale; ``ValueError`` if the prior has none."""
        if not self.can_interweave:
            raise ValueError(f"{type(self).__name__} has no ancillary moves of its scales (interweave)")
        module = importlib.import_module(self.conditionals_module)
        return module.interweave_scales(self, specs, values, log_lik)

    @property
    def can_reparameterize(self) -> bool:
        """Whether the prior maps its weights between the centered and non-centered forms
        (``reparameterize``)."""
        return hasattr(importlib.import_module(self.conditionals_module), "reparameterize")

    def reparameterize(
        self, specs: Sequence[ParamSpec], values: Mapping[str, Tensor], centered: bool
    ) -> dict[str, Tensor]:
        """The weight sites in the centered (``True``) or non-centered form given the scales in ``values``."""
        if not self.can_reparameterize:
            raise ValueError(f"{type(self).__name__} has no map between its centered and non-centered forms")
        return importlib.import_module(self.conditionals_module).reparameterize(self, specs, values, centered)


def site_name_clashes(names: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs ``(a, b)`` of site names where ``b`` is ``a`` plus a dot and more (``"fc0.weight"``,
    ``"fc0.weight.s2"``), sorted."""
    known = set(names)
    out = []
    for b in sorted(known):
        parts = b.split(".")
        out += [(a, b) for i in range(1, len(parts)) if (a := ".".join(parts[:i])) in known]
    return out


def check_site_names(prior: Prior, specs: Sequence[ParamSpec]) -> None:
    """Raise ``ValueError`` (naming ``prior`` and both sites) if a sample site of ``prior`` on ``specs`` is
    named after another one plus a dot (module docstring).  Runs one trial trace without gradients inside a
    private RNG fork and parameter-store scope, hidden from any enclosing handler: nothing global changes."""
    devices = sorted({t.device.index or 0 for t in prior.buffers() if t.is_cuda})
    with torch.random.fork_rng(devices=devices), pyro.get_param_store().scope(), torch.no_grad():
        with poutine.block():
            trace = poutine.trace(prior.sample_params).get_trace(specs)
    names = [n for n, site in trace.nodes.items() if site["type"] == "sample"]
    clashes = site_name_clashes(names)
    if clashes:
        a, b = clashes[0]
        leaf = b.rsplit(".", 1)[1]
        raise ValueError(
            f"prior: {type(prior).__name__} names a sample site {b!r} after its site {a!r}; Pyro's "
            f"autoguides keep a site's parameters under its dotted name, so {a!r} cannot also hold {b!r} "
            f'(AutoNormal fails with "has no attribute {leaf!r}"): name it by layer instead, e.g. '
            f"{a.split('.')[0] + '.' + leaf!r}"
        )
