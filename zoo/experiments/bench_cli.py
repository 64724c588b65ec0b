"""``zoo bench SPEC --suite NAME --out DIR``: the command-line side of :mod:`zoo.experiments.bench`.

``SPEC`` is a registry name, ``name:guide`` or a plugin's entry (``--plugin``), with ``--option k=v`` /
``--guide-option k=v``.  ``--suite`` picks a :mod:`~zoo.experiments.suites` suite; ``--dataset csv:PATH
--target COL ...`` benches on an own table instead (splits = split seeds 0-4 unless ``--splits``), against
the zoo models of ``--against`` fitted in the same run.  ``--steps N`` / ``--splits A-B`` make a smoke run
whose leaderboard says it is off the suite's budget; ``--seeds K`` fits K seeds per split; ``--jobs J``
worker processes.  ``DIR`` gets ``bench.json`` (every fit) and ``leaderboard.{md,json,png}``; the same
command again resumes an interrupted run, another bench in the same ``DIR`` is refused.

Every argument is checked (data loaded, every spec built once) before anything is fitted or written; a
problem is a usage error naming the argument (exit code 2).  An ``--against`` model that cannot fit the own
table's task (a regression-only model on class labels) is left out with a warning on stderr naming
``--against`` rather than refusing the whole bench; the benched SPEC itself must fit it.  Own data: the
task is printed before the fits, as ``zoo fit`` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["add_bench_parser", "bench_command", "DEFAULT_AGAINST"]

#: the zoo rows fitted beside an own-data bench unless ``--against`` names others: the Gaussian baseline,
#: the horseshoe and the spike-and-slab families, each with its default guide
DEFAULT_AGAINST = ("mfvi-bnn", "hs-bnn", "lbbnn")
OWN_SPLITS = (0, 1, 2, 3, 4)


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` subcommand to ``zoo``'s subparsers."""
    from zoo.experiments.cli_data import add_data_arguments
    from zoo.experiments.plugins import add_plugin_argument
    from zoo.experiments.suites import SUITES

    b = sub.add_parser(
        "bench", help="bench a model over a fixed suite and write DIR/leaderboard.{md,json,png}"
    )
    b.add_argument("spec", metavar="SPEC", help="a registry name, name:guide, or a plugin's entry")
    b.add_argument("--suite", default=None, help=f"one of {', '.join(sorted(SUITES))}")
    b.add_argument("--out", required=True)
    b.add_argument("--seeds", type=int, default=1, help="seeds per split (seed k of split s: s + 1000 k)")
    b.add_argument("--jobs", type=int, default=1, help="worker processes (one torch thread each)")
    from zoo.experiments.dispatch import add_dispatch_arguments

    add_dispatch_arguments(b)  # --backend {loky,dask,ray} --address
    b.add_argument("--steps", type=int, default=None, help="override the budget (smoke run, off budget)")
    b.add_argument("--splits", default=None, help="e.g. 0-0 or 0,2 (smoke run unless the suite's own)")
    from zoo.experiments.cli_parsers import add_option_arguments

    add_option_arguments(b)  # --option, --guide-option
    b.add_argument("--dataset", default=None, help="own data instead of a suite: csv:PATH or npz:PATH")
    b.add_argument(
        "--against",
        default=None,
        help=f"own data: zoo models (name or name:guide, comma-separated) fitted beside it in the same run "
        f"(default {','.join(DEFAULT_AGAINST)})",
    )
    b.add_argument("--zoo-rows", default=None, help="zoo rows file (default the committed bench-SUITE.json)")
    b.add_argument("--data-dir", default=None, help="data root (default ZOO_DATA_DIR)")
    b.add_argument("--no-progress", action="store_true")
    add_data_arguments(b)
    add_plugin_argument(b)


def _positive(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    for name in ("seeds", "jobs", "steps"):
        v = getattr(a, name)
        if v is not None and v <= 0:
            parser.error(f"argument --{name}: must be > 0, got {v}")


def _spec(parser: argparse.ArgumentParser, a: argparse.Namespace):
    from zoo.experiments.bench import parse_spec
    from zoo.experiments.cli_common import option_hints, parse_options

    model, _, guide = a.spec.partition(":")
    hints = dict(zip(("option", "guide_option"), option_hints(model, guide or None)))  # typed values
    opts = {}
    for flag, attr in (("--option", "option"), ("--guide-option", "guide_option")):
        try:
            opts[attr] = parse_options(getattr(a, attr), hints[attr])
        except ValueError as e:
            parser.error(f"argument {flag}: {e}")
    try:
        return parse_spec(a.spec, opts["option"], opts["guide_option"])
    except (TypeError, ValueError) as e:
        parser.error(f"argument {e}" if str(e).startswith("SPEC") else f"argument SPEC: {e}")


def _suite(parser: argparse.ArgumentParser, a: argparse.Namespace, splits):
    """``(suite, table options, against specs)``: a registered suite, or one made of an own dataset."""
    from zoo.experiments.bench import parse_spec
    from zoo.experiments.cli_data import TABLE_FLAGS, table_options
    from zoo.experiments.suites import SUITES, Suite, get_suite

    if a.dataset is None:
        if a.against is not None:
            parser.error(
                "argument --against: applies to an own --dataset only (a suite's zoo rows are committed)"
            )
        if a.suite is None:
            parser.error(f"argument --suite: give a suite ({', '.join(sorted(SUITES))}) or an own --dataset")
        given = [flag for field, flag in TABLE_FLAGS.items() if getattr(a, field) is not None]
        if given or a.no_standardize:
            parser.error(f"argument {(given or ['--no-standardize'])[0]}: applies to an own --dataset only")
        if a.zoo_rows is not None and not os.path.isfile(a.zoo_rows):
            parser.error(f"argument --zoo-rows: no such file {a.zoo_rows!r}")
        try:
            return get_suite(a.suite), None, ()
        except ValueError as e:
            parser.error(f"argument --suite: {e}")
    if a.suite is not None or a.zoo_rows is not None:
        flag = "--suite" if a.suite is not None else "--zoo-rows"
        parser.error(f"argument --dataset: benches own data instead of a suite; leave out {flag}")
    table = table_options(parser, a)
    names = DEFAULT_AGAINST if a.against is None else [n for n in a.against.split(",") if n.strip()]
    try:
        against = tuple(parse_spec(n) for n in names)
    except ValueError as e:
        parser.error(f"argument --against: {e}")
    stem = os.path.splitext(os.path.basename(a.dataset.partition(":")[2] or a.dataset))[0]
    suite = Suite(
        name=f"own:{stem}",
        description=f"own data {a.dataset} x split seeds {list(splits or OWN_SPLITS)}, uci-small budget",
        datasets=(a.dataset,),
        splits=tuple(splits or OWN_SPLITS),
        hidden=get_suite("uci-small").hidden,
        budget=get_suite("uci-small").budget,
    )
    return suite, table, against


def _fitting_against(parser: argparse.ArgumentParser, a: argparse.Namespace, table, split: int, against):
    """The ``--against`` specs that can fit the own table's task (the others are left out with a warning
    naming ``--against``); loads the table once, so a bad one is a usage error naming its flag, and prints
    the task."""
    from zoo.experiments.bench_fit import load_bench_dataset
    from zoo.experiments.cli_data import error_flag, task_line
    from zoo.experiments.registry import get_entry

    try:
        ds = load_bench_dataset(a.dataset, split, a.data_dir, table)
    except (FileNotFoundError, TypeError, ValueError) as e:
        parser.error(f"argument {error_flag(e, True)}: {e}")
    kept = []
    for s in against:
        tasks = get_entry(s.model).tasks
        if ds.task in tasks:
            kept.append(s)
        else:
            print(
                f"zoo bench: warning: argument --against: {s.label} fits {'/'.join(tasks)} data, not "
                f"{ds.task}: left out of this bench",
                file=sys.stderr,
            )
    print(task_line(ds, a.task), flush=True)
    return tuple(kept)


def _plan(parser: argparse.ArgumentParser, a: argparse.Namespace):
    """The :class:`~zoo.experiments.bench.BenchPlan` and its fits, checked before anything runs."""
    from zoo.experiments.bench import BenchPlan, check_out
    from zoo.experiments.cli_common import check_out_dir, parse_splits
    from zoo.experiments.journal import JournalMismatch

    _positive(parser, a)
    try:
        check_out_dir(a.out)
    except ValueError as e:
        parser.error(f"argument --out: {e}")
    try:
        splits = parse_splits(a.splits)
    except ValueError:
        parser.error(f"argument --splits: expected e.g. 0-4 or 0,3, got {a.splits!r}")
    spec = _spec(parser, a)
    suite, table, against = _suite(parser, a, splits)
    if table is not None:
        against = _fitting_against(parser, a, table, suite.splits[0], against)
    plugins = tuple([*a.plugin_pre, *a.plugin])
    if against and spec.label in {s.label for s in against}:
        against = tuple(s for s in against if s.label != spec.label)
    plan = BenchPlan(
        suite,
        (spec, *against),
        splits=None if splits is None else tuple(splits),
        seeds=a.seeds,
        steps=a.steps,
        table=table,
        data_dir=a.data_dir,
        plugins=plugins,
    )
    try:
        signature = plan.signature()  # the specs' resolved options: bad ones are refused here
    except (TypeError, ValueError) as e:
        parser.error(f"argument SPEC/--option/--guide-option: {e}")
    try:
        check_out(Path(a.out), signature)
    except (JournalMismatch, ValueError) as e:
        parser.error(f"argument --out: {e}")
    try:
        tasks = plan.tasks()
    except FileNotFoundError as e:
        parser.error(f"argument --suite/--dataset/--data-dir: {e}")
    except (TypeError, ValueError) as e:
        parser.error(f"argument SPEC/--option/--guide-option/--splits: {e}")
    return plan, tasks


def bench_command(parser: argparse.ArgumentParser, a: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Run ``zoo bench`` (arguments already parsed, plugins loaded)."""
    from zoo.experiments.bench import run_fits, write_bench
    from zoo.experiments.cli_common import log_progress
    from zoo.experiments.leaderboard import build_leaderboard, leaderboard_files, load_zoo_rows
    from zoo.infer.threads import apply_num_threads

    plan, tasks = _plan(parser, a)
    try:
        apply_num_threads(None, default=1)  # ZOO_NUM_THREADS, capped at the cores
    except ValueError as e:
        parser.error(f"argument ZOO_NUM_THREADS: {e}")
    if not a.no_progress:
        log_progress()
    from zoo.experiments.dispatch import DispatchError, dispatch_config

    dispatch = dispatch_config(parser, a)
    try:
        doc = run_fits(
            plan, a.out, jobs=a.jobs, progress=not a.no_progress, tasks=tasks, dispatch=dispatch,
            finalize=False,
        )  # fmt: skip
    except DispatchError as e:  # a cluster that cannot be reached: raised before any fit
        parser.error(f"argument {e.flag}: {e}")
    bench_label = plan.specs[0].label
    bench_rows = [r for r in doc["rows"] if r["label"] == bench_label]
    if plan.table is not None or a.dataset is not None:
        zoo_rows = [r for r in doc["rows"] if r["label"] != bench_label]
        fitted = ", ".join(s.label for s in plan.specs[1:]) or "none: no --against model fits this task"
        source, note = f"fitted in this run ({fitted})", None
    else:
        zoo_rows, source, note = load_zoo_rows(plan.suite, a.zoo_rows)
    cmd = "zoo " + " ".join(sys.argv[1:] if argv is None else argv)
    lb = build_leaderboard(
        plan.suite,
        bench_label,
        bench_rows,
        zoo_rows,
        off_budget=plan.off_budget,
        source=source,
        note=note,
        command=cmd,
        run={"steps": plan.steps, "splits": list(plan.effective_splits), "seeds": plan.seeds},
    )
    files = leaderboard_files(lb, a.out)
    write_bench(a.out, doc, files)  # bench.json and the leaderboard replace the folder's files as one set
    paths = {p.suffix[1:]: p for p in files}
    print(lb["title"])
    for e in lb["rows"]:
        ranks = ", ".join(f"{m} {r:.2f}" for m, r in e["rank"].items() if r is not None)
        print(f"  {'*' if e['bench'] else ' '} {e['label']}: mean rank {ranks}")
    if note and a.no_progress:  # with progress the note was logged already
        print(f"note: {note}")
    print(f"-> {paths['md']}, {paths['json']}, {paths['png']}")
    return 0
