"""The tensors a fit trains on.

* :func:`fit_tensors` returns a dataset's train/test tensors with regression targets standardized on the
  training statistics, as ``zoo fit``, ``zoo bench`` and NUTS fits use them;
* :func:`conform_tensors` is what :func:`zoo.fit` / :func:`zoo.resume` apply to the tensors they are given
  (after the shape checks): no rows is an error naming ``x``, floating inputs of any dtype (float16,
  bfloat16, float64) are cast to the model's dtype, and inputs or regression targets on a wildly
  non-standard scale give a ``logging`` warning, since no zoo model rescales them itself;
* :func:`warn_scale` is that warning for one tensor.

Lives in the data layer so that every inference method (the SVI/CAVI loop, :mod:`zoo.infer.mcmc`) and the
reference posteriors prepare data the same way without importing the experiments layer.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor

from zoo.data.core import Dataset

__all__ = ["SCALE_LIMIT", "conform_tensors", "fit_tensors", "model_dtype", "warn_scale"]

logger = logging.getLogger(__name__)

SCALE_LIMIT = 1e3
"""A column whose ``max(|mean|, sd)`` exceeds this, or whose non-zero sd is below ``1 / SCALE_LIMIT``
everywhere, is on a "wildly non-standard" scale: priors such as ``N(0, 1)`` weights (MacKay 1992;
Blundell et al. 2015, arXiv:1505.05424, §3) assume inputs and targets of order one."""


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The floating dtype of ``model``'s first floating parameter or buffer (torch's default if none)."""
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()


def warn_scale(name: str, t: Tensor) -> bool:
    """Log a warning (and return True) when the columns of ``t`` are on a wildly non-standard scale
    (:data:`SCALE_LIMIT`); non-floating tensors (labels) and empty ones are never warned about."""
    if not isinstance(t, Tensor) or not t.is_floating_point() or t.numel() == 0:
        return False
    cols = t.detach().reshape(t.shape[0], -1).to(torch.float64)
    mean, sd = cols.mean(0), cols.std(0, unbiased=False)
    big = float(torch.maximum(mean.abs(), sd).max())
    varying = sd[sd > 0]
    tiny = varying.numel() > 0 and float(varying.max()) < 1.0 / SCALE_LIMIT and float(mean.abs().max()) < 1.0
    if big > SCALE_LIMIT or tiny:
        logger.warning(
            "%s is on a non-standard scale (largest column |mean| or sd %.3g, largest sd %.3g) and the "
            "model does not standardize it: %s, or expect a poor fit",
            name,
            big,
            float(sd.max()),
            _TARGET_ADVICE if name == "y" else _INPUT_ADVICE,
        )
        return True
    return False


_INPUT_ADVICE = (
    "standardize it first (zoo.data.from_arrays(..., standardize=True) does, keeping the statistics for "
    "new rows in Dataset.transform_x; zoo fit and zoo.fit_on_dataset do by default)"
)
_TARGET_ADVICE = (
    "fit on (y - mu) / sd and record mu, sd with fit(..., metadata={'y_mean': mu, 'y_std': sd}) so that "
    "predict and to_inference_data work in target units (mu, sd: ds.y_mean, ds.y_std of a zoo.data "
    "Dataset, whose targets are never rescaled), or let zoo.fit_on_dataset / zoo fit do both"
)


def conform_tensors(model: torch.nn.Module, x: Tensor, y: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """``(x, y)`` as ``model`` trains on them: floating ``x`` (and floating ``y``) cast to
    :func:`model_dtype`; ``x`` without rows is a ``ValueError`` naming it; a scale warning
    (:func:`warn_scale`) for ``x`` and regression ``y``.  Run after the shape checks."""
    if x.dim() == 0 or x.shape[0] == 0:
        raise ValueError(f"x has no rows (shape {tuple(x.shape)}): a fit needs at least one training point")
    dtype = model_dtype(model)
    if x.is_floating_point() and x.dtype != dtype:
        x = x.to(dtype)
    if y is not None and y.is_floating_point() and y.dtype != dtype:
        y = y.to(dtype)
    warn_scale("x", x)
    if y is not None and getattr(model, "task", "regression") == "regression":
        warn_scale("y", y)
    return x, y


def fit_tensors(
    dataset: Dataset, device: torch.device, dtype: torch.dtype = torch.float32, standardize_y: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """``(x_train, y_train, x_test, y_test, extra)``.

    For regression with ``standardize_y`` the training targets become ``(y - mu) / sd`` and
    ``extra = {"y_mean": mu, "y_std": sd}`` records how to undo it (a dataset's own ``y_mean`` / ``y_std``
    take precedence over the training statistics; a zero ``sd`` becomes 1); without it ``extra =
    {"standardize_y": False}`` says so (a fit's config then always tells its target scale, as
    :func:`zoo.reference.score.score_fit` needs).  Test targets stay on the
    original scale: metrics are reported there.  A single-output regression target of shape ``(N, 1)`` is
    squeezed to ``(N,)``, the shape the likelihood scores (``(N, 1)`` against ``(N,)`` means would
    broadcast to ``(N, N)``)."""
    xtr, ytr, xte, yte = dataset.tensors(device=device, dtype=dtype)
    if dataset.task == "regression" and ytr.dim() == 2 and ytr.shape[1] == 1:
        ytr, yte = ytr[:, 0], yte.reshape(-1)
    extra: dict = {}
    if dataset.task == "regression" and standardize_y:
        mu = float(np.mean(dataset.y_train)) if dataset.y_mean is None else float(np.mean(dataset.y_mean))
        sd = float(np.std(dataset.y_train)) if dataset.y_std is None else float(np.mean(dataset.y_std))
        sd = sd if sd > 0 else 1.0
        ytr = (ytr - mu) / sd
        extra = {"y_mean": mu, "y_std": sd}
    elif dataset.task == "regression":
        extra = {"standardize_y": False}  # said, not implied: a fit's config then tells its scale
    return xtr, ytr, xte, yte, extra
