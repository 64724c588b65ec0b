"""Projection-predictive pruning of a finished run (``zoo fit --prune projpred``): :func:`prune_run` prunes
the run's network (:func:`zoo.sparsity.projpred.projpred_units` on its training data, on the scale it was
fitted on) and scores the pruned predictive on the test split against the full network's, both from the
same posterior draws, on the original target scale."""

from __future__ import annotations

from typing import Any

import torch

from zoo.sparsity.projpred import ProjpredConfig, _elpd_points, projpred_units

__all__ = ["PRUNE_COLUMNS", "PRUNE_METHODS", "prune_run"]

#: the accepted values of ``zoo fit --prune``
PRUNE_METHODS = ("projpred",)
#: the numeric prune columns a protocol summarizes
PRUNE_COLUMNS = ("pp_units_kept", "prune_delta_nll", "prune_delta_rmse", "prune_seconds")


def _scores(mean: torch.Tensor, sd: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Mixture NLL (mean over test points) and RMSE of the predictive mean of draws ``N(mean_s, sd_s^2)``."""
    nll = -_elpd_points(mean, sd.pow(2), y).mean()
    rmse = (mean.mean(0) - y).pow(2).mean().sqrt()
    return float(nll), float(rmse)


def prune_run(run: Any, config: ProjpredConfig | None = None) -> dict[str, Any]:
    """Prune ``run`` (a :class:`~zoo.experiments.outputs.RunOutput` of a regression fit) and return the prune
    columns: ``pp_units_kept``, ``pp_units_total``, ``prune_kept`` (indices), ``prune_delta_nll`` and
    ``prune_delta_rmse`` (pruned minus full, test split, original scale), ``prune_seconds``, ``prune_rule``
    and its tolerance."""
    from zoo.data.tensors import fit_tensors

    cfg = config if config is not None else ProjpredConfig()
    ds, res = run.dataset, run.result
    if ds.task != "regression":
        raise ValueError(f"--prune projpred: implemented for regression, got a {ds.task} dataset ({ds.name})")
    y_mean, y_std = float(res.config.get("y_mean", 0.0)), float(res.config.get("y_std", 1.0))
    xtr, ytr, xte, yte, _ = fit_tensors(ds, torch.device("cpu"), dtype=torch.float64, standardize_y=False)
    ytr = (ytr.reshape(-1) - y_mean) / y_std
    pp = projpred_units(res, xtr, ytr, cfg)
    mean, sd = pp.predict(xte)
    full_mean, full_sd = pp.predict(xte, pruned=False)
    y = yte.reshape(-1).double()
    nll, rmse = _scores(mean * y_std + y_mean, sd * y_std, y)
    full_nll, full_rmse = _scores(full_mean * y_std + y_mean, full_sd * y_std, y)
    tol = {"nll": cfg.nll_tol, "se": cfg.z, "kl": cfg.kl_tol}[cfg.rule]
    return {
        "pp_units_kept": len(pp.kept),
        "pp_units_total": pp.units,
        "prune_kept": pp.kept,
        "prune_layer": pp.layer,
        "prune_delta_nll": nll - full_nll,
        "prune_delta_rmse": rmse - full_rmse,
        "prune_full_nll": full_nll,
        "prune_seconds": round(pp.seconds, 3),
        "prune_rule": cfg.rule,
        "prune_tol": tol,
    }
