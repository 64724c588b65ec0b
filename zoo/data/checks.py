"""Checks of user data before any training: :func:`zoo.data.from_arrays` and :func:`zoo.data.load_table` run
them, so a bad array is a ``ValueError`` naming the argument (``x_train``, ``y_test``, ``n_classes``, ...)
instead of a failure deep inside the fit or, worse, a silently wrong fit (labels 0.7 cut to 0, labels ±1
read by a Bernoulli likelihood).

* inputs: numeric, 2-D (a 1-D array is one feature), finite, at least one row, the same columns in both parts;
* targets: as many rows as their inputs, finite; classification labels integers (``1.0`` is fine, ``0.7`` is
  not) in ``0..C-1`` (−1/+1 or 1..C are rejected with the remap to use);
* the task: ``"regression"``, ``"binary"`` or ``"multiclass"``, or inferred by :func:`infer_task`;
* ``n_classes``: 2 for binary, ``max label + 1`` for multiclass when omitted, checked when given; labels
  ``1..C`` without any class 0 in either part are refused when it is omitted (1-based labels would
  otherwise make a phantom empty class 0);
* a true support (the relevant input features, for selection metrics): a boolean mask or an index list.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Sequence

import numpy as np

__all__ = [
    "MAX_INFERRED_CLASSES",
    "TASKS",
    "check_class_labels",
    "check_inputs",
    "check_n_classes",
    "check_regression_targets",
    "check_task",
    "check_true_support",
    "feature_index",
    "infer_task",
    "label_remap_hint",
]

logger = logging.getLogger(__name__)

TASKS = ("regression", "binary", "multiclass")

MAX_INFERRED_CLASSES = 20
"""Integer-valued targets with more distinct values than this are inferred to be a regression target."""


def _positions(bad: np.ndarray, limit: int = 5) -> str:
    idx = [int(i) for i in np.flatnonzero(bad)[:limit]]
    more = ", ..." if int(bad.sum()) > limit else ""
    return f"[{', '.join(map(str, idx))}{more}]"


def _check_finite(name: str, arr: np.ndarray) -> None:
    bad = ~np.isfinite(arr)
    if not bad.any():
        return
    where = f"in column(s) {_positions(bad.any(axis=0))}" if arr.ndim == 2 else f"at row(s) {_positions(bad)}"
    raise ValueError(
        f"{name} contains {int(bad.sum())} non-finite value(s) (NaN or inf) {where}; "
        "drop or impute them before training"
    )


def _numeric(name: str, value: object) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists etc.
        raise ValueError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} must be numeric, got dtype {arr.dtype}; encode non-numeric columns or labels as numbers"
        )
    return arr


def check_inputs(x_train: object, x_test: object) -> tuple[np.ndarray, np.ndarray]:
    """``(x_train, x_test)`` as finite ``float64`` 2-D arrays with rows and equal widths (1-D: one
    feature)."""
    out = []
    for name, value in (("x_train", x_train), ("x_test", x_test)):
        x = _numeric(name, value).astype(np.float64)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D array (rows, features), got shape {x.shape}")
        if x.shape[0] == 0:
            part = name.split("_")[1]
            raise ValueError(
                f"{name} has no rows: the {part} part is empty (both parts need at least one row)"
            )
        _check_finite(name, x)
        out.append(x)
    if out[0].shape[1] != out[1].shape[1]:
        raise ValueError(
            f"x_test has {out[1].shape[1]} feature column(s) but x_train has {out[0].shape[1]}; "
            "both parts need the same features"
        )
    return out[0], out[1]


def _check_rows(name: str, y: np.ndarray, n: int) -> None:
    if y.ndim == 0 or y.shape[0] != n:
        x_name = "x_" + name.split("_")[1]
        raise ValueError(f"{name} has {y.shape[0] if y.ndim else 0} row(s) but {x_name} has {n}")


def check_regression_targets(name: str, value: object, n: int) -> np.ndarray:
    """A finite ``float64`` target ``(n,)`` or ``(n, k)`` with ``k >= 2``; one column ``(n, 1)`` is squeezed
    to ``(n,)`` (a single-output likelihood scores ``(n,)``: ``(n, 1)`` would broadcast to ``(n, n)``)."""
    y = _numeric(name, value).astype(np.float64)
    _check_rows(name, y, n)
    if y.ndim > 2 or (y.ndim == 2 and y.shape[1] == 0):
        raise ValueError(f"{name} must have shape (n,) or (n, k) for regression, got {y.shape}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    _check_finite(name, y)
    return y


def label_remap_hint(values: np.ndarray) -> str:
    """How to map integer labels with the distinct ``values`` onto ``0..C-1``."""
    u = np.unique(values)
    if u.size == 2 and u[0] == -1 and u[1] == 1:
        return "map -1/+1 to 0/1, e.g. y = (y + 1) // 2"
    if u.size and u[0] == 1:
        return "the labels look 1-based: use y - 1"
    return "map them to 0..C-1, e.g. y = np.unique(y, return_inverse=True)[1]"


def check_class_labels(name: str, value: object, n: int, task: str) -> np.ndarray:
    """Classification labels ``(n,)`` as ``int64``: bool, integer or integer-valued float, finite,
    ``>= 0``."""
    y = _numeric(name, value)
    _check_rows(name, y, n)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D class labels (n,) for task {task!r}, got shape {y.shape}")
    if y.dtype.kind == "f":
        _check_finite(name, y)
        frac = y != np.round(y)
        if frac.any():
            raise ValueError(
                f"{name} must hold integer class labels for task {task!r}, got {int(frac.sum())} non-integer "
                f"value(s) such as {y[frac][0]!r} (labels are never rounded; for a continuous target use "
                "task='regression')"
            )
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise ValueError(
            f"{name} labels must lie in 0..C-1, got negative labels (values {np.unique(y)[:10].tolist()}); "
            + label_remap_hint(y)
        )
    return y


def check_n_classes(task: str, n_classes: object, y_train: np.ndarray, y_test: np.ndarray) -> int | None:
    """``n_classes`` for ``task``: ``None`` for regression, 2 for binary (inferred when omitted), for
    multiclass ``max label + 1`` when omitted; every label of both parts must be below it.  Omitted, labels
    whose smallest is 1 in both parts (``1..C``, ``C >= 2``) are refused with the ``y - 1`` remap: read as
    given they would add an empty class 0.  A class missing from one part only is a logged warning."""
    if task == "regression":
        if n_classes is not None:
            raise ValueError(f"n_classes must be None for task 'regression', got {n_classes!r}")
        return None
    if n_classes is not None and (isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral)):
        raise ValueError(f"n_classes must be an int, got {n_classes!r}")
    labels = np.concatenate([y_train, y_test])
    top = int(labels.max())
    if task == "binary":
        if n_classes is not None and int(n_classes) != 2:
            raise ValueError(f"n_classes must be 2 for task 'binary' (one logit), got {n_classes!r}")
        k = 2
    else:
        k = top + 1 if n_classes is None else int(n_classes)
        if n_classes is None and top >= 2 and int(labels.min()) == 1:
            raise ValueError(
                f"y_train/y_test: class labels must lie in 0..C-1, got 1..{top} with no class 0 in either "
                f"part (values {np.unique(labels)[:10].tolist()}); the labels look 1-based: use y - 1 "
                "(or, for a numeric target such as a rating, task='regression' / --task regression)"
            )
        if k < 2:
            raise ValueError(f"n_classes must be >= 2 for task 'multiclass', got {k} (all labels are {top})")
    for name, y in (("y_train", y_train), ("y_test", y_test)):
        if int(y.max()) >= k:
            raise ValueError(
                f"{name} labels must lie in 0..{k - 1} for {k} classes (n_classes), got values "
                f"{np.unique(y)[:10].tolist()}; " + label_remap_hint(labels)
            )
    missing = sorted(set(range(k)) - set(np.unique(y_train).tolist()))
    if missing:
        logger.warning("y_train has no example of class(es) %s of %d", missing[:10], k)
    return k


def check_task(task: object) -> str:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS} (or None to infer it), got {task!r}")
    return str(task)


def infer_task(y: np.ndarray, name: str = "y") -> str:
    """The task of a target: non-integer values, more than :data:`MAX_INFERRED_CLASSES` distinct integers or
    several columns mean ``"regression"``, two distinct values ``"binary"``, otherwise ``"multiclass"``."""
    y = _numeric(name, y)
    if y.ndim == 2 and y.shape[1] > 1:
        return "regression"
    y = y.reshape(-1)
    _check_finite(name, y)
    if y.dtype.kind == "f" and np.any(y != np.round(y)):
        return "regression"
    k = np.unique(y).size
    if k > MAX_INFERRED_CLASSES:
        return "regression"
    if k < 2:
        raise ValueError(f"{name} has a single distinct value ({y[0]!r}): cannot infer the task; pass task=")
    return "binary" if k == 2 else "multiclass"


def check_true_support(value: object, n_features: int) -> np.ndarray | None:
    """The true support as a boolean mask ``(n_features,)``, from a boolean mask of that length (dtype
    ``bool``; a 0/1 integer list is read as indices) or a list of distinct feature indices; ``None`` passes
    through."""
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise ValueError(f"true_support must be a 1-D mask or index list, got shape {arr.shape}")
    if arr.dtype.kind == "b":
        if arr.size != n_features:
            raise ValueError(
                f"true_support mask has {arr.size} entries but the data have {n_features} features"
            )
        mask = arr.astype(bool)
    elif arr.dtype.kind in "iu" or arr.size == 0:
        idx = arr.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n_features):
            raise ValueError(f"true_support indices must lie in 0..{n_features - 1}, got {idx.tolist()}")
        if np.unique(idx).size != idx.size:
            raise ValueError(f"true_support indices must be distinct, got {idx.tolist()}")
        mask = np.zeros(n_features, dtype=bool)
        mask[idx] = True
    else:
        raise ValueError(f"true_support must be a boolean mask or integer indices, got dtype {arr.dtype}")
    if mask.all() or not mask.any():
        logger.warning(
            "true_support marks %d of %d features: TPR or FPR is undefined", mask.sum(), n_features
        )
    return mask


def feature_index(ref: object, columns: Sequence[str], what: str) -> int:
    """The position of column ``ref``: a name in ``columns``, or an integer index (negative from the end; a
    string of digits that names no column, as a command line gives it, is an index too)."""
    if isinstance(ref, str):
        hits = [i for i, c in enumerate(columns) if c == ref]
        if not hits and ref.strip().lstrip("-").isdigit():
            return feature_index(int(ref), columns, what)  # "2" from a command line: an index
        if not hits:
            raise ValueError(f"{what}: no column named {ref!r}; columns: {list(columns)}")
        if len(hits) > 1:
            raise ValueError(f"{what}: column name {ref!r} is not unique; give its index")
        return hits[0]
    if isinstance(ref, bool) or not isinstance(ref, numbers.Integral):
        raise ValueError(f"{what} must be a column name or an integer index, got {ref!r}")
    i = int(ref)
    if not -len(columns) <= i < len(columns):
        raise ValueError(f"{what}: column index {i} is out of range for {len(columns)} columns")
    return i % len(columns)
