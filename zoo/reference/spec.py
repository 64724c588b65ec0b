"""The parts of a reference instance (:mod:`zoo.reference.instances` holds the pinned table): its data
(:class:`DataSpec`, with the seeded subsampling every guide scored against it is fitted on), its NUTS settings
(:class:`SamplerSettings`) and the instance itself (:class:`ReferenceInstance`).

``selection-linear`` is the zoo's correlated variable-selection design
(:func:`zoo.data.synthetic.make_logistic_selection`'s covariates) restricted to 14 columns (so ``2^14``
models can be enumerated) with a *linear-Gaussian* response ``y = 0.25 x β + 0.4 + ε``, ``ε ~ N(0, 1)``,
``β`` the generator's coefficients on those columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo.core.config import Config
from zoo.core.validation import (
    check_bool,
    check_count,
    check_optional,
    check_positive_int,
    check_probability,
)

if TYPE_CHECKING:
    from zoo.data import Dataset
    from zoo.infer.mcmc import NUTSConfig

__all__ = ["DataSpec", "SamplerSettings", "ReferenceInstance", "METHODS", "SELECTION_COLUMNS"]

METHODS = ("nuts", "enumeration")

#: the 14 (0-based) columns of the selection covariates used by ``selection-linear``: X1-X4, X7-X9, X11, X13,
#: X15, X16, X18-X20 (1-based), which keep the strongly correlated pairs (X2-X3, X1-X4, X13-X15, X9-X11,
#: X2-X18, X18-X20, X16-X19, X7-X8)
SELECTION_COLUMNS = (0, 1, 2, 3, 6, 7, 8, 10, 12, 14, 15, 17, 18, 19)
_SELECTION_SIGNAL = 0.25
_SELECTION_ROWS = 250


@dataclasses.dataclass(frozen=True)
class DataSpec(Config):
    """The data of an instance: registry ``dataset`` (or ``"selection-linear"``) at ``split``, with a seeded
    subsample of ``n_train`` training and ``n_test`` test rows (``None``: all)."""

    dataset: str
    split: int = 0
    n_train: int | None = None
    n_test: int | None = None
    seed: int = 0

    def validate(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ValueError(f"dataset must be a non-empty name, got {self.dataset!r}")
        check_count("split", self.split)
        check_count("seed", self.seed)
        for name in ("n_train", "n_test"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))


@dataclasses.dataclass(frozen=True)
class SamplerSettings(Config):
    """NUTS settings of an instance (the fields of :class:`zoo.infer.mcmc.NUTSConfig` it pins)."""

    chains: int = 4
    warmup: int = 500
    samples: int = 1000
    target_accept: float = 0.8
    max_tree_depth: int = 8
    jit_compile: bool = True
    init: str = "uniform"
    full_mass: bool = False
    hierarchical: bool = False
    centered: bool | None = None
    gibbs: bool = False
    interweave: bool = False

    def validate(self) -> None:
        if check_positive_int("chains", self.chains) < 4:
            raise ValueError(
                f"chains must be >= 4 for a reference (R-hat needs several chains), got {self.chains}"
            )
        check_positive_int("warmup", self.warmup)
        check_positive_int("samples", self.samples)
        check_probability("target_accept", self.target_accept)
        check_positive_int("max_tree_depth", self.max_tree_depth)
        check_optional("centered", self.centered, check_bool)
        check_bool("gibbs", self.gibbs)
        check_bool("interweave", self.interweave)

    def nuts_config(self, seed: int, progress: bool = False, parallel: bool | None = False) -> NUTSConfig:
        """The :class:`zoo.infer.mcmc.NUTSConfig` of these settings."""
        from zoo.infer.mcmc import NUTSConfig

        return NUTSConfig(**self.to_dict(), seed=seed, progress=progress, parallel=parallel)


@dataclasses.dataclass(frozen=True)
class ReferenceInstance(Config):
    """One pinned reference posterior (module docstring).

    ``model``: registry name; ``options``: its builder options; ``scored``: the registry models whose guides
    the scoreboard scores against this instance (``model`` itself first); ``draws``: predictive draws kept
    (thinned evenly over all chains); ``note``: what was shrunk to keep it cheap.
    """

    name: str
    model: str
    method: str
    data: DataSpec
    hidden: tuple[int, ...] = (10,)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    sampler: SamplerSettings = dataclasses.field(default_factory=SamplerSettings)
    draws: int = 800
    seed: int = 0
    scored: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "hidden", tuple(self.hidden))
        object.__setattr__(self, "scored", tuple(self.scored) or (self.model,))
        super().__post_init__()

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not isinstance(self.data, DataSpec):
            raise TypeError(f"data must be a DataSpec, got {type(self.data).__name__}")
        if not isinstance(self.sampler, SamplerSettings):
            raise TypeError(f"sampler must be SamplerSettings, got {type(self.sampler).__name__}")
        check_positive_int("draws", self.draws)
        check_count("seed", self.seed)
        if self.method == "enumeration" and (self.model != "lbbnn" or self.hidden != ()):
            raise ValueError(
                "method: 'enumeration' is the linear spike-and-slab model (model 'lbbnn', hidden ())"
            )

    def dataset(self, data_dir: str | Path | None = None) -> Dataset:
        """The instance's :class:`zoo.data.Dataset` (subsampled as pinned; inputs standardized with the
        full training split's statistics)."""
        from zoo.data import load_dataset

        spec = self.data
        ds = _selection_linear(spec.split) if spec.dataset == "selection-linear" else None
        ds = ds if ds is not None else load_dataset(spec.dataset, split=spec.split, data_dir=data_dir)
        return _subsample(ds, spec)

    def target_scale(self, data_dir: str | Path | None = None) -> tuple[float, float]:
        """``(y_mean, y_std)`` the instance's regression targets are standardized with — the reference's
        own (stored as ``meta["y_mean"]``, ``meta["y_std"]``), the numbers to pass to a fit on standardized
        targets as ``metadata={"y_mean": .., "y_std": ..}`` before scoring it
        (:func:`zoo.reference.score.score_fit`).  They are the full training split's statistics
        (:func:`zoo.data.tensors.fit_tensors`), not those of the subsampled rows of ``dataset().tensors()``.
        ``ValueError`` for a binary instance."""
        import torch

        from zoo.data.tensors import fit_tensors

        ds = self.dataset(data_dir)
        if ds.task != "regression":
            raise ValueError(f"instance {self.name!r} is a {ds.task} instance; it has no target scale")
        extra = fit_tensors(ds, torch.device("cpu"), dtype=torch.float64)[4]
        return float(extra["y_mean"]), float(extra["y_std"])


def _selection_linear(split: int):
    from zoo.data import from_arrays
    from zoo.data.synthetic import make_logistic_selection

    x, _, beta = make_logistic_selection(n=_SELECTION_ROWS, seed=0)
    cols = list(SELECTION_COLUMNS)
    x, beta = x[:, cols], _SELECTION_SIGNAL * beta[cols]
    rng = np.random.default_rng(1)
    y = x @ beta + 0.4 + rng.standard_normal(x.shape[0])
    perm = np.random.default_rng(split).permutation(x.shape[0])
    tr, te = perm[:200], perm[200:]
    meta = {
        "source": "zoo.reference.instances",
        "beta_true": beta,
        "protocol": "selection-linear (module doc)",
    }
    return from_arrays("selection-linear", "regression", x[tr], y[tr], x[te], y[te], split=split, meta=meta)


def _subsample(ds, spec: DataSpec):
    """``ds`` with ``n_train`` / ``n_test`` rows drawn without replacement (seed ``spec.seed``)."""
    rng = np.random.default_rng(spec.seed)
    changes: dict[str, Any] = {}
    for part, n in (("train", spec.n_train), ("test", spec.n_test)):
        total = getattr(ds, f"n_{part}")
        if n is None or n >= total:
            continue
        idx = np.sort(rng.permutation(total)[:n])
        changes[f"x_{part}"] = getattr(ds, f"x_{part}")[idx]
        changes[f"y_{part}"] = getattr(ds, f"y_{part}")[idx]
    if not changes:
        return ds
    meta = {**ds.meta, "subsample": spec.to_dict()}
    return dataclasses.replace(ds, **changes, meta=meta)
