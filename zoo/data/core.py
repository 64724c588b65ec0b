"""Core data container and helpers shared by every loader in :mod:`zoo.data`.

Conventions (used by all loaders):

* Inputs are ``float64`` arrays of shape ``(n, d)``. With ``standardize=True`` they are standardised with the
  **training** mean and standard deviation (``ddof=0``, as ``sklearn.preprocessing.StandardScaler`` and the
  Hernández-Lobato & Adams 2015 UCI protocol, arXiv:1502.05336 §5, do). Numerically constant training
  columns get std 1, so no NaN can appear (the naval-propulsion data has constant columns). The statistics
  stay on the :class:`Dataset` (``x_mean``/``x_std``; :meth:`Dataset.transform_x` maps new raw inputs).
* Regression targets stay in their **original units**. Their training mean/std are stored in
  :attr:`Dataset.y_mean` / :attr:`Dataset.y_std` for fit code that wants to standardise targets and map
  predictions back (Sheinkman & Wade 2025, arXiv:2411.11132 §4, do not rescale outputs; Ghosh, Yao &
  Doshi-Velez 2019, arXiv:1705.10388 §6.1, standardise and report in original units — both are possible
  this way; :func:`zoo.experiments.runs.fit_on_dataset` standardises for fitting unless the registry entry
  says otherwise and reports every metric in original units).
* Classification labels are ``int64`` arrays of shape ``(n,)`` in ``0..n_classes-1``.
* Every array is validated before any training (:mod:`zoo.data.checks`).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from zoo.data import checks

__all__ = [
    "DATA_ENV_VAR",
    "TASKS",
    "Dataset",
    "check_split",
    "data_root",
    "from_arrays",
    "random_split",
    "standardize",
]

DATA_ENV_VAR = "ZOO_DATA_DIR"
"""Environment variable naming the shared data root."""

TASKS = checks.TASKS

EXPECTED_LAYOUT = (
    "expected layout under the data root: uci/<name>/{data.txt,index_features.txt,index_target.txt,"
    "index_train_K.txt,index_test_K.txt,n_splits.txt}, uci/airfoil/airfoil_self_noise.dat, "
    "mnist/t10k-{images-idx3,labels-idx1}-ubyte.gz, kmnist/t10k-{images-idx3,labels-idx1}-ubyte.gz"
)


@dataclass(frozen=True, eq=False)
class Dataset:
    """One train/test split of a dataset.

    ``eq=False``: the fields are numpy arrays, so element-wise ``==`` and hashing of the arrays would be
    meaningless; datasets compare by identity.

    Attributes:
        name: registry name (e.g. ``"uci:bostonHousing"``).
        task: ``"regression"``, ``"binary"`` or ``"multiclass"``.
        x_train, x_test: ``float64`` inputs, shape ``(n, d)``; standardised with train statistics when
            ``x_mean``/``x_std`` are set.
        y_train, y_test: regression: ``float64`` ``(n,)`` or ``(n, k)`` in original units; classification:
            ``int64`` labels ``(n,)``.
        split: split index (``None`` if the dataset has no notion of splits).
        n_classes: 2 for binary, K for multiclass, ``None`` for regression.
        x_mean, x_std: train statistics applied to x (``None`` if not standardised).
        y_mean, y_std: train statistics of y (regression only); **not** applied to ``y_*``.
        meta: free-form provenance, e.g. ``{"source": path, "protocol": "..."}``; ``meta["true_support"]``
            (set by :func:`from_arrays`' ``true_support=``) or ``meta["beta_true"]`` (the simulated
            coefficients of ``logistic-sim``) give :attr:`true_support`.
    """

    name: str
    task: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    split: int | None = None
    n_classes: int | None = None
    x_mean: np.ndarray | None = None
    x_std: np.ndarray | None = None
    y_mean: float | np.ndarray | None = None
    y_std: float | np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        for part in ("train", "test"):
            x = getattr(self, f"x_{part}")
            y = getattr(self, f"y_{part}")
            if not isinstance(x, np.ndarray) or x.ndim != 2:
                raise ValueError(
                    f"x_{part} must be a 2-D numpy array, got {type(x).__name__} "
                    f"with shape {getattr(x, 'shape', None)}"
                )
            if not isinstance(y, np.ndarray) or y.shape[:1] != x.shape[:1]:
                raise ValueError(
                    f"y_{part} must be a numpy array with {x.shape[0]} rows (as x_{part}), "
                    f"got shape {getattr(y, 'shape', None)}"
                )
            if self.task != "regression" and y.ndim != 1:
                raise ValueError(f"y_{part} must be 1-D labels for task {self.task!r}, got shape {y.shape}")
        if self.x_train.shape[1] != self.x_test.shape[1]:
            raise ValueError(
                f"x_train and x_test have different widths: {self.x_train.shape[1]} vs {self.x_test.shape[1]}"
            )
        if self.task == "regression":
            if self.n_classes is not None:
                raise ValueError(f"n_classes must be None for regression, got {self.n_classes!r}")
        elif self.task == "binary":
            if self.n_classes != 2:
                raise ValueError(f"n_classes must be 2 for task 'binary', got {self.n_classes!r}")
        elif self.n_classes is None or self.n_classes < 2:
            raise ValueError(f"n_classes must be an int >= 2 for task 'multiclass', got {self.n_classes!r}")

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def out_features(self) -> int:
        """``n_classes`` for multiclass, 1 for binary (one logit), 1 or k for regression."""
        if self.task == "multiclass":
            return int(self.n_classes)  # type: ignore[arg-type]
        if self.task == "binary":
            return 1
        return 1 if self.y_train.ndim == 1 else int(self.y_train.shape[1])

    @property
    def true_support(self) -> np.ndarray | None:
        """Boolean mask ``(in_features,)`` of the inputs that truly matter, or ``None`` when unknown.

        From ``meta["true_support"]`` (see :func:`from_arrays`), else ``meta["beta_true"] != 0``.  Registry
        entries with a variable-selection report (the one-neuron LBBNN) score TPR/FPR against it.
        """
        if self.meta.get("true_support") is not None:
            return np.asarray(self.meta["true_support"], dtype=bool)
        if self.meta.get("beta_true") is not None:
            return np.asarray(self.meta["beta_true"]) != 0
        return None

    def transform_x(self, x: np.ndarray) -> np.ndarray:
        """New raw inputs ``(m, d)`` mapped as ``x_train`` was (train statistics; unchanged if not
        standardised)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x must have shape (m, {self.in_features}), got {x.shape}")
        if self.x_mean is None or self.x_std is None:
            return x
        return (x - self.x_mean) / self.x_std

    def tensors(
        self, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Return ``(x_train, y_train, x_test, y_test)`` as torch tensors on ``device``.

        Inputs and regression targets get ``dtype``; classification labels are ``torch.long``.
        """
        y_dtype = dtype if self.task == "regression" else torch.long

        def conv(a: np.ndarray, dt: torch.dtype) -> Tensor:
            return torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=device)

        return (
            conv(self.x_train, dtype),
            conv(self.y_train, y_dtype),
            conv(self.x_test, dtype),
            conv(self.y_test, y_dtype),
        )

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, task={self.task!r}, split={self.split!r}, n_train={self.n_train}, "
            f"n_test={self.n_test}, in_features={self.in_features}, out_features={self.out_features})"
        )


def data_root(data_dir: str | Path | None = None) -> Path:
    """Resolve the shared data root: ``data_dir`` if given, else ``$ZOO_DATA_DIR``.

    Raises:
        FileNotFoundError: neither is set, or the folder does not exist. The message names ``ZOO_DATA_DIR``
            and the expected layout.
    """
    if data_dir is None:
        env = os.environ.get(DATA_ENV_VAR)
        if not env:
            raise FileNotFoundError(
                f"no data root: pass data_dir=... or set {DATA_ENV_VAR} to the folder holding uci/, mnist/, "
                f"kmnist/ ({EXPECTED_LAYOUT})"
            )
        root = Path(env).expanduser()
        origin = f"{DATA_ENV_VAR}={env!r}"
    else:
        root = Path(data_dir).expanduser()
        origin = f"data_dir={str(data_dir)!r}"
    if not root.is_dir():
        raise FileNotFoundError(
            f"data root {origin} is not an existing folder; pass data_dir=... or set {DATA_ENV_VAR} "
            f"({EXPECTED_LAYOUT})"
        )
    return root


def check_split(split: object, n_splits: int | None = None) -> int:
    """Validate a split index: a non-negative int (``bool`` rejected), below ``n_splits`` if given.

    Raises:
        TypeError: ``split`` is not an integer.
        ValueError: ``split`` is negative or ``>= n_splits``.
    """
    if isinstance(split, bool) or not isinstance(split, numbers.Integral):
        raise TypeError(f"split must be a non-negative int, got {split!r} ({type(split).__name__})")
    split = int(split)
    if split < 0:
        raise ValueError(f"split must be a non-negative int, got {split}")
    if n_splits is not None and split >= n_splits:
        raise ValueError(
            f"split={split} is out of range: this dataset has {n_splits} splits (0..{n_splits - 1})"
        )
    return split


def standardize(
    x_train: np.ndarray, x_test: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardise columns with the training mean and std (``ddof=0``).

    Numerically constant training columns (zero range, or std below ``1e-12 * max(1, |mean|)``, which
    catches float round-off such as naval column 11) get std 1, so they map to ~0 and never to NaN.

    Returns:
        ``(x_train_std, x_test_std, mean, std)``, all ``float64``.
    """
    xtr = np.asarray(x_train, dtype=np.float64)
    xte = np.asarray(x_test, dtype=np.float64)
    if xtr.ndim != 2 or xte.ndim != 2 or xtr.shape[1] != xte.shape[1]:
        raise ValueError(f"x_train and x_test must be 2-D with equal widths, got {xtr.shape} and {xte.shape}")
    if xtr.shape[0] == 0:
        raise ValueError("x_train must have at least one row to compute statistics")
    mean = xtr.mean(axis=0)
    std = xtr.std(axis=0)
    constant = (np.ptp(xtr, axis=0) == 0) | (std <= 1e-12 * np.maximum(1.0, np.abs(mean)))
    std = np.where(constant, 1.0, std)
    return (xtr - mean) / std, (xte - mean) / std, mean, std


_standardize_columns = standardize  # from_arrays' ``standardize`` argument shadows the function's name


def random_split(n: int, seed: int, test_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random train/test split in the style of Hernández-Lobato & Adams (2015).

    A permutation from ``np.random.default_rng(seed)``; the first ``round((1 - test_fraction) * n)`` indices
    (``round(0.9 n)`` by default) are train, the rest test. Indices are returned in permutation order.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    n_train = int(round((1.0 - float(test_fraction)) * int(n)))
    if not 0 < n_train < n:
        raise ValueError(f"test_fraction={test_fraction} leaves an empty train or test set for n={n}")
    perm = np.random.default_rng(int(seed)).permutation(int(n))
    return perm[:n_train], perm[n_train:]


def from_arrays(
    name: str,
    task: str | None,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    standardize: bool = True,
    split: int | None = None,
    n_classes: int | None = None,
    true_support: np.ndarray | Sequence[int] | None = None,
    meta: dict[str, Any] | None = None,
    standardize_x: bool | None = None,
) -> Dataset:
    """Build a :class:`Dataset` from your own arrays, validated before any training.

    This is the Python route for own data (``zoo.data.load_table`` reads a CSV / NPZ file into the same)::

        ds = from_arrays("mine", "binary", x_tr, y_tr, x_te, y_te, true_support=[0, 3])
        run = zoo.experiments.runs.fit_on_dataset("lbbnn", ds, hidden=[])

    Args:
        name: the dataset's name in run records.
        task: ``"regression"``, ``"binary"`` or ``"multiclass"``; ``None`` infers it from the labels
            (:func:`zoo.data.checks.infer_task`: non-integer or more than 20 distinct values: regression;
            two classes: binary; else multiclass).
        x_train, x_test: numeric inputs ``(n, d)`` (1-D: one feature), finite, at least one row each.
        y_train, y_test: regression: finite ``(n,)`` or ``(n, k)``; classification: integer labels in
            ``0..C-1`` (``1.0`` is accepted, ``0.7`` is rejected, never rounded; −1/+1 and 1..C are rejected
            with the remap to apply).
        standardize: standardise x with the **train** part's mean and std (``ddof=0``; constant columns get
            std 1); the statistics are kept in ``x_mean``/``x_std`` (see :meth:`Dataset.transform_x`).
            Regression targets are never changed here: their train mean/std are recorded in
            ``y_mean``/``y_std``, which :func:`zoo.experiments.runs.fit_on_dataset` uses to standardise the
            targets for fitting and to map predictions back (metrics in original units). Default ``True``.
        split: split index recorded on the dataset.
        n_classes: 2 for binary (inferred when omitted); for multiclass ``max label + 1`` when omitted;
            checked against the labels when given.
        true_support: the input features that truly matter, as a boolean mask ``(d,)`` or a list of feature
            indices; stored as ``meta["true_support"]`` (a boolean mask, read by
            :attr:`Dataset.true_support`). With it, runs whose model reports a variable selection (the
            one-neuron ``lbbnn`` entries) add ``tpr``/``fpr`` (Skaaret-Lund, Storvik & Hubin 2023,
            arXiv:2305.03395, §5.1) to their metrics.
        meta: free-form provenance, copied.
        standardize_x: older name of ``standardize`` (wins when given).

    Raises:
        ValueError: naming the argument: non-finite values (which array, how many, where), an empty part,
            row counts of x and y that differ, different feature counts, non-integer or out-of-range labels,
            an unknown task, a wrong ``n_classes``, a bad ``true_support``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if standardize_x is not None:
        standardize = standardize_x
    if not isinstance(standardize, bool | np.bool_):
        raise ValueError(f"standardize must be a bool, got {standardize!r}")
    x_train, x_test = checks.check_inputs(x_train, x_test)
    if task is None:
        ys = [np.asarray(y_train), np.asarray(y_test)]
        task = checks.infer_task(np.concatenate(ys) if ys[0].ndim == ys[1].ndim else ys[0], "y_train")
    task = checks.check_task(task)
    y_mean: float | np.ndarray | None = None
    y_std: float | np.ndarray | None = None
    if task == "regression":
        y_train = checks.check_regression_targets("y_train", y_train, x_train.shape[0])
        y_test = checks.check_regression_targets("y_test", y_test, x_test.shape[0])
        if y_train.ndim == 1:
            y_mean, y_std = float(y_train.mean()), float(y_train.std())
        else:
            y_mean, y_std = y_train.mean(axis=0), y_train.std(axis=0)
    else:
        y_train = checks.check_class_labels("y_train", y_train, x_train.shape[0], task)
        y_test = checks.check_class_labels("y_test", y_test, x_test.shape[0], task)
    n_classes = checks.check_n_classes(task, n_classes, y_train, y_test)
    meta = dict(meta or {})
    support = checks.check_true_support(true_support, x_train.shape[1])
    if support is not None:
        meta["true_support"] = support
    x_mean = x_std = None
    if standardize:
        x_train, x_test, x_mean, x_std = _standardize_columns(x_train, x_test)
    return Dataset(
        name=name,
        task=task,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        split=split,
        n_classes=n_classes,
        x_mean=x_mean,
        x_std=x_std,
        y_mean=y_mean,
        y_std=y_std,
        meta=meta,
    )
