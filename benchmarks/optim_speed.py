"""Per-step cost of Pyro's per-parameter Adam (``pyro.optim.Adam``: one torch optimizer per tensor) versus
the zoo's :class:`zoo.infer.optim.FusedPyroOptim` (one multi-tensor Adam), measured in the same run on the
same fits.

Configurations (guides with many parameter tensors): the one-neuron LBBNN-FLOW of ``lbbnn-flow-selection``
(logistic-sim, MADE 2 x 100, batch 400, ~34 tensors), the horseshoe structured guide on boston 1 x 50
(batch 128) and the LBBNN-FLOW 1 x 500 of ``lbbnn-flow-tabular`` (wine, MADE 2 x 250, batch 100).  Each
runs ``warm`` untimed steps, then ``steps`` timed steps with each optimizer from the same seed; both give
the same trajectory (tested in ``tests/test_inference.py``).

Usage: ``ZOO_DATA_DIR=<data root> python benchmarks/optim_speed.py [--steps 300]``
"""

from __future__ import annotations

import argparse

import pyro
import pyro.optim
import torch

import zoo.families.lbbnn.flows  # noqa: F401  (registers the flow guides)
from zoo.data import load_dataset
from zoo.experiments.registry import build
from zoo.infer.loop import fit, resume
from zoo.infer.optim import make_optimizer

CONFIGS = {
    "lbbnn-flow 1-neuron (logistic-sim)": (
        "lbbnn",
        "logistic-sim",
        [],
        "flow",
        {"flow_hidden": [100, 100]},
        {"hyper": "fixed", "inclusion": 0.25},
        400,
    ),
    "hs-bnn structured (boston 1x50)": ("hs-bnn", "uci:boston", [50], "structured", {}, {}, 128),
    "lbbnn-flow 1x500 (cv10 wine)": (
        "lbbnn",
        "cv10:uci:wine",
        [500],
        "flow",
        {"flow_hidden": [250, 250]},
        {"hyper": "fixed", "inclusion": 0.1, "noise": "fixed"},
        100,
    ),
}


def ms_per_step(cfg, optimizer, steps: int, warm: int) -> float:
    model_name, ds_name, hidden, guide_name, gopts, opts, batch = cfg
    ds = load_dataset(ds_name, 0)
    x, y, _, _ = ds.tensors(dtype=torch.float32)
    if ds.task == "regression":
        y = (y - y.mean()) / y.std()
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    model, guide, _ = build(
        model_name,
        ds.in_features,
        ds.out_features,
        ds.task,
        hidden=hidden,
        guide=guide_name,
        guide_options=gopts,
        **opts,
    )
    loss = guide.default_loss() if callable(getattr(guide, "default_loss", None)) else None
    res = fit(
        model, guide, x, y, steps=warm, optimizer=optimizer, batch_size=batch, loss=loss, progress=False
    )
    t0 = res.wall_time
    resume(res, x, y, steps, progress=False)
    return 1e3 * (res.wall_time - t0) / steps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warm", type=int, default=20)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    pyro.enable_validation(False)
    print(f"{a.steps} timed steps after {a.warm} warm-up steps, one torch thread")
    print("| configuration | pyro.optim.Adam ms/step | FusedPyroOptim ms/step | speed-up |")
    print("|---|---|---|---|")
    for name, cfg in CONFIGS.items():
        per = ms_per_step(cfg, pyro.optim.Adam({"lr": 1e-2}), a.steps, a.warm)
        fused = ms_per_step(cfg, make_optimizer("adam", 1e-2), a.steps, a.warm)
        print(f"| {name} | {per:.2f} | {fused:.2f} | {per / fused:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
