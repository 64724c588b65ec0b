"""Seconds per epoch of LBBNN-LCRT and LBBNN-FLOW on mnist10k (Skaaret-Lund, Storvik & Hubin 2023,
arXiv:2305.03395, §5.3), against the mean-field LBBNN of Hubin & Storvik (2019, arXiv:1903.07594) and a
hand-written plain-PyTorch LCRT loop.

All fit the same model (784-400-600-10 ReLU, spike-and-slab prior ψ = 0.1, σ² = 1, N(0, 1) biases) at batch
100 with one Adam optimizer and one MC sample per step:

* ``plain LCRT``: written here from the paper's §4 (two matmuls per layer, analytic KL), no Pyro;
* ``zoo LCRT``: :class:`guides.lbbnn.lcrt.LCRTLBBNNGuide` with :class:`guides.lbbnn.lcrt.LCRT_ELBO`;
* ``zoo FLOW``: :class:`guides.flows.lbbnn.LBBNNFlowGuide` (K = 2 IAF steps for q(z) and r, MADE 2 × 50,
  the guide's default) with ``LCRT_ELBO``;
* ``zoo MF``: :class:`guides.lbbnn.meanfield.MeanFieldLBBNNGuide` (weight-space sampling, ``Trace_ELBO``).

``python benchmarks/lbbnn_flow_speed.py [--quick]`` (``--quick``: 10 timed steps per method instead of an
epoch of 80); the data root is ``$ZOO_DATA_DIR`` or ``--data-dir``.  The paper's A10 GPU numbers
(§5.3): LCRT ≈ 4 s, LBBNN ≈ 13 s, FLOW ≈ 17 s per 60k-image epoch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _lbbnn_plain import mnist_setup, plain_kl, plain_layers, plain_seconds_per_step, zoo_seconds_per_step

from guides.lbbnn.lcrt import LCRT_ELBO

PSI, SLAB_VAR, BATCH = 0.1, 1.0, 100


def plain_lcrt_step_fn(sizes, n_train):
    """A hand-written LBBNN-LCRT training step (no Pyro): h ~ N(E[h], Var[h]) per layer, analytic KL."""
    layers, params = plain_layers(sizes)
    opt = torch.optim.Adam(params, lr=1e-3)

    def step(xb, yb):
        opt.zero_grad()
        h, kl = xb, 0.0
        for i, lay in enumerate(layers):
            lam, mu = lay["lam"], lay["mu"]
            a, sig, bsig = torch.sigmoid(lam), F.softplus(lay["rho"]), F.softplus(lay["brho"])
            mean = F.linear(h, a * mu, lay["bmu"])
            var = F.linear(h**2, a * (sig**2 + (1 - a) * mu**2), bsig**2)
            h = mean + var.clamp_min(1e-12).sqrt() * torch.randn_like(mean)
            if i < len(layers) - 1:
                h = F.relu(h)
            kl = kl + plain_kl(lay, a, sig, bsig, PSI, SLAB_VAR)
        loss = F.cross_entropy(h, yb, reduction="sum") * (n_train / xb.shape[0]) + kl
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def main(argv=None) -> None:
    a, x, y = mnist_setup(__doc__.splitlines()[0], "10 timed steps per method instead of an epoch", argv)
    n = x.shape[0]
    per_epoch = n // BATCH
    steps, warm = (10, 2) if a.quick else (per_epoch, 3)

    torch.manual_seed(0)
    step = plain_lcrt_step_fn((784, 400, 600, 10), n)
    times = {"plain LCRT": plain_seconds_per_step(step, x, y, steps, warm, BATCH)}
    for label, guide, loss in (
        ("zoo LCRT", "lcrt", LCRT_ELBO()),
        ("zoo FLOW", "flow", LCRT_ELBO()),
        ("zoo MF (Trace_ELBO)", "mean-field", None),
    ):
        times[label] = zoo_seconds_per_step(guide, x, y, steps, warm, loss, PSI, BATCH)

    print(f"mnist10k: n_train={n}, batch {BATCH}, {per_epoch} steps/epoch, timed {steps} steps each")
    for k, v in times.items():
        print(f"{k:<20} {v * 1e3:8.1f} ms/step = {v * per_epoch:6.2f} s/epoch")
    print(f"zoo LCRT / plain LCRT = {times['zoo LCRT'] / times['plain LCRT']:.2f}")
    print(f"zoo FLOW / zoo LCRT   = {times['zoo FLOW'] / times['zoo LCRT']:.2f}")
    print(f"zoo MF / zoo LCRT     = {times['zoo MF (Trace_ELBO)'] / times['zoo LCRT']:.2f}")


if __name__ == "__main__":
    main()
