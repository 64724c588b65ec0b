"""Small datasets bundled with scikit-learn (offline, no data root needed).

* Diabetes (Efron et al. 2004): 442 x 10, regression; used by the bow-tie paper
  (Sheinkman & Wade 2025, arXiv:2411.11132, §4.2, App. D.3) with 10 random 90/10 splits. We load
  ``sklearn.datasets.load_diabetes(scaled=False)``, i.e. raw unscaled inputs (sex coded 1/2) and raw targets
  (25-346).
* Breast cancer (WDBC): 569 x 30, binary (0 = malignant, 1 = benign).
* Digits (8x8 optical digits): 1797 x 64 pixel counts 0-16, 10 classes.

None of them has a standard split: split ``K`` is the seeded random 90/10 split
:func:`zoo.data.core.random_split` ``(n, seed=K)``.
"""

from __future__ import annotations

import importlib

from zoo.data.core import Dataset
from zoo.data.splits import random_split_dataset

__all__ = ["load_breast_cancer", "load_diabetes", "load_digits"]


def _skd():  # scikit-learn is imported lazily: importing it costs ~3 s
    return importlib.import_module("sklearn.datasets")


def load_diabetes(split: int = 0, standardize: bool = True) -> Dataset:
    """Diabetes regression (442 x 10), raw inputs and targets; random 90/10 split with seed ``split``."""
    bunch = _skd().load_diabetes(scaled=False)
    return random_split_dataset(
        "diabetes",
        "regression",
        bunch.data,
        bunch.target,
        split,
        standardize=standardize,
        meta={"source": "sklearn.datasets.load_diabetes(scaled=False)", "protocol": "no standard split"},
    )


def load_breast_cancer(split: int = 0, standardize: bool = True) -> Dataset:
    """WDBC binary classification (569 x 30; 0 = malignant, 1 = benign); random 90/10 split, seed K."""
    bunch = _skd().load_breast_cancer()
    return random_split_dataset(
        "breast-cancer",
        "binary",
        bunch.data,
        bunch.target,
        split,
        standardize=standardize,
        n_classes=2,
        meta={"source": "sklearn.datasets.load_breast_cancer()", "protocol": "no standard split"},
    )


def load_digits(split: int = 0, standardize: bool = True) -> Dataset:
    """8x8 digits, 10 classes (1797 x 64 pixel counts 0-16); random 90/10 split with seed ``split``.

    With ``standardize=True`` the always-zero border pixels are constant columns and get std 1 (no NaN).
    """
    bunch = _skd().load_digits()
    return random_split_dataset(
        "digits",
        "multiclass",
        bunch.data,
        bunch.target,
        split,
        standardize=standardize,
        n_classes=10,
        meta={"source": "sklearn.datasets.load_digits()", "protocol": "no standard split"},
    )
