"""Command line: ``zoo list [--matrix]`` | ``zoo fit MODEL --dataset NAME --out DIR`` |
``zoo reproduce NAME --out DIR`` | ``zoo bench SPEC --suite NAME --out DIR`` (see ``bench_cli``).

Every subcommand takes ``--plugin PATH_OR_MODULE`` (repeatable, also before the subcommand) to load models
from outside the package first (:mod:`zoo.experiments.plugins`).  ``zoo fit`` takes a registered dataset or
an own table file (``--dataset csv:PATH --target COLUMN``, :mod:`zoo.experiments.cli_data`; it prints the
task it fits, e.g. ``task: multiclass (3 classes, inferred from the target; pass --task to override)``) and
refuses an ``--out`` folder holding an earlier run unless ``--overwrite`` is given.

Every argument is validated before any fit starts and before anything is written (seeds in
``0 .. 2**32 - 1``, finite rates, a device this machine has, an ``--out`` whose parent is a writable folder,
every split of every dataset of a protocol, every ``--set`` key and value); a bad argument is a usage error:
one line naming it, exit code 2.  ``--option``/``--guide-option``/``--set`` values are parsed by the type of
the setting (:func:`zoo.experiments.cli_common.parse_value`: ``regularized=False`` is ``False``).  A fit that
diverges (:class:`zoo.infer.divergence.DivergenceError`) is one error line and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from zoo.experiments.cli_checks import check_build as _check_build
from zoo.experiments.cli_checks import reproduce_args as _reproduce_args
from zoo.experiments.cli_checks import validate_fit as _validate_fit
from zoo.experiments.cli_common import log_progress as _log_progress
from zoo.experiments.cli_parsers import add_fit_parser, add_reproduce_parser

__all__ = ["main", "build_parser"]


def _threads(parser: argparse.ArgumentParser, n: int | None) -> None:
    """``--threads``, else ``ZOO_NUM_THREADS``, else 1, capped at the cores; a bad value is a usage error."""
    from zoo.infer.threads import apply_num_threads  # the one reader of ZOO_NUM_THREADS (also used by fit)

    try:
        apply_num_threads(n, default=1)
    except ValueError as e:
        parser.error(f"argument --threads: {e}")


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (``zoo fit: error: argument --seed:
    ...; see zoo fit --help``) and exit code 2, without the usage block; subcommands inherit it."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    from zoo.experiments.plugins import add_plugin_argument

    p = OneLineParser(prog="zoo", description="Sparse and shrinkage Bayesian neural networks on Pyro.")
    add_plugin_argument(p, dest="plugin_pre")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="list the registered models")
    ls.add_argument(
        "--matrix",
        action="store_true",
        help="print the composition matrix (every prior family x every guide family) instead",
    )
    add_plugin_argument(ls)
    add_fit_parser(sub)
    add_reproduce_parser(sub)
    from zoo.experiments.bench_cli import add_bench_parser

    add_bench_parser(sub)
    from zoo.experiments.reference_cli import add_reference_parser

    add_reference_parser(sub)
    return p


def _fit_ensemble(a: argparse.Namespace, ds) -> None:
    from zoo.experiments.cli_report import summary
    from zoo.experiments.ensemble import fit_ensemble

    # members and metrics.json replace an earlier run in a.out as a whole, once all are written
    ens = fit_ensemble(a.model, ds, a.config, k=a.ensemble, jobs=a.jobs, zeta=a.zeta, out_dir=a.out)
    m = ens.metrics
    print(
        f"{a.ensemble} x {m['model']}/{m['guide']} on {m['dataset']} split {m['split']}: {summary(m)}"
        f", weights={[round(w, 3) for w in m['weights']]} -> {a.out}"
    )


def _check_nproc(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    from zoo.experiments.registry import get_entry

    if a.nproc < 1:
        parser.error(f"argument --nproc: must be > 0, got {a.nproc}")
    if a.nproc > 1 and (a.ensemble > 1 or a.config.fit_options or get_entry(a.model).fit_fn is not None):
        parser.error(
            "argument --nproc: data-parallel fits go through zoo.infer.loop.fit: not with --ensemble, "
            f"--inference nuts, --one-start, or a model with its own fit function ({a.model})"
        )


def _fit(parser: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    _validate_fit(parser, a)
    _check_nproc(parser, a)
    _threads(parser, a.threads)
    import pyro

    from zoo.data import is_table_name
    from zoo.experiments.cli_data import load_cli_dataset, task_line
    from zoo.experiments.cli_report import fit_report
    from zoo.experiments.runs import fit_on_dataset, write_run

    ds = load_cli_dataset(parser, a)
    _check_build(parser, a, ds)
    if is_table_name(a.dataset):
        print(task_line(ds, a.task), flush=True)
    pyro.enable_validation(False)
    if a.ensemble > 1:
        _fit_ensemble(a, ds)
        return 0
    from zoo.infer.distributed import default_nproc

    with default_nproc(a.nproc):
        run = fit_on_dataset(a.model, ds, a.config)
    if a.prune:
        from zoo.sparsity import ProjpredConfig
        from zoo.sparsity.runs import prune_run

        run.metrics.update(prune_run(run, ProjpredConfig(nll_tol=a.prune_tol, seed=a.seed)))
    paths = write_run(run, a.out)
    print("\n".join(fit_report(run.metrics, paths["metrics"].parent)))
    return 0


def _reproduce(parser: argparse.ArgumentParser, a: argparse.Namespace, argv: Sequence[str] | None) -> int:
    from zoo.experiments.dispatch import DispatchError, dispatch_config
    from zoo.experiments.journal import JournalMismatch
    from zoo.experiments.reproduce import run_protocol

    splits, overrides, variants = _reproduce_args(parser, a)
    dispatch = dispatch_config(parser, a)
    if a.verify:
        return _verify(parser, a, splits, overrides, variants, dispatch)
    cmd = "zoo " + " ".join(sys.argv[1:] if argv is None else argv)
    _log_progress()
    try:
        run_protocol(
            a.name,
            a.out,
            splits=splits,
            jobs=a.jobs,
            command=cmd,
            overrides=overrides or None,
            merge=a.merge,
            variants=variants,
            fresh=a.fresh,
            dispatch=dispatch,
        )
    except (JournalMismatch, DispatchError) as e:  # both raised before any fit
        parser.error(f"argument {e.flag}: {e}")
    return 0


def _verify(
    parser: argparse.ArgumentParser, a: argparse.Namespace, splits, overrides, variants, dispatch
) -> int:
    """``zoo reproduce NAME --verify``: :func:`zoo.experiments.verify.verify_protocol`, its table printed."""
    from zoo.experiments.verify import summary_line, verify_protocol

    if a.merge or a.fresh:
        parser.error("argument --verify: writes nothing, so not with --merge or --fresh")
    try:
        lines, counts = verify_protocol(
            a.name, a.out, splits=splits, variants=variants, overrides=overrides or None,
            tolerance=a.tolerance, dispatch=dispatch,
        )  # fmt: skip
    except ValueError as e:  # raised before any fit
        parser.error(f"argument --verify: {e}")
    print("\n".join(lines))
    print(summary_line(counts, a.tolerance))
    return 1 if counts["beyond"] else 0


def _list(a: argparse.Namespace) -> int:
    if a.matrix:
        from zoo.experiments.matrix import composition_matrix, format_matrix

        print(format_matrix(composition_matrix()))
        _plugin_note()
    else:
        from zoo.experiments.registry import format_table

        print(format_table())
    return 0


def _plugin_note() -> None:
    """Under the matrix: the loaded plugins' entries, which it does not cover (its check marks are the
    zoo's own tested pairs), with their guides."""
    from zoo.experiments.registry import available, get_entry

    entries = [get_entry(n) for n in available()]
    plugged = [f"{e.name} ({', '.join(e.guides)})" for e in entries if e.plugin is not None]
    if plugged:
        print(
            "\nplugin entries, not in the matrix (check their guides with zoo.testing.check_entry): "
            + "; ".join(plugged)
        )


def main(argv: Sequence[str] | None = None) -> int:
    from zoo.experiments.plugins import load_cli_plugins

    parser = build_parser()
    a = parser.parse_args(argv)
    load_cli_plugins(parser, [*a.plugin_pre, *getattr(a, "plugin", [])])
    from zoo.infer.divergence import DivergenceError

    try:
        return _command(parser, a, argv)
    except DivergenceError as e:  # a diverged fit: one line, exit code 1, no metrics written
        print(f"zoo {a.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1


def _command(parser: argparse.ArgumentParser, a: argparse.Namespace, argv: Sequence[str] | None) -> int:
    if a.command == "list":
        return _list(a)
    if a.command == "fit":
        from zoo.io import RunFolderError

        try:
            return _fit(parser, a)
        except RunFolderError as e:  # e.g. a full disk: the earlier run in --out is untouched
            print(f"zoo fit: error: {e}", file=sys.stderr)
            return 1
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
