"""Bow-tie CAVI to convergence, plain sweeps against SQUAREM (:mod:`zoo.infer.accelerate`; issue 17).

For each dataset (default: diabetes, yacht and boston housing, split 0) the registry ``bowtie`` entry is
fitted exactly as its protocols fit it (:func:`zoo.experiments.runs.fit_on_dataset`: one hidden layer of
``--hidden`` units, 20 as the registry default and ``bowtie-diabetes``, 50 as ``bowtie-uci``; raw targets,
full batch, the paper's stopping rule — three consecutive relative ELBO changes below ``--tol`` = 1e-5,
Sheinkman & Wade 2025, arXiv:2411.11132, §4 / App. D.1) twice: with the plain sweep, and with
``accelerate="squarem"`` (one step = one SQUAREM cycle of three sweeps).  Both get the same sweep budget
``--max-sweeps``.  Reported per fit: sweeps, seconds, whether the rule fired (``converged``), final ELBO,
test RMSE / NLL / 95 % coverage.  One torch thread (``ZOO_NUM_THREADS``); the machine may be shared, so
seconds are wall time of each fit and the sweep counts are the machine-independent figure.

Usage::

    ZOO_DATA_DIR=/work/shared/data python benchmarks/bowtie_accel.py \\
        [--datasets diabetes uci:yacht uci:bostonHousing] [--max-sweeps 3000] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

DATASETS = ("diabetes", "uci:yacht", "uci:bostonHousing")


def run_one(
    dataset: str, accelerate: str | None, max_sweeps: int, tol: float, seed: int, hidden: int
) -> dict:
    from zoo.experiments.runs import RunConfig, fit_on_dataset

    steps = max_sweeps if accelerate is None else max(1, max_sweeps // 3)  # a cycle is three sweeps
    options = {"accelerate": accelerate} if accelerate else {}
    cfg = RunConfig(split=0, seed=seed, steps=steps, hidden=[hidden], progress=False, fit_options=options)
    t0 = time.perf_counter()
    run = fit_on_dataset("bowtie", dataset, cfg) if tol is None else _with_tol(dataset, cfg, tol)
    wall = time.perf_counter() - t0
    res = run.result
    return {
        "dataset": dataset,
        "hidden": hidden,
        "method": accelerate or "plain",
        "sweeps": int(res.loop_state.get("sweeps", res.steps)),
        "steps": res.steps,
        "converged": bool(res.converged),
        "fit_seconds": round(res.wall_time, 3),
        "wall_seconds": round(wall, 3),
        "elbo": float(res.elbo[-1]),
        "squarem_accepted": res.loop_state.get("squarem_accepted"),
        **{k: run.metrics[k] for k in ("rmse", "nll", "coverage95") if k in run.metrics},
    }


def _with_tol(dataset: str, cfg, tol: float):
    """``fit_on_dataset`` with the entry's stopping tolerance replaced by ``tol``."""
    from zoo.experiments.registry import get_entry
    from zoo.experiments.runs import fit_on_dataset

    entry = get_entry("bowtie")
    saved = dict(entry.fit_defaults)
    try:
        entry.fit_defaults["tol"] = tol
        return fit_on_dataset("bowtie", dataset, cfg)
    finally:
        entry.fit_defaults.clear()
        entry.fit_defaults.update(saved)


def markdown(rows: list[dict], command: str, hidden: int) -> str:
    lines = [
        "# bowtie-accel",
        "",
        f"Bow-tie CAVI (registry `bowtie`, 1x{hidden}, raw targets, split 0) to the paper's stopping rule "
        '(three consecutive relative ELBO changes < tol), plain sweeps vs SQUAREM (`accelerate="squarem"`, '
        "Varadhan & Roland 2008, with a monotone-ELBO safeguard), the same sweep budget.",
        "",
        f"Command: `{command}`",
        "",
        "| dataset | method | sweeps | converged | fit s | ms / sweep | ELBO | RMSE | NLL | cov. 95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['method']} | {r['sweeps']} | {'yes' if r['converged'] else 'no'} | "
            f"{r['fit_seconds']:.1f} | {1e3 * r['fit_seconds'] / r['sweeps']:.1f} | {r['elbo']:.2f} | "
            f"{r.get('rmse', float('nan')):.3f} | "
            f"{r.get('nll', float('nan')):.3f} | {r.get('coverage95', float('nan')):.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS))
    p.add_argument("--max-sweeps", type=int, default=3000)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=20, help="units of the one hidden layer")
    p.add_argument("--out", default=None, help="write bowtie-accel.{json,md} into this folder")
    a = p.parse_args(argv)
    if a.max_sweeps < 3:
        p.error("--max-sweeps must be >= 3")
    if not os.environ.get("ZOO_DATA_DIR"):
        p.error("needs ZOO_DATA_DIR (e.g. /work/shared/data)")
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for ds in a.datasets:
        for acc in (None, "squarem"):
            r = run_one(ds, acc, a.max_sweeps, a.tol, a.seed, a.hidden)
            rows.append(r)
            print(json.dumps(r), flush=True)
    command = "python benchmarks/bowtie_accel.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(rows, command.strip(), a.hidden)
    print(text)
    if a.out:
        from zoo.io import atomic_write_many

        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_many(
            {
                out / "bowtie-accel.json": json.dumps({"command": command, "rows": rows}, indent=1).encode(),
                out / "bowtie-accel.md": text.encode(),
            }
        )
    return rows


if __name__ == "__main__":
    main()
