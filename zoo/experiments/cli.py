"""Command line: ``zoo list [--matrix]`` | ``zoo fit MODEL --dataset NAME --out DIR`` |
``zoo reproduce NAME --out DIR`` | ``zoo bench SPEC --suite NAME --out DIR`` (see ``bench_cli``).

Every subcommand takes ``--plugin PATH_OR_MODULE`` (repeatable, also before the subcommand) to load models
from outside the package first (:mod:`zoo.experiments.plugins`).  ``zoo fit`` takes a registered dataset or
an own table file (``--dataset csv:PATH --target COLUMN``, :mod:`zoo.experiments.cli_data`) and refuses an
``--out`` folder holding an earlier run unless ``--overwrite`` is given.

Every argument is validated before anything is written; a bad argument is a usage error naming it
(exit code 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from zoo.experiments.cli_common import log_progress as _log_progress
from zoo.experiments.cli_common import parse_options as _parse_options
from zoo.experiments.cli_common import parse_splits as _parse_splits

__all__ = ["main", "build_parser"]


def _threads(n: int | None) -> None:
    from zoo.infer.threads import apply_num_threads  # the one reader of ZOO_NUM_THREADS (also used by fit)

    apply_num_threads(n, default=1)


RUN_FILES = ("metrics.json", "checkpoint.pt", "posterior.nc")
"""The files of a run folder: ``zoo fit --out DIR`` refuses a DIR holding any of them without --overwrite."""


def build_parser() -> argparse.ArgumentParser:
    from zoo.experiments.plugins import add_plugin_argument

    p = argparse.ArgumentParser(
        prog="zoo", description="Sparse and shrinkage Bayesian neural networks on Pyro."
    )
    add_plugin_argument(p, dest="plugin_pre")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="list the registered models")
    ls.add_argument(
        "--matrix",
        action="store_true",
        help="print the composition matrix (every prior family x every guide family) instead",
    )
    add_plugin_argument(ls)
    _add_fit(sub)
    _add_reproduce(sub)
    from zoo.experiments.bench_cli import add_bench_parser

    add_bench_parser(sub)
    from zoo.experiments.reference_cli import add_reference_parser

    add_reference_parser(sub)
    return p


def _add_fit(sub) -> None:
    from zoo.experiments.cli_data import add_data_arguments
    from zoo.experiments.plugins import add_plugin_argument

    f = sub.add_parser(
        "fit",
        help="fit a registered model on a dataset and write DIR/{metrics.json,posterior.nc,checkpoint.pt}",
    )
    f.add_argument("model")
    f.add_argument(
        "--dataset",
        required=True,
        help="diabetes, breast-cancer, digits, uci:<name>, mnist10k, ..., or own data csv:PATH / npz:PATH",
    )
    f.add_argument("--split", type=int, default=0)
    f.add_argument("--hidden", type=int, nargs="+", default=None, help="hidden widths, e.g. --hidden 50 50")
    f.add_argument("--guide", default=None)
    f.add_argument("--steps", type=int, default=None)
    f.add_argument("--lr", type=float, default=None)
    f.add_argument("--batch-size", type=int, default=None)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--device", default=None, help="cpu (default, or ZOO_DEVICE) or cuda")
    f.add_argument("--num-samples", type=int, default=100, help="posterior draws for prediction")
    f.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default ZOO_NUM_THREADS, else 1: "
        "the zoo's small networks run fastest single-threaded on a 2-core machine)",
    )
    f.add_argument("--data-dir", default=None, help="data root (default ZOO_DATA_DIR)")
    f.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model builder option (repeatable), e.g. --option regularized=true; values parse as JSON",
    )
    f.add_argument(
        "--guide-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="guide option (repeatable), e.g. --guide-option beta_rule=textbook; values parse as JSON",
    )
    f.add_argument(
        "--ensemble",
        type=int,
        default=1,
        metavar="K",
        help="fit K members (seeds seed + 10007 i) and combine them with ELBO weights (paper 000 §3.6); "
        "members go to DIR/member_i, the ensemble's metrics to DIR/metrics.json",
    )
    f.add_argument("--jobs", type=int, default=1, help="worker processes for --ensemble members")
    f.add_argument("--zeta", type=float, default=0.1, help="ensemble weight tempering, w ∝ exp(zeta ELBO)")
    f.add_argument("--no-progress", action="store_true")
    f.add_argument("--out", required=True)
    f.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace an earlier run in --out (a folder holding {', '.join(RUN_FILES)} is refused)",
    )
    add_data_arguments(f)
    from zoo.experiments.cli_nuts import add_nuts_arguments  # --inference nuts --chains --warmup --samples

    add_nuts_arguments(f)
    add_plugin_argument(f)


def _add_reproduce(sub) -> None:
    from zoo.experiments.plugins import add_plugin_argument

    r = sub.add_parser(
        "reproduce", help="run a paper protocol over splits; writes DIR/NAME.json and DIR/NAME.md"
    )
    r.add_argument("name")
    r.add_argument("--out", required=True)
    r.add_argument("--splits", default=None, help="e.g. 0-9 or 0,3,5 (default: the protocol's)")
    r.add_argument("--jobs", type=int, default=1, help="worker processes (one torch thread each)")
    r.add_argument("--steps", type=int, default=None, help="override the step budget (smoke runs)")
    r.add_argument("--variants", default=None, help="comma-separated subset of the protocol's variants")
    r.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a run argument wherever the protocol sets it (JSON value), e.g. "
        "--set posttrain_steps=10 --set max_seconds=60 for a smoke run",
    )
    r.add_argument(
        "--merge",
        action="store_true",
        help="keep the rows of an existing DIR/NAME.json that this run does not redo (complete a protocol "
        "split range by split range); an interrupted run always resumes from DIR/NAME.partial.jsonl",
    )
    add_plugin_argument(r)


_FLAGS = {"options": "--option", "guide_options": "--guide-option"}


def _flag(error: Exception) -> str:
    """The command-line flag of the RunConfig field a validation error names (its first word)."""
    from zoo.experiments.config import RunConfig

    word = str(error).split(" ", 1)[0].rstrip(":")
    if word in RunConfig.field_names():
        return _FLAGS.get(word, "--" + word.replace("_", "-"))
    return "--option"


def _validate_fit(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    from zoo.core.validation import resolve_device
    from zoo.data import DATASETS, is_table_name
    from zoo.experiments.registry import get_entry

    try:
        entry = get_entry(a.model)
    except ValueError as e:
        parser.error(f"argument MODEL: {e}")
    if a.guide is not None and a.guide not in entry.guides:
        parser.error(f"argument --guide: {a.model} offers {list(entry.guides)}, not {a.guide!r}")
    if a.dataset not in DATASETS and not a.dataset.startswith("uci:") and not is_table_name(a.dataset):
        parser.error(
            f"argument --dataset: unknown dataset {a.dataset!r}; valid: {', '.join(DATASETS)}, "
            "or an own table csv:PATH / npz:PATH"
        )
    if a.zeta < 0 or a.zeta != a.zeta or a.zeta == float("inf"):
        parser.error(f"argument --zeta: must be a finite number >= 0, got {a.zeta}")
    for name in ("steps", "num_samples", "batch_size", "threads", "ensemble", "jobs"):
        v = getattr(a, name)
        if v is not None and v <= 0:
            parser.error(f"argument --{name.replace('_', '-')}: must be > 0, got {v}")
    try:
        resolve_device(a.device)
    except ValueError as e:
        parser.error(f"argument --device: {e}")
    _check_out(parser, a.out, a.overwrite)
    for flag, attr in (("--option", "option"), ("--guide-option", "guide_option")):
        try:
            setattr(a, attr + "s", _parse_options(getattr(a, attr)))
        except ValueError as e:
            parser.error(f"argument {flag}: expected KEY=VALUE, got {e.args[0]!r}")
    a.config = _run_config(parser, a)
    from zoo.experiments.cli_nuts import apply_nuts_arguments

    apply_nuts_arguments(parser, a)


def _check_out(parser: argparse.ArgumentParser, out: str, overwrite: bool) -> None:
    """``--out`` must be a folder (or not exist yet) without an earlier run, unless ``overwrite``."""
    if os.path.exists(out) and not os.path.isdir(out):
        parser.error(f"argument --out: {out!r} exists and is not a directory")
    earlier = [f for f in RUN_FILES if os.path.exists(os.path.join(out, f))]
    if earlier and not overwrite:
        parser.error(
            f"argument --out: {out!r} holds an earlier run ({', '.join(earlier)}); choose another folder "
            "or pass --overwrite to replace it"
        )


def _run_config(parser: argparse.ArgumentParser, a: argparse.Namespace):
    """The run's :class:`~zoo.experiments.config.RunConfig`; a bad value is a usage error naming its flag."""
    from zoo.experiments.config import RunConfig

    try:
        return RunConfig(
            split=a.split,
            hidden=a.hidden,
            guide=a.guide,
            steps=a.steps,
            lr=a.lr,
            batch_size=a.batch_size,
            seed=a.seed,
            device=a.device,
            progress=not a.no_progress,
            num_samples=a.num_samples,
            data_dir=a.data_dir,
            options=a.options,
            guide_options=a.guide_options,
        )
    except (TypeError, ValueError) as e:
        parser.error(f"argument {_flag(e)}: {e}")


def _check_build(parser: argparse.ArgumentParser, a: argparse.Namespace, ds) -> None:
    """Builder options are checked by building once, before anything is fitted or written."""
    from zoo.experiments.registry import build

    try:
        build(
            a.model,
            ds.in_features,
            ds.out_features,
            ds.task,
            hidden=a.hidden,
            guide=a.guide,
            guide_options=a.guide_options,
            **a.options,
        )
    except (TypeError, ValueError) as e:
        parser.error(f"argument --option/--guide-option/--hidden: {e}")


def _summary(m: dict) -> str:
    keys = [k for k in ("rmse", "nll", "coverage95", "accuracy", "ece", "density") if k in m]
    return ", ".join(f"{k}={m[k]:.4g}" for k in keys)


def _fit_ensemble(a: argparse.Namespace, ds) -> None:
    from zoo.experiments.ensemble import fit_ensemble
    from zoo.experiments.runs import dumps_json
    from zoo.io import atomic_write_text

    ens = fit_ensemble(a.model, ds, a.config, k=a.ensemble, jobs=a.jobs, zeta=a.zeta, out_dir=a.out)
    atomic_write_text(os.path.join(a.out, "metrics.json"), dumps_json(ens.metrics))
    for name in RUN_FILES[1:]:  # a single fit's files left by an earlier run (--overwrite) are not this run's
        if os.path.exists(os.path.join(a.out, name)):
            os.remove(os.path.join(a.out, name))
    m = ens.metrics
    print(
        f"{a.ensemble} x {m['model']}/{m['guide']} on {m['dataset']} split {m['split']}: {_summary(m)}"
        f", weights={[round(w, 3) for w in m['weights']]} -> {a.out}"
    )


def _fit(parser: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    _validate_fit(parser, a)
    _threads(a.threads)
    import pyro

    from zoo.experiments.cli_data import load_cli_dataset
    from zoo.experiments.runs import fit_on_dataset, write_run

    ds = load_cli_dataset(parser, a)
    _check_build(parser, a, ds)
    pyro.enable_validation(False)
    if a.ensemble > 1:
        _fit_ensemble(a, ds)
        return 0
    run = fit_on_dataset(a.model, ds, a.config)
    paths = write_run(run, a.out)
    m = run.metrics
    print(
        f"{m['model']}/{m['guide']} on {m['dataset']} split {m['split']} (n_train={m['n_train']}, "
        f"n_test={m['n_test']}): {_summary(m)}, elbo={m['elbo']:.6g}, {m['fit_seconds']:.1f}s "
        f"-> {paths['metrics'].parent}"
    )
    return 0


def _reproduce_args(parser: argparse.ArgumentParser, a: argparse.Namespace) -> tuple:
    from zoo.experiments.reproduce import available_protocols, check_overrides, check_protocol_data

    if a.name not in available_protocols():
        parser.error(
            f"argument NAME: unknown protocol {a.name!r}; available: {', '.join(available_protocols())}"
        )
    try:
        splits = _parse_splits(a.splits)
    except ValueError:
        parser.error(f"argument --splits: expected e.g. 0-9 or 0,3,5, got {a.splits!r}")
    if a.jobs <= 0:
        parser.error(f"argument --jobs: must be > 0, got {a.jobs}")
    if a.steps is not None and a.steps <= 0:
        parser.error(f"argument --steps: must be > 0, got {a.steps}")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        parser.error(f"argument --out: {a.out!r} exists and is not a directory")
    try:
        overrides = _parse_options(a.set)
        check_overrides(overrides)
    except ValueError as e:
        parser.error(f"argument --set: expected KEY=VALUE with a run setting as KEY, got {e}")
    if a.steps:
        overrides["steps"] = a.steps
    try:
        variants = None if a.variants is None else [v for v in a.variants.split(",") if v]
        check_protocol_data(a.name, splits, variants)
    except (FileNotFoundError, TypeError, ValueError) as e:
        parser.error(f"argument NAME/--splits/--variants: {e}")
    return splits, overrides, variants


def _reproduce(parser: argparse.ArgumentParser, a: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from zoo.experiments.reproduce import run_protocol

    splits, overrides, variants = _reproduce_args(parser, a)
    cmd = "zoo " + " ".join(sys.argv[1:] if argv is None else argv)
    _log_progress()
    run_protocol(
        a.name,
        a.out,
        splits=splits,
        jobs=a.jobs,
        command=cmd,
        overrides=overrides or None,
        merge=a.merge,
        variants=variants,
    )
    return 0


def _list(a: argparse.Namespace) -> int:
    if a.matrix:
        from zoo.experiments.matrix import composition_matrix, format_matrix

        print(format_matrix(composition_matrix()))
    else:
        from zoo.experiments.registry import format_table

        print(format_table())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from zoo.experiments.plugins import load_cli_plugins

    parser = build_parser()
    a = parser.parse_args(argv)
    load_cli_plugins(parser, [*a.plugin_pre, *getattr(a, "plugin", [])])
    if a.command == "list":
        return _list(a)
    if a.command == "fit":
        return _fit(parser, a)
    if a.command == "reproduce":
        return _reproduce(parser, a, argv)
    if a.command == "bench":
        from zoo.experiments.bench_cli import bench_command

        return bench_command(parser, a, argv)
    if a.command == "reference":
        from zoo.experiments.reference_cli import run_reference

        return run_reference(parser, a, argv)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
