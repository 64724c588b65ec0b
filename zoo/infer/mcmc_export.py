"""Convergence diagnostics and the ArviZ export of a NUTS fit (:func:`zoo.infer.mcmc.fit_nuts`).

* :func:`convergence_summary`: divergent transitions, and per site the largest rank-normalized split R-hat
  and the smallest bulk / tail effective sample sizes (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
  "Rank-normalization, folding, and localization: an improved R-hat", Bayesian Analysis 16(2),
  arXiv:1903.08008, §4-5; computed by ArviZ).  Unlike the i.i.d. draws of a VI guide, these are diagnostics
  of the chains.  In a BNN the weights are only identified up to permutation and sign of the hidden units,
  so weight-space R-hat flags chains that sit in different (equivalent) modes; :func:`predictive_diagnostics`
  computes the same statistics for the network output at given inputs, which is invariant to them.
* :func:`to_inference_data`: the ArviZ export, with ``(chain, draw)`` dims so that ArviZ's R-hat / ESS mean
  what they say; every posterior draw is used exactly once, in chain order.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import arviz as az
import numpy as np
from torch import Tensor

from zoo.eval.diagnostics import site_dims  # the variational export's naming, shared
from zoo.eval.units import annotate_target_scaling
from zoo.infer.predict import Predictions, log_likelihood, predict
from zoo.infer.result import FitResult

# a NUTS fit (zoo.infer.mcmc_result.NUTSResult, a FitResult); named by its base class here so that
# the result module, which calls this one to export, is not imported back
NUTSResult = FitResult

__all__ = [
    "all_draws_predict",
    "convergence_summary",
    "draw_chunks",
    "predictive_diagnostics",
    "site_dims",
    "to_inference_data",
]


def _nan_stat(fn, arr: np.ndarray) -> float:
    arr = np.asarray(arr, dtype=np.float64)
    return float(fn(arr)) if arr.size and np.isfinite(arr).any() else float("nan")


def _rhat_ess(data: Mapping[str, np.ndarray]) -> tuple[Any, Any, Any]:
    az_log = getattr(az, "_log", None) or logging.getLogger("arviz")  # ArviZ 0.x: its own Logger object
    level = az_log.level
    az_log.setLevel(logging.ERROR)  # ArviZ logs a shape warning for one chain or very few draws
    try:
        ds = az.convert_to_dataset(dict(data))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # constant sites (nan R-hat)
            return az.rhat(ds), az.ess(ds, method="bulk"), az.ess(ds, method="tail")
    finally:
        az_log.setLevel(level)


def convergence_summary(samples: Mapping[str, Tensor], diverging: Tensor) -> dict[str, Any]:
    """``{"divergences", "divergences_per_chain", "rhat_max", "ess_bulk_min", "ess_tail_min", "chains",
    "draws", "sites": {site: {"rhat_max", "ess_bulk_min", "ess_tail_min"}}}`` of draws ``{site: (chain,
    draw, *shape)}`` and the divergence flags ``(chain, draw)``."""
    data = {k: v.detach().double().cpu().numpy() for k, v in samples.items()}
    rhat, bulk, tail = _rhat_ess(data)
    sites = {
        k: {
            "rhat_max": _nan_stat(np.nanmax, rhat[k].values),
            "ess_bulk_min": _nan_stat(np.nanmin, bulk[k].values),
            "ess_tail_min": _nan_stat(np.nanmin, tail[k].values),
        }
        for k in data
    }
    first = next(iter(data.values()))
    return {
        "divergences": int(diverging.sum()),
        "divergences_per_chain": [int(v) for v in diverging.sum(1)],
        "rhat_max": _nan_stat(np.nanmax, [s["rhat_max"] for s in sites.values()]),
        "ess_bulk_min": _nan_stat(np.nanmin, [s["ess_bulk_min"] for s in sites.values()]),
        "ess_tail_min": _nan_stat(np.nanmin, [s["ess_tail_min"] for s in sites.values()]),
        "chains": int(first.shape[0]),
        "draws": int(first.shape[1]),
        "sites": sites,
    }


def predictive_diagnostics(values: Tensor, chains: int, prefix: str = "pred") -> dict[str, float]:
    """R-hat and bulk ESS of per-draw predictions ``values`` ``(chains * draws, N, ...)`` (draws in chain
    order): ``{prefix}_rhat_max``, ``{prefix}_rhat_median``, ``{prefix}_ess_bulk_min``,
    ``{prefix}_ess_bulk_median`` over the ``N`` points."""
    v = values.detach().double().cpu().numpy()
    v = v.reshape(chains, v.shape[0] // chains, *v.shape[1:])
    rhat, bulk, _ = _rhat_ess({"f": v})
    r, b = rhat["f"].values, bulk["f"].values
    return {
        f"{prefix}_rhat_max": _nan_stat(np.nanmax, r),
        f"{prefix}_rhat_median": _nan_stat(np.nanmedian, r),
        f"{prefix}_ess_bulk_min": _nan_stat(np.nanmin, b),
        f"{prefix}_ess_bulk_median": _nan_stat(np.nanmedian, b),
    }


def draw_chunks(result: Any, num_draws: int, budget: int = 1 << 24) -> dict[str, int]:
    """``predict`` chunk sizes that take all ``num_draws`` draws in one chunk (in storage order) and bound
    the activations to about ``budget`` numbers by chunking the rows."""
    width = max(int(s.shape[0]) for s in result.model.architecture.param_specs())
    return {"sample_chunk": num_draws, "data_chunk": max(1, budget // (num_draws * max(width, 1)))}


def _attr(v: Any) -> Any:
    """A netCDF-safe attribute value."""
    if isinstance(v, bool):
        return int(v)
    if v is None:
        return "none"
    return v


def _attrs(result: NUTSResult) -> dict[str, Any]:
    d, cfg = result.diagnostics, result.config
    facts = {
        "inference": "nuts",
        "model": (result.spec or {}).get("model", type(result.model).__name__),
        "chains": result.guide.num_chains,
        "draws_per_chain": result.guide.num_draws,
        "warmup": cfg.get("warmup"),
        "target_accept": cfg.get("target_accept"),
        "max_tree_depth": cfg.get("max_tree_depth"),
        "seed": int(result.seed),
        "fit_seconds": float(result.wall_time),
        "divergences": d.get("divergences"),
        "rhat_max": d.get("rhat_max"),
        "ess_bulk_min": d.get("ess_bulk_min"),
        "ess_tail_min": d.get("ess_tail_min"),
    }
    return {k: _attr(v) for k, v in facts.items()}


def _layers(result: Any) -> dict[str, tuple[int, int]]:
    return {
        s.name.rsplit(".", 1)[0]: (int(s.shape[0]), int(s.shape[1]))
        for s in result.model.architecture.param_specs()
        if s.role == "weight" and len(s.shape) == 2
    }


def _draws_at(result: NUTSResult, x: Tensor) -> np.ndarray:
    """Joint draws of ``y`` at ``x`` ``(chain, draw, N, ...)``: draw ``s`` uses posterior draw ``s``."""
    g = result.guide
    pred = all_draws_predict(result, x, keep_draws=False, return_samples=True, seed=int(result.seed))
    ys = pred.samples.cpu().numpy()
    return ys.reshape(g.num_chains, g.num_draws, *ys.shape[1:])


def _obs_dims(arr_ndim: int) -> list[str]:
    return ["obs_id"] if arr_ndim == 1 else ["obs_id", "obs_dim_0"]


def _train_groups(result: NUTSResult, data: tuple, inputs: bool) -> dict[str, Any]:
    x, y = data
    g = result.guide
    total = g.num_chains * g.num_draws
    ll = log_likelihood(result, x, y, num_samples=total, seed=int(result.seed), **draw_chunks(result, total))
    ydims = {"obs": _obs_dims(y.dim())}
    groups = {
        "posterior_predictive": az.dict_to_dataset({"obs": _draws_at(result, x)}, dims=ydims),
        "observed_data": az.dict_to_dataset({"obs": y.detach().cpu().numpy()}, dims=ydims, default_dims=[]),
        "log_likelihood": az.dict_to_dataset(
            {"obs": ll.cpu().numpy().reshape(g.num_chains, g.num_draws, -1)}, dims={"obs": ["obs_id"]}
        ),
    }
    if inputs:
        groups["constant_data"] = az.dict_to_dataset(
            {"x": x.detach().cpu().numpy()}, dims={"x": ["obs_id", "feature"]}, default_dims=[]
        )
    return groups


def _new_data_groups(result: NUTSResult, x: Tensor, y: Tensor | None, inputs: bool) -> dict[str, Any]:
    draws = _draws_at(result, x)
    groups = {"predictions": az.dict_to_dataset({"obs": draws}, dims={"obs": _obs_dims(draws.ndim - 2)})}
    const, dims = {}, {"x": ["obs_id", "feature"]}
    if inputs:
        const["x"] = x.detach().cpu().numpy()
    if y is not None:
        const["y"] = y.detach().cpu().numpy()
        dims["y"] = _obs_dims(y.dim())
    if const:
        groups["predictions_constant_data"] = az.dict_to_dataset(const, dims=dims, default_dims=[])
    return groups


def to_inference_data(
    result: NUTSResult,
    x: Tensor | None = None,
    y: Tensor | None = None,
    *,
    train: tuple[Tensor, Tensor] | None = None,
    max_input_values: int = 100_000,
) -> az.InferenceData:
    """ArviZ export of a NUTS fit with ``(chain, draw)`` dims, in the schema of the variational export
    (:func:`zoo.eval.diagnostics.to_inference_data`): ``posterior`` (every latent site, sampler facts as
    attributes), ``sample_stats`` (``lp``, ``diverging``); for ``train=(x, y)`` (the data the chains saw)
    ``posterior_predictive``, ``observed_data``, ``log_likelihood`` and ``constant_data``; for new inputs
    ``x`` (targets ``y`` optional) ``predictions`` and ``predictions_constant_data``.  Every posterior draw
    is used exactly once, in chain order; inputs are stored up to ``max_input_values`` numbers."""
    layers = _layers(result)
    posterior = {k: v.detach().cpu().numpy() for k, v in result.guide.samples.items()}
    dims = {k: site_dims(k, tuple(v.shape[2:]), layers) for k, v in posterior.items()}
    groups: dict[str, Any] = {
        "posterior": az.dict_to_dataset(posterior, dims=dims),
        "sample_stats": az.dict_to_dataset({k: v.cpu().numpy() for k, v in result.guide.stats.items()}),
    }
    if train is not None:
        groups.update(_train_groups(result, tuple(train), train[0].numel() <= max_input_values))
    if x is not None:
        groups.update(_new_data_groups(result, x, y, x.numel() <= max_input_values))
    groups["posterior"].attrs.update(_attrs(result))
    annotate_target_scaling(groups, result)  # y_mean / y_std: which groups are on which scale
    return az.InferenceData(**groups)


def all_draws_predict(result: NUTSResult, x: Tensor, **kwargs: Any) -> Predictions:
    """``predict`` over every posterior draw exactly once (in chain order)."""
    total = result.num_draws
    return predict(result, x, num_samples=total, **draw_chunks(result, total), **kwargs)
