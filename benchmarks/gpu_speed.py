"""CUDA versus CPU speed of three zoo workloads, the same code on both devices (issue 18, GPU check).

* ``lbbnn-mf-epoch``: seconds per epoch of the mean-field LBBNN 784-400-600-10 on mnist10k, batch 100
  (Hubin & Storvik 2019, arXiv 1903.07594, §5; closed-form KL ELBO);
* ``horseshoe-epoch``: seconds per epoch of the horseshoe BNN 784-400-400-10 on mnist10k, factorized guide
  with the local-reparameterization estimator, batch 128 (Ghosh, Yao & Doshi-Velez 2019, arXiv 1705.10388,
  §6.5), gradient plus closed-form auxiliary step (``benchmarks/hs_speed.py``);
* ``bowtie-cavi-sweep``: seconds per full-batch CAVI sweep of the bow-tie BNN on protein (N = 41,157;
  Sheinkman & Wade 2025, arXiv 2411.11132, Algorithm 1), float64.

Each workload runs ``--warmup`` untimed steps, then ``--steps`` timed steps (sweeps), scaled to one epoch.
CUDA times include a device synchronization per step (the loop reads every step's ELBO).  Called by
``benchmarks/gpu_check.sh``, which passes the test-suite outcome to record next to the figures.

Usage::

    ZOO_DATA_DIR=<data> python benchmarks/gpu_speed.py [--devices cpu cuda] [--out results/gpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import pyro
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from zoo.data import load_dataset  # noqa: E402
from zoo.experiments.registry import build  # noqa: E402
from zoo.infer.loop import fit, resume  # noqa: E402
from zoo.io import atomic_write_text  # noqa: E402


def _timed(model, guide, x, y, warmup: int, steps: int, device: str, **kw) -> float:
    """Seconds per step of :func:`zoo.infer.loop.fit` after ``warmup`` steps."""
    res = fit(model, guide, x, y, steps=warmup, progress=False, seed=0, device=device, **kw)
    before = res.wall_time
    resume(res, x, y, steps, progress=False)
    return (res.wall_time - before) / steps


def lbbnn_epoch(device: str, warmup: int, steps: int, data_dir: str | None) -> float:
    from guides.lbbnn.elbo import ClosedFormKL_ELBO

    ds = load_dataset("mnist10k", 0, data_dir=data_dir)
    x, y, _, _ = ds.tensors(dtype=torch.float32)
    pyro.set_rng_seed(0)
    model, guide, _ = build(
        "lbbnn", 784, 10, "multiclass", hidden=(400, 600), guide="mean-field", hyper="fixed", inclusion=0.1
    )
    loss = ClosedFormKL_ELBO()
    per_step = _timed(model, guide, x, y, warmup, steps, device, lr=1e-3, batch_size=100, loss=loss)
    return per_step * (x.shape[0] // 100)


def horseshoe_epoch(device: str, warmup: int, steps: int, data_dir: str | None) -> float:
    import hs_speed

    ds = load_dataset("mnist10k", 0, data_dir=data_dir)
    row = hs_speed.time_one(ds, [400, 400], "factorized", "lrt", steps, warmup, torch.device(device))
    return row["seconds_per_epoch"]


def bowtie_sweep(device: str, warmup: int, steps: int, data_dir: str | None, hidden: int = 20) -> float:
    ds = load_dataset("uci:protein-tertiary-structure", 0, data_dir=data_dir)
    x, y, _, _ = ds.tensors(dtype=torch.float64)
    pyro.set_rng_seed(0)
    model, guide, _ = build("bowtie", x.shape[1], 1, "regression", hidden=[hidden])
    return _timed(model, guide, x, y, max(1, warmup), steps, device)


WORKLOADS = {
    "lbbnn-mf-epoch": (lbbnn_epoch, "s/epoch"),
    "horseshoe-epoch": (horseshoe_epoch, "s/epoch"),
    "bowtie-cavi-sweep": (bowtie_sweep, "s/sweep"),
}


def _tests_record(log: str | None, rc: int | None, seconds: float | None) -> dict | None:
    """The test suite's outcome from its pytest log: exit code, last line, counts and the failed test ids.

    ``pytest -v`` lines (``... PASSED``/``FAILED``/``ERROR``/``SKIPPED``, printed as each test ends, so a
    suite stopped at its time cap still names its failures) are counted when present; otherwise the
    ``-q`` progress marks are."""
    if log is None:
        return None
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    outcomes = {"passed": "PASSED", "failed": "FAILED", "errors": "ERROR", "skipped": "SKIPPED"}
    verbose = [ln for ln in lines if "::" in ln and any(f" {w}" in ln for w in outcomes.values())]
    failed: list[str] = []
    if verbose:
        counts = {k: sum(f" {w}" in ln for ln in verbose) for k, w in outcomes.items()}
        failed = sorted(
            {tok for ln in verbose if " FAILED" in ln or " ERROR" in ln for tok in ln.split() if "::" in tok}
        )
    else:
        progress = "".join(ln.split(" [")[0] for ln in lines if ln.rstrip().endswith("%]"))
        marks = (("passed", "."), ("failed", "F"), ("errors", "E"), ("skipped", "s"))
        counts = {k: progress.count(c) for k, c in marks}
    return {
        "rc": rc,
        "seconds": seconds,
        "summary": lines[-1] if lines else "",
        "progress_counts": counts,
        "failed": failed,
        "timed_out": rc in (124, 137),
    }


def run(devices: list[str], warmup: int, steps: int, sweeps: int, data_dir: str | None) -> list[dict]:
    rows = []
    for name, (fn, unit) in WORKLOADS.items():
        row: dict = {"workload": name, "unit": unit}
        for dev in devices:
            n = sweeps if name == "bowtie-cavi-sweep" else steps
            try:
                row[f"{dev}_seconds"] = fn(dev, warmup, n, data_dir)
            except Exception as e:  # one broken workload must not lose the others' figures
                row[f"{dev}_error"] = f"{type(e).__name__}: {e}"
                print(f"{name} on {dev}: failed: {row[f'{dev}_error']}", flush=True)
                continue
            print(f"{name} on {dev}: {row[f'{dev}_seconds']:.3f} {unit}", flush=True)
        if "cpu_seconds" in row and "cuda_seconds" in row:
            row["speedup_cuda_over_cpu"] = row["cpu_seconds"] / row["cuda_seconds"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["cpu", "cuda"], choices=["cpu", "cuda"])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="timed minibatch steps per epoch workload")
    p.add_argument("--sweeps", type=int, default=2, help="timed bow-tie sweeps")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--tests-log", default=None, help="pytest -q log of the ZOO_DEVICE=cuda suite")
    p.add_argument("--tests-rc", type=int, default=None)
    p.add_argument("--tests-seconds", type=float, default=None)
    p.add_argument("--out", default=None, help="write the record (JSON) here")
    a = p.parse_args(argv)
    if "cuda" in a.devices and not torch.cuda.is_available():
        p.error("--devices cuda: torch sees no CUDA device")
    pyro.enable_validation(False)
    t0 = time.perf_counter()
    record = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu": f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "command": "bash benchmarks/gpu_check.sh",
        "tests": _tests_record(a.tests_log, a.tests_rc, a.tests_seconds),
        "rows": run(a.devices, a.warmup, a.steps, a.sweeps, a.data_dir),
    }
    record["benchmark_seconds"] = time.perf_counter() - t0
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        atomic_write_text(a.out, json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    rec = main(sys.argv[1:])
    sys.exit(1 if any(k.endswith("_error") for row in rec["rows"] for k in row) else 0)
