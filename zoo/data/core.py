"""Core data container and helpers shared by every loader in :mod:`zoo.data`.

Conventions (used by all loaders):

* Inputs are ``float64`` arrays of shape ``(n, d)``. With ``standardize=True`` they are standardised with the
  **training** mean and standard deviation (``ddof=0``, as ``sklearn.preprocessing.StandardScaler`` and the
  Hernández-Lobato & Adams 2015 UCI protocol do). Numerically constant training columns get std 1, so no NaN
  can appear (the naval-propulsion data has constant columns).
* Regression targets stay in their **original units**. Their training mean/std are stored in
  :attr:`Dataset.y_mean` / :attr:`Dataset.y_std` for fit code that wants to standardise targets and map
  predictions back (the bow-tie paper, note 000 §4.1, does not rescale outputs; the horseshoe paper,
  note 004 §6.1, standardises and reports in original units — both are possible this way).
* Classification labels are ``int64`` arrays of shape ``(n,)``.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "DATA_ENV_VAR",
    "TASKS",
    "Dataset",
    "check_split",
    "data_root",
    "from_arrays",
    "random_split",
    "random_split_dataset",
    "standardize",
]

DATA_ENV_VAR = "ZOO_DATA_DIR"
"""Environment variable naming the shared data root."""

TASKS = ("regression", "binary", "multiclass")

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
        meta: free-form provenance, e.g. ``{"source": path, "protocol": "...", "beta_true": ...}``.
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
    task: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    standardize_x: bool = True,
    split: int | None = None,
    n_classes: int | None = None,
    meta: dict[str, Any] | None = None,
) -> Dataset:
    """Build a :class:`Dataset` from raw arrays, applying the package conventions.

    x is cast to ``float64`` (2-D) and standardised with train statistics if ``standardize_x``;
    regression y is cast to ``float64`` and its train mean/std (``ddof=0``; per column for ``(n, k)``
    targets) are recorded but not applied; classification y is cast to ``int64``.
    """
    x_train = np.asarray(x_train, dtype=np.float64)
    x_test = np.asarray(x_test, dtype=np.float64)
    if x_train.ndim == 1:
        x_train, x_test = x_train[:, None], x_test.reshape(-1, 1)
    x_mean = x_std = None
    if standardize_x:
        x_train, x_test, x_mean, x_std = standardize(x_train, x_test)
    y_mean: float | np.ndarray | None = None
    y_std: float | np.ndarray | None = None
    if task == "regression":
        y_train = np.asarray(y_train, dtype=np.float64)
        y_test = np.asarray(y_test, dtype=np.float64)
        if y_train.ndim == 1:
            y_mean, y_std = float(y_train.mean()), float(y_train.std())
        else:
            y_mean, y_std = y_train.mean(axis=0), y_train.std(axis=0)
    else:
        y_train = np.asarray(y_train).astype(np.int64)
        y_test = np.asarray(y_test).astype(np.int64)
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
        meta=dict(meta or {}),
    )


def random_split_dataset(
    name: str,
    task: str,
    x: np.ndarray,
    y: np.ndarray,
    split: int,
    *,
    standardize: bool = True,
    n_classes: int | None = None,
    meta: dict | None = None,
) -> Dataset:
    """A :class:`Dataset` from full arrays with the seeded random 90/10 split of :func:`random_split`.

    ``meta["protocol"]`` (if given) is extended with the split rule; train/test indices are recorded.
    """
    split = check_split(split)
    tr, te = random_split(x.shape[0], seed=split)
    meta = dict(meta or {})
    rule = f"seeded random 90/10 split, np.random.default_rng({split}).permutation, first round(0.9 N) train"
    meta["protocol"] = f"{meta['protocol']}; {rule}" if meta.get("protocol") else rule
    return indexed_dataset(
        name, task, x, y, tr, te, split, standardize=standardize, n_classes=n_classes, meta=meta
    )


def indexed_dataset(
    name: str,
    task: str,
    x: np.ndarray,
    y: np.ndarray,
    train_index: np.ndarray,
    test_index: np.ndarray,
    split: int,
    *,
    standardize: bool = True,
    n_classes: int | None = None,
    meta: dict | None = None,
) -> Dataset:
    """:func:`from_arrays` on the rows ``train_index`` / ``test_index`` of full arrays; the indices are
    recorded in ``meta`` (``train_index``, ``test_index``)."""
    meta = {**(meta or {}), "train_index": train_index, "test_index": test_index}
    return from_arrays(
        name,
        task,
        x[train_index],
        y[train_index],
        x[test_index],
        y[test_index],
        standardize_x=standardize,
        split=split,
        n_classes=n_classes,
        meta=meta,
    )
