"""Data-parallel scaling of one fit on this machine: 1 versus 2 processes (``nproc``, gloo on CPU).

Two workloads on ``uci:protein-tertiary-structure`` split 0 (N = 41,157 training rows, 9 features):

* ``bowtie-cavi-sweep``: seconds per full-batch CAVI sweep of the bow-tie BNN (Sheinkman & Wade 2025,
  arXiv 2411.11132, Algorithm 1) — distributed CAVI: each rank sweeps its rows' locals, the sufficient
  statistics of Eqs. (15)-(16) are all-reduced (:mod:`zoo.infer.distributed`);
* ``mfvi-bnn-epoch``: seconds per epoch of the mean-field Gaussian BNN (Blundell et al. 2015, arXiv
  1505.05424) with Adam, one hidden layer of 50 units, global batch 512: each rank takes half of every
  minibatch, gradients all-reduced.

Times are medians of per-step wall-clock gaps recorded by a rank-0 callback (the first step — the bow-tie's
initialization, process start-up — is excluded), so the ratio is the steady-state speed-up, not counting
the one-off cost of spawning the ranks (reported separately as ``startup_seconds``).  Every process uses
one torch thread.  The machine is shared: expect noise.

Usage::

    ZOO_DATA_DIR=<data> python benchmarks/scaling.py [--hidden 10] [--sweeps 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import pyro
import torch

from zoo.data import load_dataset
from zoo.experiments.registry import build
from zoo.infer.loop import fit
from zoo.io import atomic_write_text

DATASET = "uci:protein-tertiary-structure"


class StepClock:
    """A picklable fit callback: appends ``time.perf_counter()`` after every step to a file (rank 0 runs
    callbacks, so the clock works the same under ``nproc > 1``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, step: int, elbo: float, result) -> None:
        with open(self.path, "a") as fh:
            fh.write(f"{time.perf_counter()!r} {time.process_time()!r}\n")

    def gaps(self) -> tuple[list[float], list[float]]:
        """Wall-clock and rank-0 CPU seconds between consecutive steps."""
        with open(self.path) as fh:
            stamps = [tuple(map(float, line.split())) for line in fh if line.strip()]
        wall = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
        return wall, [b[1] - a[1] for a, b in zip(stamps, stamps[1:])]


def timed_fit(model: str, x, y, nproc: int, steps: int, **kw) -> dict:
    """Fit ``model`` for ``steps`` steps on ``nproc`` processes; median step gap (after the first step) and
    the wall time of the whole call."""
    pyro.set_rng_seed(0)
    m, g, _ = build(model, x.shape[1], 1, "regression", **kw.pop("build"))
    with tempfile.TemporaryDirectory() as d:
        clock = StepClock(os.path.join(d, "clock.txt"))
        t0 = time.perf_counter()
        res = fit(m, g, x, y, steps=steps, nproc=nproc, progress=False, callbacks=[clock], seed=0, **kw)
        total = time.perf_counter() - t0
        wall, cpu = clock.gaps()
    return {
        "step_seconds": statistics.median(wall),
        "step_cpu_seconds": statistics.median(cpu),
        "steps": len(wall) + 1,
        "call_seconds": total,
        "elbo_last": res.elbo[-1],
    }


def _row(workload: str, nproc: int, t: dict, per_unit: int, unit: str) -> dict:
    return {
        "workload": workload,
        "nproc": nproc,
        "seconds": t["step_seconds"] * per_unit,
        "rank0_cpu_seconds": t["step_cpu_seconds"] * per_unit,
        "unit": unit,
        "call_seconds": t["call_seconds"],
        "elbo_last": t["elbo_last"],
    }


def run(hidden: int, sweeps: int, epochs: float, data_dir: str | None) -> dict:
    ds = load_dataset(DATASET, 0, data_dir=data_dir)
    x64, y64, _, _ = ds.tensors(dtype=torch.float64)
    x32, y32 = x64.float(), ((y64 - y64.mean()) / y64.std()).float()
    n, batch = x64.shape[0], 512
    mf_steps = 1 + max(2, int(epochs * (n // batch)))
    rows = []
    for nproc in (1, 2):
        bt = timed_fit("bowtie", x64, y64, nproc, 1 + sweeps, build={"hidden": [hidden]})
        rows.append(_row("bowtie-cavi-sweep", nproc, bt, 1, "s/sweep"))
        mf = timed_fit(
            "mfvi-bnn", x32, y32, nproc, mf_steps, batch_size=batch, lr=1e-3, build={"hidden": [50]}
        )
        rows.append(_row("mfvi-bnn-epoch", nproc, mf, n // batch, "s/epoch"))
    ratios = {}
    for w in ("bowtie-cavi-sweep", "mfvi-bnn-epoch"):
        one, two = (r for r in rows if r["workload"] == w)
        ratios[w] = {
            "speedup_2_over_1": one["seconds"] / two["seconds"],
            "rank0_cpu_ratio_1_over_2": one["rank0_cpu_seconds"] / two["rank0_cpu_seconds"],
        }
    return {"dataset": DATASET, "n_train": n, "bowtie_hidden": [hidden], "mfvi_hidden": [50], "batch": batch,
            "rows": rows, "ratios": ratios}  # fmt: skip


#: the protocol slice fanned out by --fanout: mfvi-bnn on kin8nm and power, splits 0-1 (4 fits)
FANOUT = [("uci:kin8nm", 0), ("uci:kin8nm", 1), ("uci:power-plant", 0), ("uci:power-plant", 1)]


def _same_rows(a: list[dict], b: list[dict]) -> bool:
    """Rows equal up to their timing fields."""

    def strip(r: dict) -> dict:
        return {k: v for k, v in r.items() if "seconds" not in k and "time" not in k}

    return [strip(r) for r in a] == [strip(r) for r in b]


def fanout(steps: int, jobs: int) -> dict:
    """The FANOUT slice (``steps`` steps per fit) through the zoo's joblib dispatcher on loky and on a local
    Dask cluster with ``jobs`` workers: wall time of each, and whether the rows agree."""
    from zoo.experiments.dispatch import DispatchConfig, dispatch
    from zoo.experiments.protocol import RunSpec
    from zoo.experiments.reproduce import _run_one

    specs = [RunSpec("mfvi-bnn", "mfvi-bnn", d, s, {"hidden": [50], "steps": steps}) for d, s in FANOUT]
    out, rows = {}, {}
    for backend in ("loky", "dask"):
        t0 = time.perf_counter()
        got = dict(dispatch(_run_one, specs, DispatchConfig(backend=backend, jobs=jobs)))
        out[backend] = time.perf_counter() - t0
        rows[backend] = [got[i] for i in range(len(specs))]
    return {"fits": len(specs), "steps": steps, "jobs": jobs, "loky_seconds": out["loky"],
            "dask_seconds": out["dask"], "dask_over_loky": out["dask"] / out["loky"],
            "rows_equal": _same_rows(rows["loky"], rows["dask"])}  # fmt: skip


def to_markdown(res: dict, command: str) -> str:
    lines = [
        "# Data-parallel scaling (1 vs 2 processes, gloo on CPU)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {res['machine']}. Dataset `{res['dataset']}` split 0, N = {res['n_train']}. "
        f"Bow-tie hidden {res['bowtie_hidden']} (float64 CAVI); mfvi-bnn hidden {res['mfvi_hidden']}, "
        f"global batch {res['batch']}. One torch thread per process; medians of per-step times, the first "
        "step (initialization) excluded; `call` is the whole call including spawning the ranks. "
        "Rank-0 CPU time is the work one process does per unit (a ratio near 2 means the work is split "
        "evenly, whatever the machine's load); wall time is what the user waits.",
        f"Load average when the run started: {res.get('load_average', 'n/a')}.",
        "",
        "| workload | nproc | wall time | rank-0 CPU time | unit | call (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        cells = (r["workload"], r["nproc"], f"{r['seconds']:.3f}", f"{r['rank0_cpu_seconds']:.3f}", r["unit"],
                 f"{r['call_seconds']:.1f}")  # fmt: skip
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", "| workload | wall speed-up 2 over 1 | rank-0 CPU 1 over 2 |", "|---|---|---|"]
    lines += [
        f"| {w} | {v['speedup_2_over_1']:.2f} | {v['rank0_cpu_ratio_1_over_2']:.2f} |"
        for w, v in res["ratios"].items()
    ]
    f = res.get("fanout")
    if f:
        lines += [
            "",
            f"Fan-out of a protocol slice (mfvi-bnn on kin8nm and power, splits 0-1: {f['fits']} fits of "
            f"{f['steps']} steps, {f['jobs']} workers) through `zoo.experiments.dispatch`:",
            "",
            "| backend | wall (s) |",
            "|---|---|",
            f"| loky | {f['loky_seconds']:.1f} |",
            f"| dask (LocalCluster) | {f['dask_seconds']:.1f} |",
            "",
            f"dask / loky = {f['dask_over_loky']:.2f}; rows equal (timings aside): {f['rows_equal']}.",
        ]
    for note in res.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=10, help="bow-tie hidden width")
    p.add_argument("--sweeps", type=int, default=3, help="timed bow-tie sweeps (after the first)")
    p.add_argument("--epochs", type=float, default=1.0, help="timed mfvi-bnn epochs")
    p.add_argument("--data-dir", default=None)
    p.add_argument(
        "--fanout-steps", type=int, default=200, help="steps per fit of the fan-out slice (0: skip)"
    )
    p.add_argument("--out", default=None, help="folder for scaling.json / scaling.md")
    a = p.parse_args(argv)
    if a.hidden < 1 or a.sweeps < 2 or a.epochs <= 0:
        p.error("--hidden must be >= 1, --sweeps >= 2 and --epochs > 0")
    os.environ.setdefault("ZOO_NUM_THREADS", "1")
    torch.set_num_threads(1)
    pyro.enable_validation(False)
    t0 = time.perf_counter()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    res = run(a.hidden, a.sweeps, a.epochs, a.data_dir)
    res["load_average"] = None if load is None else [round(v, 2) for v in load]
    if a.fanout_steps > 0:
        res["fanout"] = fanout(a.fanout_steps, 2)
    res["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    res["total_seconds"] = time.perf_counter() - t0
    command = "ZOO_DATA_DIR=<data> python benchmarks/scaling.py " + " ".join(argv if argv is not None else [])
    print(to_markdown(res, command.strip()))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        record = json.dumps({**res, "command": command}, indent=1)
        atomic_write_text(os.path.join(a.out, "scaling.json"), record)
        atomic_write_text(os.path.join(a.out, "scaling.md"), to_markdown(res, command.strip()))
    return res


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
