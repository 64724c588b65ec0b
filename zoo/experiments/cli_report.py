"""The lines ``zoo fit`` prints once a run is written (:mod:`zoo.experiments.cli`): the test metrics, a
warning when NUTS chains did not converge, and what the run chose or added (the kept start or likelihood,
the split-conformal interval, the pruned units)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["fit_report", "nuts_warning", "summary"]


def summary(m: Mapping[str, Any]) -> str:
    """``rmse=..., nll=..., coverage95=...`` (or the classification metrics) of a run row ``m``."""
    keys = [k for k in ("rmse", "nll", "coverage95", "accuracy", "ece", "density") if k in m]
    return ", ".join(f"{k}={m[k]:.4g}" for k in keys)


def _known(v: Any) -> bool:
    """A diagnostic that was computed (``None``/``nan``: undefined, e.g. R-hat of a single chain)."""
    return isinstance(v, int | float) and math.isfinite(v)


def nuts_warning(m: Mapping[str, Any]) -> str | None:
    """The warning line of a NUTS row ``m`` whose chains fail the convergence checks of the reference gate
    (:data:`zoo.reference.store.GATE`: rank-normalized split R-hat below 1.01, bulk and tail ESS of at least
    400 over all chains, no divergent transition; Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
    arXiv:1903.08008, §4), else ``None``; an undefined diagnostic (R-hat of one chain) is skipped."""
    from zoo.reference.store import GATE

    bad = []
    rhat = m.get("rhat_max")
    if _known(rhat) and not rhat < GATE["rhat_max"]:
        bad.append(f"max R-hat {rhat:.3f} (should be < {GATE['rhat_max']})")
    for key, label in (("ess_bulk_min", "bulk"), ("ess_tail_min", "tail")):
        ess = m.get(key)
        if _known(ess) and not ess >= GATE[key]:
            bad.append(f"min {label} ESS {ess:.0f} (should be >= {GATE[key]:.0f} over all chains)")
    if m.get("divergences", 0) > GATE["divergences"]:
        bad.append(f"{m['divergences']} divergent transitions (should be 0)")
    if not bad:
        return None
    return (
        "WARNING: the NUTS chains have not converged: " + "; ".join(bad) + ". The draws may not represent "
        "the posterior: run longer (--warmup, --samples), raise --target-accept, or try --full-mass / --gibbs"
    )


def fit_report(m: Mapping[str, Any], out: Path) -> list[str]:
    """The report of a ``zoo fit`` row ``m`` written to ``out``: one line of metrics (with the ELBO of a
    variational fit; a NUTS run has none), a warning line for NUTS chains that failed to converge
    (:func:`nuts_warning`), and one for each of the choices and additions the row records."""
    nuts = m.get("inference") == "nuts"
    elbo = "" if nuts else f", elbo={m['elbo']:.6g}"
    lines = [
        f"{m['model']}/{m['guide']} on {m['dataset']} split {m['split']} (n_train={m['n_train']}, "
        f"n_test={m['n_test']}): {summary(m)}{elbo}, {m['fit_seconds']:.1f}s -> {out}"
    ]
    warning = nuts_warning(m) if nuts else None
    if warning is not None:
        lines.append(warning)
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
