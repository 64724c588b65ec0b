"""A one-chain pilot of a reference instance, with its sampler settings overridden: how well one chain mixes
on exactly the instance's model and rows before four chains are spent on it (an hour or more here).

Usage::

    python benchmarks/reference_pilot.py hs-bowtie-tanh --warmup 300 --samples 600 --target-accept 0.95 \\
        --gibbs --interweave [--centered | --non-centered] [--seed 0]

Prints, for every quantity a reference stores (``f`` and ``y`` at the test inputs, ``sigma``, the sorted unit
norms, the horseshoe's shrinkage factors), the smallest and the median bulk ESS over its entries (ArviZ's
rank-normalized ESS of the one chain), and the chain's step size, mean acceptance probability, divergences
and CPU seconds.  Writes nothing.  Without ``--gibbs`` the chain runs the instance's own NUTS settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np


def ess_summary(values: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """``{quantity: (min, median)}`` of the bulk ESS of each entry of one chain's draws ``(draws, ...)``."""
    import arviz as az

    out = {}
    for key, v in values.items():
        v = np.asarray(v, dtype=float).reshape(len(v), -1)
        if v.shape[0] < 4:
            raise ValueError(f"values[{key!r}]: need at least 4 draws, got {v.shape[0]}")
        ess = [float(az.ess(v[None, :, j], method="bulk")) for j in range(v.shape[1])]
        out[key] = (min(ess), float(np.median(ess)))
    return out


def _config(inst, a: argparse.Namespace):
    from zoo.infer.mcmc import NUTSConfig

    s = inst.sampler
    if a.gibbs and a.no_gibbs:
        raise ValueError("--gibbs and --no-gibbs cannot be combined")
    if a.centered and a.non_centered:
        raise ValueError("--centered and --non-centered cannot be combined")
    gibbs = False if a.no_gibbs else a.gibbs or s.gibbs
    return NUTSConfig(
        chains=1,
        warmup=a.warmup or s.warmup,
        samples=a.samples or s.samples,
        target_accept=a.target_accept or s.target_accept,
        max_tree_depth=s.max_tree_depth,
        jit_compile=False if gibbs else s.jit_compile or a.no_gibbs,
        full_mass=False if gibbs else a.full_mass or s.full_mass,
        hierarchical=s.hierarchical,
        centered=False if a.non_centered else True if a.centered else s.centered,
        gibbs=gibbs,
        interweave=a.interweave or s.interweave,
        seed=a.seed,
        progress=False,
        parallel=False,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("instance")
    p.add_argument("--warmup", type=int)
    p.add_argument("--samples", type=int)
    p.add_argument("--target-accept", type=float)
    p.add_argument("--gibbs", action="store_true", help="NUTS within Gibbs (diagonal mass matrix)")
    p.add_argument("--no-gibbs", action="store_true", help="plain NUTS on the prior's marginal form")
    p.add_argument("--full-mass", action="store_true", help="dense mass matrix (plain NUTS only)")
    p.add_argument("--interweave", action="store_true")
    p.add_argument("--centered", action="store_true", help="sample the horseshoe's weights centered")
    p.add_argument("--non-centered", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    import torch

    from zoo.experiments.registry import build
    from zoo.infer.mcmc import fit_nuts
    from zoo.reference.compute import _invariants
    from zoo.reference.instances import get_instance

    inst = get_instance(a.instance)
    if inst.method != "nuts":
        p.error(f"argument instance: {a.instance} is computed by {inst.method}, not NUTS")
    try:
        cfg = _config(inst, a)
    except (TypeError, ValueError) as e:
        p.error(str(e))
    ds = inst.dataset()
    model, _, spec = build(
        inst.model, ds.in_features, ds.out_features, ds.task, hidden=list(inst.hidden), **inst.options
    )
    result = fit_nuts(model, ds, cfg, spec=spec)
    values = _invariants(result, torch.as_tensor(ds.x_test, dtype=torch.float32), result.num_draws)
    print(f"{a.instance}: {dataclasses.asdict(cfg) | {'metadata': None}}")
    for key, (lo, med) in ess_summary(values).items():
        print(f"  {key:12s} bulk ESS min {lo:7.0f}  median {med:7.0f}  of {result.num_draws}")
    for c in result.chain_stats:
        print(
            f"  step size {c['step_size']:.2e}, mean acceptance {c['mean_accept_prob']:.2f}, "
            f"divergences {c['num_divergences']}, {c['cpu_seconds']:.0f} CPU s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
