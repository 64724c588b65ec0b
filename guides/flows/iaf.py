"""Inverse autoregressive flows with the numerically stable update (Kingma et al. 2016, arXiv:1606.04934)
as used for ``q(z)`` and the reverse model of Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395, §3.1,
Eqs. 6-8).

Each step is Pyro's ``AffineAutoregressive(AutoRegressiveNN(...), stable=True)``, which is exactly their
Eq. (7), ``z_k = κ_k ⊙ z_{k-1} + (1 - κ_k) ⊙ m_k`` with ``κ = sigmoid(s + sigmoid_bias)``; the log-determinant
is ``Σ_i log κ_k,i`` (Eq. 8), computed on the forward pass — no inversion anywhere.  Where Pyro does not fit
the paper, documented deviations:

* ``AutoRegressiveNN`` refuses hidden layers narrower than the input, which the paper needs (width 250 for
  dim 784/600); :class:`NarrowAutoRegressiveNN` rebuilds its masked layers with Pyro's own ``create_mask``
  at the requested widths (MADE degrees stay autoregressive for any width; tested);
* Pyro adds ``sigmoid_bias`` (default 2.0, near-identity start; the reference code has none) — exposed;
* the input ordering alternates identity / reversed between steps (the reference code reuses one random
  ordering for every step); LeakyReLU(0.001) as in the reference code.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from pyro.distributions.transforms import AffineAutoregressive
from pyro.nn import AutoRegressiveNN
from pyro.nn.auto_reg_nn import MaskedLinear, create_mask
from pyro.nn.module import to_pyro_module_
from torch import Tensor, nn

from zoo.core.validation import check_positive_int

__all__ = ["NarrowAutoRegressiveNN", "IAF", "make_iaf"]


class NarrowAutoRegressiveNN(AutoRegressiveNN):
    """Pyro's ``AutoRegressiveNN`` (MADE, output ``(m, s)``) whose hidden widths may be smaller than the input
    dimension, as in the reference code's MADE (Pyro's own check forbids it).  The masks come from Pyro's
    ``create_mask``; only the width check is bypassed."""

    def __init__(
        self,
        input_dim: int,
        hidden_dims: Sequence[int],
        permutation: Tensor,
        nonlinearity: nn.Module,
        param_dims: Sequence[int] = (1, 1),
    ) -> None:
        hidden_dims = [check_positive_int("hidden", h) for h in hidden_dims]
        with warnings.catch_warnings():  # dim = 1: Pyro suggests an affine map; the IAF is still valid
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(
                input_dim,
                [max(h, input_dim) for h in hidden_dims],
                param_dims=list(param_dims),
                permutation=permutation,
                nonlinearity=nonlinearity,
            )
        if hidden_dims == self.hidden_dims:
            return
        self.hidden_dims = hidden_dims
        self.masks, self.mask_skip = create_mask(
            input_dim, 0, hidden_dims, self.permutation, self.output_multiplier
        )
        widths = [input_dim, *hidden_dims]
        layers = [MaskedLinear(widths[i], widths[i + 1], self.masks[i]) for i in range(len(hidden_dims))]
        layers.append(MaskedLinear(hidden_dims[-1], input_dim * self.output_multiplier, self.masks[-1]))
        self.layers = nn.ModuleList(layers)


class IAF(nn.Module):
    """``K`` stable IAF steps (Eq. 7) on vectors of size ``dim``; ``forward(z) -> (z_K, Σ_k Σ_i log κ_k,i)``.

    :param hidden: MADE hidden widths (may be narrower than ``dim``, :class:`NarrowAutoRegressiveNN`).
    :param num_steps: ``K`` (paper: 2).
    :param sigmoid_bias: added to ``s`` before the sigmoid (Pyro's convention; 0 = the paper's Eq. 7 as
        written).
    """

    def __init__(
        self, dim: int, hidden: Sequence[int] = (50, 50), num_steps: int = 2, sigmoid_bias: float = 2.0
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        check_positive_int("num_steps", num_steps)
        steps = []
        for k in range(num_steps):
            perm = torch.arange(dim) if k % 2 == 0 else torch.arange(dim).flip(0)
            arn = NarrowAutoRegressiveNN(dim, hidden, perm, nn.LeakyReLU(0.001))
            steps.append(AffineAutoregressive(arn, stable=True, sigmoid_bias=float(sigmoid_bias)))
        self.steps = nn.ModuleList(steps)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        logdet = z.new_zeros(z.shape[:-1])
        for t in self.steps:
            y = t(z)
            logdet = logdet + t.log_abs_det_jacobian(z, y)
            z = y
        return z, logdet


def make_iaf(dim: int, hidden: Sequence[int], num_steps: int, sigmoid_bias: float) -> IAF:
    """An :class:`IAF` whose parameters are Pyro parameters (of the fit's param-store scope)."""
    flow = IAF(dim, hidden, num_steps, sigmoid_bias)
    to_pyro_module_(flow)  # its nn.Parameters become pyro params of the fit's param-store scope
    return flow
