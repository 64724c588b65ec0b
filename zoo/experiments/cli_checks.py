"""Argument checks of ``zoo fit`` and ``zoo reproduce`` (:mod:`zoo.experiments.cli`): everything a command
line gives is checked here before any fit starts or anything is written, and a bad value is a usage error
(``parser.error``: one line naming the flag, exit code 2).

* ``zoo fit``: the model, guide and dataset names, positive counts, a finite ``--zeta``, a device this machine
  has, ``--out`` (:func:`check_out`), ``--option``/``--guide-option`` parsed by the type of the option
  (:func:`zoo.experiments.cli_common.parse_value`), the run's :class:`~zoo.experiments.config.RunConfig`
  (seed range, finite rates), the NUTS flags, and the builder options by building once (:func:`check_build`);
* ``zoo reproduce``: the protocol, ``--splits`` (every split of every dataset the protocol would fit is
  loaded once, :func:`zoo.experiments.cli_common.check_protocol_splits`), ``--out``, and every ``--set`` key
  and value, whether or not a protocol run sets it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from zoo.experiments.cli_common import parse_options as _parse_options
from zoo.experiments.cli_common import parse_splits as _parse_splits

if TYPE_CHECKING:
    from zoo.core.model import BayesianModel
    from zoo.data import Dataset
    from zoo.experiments.config import RunConfig

__all__ = [
    "RUN_FILES",
    "validate_fit",
    "check_out",
    "run_config",
    "build_error_flag",
    "check_build",
    "check_conformal",
    "reproduce_args",
]

RUN_FILES = ("metrics.json", "checkpoint.pt", "posterior.nc")
"""The files of a run folder: ``zoo fit --out DIR`` refuses a DIR holding any of them without --overwrite."""


_FLAGS = {"options": "--option", "guide_options": "--guide-option"}


def _flag(error: Exception) -> str:
    """The command-line flag of the RunConfig field a validation error names (its first word)."""
    from zoo.experiments.config import RunConfig

    word = str(error).split(" ", 1)[0].rstrip(":")
    if word in RunConfig.field_names():
        return _FLAGS.get(word, "--" + word.replace("_", "-"))
    return "--option"


def validate_fit(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Check every ``zoo fit`` argument (module docstring) and put the run's config on ``a.config`` and the
    parsed options on ``a.options`` / ``a.guide_options``; the first bad one is ``parser.error``."""
    from zoo.core.validation import resolve_device
    from zoo.data import DATASETS, is_dataset_name
    from zoo.experiments.cli_common import option_hints
    from zoo.experiments.registry import get_entry

    try:
        entry = get_entry(a.model)
    except ValueError as e:
        parser.error(f"argument MODEL: {e}")
    if a.guide is not None and a.guide not in entry.guides:
        parser.error(f"argument --guide: {a.model} offers {list(entry.guides)}, not {a.guide!r}")
    if not is_dataset_name(a.dataset):
        parser.error(
            f"argument --dataset: unknown dataset {a.dataset!r}; valid: {', '.join(DATASETS)}, "
            "uci:<alias>, cv10:<name>, or an own table csv:PATH / npz:PATH"
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
    check_out(parser, a.out, a.overwrite)
    hints = option_hints(a.model, a.guide)  # values parsed by the option's type: regularized=False is False
    for flag, attr, h in (("--option", "option", hints[0]), ("--guide-option", "guide_option", hints[1])):
        try:
            setattr(a, attr + "s", _parse_options(getattr(a, attr), h))
        except ValueError as e:
            parser.error(f"argument {flag}: {e}")
    a.config = run_config(parser, a)
    from zoo.experiments.cli_nuts import apply_nuts_arguments

    apply_nuts_arguments(parser, a)


def check_out(parser: argparse.ArgumentParser, out: str, overwrite: bool) -> None:
    """``--out`` must be a writable folder (or a new name in one) without an earlier run, unless
    ``overwrite``."""
    from zoo.experiments.cli_common import check_out_dir

    try:
        check_out_dir(out)
    except ValueError as e:
        parser.error(f"argument --out: {e}")
    earlier = [f for f in RUN_FILES if os.path.exists(os.path.join(out, f))]
    if earlier and not overwrite:
        parser.error(
            f"argument --out: {out!r} holds an earlier run ({', '.join(earlier)}); choose another folder "
            "or pass --overwrite to replace it"
        )


def run_config(parser: argparse.ArgumentParser, a: argparse.Namespace) -> RunConfig:
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
            fit_options=_choice_options(a),
            conformal=a.conformal,
            conformal_level=a.conformal_level,
            conformal_folds=a.conformal_folds,
        )
    except (TypeError, ValueError) as e:
        parser.error(f"argument {_flag(e)}: {e}")


def _choice_options(a: argparse.Namespace) -> dict:
    """The run's ``fit_options`` of :mod:`zoo.experiments.starts`: ``--one-start`` and ``--likelihoods``."""
    out: dict = {"starts": [{}]} if a.one_start else {}
    if getattr(a, "likelihoods", None):
        out["likelihoods"] = list(a.likelihoods)
    return out


def build_error_flag(error: Exception, options: dict | None, guide_options: dict | None) -> str:
    """The command-line argument a build error is about, for its ``argument X:`` prefix: read from the
    error's leading argument name (``options of M``, ``guide_options``, ``hidden``, ``guide``, ``task``), else
    from which of ``--option`` / ``--guide-option`` were given; ``model`` when neither was (the entry's own
    builder or guide factory failed on its defaults)."""
    text = str(error)
    prefixes = {
        "options of": "--option",
        "guide_options": "--guide-option",
        "hidden": "--hidden",
        "guide:": "--guide",
        "task:": "--dataset",
    }
    for prefix, flag in prefixes.items():
        if text.startswith(prefix):
            return flag
    given = [flag for flag, values in (("--option", options), ("--guide-option", guide_options)) if values]
    return "/".join(given) if given else "model"


def check_build(parser: argparse.ArgumentParser, a: argparse.Namespace, ds: Dataset) -> None:
    """Builder options are checked by building once (once per ``--likelihoods`` candidate), before anything
    is fitted or written."""
    from zoo.experiments.registry import build
    from zoo.experiments.starts import resolve_likelihoods

    try:
        likelihoods = resolve_likelihoods(a.config.fit_options, a.options)
    except (TypeError, ValueError) as e:
        parser.error(f"argument --likelihoods: {e}")
    for lik in likelihoods:
        try:
            model, guide, _ = build(
                a.model,
                ds.in_features,
                ds.out_features,
                ds.task,
                hidden=a.hidden,
                guide=a.guide,
                guide_options=a.guide_options,
                **{**a.options, **lik},
            )
        except (TypeError, ValueError) as e:
            flags = "--likelihoods/--option" if lik else build_error_flag(e, a.options, a.guide_options)
            parser.error(f"argument {flags}: {str(e).removeprefix('model: ')}")
    if getattr(a, "prune", None):
        check_prune(parser, a, ds, model, guide)
    if getattr(a, "conformal", None) is not None or getattr(a, "conformal_folds", None) is not None:
        check_conformal(parser, a, ds)


def check_conformal(parser: argparse.ArgumentParser, a: argparse.Namespace, ds: Dataset) -> None:
    """``--conformal SHARE`` calibrates one regression fit on enough held-out rows
    (:func:`zoo.experiments.conformal.calibration_split`); ``--conformal-folds K`` needs a regression set
    of at least K rows (:func:`zoo.experiments.cv_plus.check_cv_plus`)."""
    from zoo.experiments.conformal import calibration_split
    from zoo.experiments.cv_plus import check_cv_plus

    flag = "--conformal" if a.conformal is not None else "--conformal-folds"
    if a.ensemble > 1:
        parser.error(f"argument {flag}: calibrates one fit; not with --ensemble")
    try:
        if a.conformal is not None:
            calibration_split(ds, a.conformal, a.seed, a.conformal_level)
        else:
            check_cv_plus(ds, a.conformal_folds, a.conformal_level)
    except ValueError as e:
        message = str(e).removeprefix("conformal: ").removeprefix("conformal_folds: ")
        parser.error(f"argument {flag}: {message}")


def check_prune(
    parser: argparse.ArgumentParser, a: argparse.Namespace, ds: Dataset, model: BayesianModel, guide: Callable
) -> None:
    """``--prune projpred`` needs a regression fit of an MLP with a hidden layer whose guide draws weights."""
    from zoo.core.architectures import MLP

    if not (a.prune_tol > 0 and a.prune_tol < float("inf")):
        parser.error(f"argument --prune-tol: must be a finite number > 0, got {a.prune_tol}")
    if a.ensemble > 1:
        parser.error("argument --prune: prunes one fit; not with --ensemble")
    if ds.task != "regression":
        parser.error(f"argument --prune: projpred pruning is for regression; {ds.name} is {ds.task}")
    arch = getattr(model, "architecture", None)
    if not isinstance(arch, MLP) or not arch.hidden:
        parser.error(f"argument --prune: {a.model} has no hidden layer of units to prune")
    if arch.out_features != 1:
        parser.error(
            f"argument --prune: projpred pruning needs a network with one output; this one has "
            f"{arch.out_features} (heteroscedastic=true adds a noise output per target)"
        )
    if callable(getattr(guide, "predictive", None)):
        parser.error(
            f"argument --prune: the {type(guide).__name__} guide predicts in closed form, without weight "
            "draws to project; use its own sparsity report"
        )


def reproduce_args(parser: argparse.ArgumentParser, a: argparse.Namespace) -> tuple:
    from zoo.experiments.cli_common import check_out_dir, check_protocol_splits, config_hints
    from zoo.experiments.config import RunConfig
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
    try:
        if not getattr(a, "verify", False):  # --verify only reads DIR/NAME.json (a read-only folder will do)
            check_out_dir(a.out)
    except ValueError as e:
        parser.error(f"argument --out: {e}")
    from zoo.experiments.cli_common import check_overrides as check_override_values

    try:  # every key a run setting, every value of its type and finite, whether a run sets it or not
        hints = {**config_hints(RunConfig), "ensemble": int, "zeta": float}
        overrides = _parse_options(a.set, hints)
        check_overrides(overrides)
        check_override_values(overrides)
    except (TypeError, ValueError) as e:
        parser.error(f"argument --set: {e}")
    if overrides.get("device") is None:
        from zoo.core.validation import resolve_device

        try:  # the device the workers' fits will use (ZOO_DEVICE, else CPU) must exist here too
            resolve_device(None)
        except ValueError as e:
            parser.error(f"argument ZOO_DEVICE: {e}")
    if a.steps:
        overrides["steps"] = a.steps
    try:
        variants = None if a.variants is None else [v for v in a.variants.split(",") if v]
        check_protocol_data(a.name, splits, variants)
        check_protocol_splits(a.name, splits, variants)  # every split of every dataset, before any fit
    except (FileNotFoundError, TypeError, ValueError) as e:
        parser.error(f"argument NAME/--splits/--variants: {e}")
    return splits, overrides, variants
