"""K-fold cross-validation views of a zoo dataset: ``cv10:<name>`` with ``split`` = fold.

The tabular study of Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395, App. C) uses 10-fold
cross-validation; the authors' public code draws the folds with ``StratifiedKFold(10, shuffle=True,
random_state=1)`` for classification and ``KFold`` (same shuffle and seed) for regression.  Here the
folds are drawn over *all* rows of the base dataset, put back into their original file order (the base
loader's ``train_index`` / ``test_index`` of split 0 cover every row), and x is standardised with the
training folds' statistics (``from_arrays``); regression targets record their training-fold mean/sd as every
zoo dataset does.  The authors' code also trims rows so that folds have equal size; we do not (folds differ
by at most one row).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from zoo.data.core import Dataset, check_split
from zoo.data.splits import indexed_dataset

__all__ = ["CV_PREFIX", "N_FOLDS", "CV_SEED", "kfold_indices", "cross_validation_dataset"]

CV_PREFIX = "cv10:"
N_FOLDS = 10
CV_SEED = 1  # random_state=1 of the authors' public code (Skaaret-Lund et al. 2023, App. C)


def kfold_indices(
    y: np.ndarray, task: str, fold: int, n_folds: int = N_FOLDS, seed: int = CV_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """``(train_index, test_index)`` of fold ``fold``: stratified on the labels for classification,
    plain K-fold for regression, both shuffled with ``seed``."""
    from sklearn.model_selection import KFold, StratifiedKFold

    fold = check_split(fold, n_folds)
    y = np.asarray(y)
    if task == "regression":
        splitter = KFold(n_folds, shuffle=True, random_state=seed).split(np.zeros(len(y)))
    else:
        splitter = StratifiedKFold(n_folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)
    for k, (tr, te) in enumerate(splitter):
        if k == fold:
            return tr, te
    raise AssertionError("unreachable: check_split bounds the fold")  # pragma: no cover


def cross_validation_dataset(
    base_name: str, fold: int, load_base: Callable[[str], Dataset], *, standardize: bool = True
) -> Dataset:
    """Fold ``fold`` of 10-fold CV over every row of ``base_name`` (loaded unstandardised by
    ``load_base(base_name)``); the test part is the held-out fold."""
    base = load_base(base_name)
    x = np.concatenate([base.x_train, base.x_test])
    y = np.concatenate([base.y_train, base.y_test])
    order = base.meta.get("train_index"), base.meta.get("test_index")
    if order[0] is not None and order[1] is not None:
        rows = np.concatenate([np.asarray(order[0]), np.asarray(order[1])])
        if np.array_equal(np.sort(rows), np.arange(len(rows))):
            inv = np.empty_like(rows)
            inv[rows] = np.arange(len(rows))
            x, y = x[inv], y[inv]  # back to file order
    tr, te = kfold_indices(y, base.task, fold)
    meta = {
        "source": base.meta.get("source", base.name),
        "base": base.name,
        "protocol": (
            f"10-fold CV over all {len(y)} rows of {base.name}, fold {fold}: "
            f"{'KFold' if base.task == 'regression' else 'StratifiedKFold'}"
            f"(10, shuffle=True, random_state={CV_SEED}) "
            "(Skaaret-Lund et al. 2023, arXiv:2305.03395, App. C)"
        ),
    }
    name = f"{CV_PREFIX}{base.name}"
    return indexed_dataset(
        name, base.task, x, y, tr, te, fold, standardize=standardize, n_classes=base.n_classes, meta=meta
    )
