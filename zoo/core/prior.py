"""The prior contract.

A prior is a :class:`~pyro.nn.PyroModule` that, given an architecture's :class:`~zoo.core.architectures.ParamSpec`
list, emits Pyro sample sites and returns a ``{spec.name: tensor}`` dictionary of network parameters
(each with the spec's shape, possibly with leading sample dims).  It may add any latent sites it needs
beyond the weights (global/local scales, inclusion indicators, auxiliaries) — their names must be
prefixed by the spec name or layer (``"fc0.tau2"``) so several priors can coexist.

Hyperparameters live in registered buffers, so ``model.to(device)`` moves them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.architectures import ParamSpec

__all__ = ["Prior"]


class Prior(PyroModule):
    """Base class of every prior (see module docstring for the contract)."""

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:  # pragma: no cover
        raise NotImplementedError(
            f"{type(self).__name__} must implement sample_params() (abstract interface)"
        )

    def config(self) -> dict:  # pragma: no cover
        raise NotImplementedError(f"{type(self).__name__} must implement config() (abstract interface)")
