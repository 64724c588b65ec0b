"""Per-step cost of the zoo's parameter handling versus Pyro's module-local parameters, in one run.

* ``store``: today's path, :func:`zoo.infer.loop.fit` / ``resume`` — the fit's Pyro param-store scope,
  ``SVI`` and :class:`zoo.infer.optim.FusedPyroOptim` (one ``foreach`` Adam behind Pyro's per-parameter
  optimizer interface), including the loop's minibatch and ELBO book-keeping;
* ``local``: ``pyro.settings.set(module_local_params=True)``: model and guide keep their parameters as
  ``nn.Parameter``s, the ELBO is a module (``ELBO()(model, guide)``) and a plain
  ``torch.optim.Adam(params, foreach=True)`` steps ``elbo_module.parameters()``; the same minibatch
  order and the same ``float(loss)`` per step.

Problems (the same ELBO class on both sides): ``mfvi-bnn`` (AutoNormal guide, ``Trace_ELBO``) on diabetes
(50 hidden units, full batch, the registry defaults), and the mean-field LBBNN (``MeanFieldLBBNNGuide``,
its ``ClosedFormKL_ELBO``; Hubin & Storvik 2019, arXiv:1903.07594, §5) on a 784-400-600-10 ReLU net
with random data (batch 100).  Each approach runs ``warm`` untimed steps, then ``rounds`` alternating
blocks of ``steps`` timed steps; the median block gives ms/step and ``store / local`` is the ratio.

Usage: ``python benchmarks/params_speed.py [--steps 200] [--rounds 3] [--device cpu]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pyro
import torch
from pyro.infer import Trace_ELBO

from zoo.data import load_dataset
from zoo.experiments.registry import build
from zoo.infer.loop import fit, resume


def diabetes_problem(device: torch.device) -> dict:
    ds = load_dataset("diabetes", 0)
    x, y, _, _ = ds.tensors(device=device, dtype=torch.float32)
    y = (y - y.mean()) / y.std()
    return {
        "name": "mfvi-bnn diabetes 10-50-1 (full batch 398)",
        "build": lambda: build("mfvi-bnn", ds.in_features, 1, "regression", hidden=[50])[:2],
        "loss": lambda m, g: Trace_ELBO(),
        "x": x,
        "y": y,
        "batch": None,
        "lr": 1e-2,
    }


def lbbnn_problem(device: torch.device, n: int = 2000) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 784, generator=g).to(device)
    y = torch.randint(0, 10, (n,), generator=g).to(device)
    opts = {"hyper": "fixed", "inclusion": 0.1, "slab_var": 1.0}
    return {
        "name": "lbbnn mean-field 784-400-600-10 (batch 100)",
        "build": lambda: build("lbbnn", 784, 10, "multiclass", hidden=[400, 600], guide="mean-field", **opts)[
            :2
        ],
        "loss": lambda m, g: g.default_loss() or Trace_ELBO(),
        "x": x,
        "y": y,
        "batch": 100,
        "lr": 1e-2,
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def store_runner(p: dict, device: torch.device, warm: int) -> Callable[[int], float]:
    """Today's path: ``fit`` for ``warm`` steps, then ``resume``; returns seconds for ``k`` more steps."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    model, guide = p["build"]()
    res = fit(
        model, guide, p["x"], p["y"], steps=warm, batch_size=p["batch"], lr=p["lr"],
        loss=p["loss"](model, guide), seed=0, device=device, progress=False,
    )  # fmt: skip

    def run(k: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        resume(res, p["x"], p["y"], k, progress=False)
        _sync(device)
        return time.perf_counter() - t0

    run.info = lambda: (len(res.param_state["params"]), statistics.fmean(res.elbo[-20:]))
    return run


def _batches(n: int, batch: int | None, device: torch.device):
    """Epoch permutations without replacement, last partial batch dropped (as the zoo's loop)."""
    gen = torch.Generator().manual_seed(0)
    while True:
        if batch is None or batch >= n:
            yield None
            continue
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n - batch + 1, batch):
            yield perm[start : start + batch].to(device)


def local_runner(p: dict, device: torch.device, warm: int) -> Callable[[int], float]:
    """Module-local parameters, the ELBO as a module and a plain fused torch Adam."""
    with pyro.settings.context(module_local_params=True):
        pyro.set_rng_seed(0)
        model, guide = p["build"]()
        model.to(device)
        guide.to(device)
        elbo = p["loss"](model, guide)(model, guide)
        batches = _batches(p["x"].shape[0], p["batch"], device)
        elbo(p["x"], p["y"], subsample=next(batches))  # creates an autoguide's lazily built parameters
        opt = torch.optim.Adam(elbo.parameters(), lr=p["lr"], foreach=True)
        trace: list[float] = []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = elbo(p["x"], p["y"], subsample=next(batches))
        loss.backward()
        opt.step()
        trace.append(-float(loss.detach()))

    def run(k: int) -> float:
        with pyro.settings.context(module_local_params=True):
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(k):
                step()
            _sync(device)
            return time.perf_counter() - t0

    run(warm)
    run.info = lambda: (len(list(elbo.parameters())), statistics.fmean(trace[-20:]))
    return run


def measure(p: dict, device: torch.device, steps: int, rounds: int, warm: int) -> dict:
    runners = {"store": store_runner(p, device, warm), "local": local_runner(p, device, warm)}
    blocks: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            blocks[name].append(1e3 * run(steps) / steps)
    ms = {k: statistics.median(v) for k, v in blocks.items()}
    return {
        "store_ms": ms["store"],
        "local_ms": ms["local"],
        "ratio": ms["store"] / ms["local"],
        "blocks": blocks,
        "info": {k: run.info() for k, run in runners.items()},
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="timed steps per block")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks per approach")
    ap.add_argument("--warm", type=int, default=20, help="untimed steps first")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", choices=("mfvi", "lbbnn"), default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    pyro.enable_validation(False)
    device = torch.device(a.device)
    problems = {"mfvi": diabetes_problem, "lbbnn": lbbnn_problem}
    print(f"torch {torch.__version__}, pyro {pyro.__version__}, device {device}, threads {a.threads}")
    print(f"{'problem':<48} {'store ms':>9} {'local ms':>9} {'store/local':>11}")
    for key, make in problems.items():
        if a.only not in (None, key):
            continue
        p = make(device)
        r = measure(p, device, a.steps, a.rounds, a.warm)
        blocks = "; ".join(f"{k}: " + ", ".join(f"{v:.2f}" for v in vs) for k, vs in r["blocks"].items())
        print(f"{p['name']:<48} {r['store_ms']:9.2f} {r['local_ms']:9.2f} {r['ratio']:11.2f}")
        print(f"    blocks (ms/step) {blocks}")
        print(
            "    parameter tensors / mean ELBO of the last 20 steps: "
            + "; ".join(f"{k}: {n}, {e:.6g}" for k, (n, e) in r["info"].items())
        )


if __name__ == "__main__":
    main()
