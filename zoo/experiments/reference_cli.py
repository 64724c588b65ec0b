"""``zoo reference``: the reference posteriors guides are scored against (:mod:`zoo.reference`).

::

    zoo reference list [--root DIR]                       # every pinned instance, stored or not, diagnostics
    zoo reference compute NAME [--force] [--root DIR]     # NUTS (>= 4 chains) or exact enumeration; gated
    zoo reference score SPEC --instance NAME --out D [--seeds K] [--steps N] [--draws S]

``SPEC`` is ``model[:guide]`` (a registry model, optionally one of its guides).  ``compute`` refuses to
replace a stored reference without ``--force`` and writes atomically; a reference failing the quality gate
(:func:`zoo.reference.store.check_gate`) is not stored and the command exits 1 naming the failed checks.
``score`` fits the guide on the instance's data ``K`` times (seeds 0..K-1), scores it against the stored
reference (:func:`zoo.reference.score.score_spec`), prints the scores and writes ``D/scores.json``.  Bad
arguments are usage errors (exit code 2) raised before any fitting or writing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["add_reference_parser", "run_reference"]


def add_reference_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``zoo reference`` on the subparsers ``sub`` of the ``zoo`` parser."""
    from zoo.experiments.plugins import add_plugin_argument

    ref = sub.add_parser("reference", help="reference posteriors: list, compute, score a guide against one")
    rsub = ref.add_subparsers(dest="ref_command", required=True)
    ls = rsub.add_parser("list", help="the pinned instances, stored or not, with their diagnostics")
    comp = rsub.add_parser("compute", help="compute a reference instance and store it (gated)")
    comp.add_argument("name")
    comp.add_argument("--force", action="store_true", help="replace a stored reference")
    comp.add_argument("--progress", action="store_true", help="show the NUTS progress bar")
    comp.add_argument(
        "--parallel",
        action="store_true",
        help="run the chains in parallel worker processes, one per core (the same draws as in sequence)",
    )
    sc = rsub.add_parser("score", help="fit a guide on an instance's data and score it against the reference")
    sc.add_argument("spec", metavar="SPEC", help="model[:guide], e.g. hs-bnn:structured")
    sc.add_argument("--instance", required=True)
    sc.add_argument("--out", required=True)
    sc.add_argument("--seeds", type=int, default=1, help="fits with seeds 0..K-1 (default 1)")
    sc.add_argument("--steps", type=int, default=None, help="training steps (default: the model's)")
    sc.add_argument("--draws", type=int, default=1000, help="guide predictive draws per fit")
    sc.add_argument("--overwrite", action="store_true", help="replace an existing D/scores.json")
    for p in (ls, comp, sc):
        p.add_argument("--root", default=None, help="reference store (default benchmarks/reference)")
        p.add_argument("--data-dir", default=None, help="data root (default ZOO_DATA_DIR)")
        p.add_argument(
            "--threads", type=int, default=None, help="torch threads (default ZOO_NUM_THREADS or 1)"
        )
        add_plugin_argument(p)


def _root(a: argparse.Namespace):
    from zoo.reference.store import resolve_root

    return resolve_root(a.root or None)  # the Python API's default store too


def _instance(parser: argparse.ArgumentParser, name: str, flag: str):
    from zoo.reference.instances import get_instance

    try:
        return get_instance(name)
    except ValueError as e:
        parser.error(f"argument {flag}: {e}")


def _fmt(v: float, spec: str = ".3f") -> str:
    return "nan" if v != v else format(v, spec)


def _list(a: argparse.Namespace) -> int:
    from zoo.reference.instances import INSTANCES
    from zoo.reference.store import load_attempts, load_reference, stored_names

    root = _root(a)
    stored, attempts = set(stored_names(root)), load_attempts(root)
    print(f"reference store: {root}")
    for name, inst in INSTANCES.items():
        head = f"{name:22s} {inst.method:11s} {inst.model}/{inst.data.dataset} hidden={list(inst.hidden)}"
        if name not in stored:
            failed = attempts.get(name)
            why = f"  last attempt: {failed['error']}" if failed else ""
            print(f"{head}  [not stored]  ({inst.note}){why}")
            continue
        meta = load_reference(root, name)[1]
        d = meta["diagnostics"]
        if d.get("method") == "enumeration":
            diag = f"exact, {d['models']} models, quadrature error {d['quadrature_error']:.1e}"
        else:
            q = d["quantities"].values()
            diag = (
                f"R-hat max {_fmt(max(x['rhat_max'] for x in q), '.4f')}, bulk ESS min "
                f"{_fmt(min(x['ess_bulk_min'] for x in q), '.0f')}, tail ESS min "
                f"{_fmt(min(x['ess_tail_min'] for x in q), '.0f')}, divergences {d['divergences']}"
            )
        print(f"{head}  [stored, {meta['wall_seconds']:.0f} s]  {diag}")
    return 0


def _compute(parser: argparse.ArgumentParser, a: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from zoo.reference.compute import compute_and_store
    from zoo.reference.store import GateError, reference_path

    inst = _instance(parser, a.name, "NAME")
    root = _root(a)
    if reference_path(root, a.name).exists() and not a.force:
        parser.error(f"argument NAME: {a.name!r} is already stored in {root}; pass --force to recompute it")
    cmd = "zoo " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        path = compute_and_store(
            inst,
            root,
            force=a.force,
            data_dir=a.data_dir,
            progress=a.progress,
            command=cmd,
            parallel=a.parallel,
        )
    except GateError as e:
        print(f"zoo reference compute {a.name}: {e}", file=sys.stderr)
        return 1
    print(f"reference {a.name} stored at {path}")
    return 0


def _score(parser: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    from zoo.experiments.runs import dumps_json
    from zoo.io import atomic_write_text
    from zoo.reference.score import ScoreConfig, check_spec, format_scores, reference_data, score_spec
    from zoo.reference.store import load_reference

    inst = _instance(parser, a.instance, "--instance")
    try:
        model, guide = check_spec(a.spec, inst)
        config = ScoreConfig(seeds=a.seeds, steps=a.steps, draws=a.draws)
    except (TypeError, ValueError) as e:
        parser.error(f"argument SPEC/--seeds/--steps/--draws: {e}")
    try:
        reference = load_reference(_root(a), inst.name)
        reference_data(inst, reference[0], a.data_dir)
    except (FileNotFoundError, ValueError) as e:
        parser.error(f"argument --instance: {e}")
    from zoo.experiments.cli_common import check_out_dir

    out = os.path.join(a.out, "scores.json")
    try:
        check_out_dir(a.out)
    except ValueError as e:
        parser.error(f"argument --out: {e}")
    if os.path.exists(out) and not a.overwrite:
        parser.error(f"argument --out: {out!r} exists; pass --overwrite to replace it")
    result = score_spec(model, guide, inst, reference, config, data_dir=a.data_dir)
    os.makedirs(a.out, exist_ok=True)
    atomic_write_text(out, dumps_json(result))
    print(format_scores(result))
    print(f"-> {out}")
    return 0


def run_reference(parser: argparse.ArgumentParser, a: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Run ``zoo reference ...`` (parsed into ``a``)."""
    import logging

    import pyro

    from zoo.infer.threads import apply_num_threads

    if a.threads is not None and a.threads <= 0:
        parser.error(f"argument --threads: must be > 0, got {a.threads}")
    try:
        apply_num_threads(a.threads, default=1)  # capped at the machine's cores
    except ValueError as e:
        parser.error(f"argument --threads: {e}")
    if a.ref_command == "list":
        return _list(a)
    logging.basicConfig(format="%(message)s", stream=sys.stdout)  # progress messages, as `zoo reproduce`
    logging.getLogger("zoo").setLevel(logging.INFO)

    pyro.enable_validation(False)
    if a.ref_command == "compute":
        return _compute(parser, a, argv)
    return _score(parser, a)
