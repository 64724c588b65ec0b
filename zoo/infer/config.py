"""The settings of one fit (:func:`zoo.infer.loop.fit`) as a validated, serializable config.

:class:`FitConfig` holds the plain-data settings (step budget, optimizer name and learning rate,
particles, minibatch size and order, stopping rule, seed, device, progress bar, and free-form ``metadata``
recorded with the fit).  The objects of a fit — an optimizer instance, the ELBO, callbacks, the registry
spec — stay arguments of :func:`~zoo.infer.loop.fit`.  A fit stores its config (``to_dict``) in
:attr:`FitResult.config <zoo.infer.result.FitResult.config>` and in its checkpoints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from zoo.core.config import Config, resolve
from zoo.core.validation import (
    check_bool,
    check_device_name,
    check_mapping,
    check_optional,
    check_positive,
    check_positive_int,
    check_seed,
)

__all__ = ["FitConfig", "OPTIMIZERS", "resolve_fit_config"]

#: optimizer names understood by :func:`zoo.infer.optim.make_optimizer`
OPTIMIZERS = ("adam", "clipped_adam", "sgd", "adagrad", "rmsprop")


@dataclasses.dataclass(frozen=True)
class FitConfig(Config):
    """Plain-data settings of :func:`zoo.infer.loop.fit` (see its docstring for each field)."""

    steps: int = 1000
    optimizer: str = "adam"
    lr: float = 1e-2
    num_particles: int = 1
    batch_size: int | None = None
    shuffle: bool = True
    tol: float | None = None
    patience: int = 3
    window: int | None = None
    seed: int = 0
    device: str | None = None
    progress: bool = True
    nproc: int = 1
    accelerate: str | None = None
    noise_refit: bool = True
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.device, torch.device):
            object.__setattr__(self, "device", str(self.device))
        if isinstance(self.metadata, Mapping):
            object.__setattr__(self, "metadata", dict(self.metadata))
        super().__post_init__()

    def validate(self) -> None:
        check_positive_int("steps", self.steps, allow_zero=True)
        if not isinstance(self.optimizer, str):
            raise TypeError(f"optimizer must be a name or a pyro.optim.PyroOptim, got {self.optimizer!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        check_positive("lr", self.lr)
        check_positive_int("num_particles", self.num_particles)
        check_optional("batch_size", self.batch_size, check_positive_int)
        check_bool("shuffle", self.shuffle)
        check_optional("tol", self.tol, check_positive)
        check_positive_int("patience", self.patience)
        check_optional("window", self.window, check_positive_int)
        check_seed("seed", self.seed)
        check_device_name("device", self.device)
        check_bool("progress", self.progress)
        check_positive_int("nproc", self.nproc)
        check_bool("noise_refit", self.noise_refit)
        if self.accelerate is not None:
            from zoo.infer.accelerate import ACCELERATORS

            if self.accelerate not in ACCELERATORS:
                raise ValueError(f"accelerate must be None or one of {ACCELERATORS}, got {self.accelerate!r}")
            if self.batch_size is not None or self.nproc > 1:
                raise ValueError(
                    "accelerate: SQUAREM extrapolates full-batch sweeps of one process; it cannot be "
                    "combined with batch_size or nproc > 1"
                )
        check_mapping("metadata", self.metadata)
        clash = sorted(set(self.metadata) & set(self.field_names()))
        if clash:
            raise ValueError(f"metadata: keys {clash} are FitConfig fields; set them as fields")

    def record(self) -> dict[str, Any]:
        """The flat dict a :class:`~zoo.infer.result.FitResult` keeps as ``config``: every field and the
        ``metadata`` entries at top level (where ``predict`` finds e.g. ``y_mean``/``y_std``)."""
        out = self.to_dict()
        meta = out.pop("metadata")
        return {**out, **meta}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> FitConfig:
        """Inverse of :meth:`record`: fields by name, every other entry back into ``metadata``."""
        names = set(cls.field_names()) - {"metadata"}
        fields = {k: v for k, v in record.items() if k in names}
        return cls(**fields, metadata={k: v for k, v in record.items() if k not in names})


def resolve_fit_config(
    config: FitConfig | Mapping[str, Any] | None, settings: Mapping[str, Any]
) -> FitConfig:
    """The :class:`FitConfig` of a :func:`~zoo.infer.loop.fit` call: ``config`` updated by keywords.

    A mapping ``config`` may also carry entries that are not fields (the form ``fit`` took before configs
    existed, e.g. ``config={"y_mean": mu, "y_std": sd}``): they are added to ``metadata``, as is a
    ``metadata`` keyword (both merge into the config's own metadata).
    """
    if isinstance(config, Mapping):
        names = set(FitConfig.field_names())
        extra = {k: v for k, v in config.items() if k not in names}
        config = {k: v for k, v in config.items() if k in names}
        check_mapping("metadata", config.setdefault("metadata", {}))
        config["metadata"] = {**config["metadata"], **extra}
    cfg = resolve(FitConfig, config, {k: v for k, v in settings.items() if k != "metadata"})
    if "metadata" in settings:
        check_mapping("metadata", settings["metadata"])
        cfg = cfg.replace(metadata={**cfg.metadata, **settings["metadata"]})
    return cfg
