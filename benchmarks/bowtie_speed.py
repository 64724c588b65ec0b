"""Wall-clock cost of one vectorized bow-tie CAVI sweep (paper 000 App. A complexity, note §2.6 and §5.5).

The note estimates 0.1–1 s per sweep for UCI sizes (N <= 930, D = 50) in vectorized float64 torch; the cost
should
grow linearly in N and L and cubically in the width.  Usage (single-threaded, a few seconds)::

    python benchmarks/bowtie_speed.py --sizes 270:20:1 400:20:1 900:50:1 300:20:2 --sweeps 3
"""

from __future__ import annotations

import argparse
import time

import torch

from guides.bowtie import BowtieCAVIGuide
from zoo.bowtie import BowtieModel


def time_sweep(n: int, width: int, depth: int, sweeps: int, seed: int = 0) -> dict:
    """Seconds per CAVI sweep and per closed-form ELBO for N = ``n`` points of dimension 8, ``depth`` hidden
    layers of ``width`` units."""
    torch.manual_seed(seed)
    x = torch.randn(n, 8, dtype=torch.float64)
    y = torch.sin(x[:, 0]) * 3 + x[:, 1] + 0.3 * torch.randn(n, dtype=torch.float64)
    model = BowtieModel(8, (width,) * depth, 1, noise_rate=None).double()
    guide = BowtieCAVIGuide(model)
    guide.initialize(model, x, y)
    guide.sweep(model, x, y)  # warm-up
    t0 = time.perf_counter()
    for _ in range(sweeps):
        guide.sweep(model, x, y)
    t1 = time.perf_counter()
    for _ in range(sweeps):
        guide.elbo(model, x, y)
    t2 = time.perf_counter()
    return {
        "n": n,
        "width": width,
        "depth": depth,
        "sweep_s": (t1 - t0) / sweeps,
        "elbo_s": (t2 - t1) / sweeps,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes",
        nargs="+",
        default=["270:20:1", "400:20:1", "900:50:1", "300:20:2"],
        help="N:width:depth triples",
    )
    p.add_argument("--sweeps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    if a.sweeps < 1:
        raise ValueError("--sweeps must be >= 1")
    torch.set_num_threads(a.threads)
    print(f"{'N':>6} {'width':>6} {'L':>3} {'s/sweep':>9} {'s/ELBO':>9}")
    for size in a.sizes:
        n, width, depth = (int(v) for v in size.split(":"))
        r = time_sweep(n, width, depth, a.sweeps)
        print(f"{r['n']:>6} {r['width']:>6} {r['depth']:>3} {r['sweep_s']:>9.4f} {r['elbo_s']:>9.4f}")


if __name__ == "__main__":
    main()
