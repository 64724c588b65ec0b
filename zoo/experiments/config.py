"""The settings of one run on a dataset (:func:`zoo.experiments.runs.fit_on_dataset`) as a config.

:class:`RunConfig` is what ``zoo fit`` builds from its arguments and what a protocol's
:class:`~zoo.experiments.reproduce.RunSpec` ``kwargs`` are checked against (an unknown key or a bad value
is an error naming it before any fit starts).  ``None`` for ``steps``/``lr``/``batch_size`` means the
registry entry's ``fit_defaults``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from zoo.core.config import Config
from zoo.core.validation import (
    check_bool,
    check_device_name,
    check_mapping,
    check_optional,
    check_positive,
    check_positive_int,
    check_seed,
)

__all__ = ["RunConfig"]


def _check_hidden(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, tuple):
        raise TypeError(f"hidden must be a sequence of ints, got {type(value).__name__}")
    for v in value:
        check_positive_int("hidden", v)


def _check_name(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")


def _check_conformal(share: object, level: object, posttrain_steps: int) -> None:
    """``conformal`` (a held-out share in (0, 1), or None) and ``conformal_level`` (in (0, 1))."""
    for name, value in (("conformal", share), ("conformal_level", level)):
        if value is None and name == "conformal":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
            raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    if share is not None and posttrain_steps:
        raise ValueError(
            "conformal: the conformal fields describe one fit; not with posttrain_steps (calibrate the "
            "post-trained fit separately)"
        )


def _check_folds(folds: object, share: object, posttrain_steps: int) -> None:
    """``conformal_folds`` (CV+ folds, an integer >= 2, or None): not with ``conformal`` or post-training."""
    if folds is None:
        return
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"conformal_folds must be an integer >= 2, got {folds!r}")
    if share is not None:
        raise ValueError("conformal_folds: CV+ or split conformal (conformal), not both")
    if posttrain_steps:
        raise ValueError(
            "conformal_folds: the CV+ fields describe the fit as trained; not with posttrain_steps"
        )


@dataclasses.dataclass(frozen=True)
class RunConfig(Config):
    """Plain-data settings of :func:`~zoo.experiments.runs.fit_on_dataset` (see its docstring)."""

    split: int = 0
    hidden: tuple[int, ...] | None = None
    guide: str | None = None
    steps: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    seed: int = 0
    device: str | None = None
    progress: bool = True
    num_samples: int = 100
    data_dir: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    guide_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    train_metrics: bool = False
    max_seconds: float | None = None
    posttrain_steps: int = 0
    posttrain_lr: float | None = None
    fit_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    conformal: float | None = None
    conformal_level: float = 0.95
    conformal_folds: int | None = None

    def __post_init__(self) -> None:
        norm = object.__setattr__
        if isinstance(self.device, torch.device):
            norm(self, "device", str(self.device))
        if isinstance(self.data_dir, os.PathLike):
            norm(self, "data_dir", os.fspath(self.data_dir))
        if isinstance(self.hidden, Sequence) and not isinstance(self.hidden, str):
            norm(self, "hidden", tuple(self.hidden))
        for name in ("options", "guide_options", "fit_options"):
            value = getattr(self, name)
            norm(self, name, {} if value is None else dict(value) if isinstance(value, Mapping) else value)
        super().__post_init__()

    def build(self, model: str, ds: Any) -> tuple:
        """``(model, guide, spec)`` of registry ``model`` for dataset ``ds`` with these settings (hidden
        widths, guide and its options, builder options): the one build of VI and NUTS runs."""
        from zoo.experiments.registry import build

        return build(
            model,
            ds.in_features,
            ds.out_features,
            ds.task,
            hidden=None if self.hidden is None else list(self.hidden),
            guide=self.guide,
            guide_options=self.guide_options,
            **self.options,
        )

    def validate(self) -> None:
        check_positive_int("split", self.split, allow_zero=True)
        _check_hidden(self.hidden)
        _check_name("guide", self.guide)
        check_optional("steps", self.steps, check_positive_int, allow_zero=True)
        check_optional("lr", self.lr, check_positive)
        check_optional("batch_size", self.batch_size, check_positive_int)
        check_seed("seed", self.seed)
        check_device_name("device", self.device)
        check_bool("progress", self.progress)
        check_positive_int("num_samples", self.num_samples)
        _check_name("data_dir", self.data_dir)
        for name in ("options", "guide_options", "fit_options"):
            check_mapping(name, getattr(self, name))
        check_bool("train_metrics", self.train_metrics)
        check_optional("max_seconds", self.max_seconds, check_positive)
        check_positive_int("posttrain_steps", self.posttrain_steps, allow_zero=True)
        check_optional("posttrain_lr", self.posttrain_lr, check_positive)
        _check_conformal(self.conformal, self.conformal_level, self.posttrain_steps)
        _check_folds(self.conformal_folds, self.conformal, self.posttrain_steps)
