"""Seconds per epoch of the mean-field LBBNN on mnist10k: the zoo (Pyro) versus a plain-PyTorch loop.

Both train the same model (784-400-600-10 ReLU, spike-and-slab prior with ψ = 0.1, σ² = 1, N(0, 1) biases;
Hubin & Storvik 2019, arXiv:1903.07594, §5) with the same variational family (Eqs. 4.5-4.7:
straight-through binary Concrete at δ = 0.5, closed-form KL), batch size 100, one Adam optimizer, one MC
sample per step (Algorithm 1, M = 1).
The plain loop is written here from the equations.  Run ``python benchmarks/lbbnn_speed.py [--quick]``;
the data root is ``$ZOO_DATA_DIR`` (or ``--data-dir``).  Target: zoo / plain ≤ 1.3.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _lbbnn_plain import mnist_setup, plain_kl, plain_layers, plain_seconds_per_step, zoo_seconds_per_step
from pyro.infer import Trace_ELBO

from guides.lbbnn.elbo import ClosedFormKL_ELBO

PSI, SLAB_VAR, TEMP, BATCH = 0.1, 1.0, 0.5, 100


def plain_step_fn(sizes, n_train):
    """A hand-written LBBNN training step (no Pyro)."""
    layers, params = plain_layers(sizes)
    opt = torch.optim.Adam(params, lr=1e-3)

    def step(xb, yb):
        opt.zero_grad()
        h, kl = xb, 0.0
        for i, lay in enumerate(layers):
            om, kap = lay["lam"], lay["mu"]
            tau = F.softplus(lay["rho"])
            u = torch.rand_like(om).clamp(1e-20, 1 - 1e-7)
            z = om + torch.log(u) - torch.log1p(-u)
            soft = torch.sigmoid(z / TEMP)
            gamma = (z > 0).float() + soft - soft.detach()
            theta = kap + tau * torch.randn_like(kap)
            btau = F.softplus(lay["brho"])
            b = lay["bmu"] + btau * torch.randn_like(btau)
            h = F.linear(h, gamma * theta, b)
            if i < len(layers) - 1:
                h = F.relu(h)
            a = torch.sigmoid(om)
            kl = kl + plain_kl(lay, a, tau, btau, PSI, SLAB_VAR)
        nll = F.cross_entropy(h, yb, reduction="sum") * (n_train / xb.shape[0])
        loss = nll + kl
        loss.backward()
        opt.step()
        return float(loss)

    return step


def main(argv=None) -> None:
    a, x, y = mnist_setup(__doc__.splitlines()[0], "a few batches instead of a full epoch", argv)
    n = x.shape[0]
    steps_per_epoch = n // BATCH
    steps = 15 if a.quick else steps_per_epoch
    warm = 3

    torch.manual_seed(0)
    plain = plain_seconds_per_step(plain_step_fn((784, 400, 600, 10), n), x, y, steps, warm, BATCH)
    # ClosedFormKL_ELBO: the mean-field guide's default_loss(), what zoo fit uses
    zoo = zoo_seconds_per_step("mean-field", x, y, steps, warm, ClosedFormKL_ELBO(), PSI, BATCH)
    zoo_trace = zoo_seconds_per_step("mean-field", x, y, steps, warm, Trace_ELBO(), PSI, BATCH)

    print(f"mnist10k: n_train={n}, batch {BATCH}, {steps_per_epoch} steps/epoch, timed {steps} steps each")
    for label, t in (
        ("plain PyTorch", plain),
        ("zoo (ClosedFormKL_ELBO)", zoo),
        ("zoo (Trace_ELBO, KL + log p)", zoo_trace),
    ):
        print(f"{label:30s} {t * 1e3:.1f} ms/step = {t * steps_per_epoch:.2f} s/epoch")
    print(f"ratio zoo/plain = {zoo / plain:.2f} (target <= 1.3); with Trace_ELBO {zoo_trace / plain:.2f}")


if __name__ == "__main__":
    main()
