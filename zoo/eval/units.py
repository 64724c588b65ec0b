"""Which scale the groups of an ArviZ export are on (:mod:`zoo.eval.diagnostics`,
:mod:`zoo.infer.mcmc_export`).

A regression fit on standardized targets records ``y_mean`` / ``y_std`` in ``fit.config``
(:func:`zoo.experiments.runs.fit_on_dataset`, or ``fit(..., metadata={"y_mean": .., "y_std": ..})``); its
posterior sites (``sigma2``, the weights) are then on the standardized scale ``(y - y_mean) / y_std``, while
the observed data, predictive draws and pointwise log-likelihood are exported in the original units.
:func:`annotate_target_scaling` writes both numbers and a sentence saying which is which onto every group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["annotate_target_scaling", "target_scale"]

_STANDARDIZED = (
    "sites on the standardized target scale (y - y_mean) / y_std (e.g. sigma2, the weights); observed_data, "
    "posterior_predictive, log_likelihood and predictions are in the original target units"
)
_ORIGINAL = (
    "original target units (the posterior's sites are on the standardized scale (y - y_mean) / y_std; "
    "log_likelihood includes the Jacobian -log(y_std))"
)


def _scalar_or_list(v: object) -> float | list[float]:
    arr = np.asarray(v, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr.ravel().tolist()


def annotate_target_scaling(groups: Mapping[str, xr.Dataset], fit: Any) -> None:
    """Record on every group of ``groups`` the target standardization the regression ``fit`` recorded
    (``y_mean`` / ``y_std`` in ``fit.config``, as :func:`zoo.experiments.runs.fit_on_dataset` and
    ``fit(..., metadata={"y_mean": .., "y_std": ..})`` store it): attributes ``y_mean``, ``y_std`` and
    ``target_scaling`` (which groups are on which scale).  A fit without a recorded standardization (or
    not a regression) gets no attribute."""
    scale = target_scale(fit)
    if scale is None:
        return
    for name, group in groups.items():
        text = _STANDARDIZED if name == "posterior" else _ORIGINAL
        group.attrs.update({"y_mean": scale[0], "y_std": scale[1], "target_scaling": text})


def target_scale(fit: Any) -> tuple[float | list[float], float | list[float]] | None:
    """``(y_mean, y_std)`` a regression ``fit`` recorded in its ``config``, else ``None`` (no
    standardization recorded, or not a regression)."""
    cfg = getattr(fit, "config", None) or {}
    likelihood = getattr(getattr(fit, "model", None), "likelihood", None)
    if getattr(likelihood, "task", None) != "regression" or not ({"y_mean", "y_std"} & set(cfg)):
        return None
    return _scalar_or_list(cfg.get("y_mean", 0.0)), _scalar_or_list(cfg.get("y_std", 1.0))
