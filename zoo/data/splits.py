"""Datasets from full arrays and row indices: a seeded random train/test split (:func:`random_split_dataset`)
or given indices (:func:`indexed_dataset`), both through :func:`zoo.data.core.from_arrays`."""

from __future__ import annotations

import numpy as np

from zoo.data.core import Dataset, check_split, from_arrays, random_split

__all__ = ["indexed_dataset", "random_split_dataset"]


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
        standardize=standardize,
        split=split,
        n_classes=n_classes,
        meta=meta,
    )
