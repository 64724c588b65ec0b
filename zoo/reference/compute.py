"""Compute a reference instance (:mod:`zoo.reference.instances`) and store it (:mod:`zoo.reference.store`).

* ``method="enumeration"``: the exact posterior of the linear spike-and-slab model
  (:func:`~zoo.reference.enumeration.enumerate_spike_slab`, the zoo's ``lbbnn`` with ``hidden=()`` and the
  instance's options mapped by :meth:`~zoo.reference.enumeration.SpikeSlabLinear.from_lbbnn_options`) and
  independent draws from it (:func:`~zoo.reference.exact_draws.sample_spike_slab`); stored: the exact
  inclusion probabilities and predictive moments, and predictive draws of ``f`` and ``y``.
* ``method="nuts"``: :func:`zoo.infer.mcmc.fit_nuts` on the registry model itself (so the reference is of
  exactly the model the guides fit), ``chains >= 4``; stored: the symmetry-invariant quantities of
  :mod:`zoo.reference.quantities` over all draws (means with their ESS-based Monte Carlo standard errors,
  ArviZ's ``mcse``) and a thinned subset of the draws, with the per-quantity R-hat and bulk/tail ESS.

Both use the same data and target standardization as ``zoo fit`` (regression targets standardized with the
training mean and standard deviation for fitting; everything stored on the original scale), so a guide
fitted by :func:`zoo.experiments.runs.fit_on_dataset` on :meth:`ReferenceInstance.dataset` is comparable.
A reference that fails the gate (:func:`~zoo.reference.store.check_gate`) raises before anything is written.
"""

from __future__ import annotations

import datetime
import logging
import platform
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.reference.instances import ReferenceInstance
from zoo.reference.store import (
    GateError,
    check_gate,
    record_attempt,
    reference_path,
    resolve_root,
    save_reference,
)

__all__ = ["compute_reference", "compute_and_store", "versions", "chain_diagnostics"]

logger = logging.getLogger(__name__)


def versions() -> dict[str, Any]:
    """Package versions and the git commit of the source checkout (``None`` outside one)."""
    import arviz
    import pyro

    import zoo

    try:
        root = Path(__file__).resolve().parents[2]
        commit = (
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "pyro": pyro.__version__,
        "arviz": arviz.__version__,
        "zoo": zoo.__version__,
        "git_commit": commit,
    }


def _standardized(ds) -> tuple[np.ndarray, float, float]:
    """Training targets standardized as :func:`zoo.experiments.runs.fit_on_dataset` does, and (mean, sd)."""
    from zoo.data.tensors import fit_tensors as _prepare

    _, ytr, _, _, extra = _prepare(ds, torch.device("cpu"), dtype=torch.float64)
    return ytr.numpy(), float(extra.get("y_mean", 0.0)), float(extra.get("y_std", 1.0))


# ------------------------------------------------------------------------------------------- enumeration


def _exact(inst: ReferenceInstance, ds) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from zoo.experiments.registry import get_entry
    from zoo.reference.enumeration import SpikeSlabLinear, enumerate_spike_slab
    from zoo.reference.exact_draws import sample_spike_slab

    options = get_entry(inst.model).options.from_dict(inst.options)
    prior = SpikeSlabLinear.from_lbbnn_options(options)
    y, mu, sd = _standardized(ds)
    exact = enumerate_spike_slab(ds.x_train, y, prior, x_test=ds.x_test)
    draws = sample_spike_slab(ds.x_train, y, exact, prior, ds.x_test, num_draws=inst.draws, seed=inst.seed)
    arrays = {
        "f": draws.f * sd + mu,
        "y": draws.y * sd + mu,
        "f_mean": exact.pred_mean * sd + mu,
        "f_mean_se": np.zeros_like(exact.pred_mean),
        "f_var": exact.pred_var_f * sd**2,
        "y_var": exact.pred_var_y * sd**2,
        "pip": exact.pip,
        "pip_se": np.zeros_like(exact.pip),
        "weight_mean": exact.weight_mean,
    }
    diag = {
        "method": "enumeration",
        "quadrature_error": exact.quadrature_error,
        "edge_mass": exact.edge_mass,
        "log_evidence": exact.log_evidence,
        "models": int(exact.model_probs.size),
        "top_models": [[list(m), p] for m, p in exact.top_models],
    }
    return arrays, {"diagnostics": diag, "y_mean": mu, "y_std": sd}


# ------------------------------------------------------------------------------------------------- NUTS


def chain_diagnostics(values: np.ndarray, chains: int) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """For draws ``values`` ``(chains * draws, ...)`` in chain order: ``{"rhat_max", "ess_bulk_min",
    "ess_tail_min"}`` over the components, and the per-component mean and its Monte Carlo standard error
    (rank-normalized split R-hat, bulk/tail ESS and ``mcse`` of ArviZ; Vehtari et al. 2021,
    arXiv:1903.08008)."""
    import arviz as az

    v = np.asarray(values, dtype=np.float64)
    v = v.reshape(chains, v.shape[0] // chains, *v.shape[1:])
    data = az.convert_to_dataset({"q": v})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rhat = np.asarray(az.rhat(data)["q"].values, dtype=float)
        bulk = np.asarray(az.ess(data, method="bulk")["q"].values, dtype=float)
        tail = np.asarray(az.ess(data, method="tail")["q"].values, dtype=float)
        se = np.asarray(az.mcse(data, method="mean")["q"].values, dtype=float)
    stats = {
        "rhat_max": float(np.nanmax(rhat)) if np.isfinite(rhat).any() else float("nan"),
        "ess_bulk_min": float(np.nanmin(bulk)) if np.isfinite(bulk).any() else float("nan"),
        "ess_tail_min": float(np.nanmin(tail)) if np.isfinite(tail).any() else float("nan"),
    }
    return stats, v.mean(axis=(0, 1)), se


def _invariants(result, x_test: torch.Tensor, total: int) -> dict[str, np.ndarray]:
    """Every stored quantity over all ``total`` draws (chain order), keyed by its stored name."""
    from zoo.reference.quantities import predictive_draws, shrinkage_draws, unit_norms

    out = dict(predictive_draws(result, x_test, total))
    out.update({f"norms.{k}": v for k, v in unit_norms(result, total).items()})
    flat = {k: v.reshape(total, *v.shape[2:]) for k, v in result.samples.items()}
    out.update({f"kappa.{k}": v for k, v in shrinkage_draws(result, total, samples=flat).items()})
    return out


def _nuts(
    inst: ReferenceInstance, ds, progress: bool, parallel: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from zoo.experiments.registry import build
    from zoo.infer.mcmc import fit_nuts

    model, _, spec = build(
        inst.model, ds.in_features, ds.out_features, ds.task, hidden=list(inst.hidden), **inst.options
    )
    config = inst.sampler.nuts_config(inst.seed, progress=progress, parallel=parallel)
    result = fit_nuts(model, ds, config, spec=spec)
    chains, total = inst.sampler.chains, result.num_draws
    x_test = torch.as_tensor(ds.x_test, dtype=torch.float32)
    values = _invariants(result, x_test, total)
    keep = np.unique(np.linspace(0, total - 1, min(inst.draws, total)).round().astype(int))
    arrays: dict[str, np.ndarray] = {}
    quantities = {}
    for key, v in values.items():
        if key == "y":  # the predictive draws of y: f plus noise; their moments follow from f and sigma
            arrays["y"] = v[keep]
            continue
        quantities[key], mean, se = chain_diagnostics(v, chains)
        if key != "sigma":
            arrays[key] = v[keep]
        arrays[f"{key}_mean"], arrays[f"{key}_mean_se"] = mean, se
    diag = {
        "method": "nuts",
        "divergences": int(result.diagnostics["divergences"]),
        "quantities": quantities,
        "weight_space": {k: result.diagnostics[k] for k in ("rhat_max", "ess_bulk_min", "ess_tail_min")},
        "chains": result.chain_stats,
        "draws_total": total,
        "draws_kept": int(keep.size),
    }
    cfg = result.config
    return arrays, {"diagnostics": diag, "y_mean": cfg.get("y_mean"), "y_std": cfg.get("y_std")}


# ------------------------------------------------------------------------------------------- entry points


def compute_reference(
    instance: ReferenceInstance,
    *,
    data_dir: str | Path | None = None,
    progress: bool = False,
    command: str | None = None,
    gate: bool = True,
    parallel: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)`` of ``instance`` (module docstring); :class:`~zoo.reference.store.GateError` if it
    fails the gate (``gate=False`` returns it anyway, for inspection; it is never stored).  ``parallel``:
    NUTS chains in worker processes (:class:`zoo.infer.mcmc.NUTSConfig`; the draws do not change)."""
    if not isinstance(instance, ReferenceInstance):
        raise TypeError(f"instance must be a ReferenceInstance, got {type(instance).__name__}")
    ds = instance.dataset(data_dir)
    t0 = time.perf_counter()
    arrays, extra = (
        _exact(instance, ds) if instance.method == "enumeration" else _nuts(instance, ds, progress, parallel)
    )
    wall = time.perf_counter() - t0
    arrays["x_test"], arrays["y_test"] = ds.x_test, ds.y_test
    meta = {
        "name": instance.name,
        "instance": instance.to_dict(),
        "method": instance.method,
        "model": instance.model,
        "dataset": ds.name,
        "task": ds.task,
        "n_train": ds.n_train,
        "n_test": ds.n_test,
        "wall_seconds": wall,
        "command": command or f"zoo reference compute {instance.name}",
        "versions": versions(),
        "seed": instance.seed,
        "threads": torch.get_num_threads(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **extra,
    }
    logger.info("reference %s computed in %.1f s", instance.name, wall)
    for group, d in meta["diagnostics"].get("quantities", {}).items():
        logger.info(
            "  %-12s R-hat max %.4f, bulk ESS min %.0f, tail ESS min %.0f",
            group,
            d["rhat_max"],
            d["ess_bulk_min"],
            d["ess_tail_min"],
        )
    if gate:
        check_gate(meta["diagnostics"])
    return arrays, meta


def compute_and_store(
    instance: ReferenceInstance,
    root: str | Path | None = None,
    *,
    force: bool = False,
    data_dir: str | Path | None = None,
    progress: bool = False,
    command: str | None = None,
    parallel: bool = False,
) -> Path:
    """Compute ``instance`` and store it under ``root`` (default :func:`~zoo.reference.store.default_root`);
    an existing reference is refused before any work unless ``force``.  A reference failing the gate raises
    :class:`~zoo.reference.store.GateError` and only its diagnostics are kept (``attempts.json``)."""
    root = resolve_root(root)
    path = reference_path(root, instance.name)
    if path.exists() and not force:
        raise FileExistsError(
            f"reference {instance.name!r} is already stored at {path}; pass --force to recompute"
        )
    arrays, meta = compute_reference(
        instance, data_dir=data_dir, progress=progress, command=command, gate=False, parallel=parallel
    )
    try:
        check_gate(meta["diagnostics"])
    except GateError as e:  # nothing of it is stored but its diagnostics (attempts.json)
        record_attempt(root, instance.name, meta, str(e))
        raise
    path = save_reference(root, instance.name, arrays, meta, force=force)
    record_attempt(root, instance.name, None, None)
    return path
