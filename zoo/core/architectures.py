"""Network architectures: deterministic functions f(x; θ) of inputs and a dictionary of parameters.

An architecture owns *no* parameters.  It declares what it needs through :class:`ParamSpec` records
(``param_specs()``) and maps ``(x, params)`` to outputs.  Priors read the specs to place their sample
sites; guides read them to size their variational parameters.  This is what lets any prior sit on
any architecture (DEVELOPERS.md, "the composition is the product").

Shapes.  A weight has shape ``(out, in)`` (as in ``torch.nn.Linear``); a bias ``(out,)``.  Parameters
may carry leading *sample* dimensions (vectorized particles / posterior draws).  Pyro places a
vectorized particle plate to the left of the model's plates; a site sampled outside the data plate
therefore has a singleton at the data plate's position (dim ``-1`` of the batch shape).  We drop that
singleton (:func:`align_particles`) so the output has shape ``(*sample, N, out)``, which lines up with
the particle plate at dim ``-2`` and the data plate at ``-1``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.core.validation import check_positive_int, check_widths

__all__ = ["ParamSpec", "Architecture", "MLP", "align_particles", "ACTIVATIONS", "check_activation"]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor of an architecture.

    ``name`` is also the Pyro sample-site name used by priors and guides (e.g. ``"fc0.weight"``).
    ``role`` is ``"weight"`` or ``"bias"``; ``layer`` counts from 0 (input layer) to L (output layer);
    ``unit_dim`` is the dimension that indexes the *receiving* units (0 for both weight and bias), so
    node-wise priors (horseshoe) can group a unit's incoming weights and bias.
    """

    name: str
    shape: tuple[int, ...]
    layer: int
    role: str
    fan_in: int
    fan_out: int
    unit_dim: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def align_particles(t: Tensor, event_dim: int) -> Tensor:
    """Drop the singleton that a vectorized particle plate leaves at the data plate's position."""
    if t.dim() > event_dim and t.shape[-event_dim - 1] == 1:
        return t.squeeze(-event_dim - 1)
    return t


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "leaky_relu": F.leaky_relu,
    "softplus": F.softplus,
    "identity": lambda t: t,
}


def check_activation(activation: object) -> str:
    """``activation`` if it is a key of :data:`ACTIVATIONS`, else a ``ValueError`` naming the choices."""
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    return activation


class Architecture(nn.Module, metaclass=abc.ABCMeta):
    """Base class (``abc`` abstract): subclasses implement :meth:`param_specs`, :meth:`forward` and
    :meth:`config`, and route each layer's affine map through :meth:`linear`-style methods so that
    :class:`zoo.ops.local_reparam.LocalReparameterization` can shadow it."""

    in_features: int
    out_features: int

    @abc.abstractmethod
    def param_specs(self) -> list[ParamSpec]:
        """The network's parameter tensors, one :class:`ParamSpec` each."""

    @abc.abstractmethod
    def forward(self, x: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        """The network output at ``x`` for parameter values ``params`` (leading sample dims allowed)."""

    def num_params(self) -> int:
        return sum(s.numel for s in self.param_specs())

    @abc.abstractmethod
    def config(self) -> dict:
        """Constructor arguments, for checkpoints and the registry."""


class MLP(Architecture):
    """Fully connected network ``in -> hidden[0] -> ... -> hidden[-1] -> out``.

    Layer ``l`` has sites ``fc{l}.weight`` (shape ``(out_l, in_l)``) and ``fc{l}.bias``.  With
    ``hidden=()`` it is a (generalized) linear model.  Each layer's affine map goes through
    :meth:`linear`, the single point a local-reparameterization effect can intercept.
    """

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int] | int,
        out_features: int,
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_features = check_positive_int("out_features", out_features)
        self.hidden = check_widths("hidden", hidden) if hidden != () else ()
        self.activation = check_activation(activation)
        self.bias = bool(bias)
        self.widths = (self.in_features, *self.hidden, self.out_features)

    def config(self) -> dict:
        return {
            "in_features": self.in_features,
            "hidden": list(self.hidden),
            "out_features": self.out_features,
            "activation": self.activation,
            "bias": self.bias,
        }

    @property
    def num_layers(self) -> int:
        return len(self.widths) - 1

    def param_specs(self) -> list[ParamSpec]:
        specs = []
        for l in range(self.num_layers):
            d_in, d_out = self.widths[l], self.widths[l + 1]
            specs.append(ParamSpec(f"fc{l}.weight", (d_out, d_in), l, "weight", d_in, d_out))
            if self.bias:
                specs.append(ParamSpec(f"fc{l}.bias", (d_out,), l, "bias", d_in, d_out))
        return specs

    def linear(self, h: Tensor, weight: Tensor, bias: Tensor | None, layer: int) -> Tensor:
        """``h @ weight^T + bias`` with broadcasting over leading sample dims."""
        out = torch.matmul(h, weight.transpose(-1, -2))
        if bias is not None:
            out = out + bias.unsqueeze(-2)
        return out

    def forward(self, x: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        act = ACTIVATIONS[self.activation]
        h = x
        for l in range(self.num_layers):
            w = align_particles(params[f"fc{l}.weight"], 2)
            b = align_particles(params[f"fc{l}.bias"], 1) if self.bias else None
            h = self.linear(h, w, b, l)
            if l < self.num_layers - 1:
                h = act(h)
        return h
