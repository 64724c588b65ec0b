"""Speed of the horseshoe guides (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.2.3, §6.5 Fig. 13):
seconds per epoch for each guide and each ELBO estimator, and the cost of the closed-form auxiliary step
(Algorithm 1, lines 6-9) as a fraction of the epoch.

Configurations: boston (``uci:boston`` split 0) with one hidden layer of 50 units, and mnist10k with a
784-400-400-10 network; batch 128 (§6.5).  Each (guide, estimator) runs ``warmup`` untimed steps,
then ``steps`` timed steps; the gradient step (``SVI.step``) and the closed-form step
(``closed_form_update``) are timed separately and scaled to one epoch (``n_train // 128`` steps).

Usage::

    ZOO_DATA_DIR=<data dir> python benchmarks/hs_speed.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import pyro
import pyro.optim
import torch
from pyro.infer import SVI, Trace_ELBO

from guides.horseshoe.lrt import HorseshoeLRTELBO
from zoo.data import load_dataset
from zoo.experiments.registry import build

GUIDES = ("factorized", "tied", "semi-structured", "structured")
CONFIGS = {"boston": ("uci:boston", [50]), "mnist10k": ("mnist10k", [400, 400])}
BATCH = 128


def _setup(dataset, hidden, guide_name: str, estimator: str, device) -> tuple[SVI, object, object]:
    """A fresh ``hs-bnn`` model and guide (seed 0) and the SVI object of ``estimator``."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    model, guide, _ = build(
        "hs-bnn", dataset.in_features, dataset.out_features, dataset.task, hidden=hidden, guide=guide_name
    )
    model.to(device)
    guide.to(device)
    loss = HorseshoeLRTELBO() if estimator == "lrt" else Trace_ELBO()
    return SVI(model, guide, pyro.optim.Adam({"lr": 5e-3}), loss), model, guide


def time_one(dataset, hidden, guide_name: str, estimator: str, steps: int, warmup: int, device) -> dict:
    xtr, ytr, _, _ = dataset.tensors(device=device)
    if dataset.task == "regression":
        ytr = (ytr - ytr.mean()) / ytr.std()
    svi, model, guide = _setup(dataset, hidden, guide_name, estimator, device)
    n = xtr.shape[0]
    gen = torch.Generator().manual_seed(0)
    t_grad = t_aux = 0.0
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for i in range(warmup + steps):
        idx = torch.randint(0, n, (BATCH,), generator=gen).to(device)
        sync()
        t0 = time.perf_counter()
        svi.step(xtr, ytr, subsample=idx)
        sync()
        t1 = time.perf_counter()
        with torch.no_grad():
            guide.closed_form_update(model, xtr, ytr, subsample=idx)
        sync()
        t2 = time.perf_counter()
        if i >= warmup:
            t_grad += t1 - t0
            t_aux += t2 - t1
    return _row(guide_name, estimator, n // BATCH, t_grad / steps, t_aux / steps)


def _row(guide_name: str, estimator: str, per_epoch: int, grad_step: float, aux_step: float) -> dict:
    grad_epoch, aux_epoch = grad_step * per_epoch, aux_step * per_epoch
    return {
        "guide": guide_name,
        "estimator": estimator,
        "steps_per_epoch": per_epoch,
        "seconds_per_epoch": grad_epoch + aux_epoch,
        "aux_seconds_per_epoch": aux_epoch,
        "aux_fraction": aux_epoch / (grad_epoch + aux_epoch),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few timed steps (a smoke run)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    pyro.enable_validation(False)
    device = torch.device(args.device)
    steps, warmup = (5, 2) if args.quick else (50, 10)
    rows = []
    for cfg in args.configs:
        name, hidden = CONFIGS[cfg]
        ds = load_dataset(name, 0, data_dir=args.data_dir)
        for g in GUIDES:
            for est in ("trace", "lrt"):
                r = {"config": cfg, **time_one(ds, hidden, g, est, steps, warmup, device)}
                rows.append(r)
                print(
                    f"{cfg:9s} {g:16s} {est:6s} {r['seconds_per_epoch']:9.3f} s/epoch "
                    f"(aux step {100 * r['aux_fraction']:.1f} %)",
                    flush=True,
                )
    doc = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, threads={args.threads}, {device}",
        "torch": torch.__version__,
        "quick": args.quick,
        "timed_steps": steps,
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(doc, fh, indent=2)
    return doc


if __name__ == "__main__":
    main()
