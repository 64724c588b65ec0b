"""Sparsity and variable-selection metrics: density of inclusion masks, TPR / FPR of a selection.

* **Density** (Hubin & Storvik 2019, arXiv:1903.07594, §3.2; Skaaret-Lund, Storvik & Hubin 2023,
  arXiv:2305.03395, §4): the fraction of ``True`` entries over all masks pooled, i.e. a size-weighted
  average of the per-layer densities, not the mean of per-layer densities.
* **Selection rates** (Skaaret-Lund et al. 2023, §5.1, variable-selection simulation):
  ``TPR = TP / (TP + FN)`` and ``FPR = FP / (FP + TN)``.

Masks may be bool arrays/tensors or numeric arrays holding only 0/1 (e.g. sampled Bernoulli gates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from zoo.core.validation import check_bool_array, check_shape

__all__ = ["density", "density_per_layer", "inclusion_frequencies", "selection_rates"]


def _mask_items(masks: Any) -> list[tuple[Any, np.ndarray]]:
    """``[(key, bool mask)]`` from a mapping, a sequence or a single array (key 0)."""
    if isinstance(masks, Mapping):
        items = [(k, check_bool_array(f"masks[{k!r}]", v)) for k, v in masks.items()]
    elif isinstance(masks, np.ndarray | torch.Tensor):
        items = [(0, check_bool_array("masks", masks))]
    elif isinstance(masks, Sequence) and not isinstance(masks, str | bytes):
        items = [(i, check_bool_array(f"masks[{i}]", v)) for i, v in enumerate(masks)]
    else:
        raise ValueError(
            f"`masks` must be a mapping or a sequence of boolean arrays, got {type(masks).__name__}"
        )
    if not items:
        raise ValueError("`masks` is empty")
    return items


def density(masks: Any) -> float:
    """Fraction of ``True`` entries over all masks pooled (mapping name -> mask, a sequence, or one array)."""
    items = _mask_items(masks)
    total = sum(m.size for _, m in items)
    if total == 0:
        raise ValueError("`masks` has no entries")
    return float(sum(int(np.count_nonzero(m)) for _, m in items) / total)


def density_per_layer(masks: Any) -> dict[Any, float]:
    """Per-mask density: ``{name: fraction True}`` (keys are the mapping's keys, or 0..L-1 for a sequence)."""
    out: dict[Any, float] = {}
    for k, m in _mask_items(masks):
        if m.size == 0:
            raise ValueError(f"`masks[{k!r}]` is empty")
        out[k] = float(np.count_nonzero(m) / m.size)
    return out


def selection_rates(selected: Any, truth: Any) -> tuple[float, float]:
    """``(TPR, FPR)`` of a variable selection: ``TP / (TP + FN)`` and ``FP / (FP + TN)``.

    Both arguments are boolean (or 0/1) arrays of equal shape.  The rates are undefined (0/0) when ``truth``
    has no positives or no negatives; that raises ``ValueError``.
    """
    sel = check_bool_array("selected", selected)
    tru = check_bool_array("truth", truth)
    check_shape("selected", sel, tru.shape, "the shape of `truth`")
    n_pos = int(np.count_nonzero(tru))
    n_neg = int(tru.size - n_pos)
    if n_pos == 0:
        raise ValueError("`truth` has no positives, so the TPR is 0/0")
    if n_neg == 0:
        raise ValueError("`truth` has no negatives, so the FPR is 0/0")
    tp = int(np.count_nonzero(sel & tru))
    fp = int(np.count_nonzero(sel & ~tru))
    return tp / n_pos, fp / n_neg


def inclusion_frequencies(selections: Any) -> np.ndarray:
    """How often each covariate is selected over repeated fits: the column means of a (fits, covariates)
    0/1 array (the bars of Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, Fig. 5)."""
    sel = check_bool_array("selections", selections)
    if sel.ndim != 2 or sel.shape[0] == 0:
        raise ValueError(f"`selections` must be a non-empty (fits, covariates) array, got shape {sel.shape}")
    return sel.mean(axis=0)
