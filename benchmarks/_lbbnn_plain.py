"""What the hand-written (plain PyTorch, no Pyro) LBBNN training steps of ``lbbnn_speed.py`` and
``lbbnn_flow_speed.py`` share: their parameters and the closed-form KL of the mean-field spike-and-slab
family (Hubin & Storvik 2019, arXiv:1903.07594, Eq. 4.7; Skaaret-Lund, Storvik & Hubin 2023,
arXiv:2305.03395, Eq. 4), written here from the equations so that the zoo is timed against code that does
not share its implementation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def plain_layers(sizes: list[int]) -> tuple[list[dict[str, Tensor]], list[Tensor]]:
    """Per layer ``d_in -> d_out``: slab means ``mu`` and bias means ``bmu`` ~ U(-0.2, 0.2), ``rho`` and
    ``brho`` ~ U(-5, -4) (``σ = softplus(ρ)``) and inclusion logits ``lam`` ~ U(0, 1); and all of them in
    one list."""
    layers, params = [], []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
        lay = {
            "mu": ((torch.rand(d_out, d_in) * 2 - 1) * 0.2).requires_grad_(),
            "rho": (-5 + torch.rand(d_out, d_in)).requires_grad_(),
            "lam": torch.rand(d_out, d_in).requires_grad_(),
            "bmu": ((torch.rand(d_out) * 2 - 1) * 0.2).requires_grad_(),
            "brho": (-5 + torch.rand(d_out)).requires_grad_(),
        }
        layers.append(lay)
        params += list(lay.values())
    return layers, params


def plain_kl(
    lay: dict[str, Tensor], a: Tensor, sig: Tensor, bsig: Tensor, psi: float, slab_var: float
) -> Tensor:
    """``KL(q || p)`` of one layer: ``Bern(α) || Bern(ψ)`` plus ``α KL(N(μ, σ²) || N(0, slab_var))`` per
    weight, and ``KL(N(μ_b, σ_b²) || N(0, 1))`` per bias; ``a = sigmoid(lam)``, ``sig = softplus(rho)`` and
    ``bsig = softplus(brho)`` come from the step, which has computed them already."""
    lam, mu = lay["lam"], lay["mu"]
    kl_b = a * (F.logsigmoid(lam) - math.log(psi)) + (1 - a) * (F.logsigmoid(-lam) - math.log1p(-psi))
    kl_s = 0.5 * (-2 * torch.log(sig) + (sig**2 + mu**2) / slab_var - 1)
    kl_bias = 0.5 * (-2 * torch.log(bsig) + bsig**2 + lay["bmu"] ** 2 - 1)
    return (kl_b + a * kl_s).sum() + kl_bias.sum()
