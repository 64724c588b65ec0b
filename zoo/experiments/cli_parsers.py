"""The argument definitions of ``zoo fit`` and ``zoo reproduce`` (:mod:`zoo.experiments.cli` runs them;
``zoo bench`` and ``zoo reference`` keep theirs beside their commands)."""

from __future__ import annotations

import argparse

from zoo.experiments.cli_checks import RUN_FILES

__all__ = ["add_fit_parser", "add_reproduce_parser", "add_option_arguments"]


def add_option_arguments(parser: argparse.ArgumentParser) -> None:
    """``--option KEY=VALUE`` and ``--guide-option KEY=VALUE`` (repeatable), as ``zoo fit`` and ``zoo bench``
    take them: values parse by the setting's type (:func:`zoo.experiments.cli_common.parse_value`)."""
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model builder option (repeatable), e.g. --option regularized=false; values parse by the "
        "option's type (booleans: true/false, yes/no, 1/0), else as JSON",
    )
    parser.add_argument(
        "--guide-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="guide option (repeatable), e.g. --guide-option beta_rule=textbook; values parse by the guide "
        "factory's annotated type, else as JSON",
    )


def add_fit_parser(sub: argparse._SubParsersAction) -> None:
    """``zoo fit``'s arguments."""
    from zoo.experiments.cli_data import add_data_arguments
    from zoo.experiments.plugins import add_plugin_argument

    f = sub.add_parser(
        "fit",
        help="fit a registered model on a dataset and write DIR/{metrics.json,posterior.nc,checkpoint.pt}",
    )
    f.add_argument("model", help="registry name (zoo list), or one a --plugin registers")
    f.add_argument(
        "--dataset",
        required=True,
        help="diabetes, breast-cancer, digits, uci:<name>, mnist10k, ..., or own data csv:PATH / npz:PATH",
    )
    f.add_argument("--split", type=int, default=0, help="the dataset's train/test split (default 0)")
    f.add_argument("--hidden", type=int, nargs="+", default=None, help="hidden widths, e.g. --hidden 50 50")
    f.add_argument("--guide", default=None, help="one of the entry's guides (default: its first; zoo list)")
    f.add_argument(
        "--steps", type=int, default=None, help="training steps (default: the entry's budget for this data)"
    )
    f.add_argument("--lr", type=float, default=None, help="learning rate (default: the entry's)")
    f.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="minibatch rows (default: the entry's; full batch for CAVI)",
    )
    f.add_argument(
        "--seed", type=int, default=0, help="seed of the initial values and every draw (default 0)"
    )
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
    add_option_arguments(f)
    f.add_argument(
        "--ensemble",
        type=int,
        default=1,
        metavar="K",
        help="fit K members (seeds seed + 10007 i) and combine them with ELBO weights (Sheinkman & Wade "
        "(2025) §3.6); "
        "members go to DIR/member_i, the ensemble's metrics to DIR/metrics.json",
    )
    f.add_argument(
        "--one-start",
        action="store_true",
        help="fit once from the guide's own initialization (an entry may fit from several starts and keep "
        "the highest ELBO, e.g. lbbnn's LCRT: zoo.experiments.starts)",
    )
    f.add_argument(
        "--likelihoods",
        nargs="+",
        default=None,
        metavar="NAME",
        help="fit under each likelihood and keep the highest ELBO (variational model selection), e.g. "
        "--likelihoods gaussian t4 (t<df>: Student-t; heteroscedastic: input-dependent noise)",
    )
    f.add_argument("--jobs", type=int, default=1, help="worker processes for --ensemble members")
    f.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="data-parallel processes for one fit (torch.distributed: gloo on CPU, NCCL on CUDA)",
    )
    f.add_argument("--zeta", type=float, default=0.1, help="ensemble weight tempering, w ∝ exp(zeta ELBO)")
    f.add_argument(
        "--prune",
        choices=("projpred",),
        default=None,
        help="after the fit, prune hidden units by projection (zoo.sparsity; regression): units kept, test "
        "NLL/RMSE change and seconds go into metrics.json",
    )
    f.add_argument(
        "--prune-tol",
        type=float,
        default=0.01,
        help="--prune projpred: the largest loss of training log density per point (nats) a pruned network "
        "may have against the full one (default 0.01)",
    )
    f.add_argument(
        "--conformal",
        type=float,
        default=None,
        metavar="SHARE",
        help="hold out SHARE of the training rows, fit on the rest, and report split-conformal intervals "
        "(coverage >= --conformal-level on exchangeable rows, whatever the fit; regression): "
        "conformal_quantile, coverage_conformal, nll_conformal in metrics.json",
    )
    f.add_argument(
        "--conformal-folds",
        type=int,
        default=None,
        metavar="K",
        help="CV+ intervals instead (Barber et al. 2021): fit once more on each K-1 of K folds of the "
        "training rows; every row calibrates, the run's fit uses all: coverage_cv_plus, width_cv_plus",
    )
    f.add_argument("--conformal-level", type=float, default=0.95, help="the conformal intervals' level")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    f.add_argument(
        "--out", required=True, help="run folder to write (its parent must exist; see --overwrite)"
    )
    f.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace an earlier run in --out (a folder holding {', '.join(RUN_FILES)} is refused)",
    )
    add_data_arguments(f)
    from zoo.experiments.cli_nuts import add_nuts_arguments  # --inference nuts --chains --warmup --samples

    add_nuts_arguments(f)
    add_plugin_argument(f)


class _ListProtocols(argparse.Action):
    """``zoo reproduce --list``: print :func:`zoo.experiments.reproduce.format_protocols` and exit 0 (like
    ``--help``, before NAME and --out are asked for)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from zoo.experiments.plugins import load_cli_plugins
        from zoo.experiments.reproduce import format_protocols

        load_cli_plugins(parser, getattr(namespace, "plugin", None))
        print(format_protocols())
        parser.exit(0)


def add_reproduce_parser(sub: argparse._SubParsersAction) -> None:
    """``zoo reproduce``'s arguments."""
    from zoo.experiments.plugins import add_plugin_argument

    r = sub.add_parser(
        "reproduce", help="run a paper protocol over splits; writes DIR/NAME.json and DIR/NAME.md"
    )
    r.add_argument("name", help="protocol name (zoo reproduce --list)")
    r.add_argument(
        "--list",
        action=_ListProtocols,
        help="print each protocol's name, what it runs and the paper's table or section it is compared with, "
        "and exit (protocols of a --plugin given before --list included)",
    )
    r.add_argument(
        "--out", required=True, help="folder of DIR/NAME.json and DIR/NAME.md (its parent must exist)"
    )
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
    r.add_argument(
        "--fresh",
        "--overwrite",
        dest="fresh",
        action="store_true",
        help="start over although DIR/NAME.partial.jsonl holds an unfinished run of other settings (that "
        "journal is kept beside it under a dated name), and replace (or --merge into) a finished "
        "DIR/NAME.json of other --steps/--set settings; without it both are refused before any fit",
    )
    r.add_argument(
        "--verify",
        action="store_true",
        help="fit the selected runs again in a temporary folder and compare them with DIR/NAME.json (writes "
        "nothing; exit status 1 if a row differs by more than --tolerance)",
    )
    r.add_argument(
        "--tolerance", type=float, default=1e-6, help="largest relative difference --verify passes"
    )
    from zoo.experiments.dispatch import add_dispatch_arguments

    add_dispatch_arguments(r)  # --backend {loky,dask,ray} --address
    add_plugin_argument(r)
