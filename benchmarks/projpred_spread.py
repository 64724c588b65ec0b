"""How stable is projection-predictive unit pruning across fit seeds? (issue 20, item 1(b))

One dataset split, one registry entry, ``--seeds`` independent fits (the seed changes the guide's
initialization, the minibatch order and the projected draws; the data split stays fixed), each pruned by
:func:`zoo.sparsity.runs.prune_run` (rule ``nll``, 0.01 nats per training point).  Reported per seed: units
kept, the test-set change in NLL and RMSE of the pruned network, and the prune seconds; then the spread
(mean, sd, min, max) of the units kept.  Writes ``OUT/projpred-spread.{json,md}``.

Usage::

    ZOO_DATA_DIR=/work/shared/data python benchmarks/projpred_spread.py \\
        [--model hs-bnn] [--guide factorized] [--dataset uci:yacht] [--split 0] [--seeds 0 1 2 3 4] [--out D]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import statistics
import sys
import time
from pathlib import Path


def run_seed(model: str, guide: str | None, dataset: str, split: int, seed: int) -> dict:
    from zoo.experiments.runs import RunConfig, fit_on_dataset
    from zoo.sparsity import ProjpredConfig
    from zoo.sparsity.runs import prune_run

    cfg = RunConfig(split=split, seed=seed, hidden=(50,), guide=guide, progress=False)
    t0 = time.perf_counter()
    run = fit_on_dataset(model, dataset, cfg)
    cols = prune_run(run, ProjpredConfig(seed=seed))
    return {
        "seed": seed,
        "rmse": run.metrics["rmse"],
        "nll": run.metrics["nll"],
        **{k: cols[k] for k in ("pp_units_kept", "pp_units_total", "prune_delta_nll", "prune_delta_rmse")},
        "prune_seconds": cols["prune_seconds"],
        "prune_kept": cols["prune_kept"],
        "seconds": round(time.perf_counter() - t0, 2),
    }


def markdown(rows: list[dict], title: str, command: str) -> str:
    kept = [r["pp_units_kept"] for r in rows]
    sd = statistics.stdev(kept) if len(kept) > 1 else 0.0
    lines = [
        "# projpred-spread",
        "",
        f"{title}: one fit per seed, pruned by projection (zoo.sparsity, rule nll, 0.01 nats per training "
        f"point).  Units kept over {len(rows)} seeds: mean {statistics.fmean(kept):.1f} ± {sd:.1f}, "
        f"min {min(kept)}, max {max(kept)}.",
        "",
        f"Command: `{command}`",
        "",
        "| seed | RMSE | NLL | units kept | ΔNLL (test) | ΔRMSE (test) | prune s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['rmse']:.3f} | {r['nll']:.3f} | "
            f"{r['pp_units_kept']} of {r['pp_units_total']} | {r['prune_delta_nll']:+.4f} | "
            f"{r['prune_delta_rmse']:+.4f} | {r['prune_seconds']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="hs-bnn")
    p.add_argument("--guide", default="factorized")
    p.add_argument("--dataset", default="uci:yacht")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--out", default=None, help="write projpred-spread.{json,md} into this folder")
    a = p.parse_args(argv)
    if not os.environ.get("ZOO_DATA_DIR") and a.dataset.startswith("uci:"):
        p.error("needs ZOO_DATA_DIR (e.g. /work/shared/data)")
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    rows = []
    for s in a.seeds:
        rows.append(run_seed(a.model, a.guide or None, a.dataset, a.split, s))
        print(json.dumps(rows[-1]), flush=True)
    command = "python benchmarks/projpred_spread.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    title = f"{a.model} ({a.guide or 'default guide'}), {a.dataset} split {a.split}, 1x50"
    text = markdown(rows, title, command.strip())
    print(text)
    if a.out:
        from zoo.io import atomic_write_many

        out = Path(a.out)
        payload = json.dumps({"command": command.strip(), "rows": rows}, indent=1).encode()
        atomic_write_many({out / "projpred-spread.json": payload, out / "projpred-spread.md": text.encode()})
    return rows


if __name__ == "__main__":
    main()
