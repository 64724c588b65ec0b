"""The tensors a fit trains on: :func:`fit_tensors` returns a dataset's train/test tensors with regression
targets standardized on the training statistics, as ``zoo fit``, ``zoo bench`` and NUTS fits use them.

Lives in the data layer so that every inference method (the SVI/CAVI loop, :mod:`zoo.infer.mcmc`) and the
reference posteriors prepare data the same way without importing the experiments layer.
"""

from __future__ import annotations

import numpy as np
import torch

from zoo.data.core import Dataset

__all__ = ["fit_tensors"]


def fit_tensors(
    dataset: Dataset, device: torch.device, dtype: torch.dtype = torch.float32, standardize_y: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """``(x_train, y_train, x_test, y_test, extra)``.

    For regression with ``standardize_y`` the training targets become ``(y - mu) / sd`` and
    ``extra = {"y_mean": mu, "y_std": sd}`` records how to undo it (a dataset's own ``y_mean`` / ``y_std``
    take precedence over the training statistics; a zero ``sd`` becomes 1).  Test targets stay on the
    original scale: metrics are reported there."""
    xtr, ytr, xte, yte = dataset.tensors(device=device, dtype=dtype)
    extra: dict = {}
    if dataset.task == "regression" and standardize_y:
        mu = float(np.mean(dataset.y_train)) if dataset.y_mean is None else float(np.mean(dataset.y_mean))
        sd = float(np.std(dataset.y_train)) if dataset.y_std is None else float(np.mean(dataset.y_std))
        sd = sd if sd > 0 else 1.0
        ytr = (ytr - mu) / sd
        extra = {"y_mean": mu, "y_std": sd}
    return xtr, ytr, xte, yte, extra
