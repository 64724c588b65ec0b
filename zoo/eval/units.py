"""Which scale the groups of an ArviZ export are on (:mod:`zoo.eval.diagnostics`,
:mod:`zoo.infer.mcmc_export`).

A regression fit on standardized targets records ``y_mean`` / ``y_std`` in ``fit.config``
(:func:`zoo.experiments.runs.fit_on_dataset`, or ``fit(..., metadata={"y_mean": .., "y_std": ..})``); its
posterior sites (``sigma2``, the weights) are then on the standardized scale ``(y - y_mean) / y_std``, while
the observed data, predictive draws and pointwise log-likelihood are exported in the original units.
:func:`annotate_target_scaling` writes both numbers and a sentence saying which is which onto every group;
:func:`check_target_units` warns when targets handed to the export look like they are on the other scale;
:func:`likelihood_attrs` names the likelihood (e.g. the Student-t degrees of freedom) for the attributes.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["annotate_target_scaling", "check_target_units", "likelihood_attrs", "target_scale"]

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


def likelihood_attrs(fit: Any) -> dict[str, object]:
    """netCDF-safe attributes naming ``fit``'s likelihood: ``likelihood`` (the class), ``likelihood_config``
    (its ``config()`` as JSON) and, for a Student-t likelihood, ``student_t_df``."""
    lik = getattr(getattr(fit, "model", None), "likelihood", None)
    if lik is None:
        return {}
    out: dict[str, object] = {"likelihood": type(lik).__name__}
    config = getattr(lik, "config", None)
    if callable(config):
        out["likelihood_config"] = json.dumps(config(), default=str, sort_keys=True)
    df = getattr(lik, "predictive_df", None)
    if df is not None:
        out["student_t_df"] = float(df)
    return out


def check_target_units(name: str, fit: Any, y: np.ndarray, draws: np.ndarray) -> None:
    """Warn (naming ``name``, e.g. ``train`` or ``y``) when the regression targets ``y`` handed to an export
    look like they are on another scale than the predictive ``draws`` (original units when ``fit`` recorded
    ``y_mean`` / ``y_std``):

    * with a recorded standardization, when ``y`` is much closer to the standardized scale than to the
      original one (distance ``|log(sd ratio)| + |mean shift| / sd`` to each, the original one over 2);
    * in any case, when the mean of ``y`` lies more than 4 predictive standard deviations from the mean of
      the draws (``draws`` of shape ``(..., S, N[, k])``)."""
    if getattr(getattr(fit.model, "likelihood", None), "task", None) != "regression":
        return
    yv = np.asarray(y, dtype=np.float64)
    dv = np.asarray(draws, dtype=np.float64)
    if yv.size < 2 or not np.isfinite(yv).all() or not np.isfinite(dv).all():
        return
    m_o, s_o = float(yv.mean()), float(yv.std()) or 1.0
    problems = []
    scale = target_scale(fit)
    if scale is not None:
        mu, sd = float(np.mean(scale[0])), float(np.mean(scale[1]))
        d_raw = abs(np.log(s_o / sd)) + abs(m_o - mu) / sd
        d_std = abs(np.log(s_o)) + abs(m_o)
        if d_raw > 2.0 and d_std < d_raw:
            problems.append(
                f"they look standardized (mean {m_o:.3g}, sd {s_o:.3g}) while the fit recorded "
                f"y_mean={mu:.4g}, y_std={sd:.4g}: pass them in original units"
            )
    m_p, s_p = float(dv.mean()), float(dv.std())
    if s_p > 0 and abs(m_o - m_p) > 4.0 * s_p:
        problems.append(
            f"their mean {m_o:.4g} is {abs(m_o - m_p) / s_p:.1f} predictive sds from the predictive "
            f"mean {m_p:.4g}"
        )
    if problems:
        warnings.warn(
            f"{name}: the targets may be on the wrong scale for this fit ({'; '.join(problems)}); "
            "observed_data/log_likelihood would not match the predictive draws",
            UserWarning,
            stacklevel=3,
        )
