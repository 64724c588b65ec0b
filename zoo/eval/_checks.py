"""Argument checks shared by the metric modules (:mod:`zoo.eval.metrics`, :mod:`zoo.eval.intervals`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from zoo.core.validation import check_broadcastable, check_float_array, check_positive_array, check_shape


def target_and_mean(y: Any, mean: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``y`` (at least 1-D) and ``mean`` of the same shape."""
    y_ = check_float_array("y", y, min_ndim=1)
    m = check_shape("mean", check_float_array("mean", mean), y_.shape, "the shape of `y`")
    return y_, m


def positive_broadcast(name: str, value: Any, shape: tuple[int, ...], ref: str) -> np.ndarray:
    """A finite, strictly positive array broadcast to ``shape`` (a variance or a scale)."""
    arr = check_positive_array(name, check_float_array(name, value))
    return check_broadcastable(name, arr, shape, ref)


def check_df(df: Any) -> float | None:
    """``None`` (Gaussian) or the Student-t degrees of freedom, a finite number > 0."""
    if df is None:
        return None
    if isinstance(df, bool) or not isinstance(df, (int, float)) or not math.isfinite(df) or df <= 0:
        raise ValueError(f"`df` must be None or a finite number > 0, got {df!r}")
    return float(df)
