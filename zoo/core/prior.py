"""The prior contract.

A prior is a :class:`~pyro.nn.PyroModule` that, given an architecture's
:class:`~zoo.core.architectures.ParamSpec` list, emits Pyro sample sites and returns a
``{spec.name: tensor}`` dictionary of network parameters (each with the spec's shape, possibly with
leading sample dims).  It may add any latent sites it needs
beyond the weights (global/local scales, inclusion indicators, auxiliaries) — their names must be
prefixed by the spec name or layer (``"fc0.tau2"``) so several priors can coexist.

Hyperparameters live in registered buffers, so ``model.to(device)`` moves them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.meta import PyroModuleABCMeta

__all__ = ["Prior"]


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
