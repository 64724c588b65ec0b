"""The lines ``zoo fit`` prints once a run is written (:mod:`zoo.experiments.cli`): the test metrics, and
what the run chose or added (the kept start or likelihood, the split-conformal interval, the pruned
units)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["fit_report", "summary"]


def summary(m: Mapping[str, Any]) -> str:
    """``rmse=..., nll=..., coverage95=...`` (or the classification metrics) of a run row ``m``."""
    keys = [k for k in ("rmse", "nll", "coverage95", "accuracy", "ece", "density") if k in m]
    return ", ".join(f"{k}={m[k]:.4g}" for k in keys)


def fit_report(m: Mapping[str, Any], out: Path) -> list[str]:
    """The report of a ``zoo fit`` row ``m`` written to ``out``: one line of metrics, and one for each of
    the choices and additions the row records."""
    lines = [
        f"{m['model']}/{m['guide']} on {m['dataset']} split {m['split']} (n_train={m['n_train']}, "
        f"n_test={m['n_test']}): {summary(m)}, elbo={m['elbo']:.6g}, {m['fit_seconds']:.1f}s -> {out}"
    ]
    if "starts" in m:
        elbos = ", ".join(f"{m[f'start_elbo_{i}']:.6g}" for i in range(m["starts"]))
        lines.append(
            f"kept start {m['start']} of {m['starts']} (estimated ELBOs {elbos}; --one-start fits one)"
        )
    if "likelihoods" in m:
        elbos = ", ".join(f"{m[f'likelihood_elbo_{i}']:.6g}" for i in range(m["likelihoods"]))
        kept = f"{m['likelihood']} ({m['likelihood_name']}) of {m['likelihoods']}"
        lines.append(f"kept likelihood {kept} (estimated ELBOs {elbos}; --likelihoods names them)")
    if "conformal_quantile" in m:
        lines.append(
            f"split conformal on {m['conformal_rows']} held-out training rows: mean +- "
            f"{m['conformal_quantile']:.3f} sd covers {m['coverage_conformal']:.3f} of the test rows at "
            f"level {m['conformal_level']} (the Gaussian interval x {m['conformal_factor']:.3f}; NLL "
            f"{m['nll_conformal']:.4g})"
        )
    if "coverage_cv_plus" in m:
        lines.append(
            f"CV+ on {m['conformal_folds']} folds ({m['cv_plus_seconds']:.1f}s more): its intervals cover "
            f"{m['coverage_cv_plus']:.3f} of the test rows at level {m['conformal_level']}, mean width "
            f"{m['width_cv_plus']:.4g} (the fit's Gaussian interval: {m['width_gaussian']:.4g})"
        )
    if "pp_units_kept" in m:
        lines.append(
            f"projpred: kept {m['pp_units_kept']} of {m['pp_units_total']} units of {m['prune_layer']}; test "
            f"NLL {m['prune_delta_nll']:+.4f}, RMSE {m['prune_delta_rmse']:+.4f} (tolerance "
            f"{m['prune_tol']} nats per training point), {m['prune_seconds']:.1f}s"
        )
    return lines
