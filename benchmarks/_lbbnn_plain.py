"""What the LBBNN speed benchmarks ``lbbnn_speed.py`` and ``lbbnn_flow_speed.py`` share: the set-up and
timing loops, and for their hand-written (plain PyTorch, no Pyro) training steps the parameters and the
closed-form KL of the mean-field spike-and-slab family (Hubin & Storvik 2019, arXiv:1903.07594, Eq. 4.7;
Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, Eq. 4), written here from the equations so that the
zoo is timed against code that does not share its implementation.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import pyro
import torch
import torch.nn.functional as F
from pyro.infer import ELBO
from torch import Tensor

from zoo.data import load_dataset
from zoo.experiments.registry import build
from zoo.infer.loop import fit, resume


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


def mnist_setup(
    description: str, quick_help: str, argv: list[str] | None
) -> tuple[argparse.Namespace, Tensor, Tensor]:
    """Parse ``--quick``, ``--data-dir`` and ``--threads``; set torch's threads, flush denormals and turn
    Pyro's validation off (as a tuned training loop would); return the args and mnist10k's split-0 training
    rows as float32 tensors."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_flush_denormal(True)
    torch.set_num_threads(a.threads)
    pyro.enable_validation(False)
    x, y, _, _ = load_dataset("mnist10k", 0, data_dir=a.data_dir).tensors(dtype=torch.float32)
    return a, x, y


def plain_seconds_per_step(
    step: Callable[[Tensor, Tensor], float], x: Tensor, y: Tensor, steps: int, warm: int, batch: int
) -> float:
    """Seconds per call of the plain ``step(xb, yb)`` over ``steps`` minibatches of one shuffled epoch
    (cycled), after ``warm`` untimed ones."""
    per_epoch = x.shape[0] // batch
    perm = torch.randperm(x.shape[0])

    def rows(i: int) -> Tensor:
        j = i % per_epoch
        return perm[j * batch : (j + 1) * batch]

    for i in range(warm):
        step(x[rows(i)], y[rows(i)])
    t0 = time.perf_counter()
    for i in range(steps):
        step(x[rows(i)], y[rows(i)])
    return (time.perf_counter() - t0) / steps


def zoo_seconds_per_step(
    guide: str, x: Tensor, y: Tensor, steps: int, warm: int, loss: ELBO | None, psi: float, batch: int
) -> float:
    """Seconds per step of ``zoo.infer.loop`` on the 784-400-600-10 ``lbbnn`` entry with guide ``guide``
    (fixed inclusion prior ``psi``): ``warm`` steps by :func:`fit`, then ``steps`` timed by :func:`resume`."""
    pyro.clear_param_store()
    model, g, _ = build(
        "lbbnn", 784, 10, "multiclass", hidden=(400, 600), guide=guide, hyper="fixed", inclusion=psi
    )
    res = fit(model, g, x, y, steps=warm, lr=1e-3, batch_size=batch, progress=False, seed=0, loss=loss)
    t_before = res.wall_time
    resume(res, x, y, steps, progress=False)
    return (res.wall_time - t_before) / steps
