"""The zoo's committed rows of a ``zoo bench`` suite: ``benchmarks/results/bench-<suite>.json`` (+ .md).

Every zoo entry that fits the suite's tasks is fitted with its default guide, plus its structured and flow
guides where it has them (:data:`ZOO_SPECS`), at the suite's budget, over all its datasets × splits, with
the per-fit journal of ``zoo bench`` in ``--work`` (an interrupted run started again resumes there).  The
result holds every fit's metrics, the exact command, the versions and the wall time; ``zoo bench`` reads it
to place a benched model among the zoo.

    ZOO_NUM_THREADS=1 python benchmarks/bench_zoo_rows.py --suite uci-small --work /tmp/bench-uci-small

``--steps`` / ``--splits`` make a smoke run (written only with ``--results-dir``, never over the committed
file).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import pyro
import torch

from zoo.experiments.bench import BenchPlan, parse_spec, run_fits
from zoo.experiments.bench_fit import load_bench_dataset
from zoo.experiments.cli_common import parse_splits
from zoo.experiments.registry import get_entry
from zoo.experiments.runs import dumps_json
from zoo.experiments.suites import get_suite
from zoo.io import atomic_write_text

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

#: the zoo's rows: each regression-capable entry's default guide plus its structured / flow guides
ZOO_SPECS = (
    "blr-cavi:cavi",
    "bowtie:cavi",
    "cm-bnn:collapsed",
    "cv-bnn:collapsed",
    "cmv-bnn:collapsed",
    "hs-bnn:factorized",
    "hs-bnn:structured",
    "hs-bnn:flow",
    "reg-hs-bnn:factorized",
    "reg-hs-bnn:structured",
    "lbbnn:mean-field",
    "lbbnn:lcrt",
    "lbbnn:flow",
    "mfvi-bnn:normal",
    "mfvi-bnn:flow",
    "ngig-bnn:normal",
)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.rstrip("\n") if done.returncode == 0 else None


def versions() -> dict:
    """Python, torch, pyro, the checkout's commit and the files changed since it (when the rows were
    computed from a working tree with uncommitted changes)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "zoo_commit": (_git("rev-parse", "HEAD") or "").strip() or None,
        "uncommitted_changes": None if status is None else [line[3:] for line in status.splitlines()],
    }


def fitting_specs(suite, specs: tuple, data_dir: str | None) -> tuple:
    """The ``specs`` whose registry entry takes the task of at least one of the suite's datasets (the
    ``selection`` suite is binary: the regression-only ``blr-cavi`` and ``bowtie`` sit it out)."""
    tasks = {load_bench_dataset(d, suite.splits[0], data_dir, None).task for d in suite.datasets}
    return tuple(s for s in specs if tasks & set(get_entry(s.model).tasks))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", required=True)
    p.add_argument("--work", required=True, help="journal folder (resumable)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument(
        "--specs",
        default=None,
        help="comma-separated name:guide list (default: the ZOO_SPECS whose entry fits a task of the suite)",
    )
    p.add_argument("--steps", type=int, default=None, help="smoke runs only")
    p.add_argument("--splits", default=None, help="smoke runs only, e.g. 0-0")
    p.add_argument("--results-dir", default=None, help=f"default {RESULTS} (refused for smoke runs)")
    p.add_argument("--data-dir", default=None)
    a = p.parse_args(argv)
    suite = get_suite(a.suite)
    if a.specs is None:
        specs = fitting_specs(suite, tuple(parse_spec(s) for s in ZOO_SPECS), a.data_dir)
    else:
        specs = tuple(parse_spec(s) for s in a.specs.split(",") if s)
    splits = parse_splits(a.splits)
    plan = BenchPlan(
        suite, specs, splits=None if splits is None else tuple(splits), steps=a.steps, data_dir=a.data_dir
    )
    if plan.off_budget and a.results_dir is None:
        p.error("--steps/--splits make a smoke run: give --results-dir (the committed rows are at budget)")
    logging.basicConfig(format="%(asctime)s %(message)s", stream=sys.stdout, level=logging.WARNING)
    logging.getLogger("zoo").setLevel(logging.INFO)
    doc = run_fits(plan, a.work, jobs=a.jobs)
    out = Path(a.results_dir) if a.results_dir else RESULTS
    # doc's wall time, not this process's: a resumed run keeps the time of the fits it reuses
    write_results(out, suite, plan, doc, float(doc["wall_seconds"]), a.jobs)
    return 0


def write_results(out: Path, suite, plan: BenchPlan, doc: dict, wall: float, jobs: int) -> None:
    from zoo.experiments.bench_identity import zoo_row_identity
    from zoo.experiments.leaderboard import zoo_rows_markdown

    cmd = "ZOO_NUM_THREADS=1 python " + " ".join(shlex.quote(x) for x in sys.argv)
    result = {
        "suite": suite.name,
        "suite_identity": suite.identity(),
        "off_budget": plan.off_budget,
        "description": suite.description,
        "command": cmd,
        "versions": versions(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, jobs={jobs}, torch threads 1",
        "wall_seconds": round(wall, 1),
        "fits_seconds": round(sum(float(r.get("total_seconds", 0.0)) for r in doc["rows"]), 1),
        "specs": [s.label for s in plan.specs],
        # the settings behind each spec's rows: zoo bench notes rows computed before a default changed
        "spec_identities": {s.label: zoo_row_identity(s.label) for s in plan.specs},
        "rows": doc["rows"],
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"bench-{suite.name}.json", dumps_json(result))
    atomic_write_text(out / f"bench-{suite.name}.md", zoo_rows_markdown(result))


if __name__ == "__main__":
    sys.exit(main())
