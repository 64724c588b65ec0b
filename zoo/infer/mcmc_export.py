"""Convergence diagnostics and the ArviZ export of a NUTS fit (:func:`zoo.infer.mcmc.fit_nuts`).

* :func:`convergence_summary`: divergent transitions, and per site the largest rank-normalized split R-hat
  and the smallest bulk / tail effective sample sizes (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
  "Rank-normalization, folding, and localization: an improved R-hat", Bayesian Analysis 16(2),
  arXiv:1903.08008, §4-5; computed by ArviZ).  Unlike the i.i.d. draws of a VI guide, these are diagnostics
  of the chains.  In a BNN the weights are only identified up to permutation and sign of the hidden units,
  so weight-space R-hat flags chains that sit in different (equivalent) modes; :func:`predictive_diagnostics`
  computes the same statistics for the network output at given inputs, which is invariant to them.
* :func:`to_inference_data`: the ArviZ export, with ``(chain, draw)`` dims so that ArviZ's R-hat / ESS mean
  what they say; every posterior draw is used exactly once, in chain order (or, with ``num_samples``, the
  chains thinned by one integer stride), and draw ``s`` of ``posterior``, ``log_likelihood``,
  ``posterior_predictive`` and ``predictions`` is the same parameter draw.  ``sample_stats`` holds the
  sampler's per-draw statistics in ArviZ's names (``lp``, ``diverging``, ``energy``, ``energy_error``,
  ``acceptance_rate``, ``step_size``, ``tree_depth``, ``n_steps``: :mod:`zoo.infer.mcmc_stats`), so
  ``az.bfmi``, ``az.plot_energy`` and the divergence markers of ``az.plot_pair`` / ``az.plot_trace`` work.
  Fits saved before these statistics were recorded export ``lp`` and ``diverging`` only; a NUTS-within-Gibbs
  fit has no ``energy`` (:mod:`zoo.infer.mcmc_gibbs`).

It is what ``zoo fit MODEL --inference nuts --out DIR`` writes as ``posterior.nc``; from Python::

    result = zoo.load("DIR/checkpoint.pt")           # a NUTSResult
    idata = result.to_inference_data(x_test, y_test, train=(x_train, y_train))
    az.summary(idata, var_names=["sigma2"]), az.bfmi(idata), az.loo(idata)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections.abc import Mapping
from typing import Any

import arviz as az
import numpy as np
from torch import Tensor

from zoo.core.validation import check_positive_int, check_seed, check_tensor
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


def site_dims(name: str, shape: tuple[int, ...], layers: dict[str, tuple[int, int]]) -> list[str]:
    """Named dims of a posterior site of shape ``shape`` (without the sample dims): the layer's ``_out`` /
    ``_in`` where an axis matches ``layers`` (``{"fc0": (out, in)}``), else ``{name}_dim_{i}`` (the naming
    of the variational export, :func:`zoo.eval.diagnostics.to_inference_data`)."""
    generic = [f"{name}_dim_{i}" for i in range(len(shape))]
    layer = next((k for k in layers if name.startswith(k + ".")), None)
    if layer is None or len(shape) not in (1, 2):
        return generic
    d_out, d_in = layers[layer]
    if len(shape) == 1:
        if shape[0] == d_out:
            return [f"{layer}_out"]
        return [f"{layer}_in"] if shape[0] == d_in else generic
    return [
        f"{layer}_out" if shape[0] == d_out else generic[0],
        f"{layer}_in" if shape[1] == d_in else generic[1],
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


def _draws_at(result: NUTSResult, x: Tensor, seed: int) -> np.ndarray:
    """Joint draws of ``y`` at ``x`` ``(chain, draw, N, ...)``: draw ``s`` uses posterior draw ``s``."""
    g = result.guide
    pred = all_draws_predict(result, x, keep_draws=False, return_samples=True, seed=seed)
    ys = pred.samples.cpu().numpy()
    return ys.reshape(g.num_chains, g.num_draws, *ys.shape[1:])


def _obs_dims(arr_ndim: int) -> list[str]:
    return ["obs_id"] if arr_ndim == 1 else ["obs_id", "obs_dim_0"]


def _train_groups(result: NUTSResult, data: tuple, inputs: bool, seed: int) -> dict[str, Any]:
    x, y = data
    g = result.guide
    total = g.num_chains * g.num_draws
    ll = log_likelihood(result, x, y, num_samples=total, seed=seed, **draw_chunks(result, total))
    ydims = {"obs": _obs_dims(y.dim())}
    groups = {
        "posterior_predictive": az.dict_to_dataset({"obs": _draws_at(result, x, seed)}, dims=ydims),
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


def _new_data_groups(
    result: NUTSResult, x: Tensor, y: Tensor | None, inputs: bool, seed: int
) -> dict[str, Any]:
    draws = _draws_at(result, x, seed)
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


def _check_export_args(result: Any, x: Any, y: Any, train: Any, num_samples: Any, seed: Any) -> None:
    """``TypeError`` / ``ValueError`` naming the argument of :func:`to_inference_data`, before any work."""
    guide = getattr(result, "guide", None)
    if not isinstance(result, FitResult) or not hasattr(guide, "num_chains") or not hasattr(guide, "stats"):
        raise TypeError(
            f"result must be a NUTS fit (zoo.infer.mcmc_result.NUTSResult), got {type(result).__name__}; "
            "export a variational fit with zoo.to_inference_data"
        )
    if num_samples is not None and check_positive_int("num_samples", num_samples) < guide.num_chains:
        raise ValueError(
            f"num_samples: at least one draw per chain ({guide.num_chains} chains), got {num_samples}"
        )
    if seed is not None:
        check_seed("seed", seed)
    if x is not None:
        check_tensor("x", x, ndim=2)
    if y is not None:
        if x is None:
            raise ValueError("y: targets at new inputs need the inputs x")
        check_tensor("y", y)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"y has {y.shape[0]} rows but x has {x.shape[0]}")
    if train is not None:
        if not isinstance(train, tuple | list) or len(train) != 2:
            raise TypeError(f"train must be an (x_train, y_train) pair, got {type(train).__name__}")
        check_tensor("train[0]", train[0], ndim=2)
        check_tensor("train[1]", train[1])
        if train[1].shape[0] != train[0].shape[0]:
            raise ValueError(
                f"train: y_train has {train[1].shape[0]} rows but x_train has {train[0].shape[0]}"
            )


def thinning_stride(chains: int, draws: int, num_samples: int | None) -> int:
    """The smallest stride ``k`` such that every ``k``-th draw of each chain (``chains * ceil(draws / k)``
    draws) is at most ``num_samples`` draws (``None``: 1, every draw)."""
    if num_samples is None or num_samples >= chains * draws:
        return 1
    k = max(1, math.ceil(chains * draws / num_samples))
    while chains * math.ceil(draws / k) > num_samples:
        k += 1
    return k


def _thinned(result: NUTSResult, stride: int) -> NUTSResult:
    """``result`` with every ``stride``-th draw of each chain (its guide rebuilt from the kept draws)."""
    if stride == 1:
        return result
    g = result.guide
    guide = type(g)(
        {k: v[:, ::stride] for k, v in g.samples.items()},
        stats={k: v[:, ::stride] for k, v in g.stats.items()},
    )
    return dataclasses.replace(result, guide=guide)


def to_inference_data(
    result: NUTSResult,
    x: Tensor | None = None,
    y: Tensor | None = None,
    num_samples: int | None = None,
    *,
    train: tuple[Tensor, Tensor] | None = None,
    include_weights: bool | None = None,
    max_weight_params: int = 50_000,
    max_input_values: int = 100_000,
    seed: int | None = None,
    max_marginal_values: int = 250_000,
) -> az.InferenceData:
    """ArviZ export of a NUTS fit with ``(chain, draw)`` dims (module docstring), in the schema of the
    variational export (:func:`zoo.eval.diagnostics.to_inference_data`, whose arguments it takes).

    Groups: ``posterior`` (every latent site; sampler settings and convergence facts as attributes),
    ``sample_stats`` (per draw: ``lp`` the log density on the unconstrained scale, ``diverging``, ``energy``,
    ``energy_error``, ``acceptance_rate``, ``step_size``, ``tree_depth``, ``n_steps``); for ``train=(x, y)``
    (the data the chains saw) ``posterior_predictive``, ``observed_data``, ``log_likelihood`` (``az.loo``,
    ``az.waic``) and ``constant_data``; for new inputs ``x`` (targets ``y`` optional) ``predictions`` and
    ``predictions_constant_data``.

    :param num_samples: ``None`` (default): every posterior draw once, in chain order; an int: at most that
        many, by keeping every ``k``-th draw of each chain (:func:`thinning_stride`; never resampled, so the
        chains stay chains), at least one per chain.
    :param include_weights: export the weight/bias sites; default only when the network has at most
        ``max_weight_params`` parameters (hyperparameters and scales are always exported).
    :param max_input_values: inputs are stored only up to this many numbers.
    :param seed: seed of the observation noise in ``posterior_predictive`` / ``predictions`` (default: the
        fit's seed); the parameters of draw ``s`` are the same in every group whatever the seed.
    :param max_marginal_values: taken for the variational exporter's signature and checked; it does not
        apply here (NUTS samples models whose likelihood needs no Monte Carlo over per-row latents).

    The targets are on the scale of the fit's config: with ``y_mean`` / ``y_std`` recorded (every ``zoo
    fit`` run) pass raw targets; the groups are labelled by :func:`zoo.eval.units.annotate_target_scaling`.
    """
    _check_export_args(result, x, y, train, num_samples, seed)
    check_positive_int("max_marginal_values", max_marginal_values)
    stride = thinning_stride(result.guide.num_chains, result.guide.num_draws, num_samples)
    result = _thinned(result, stride)
    seed = int(result.seed) if seed is None else seed
    if include_weights is None:
        include_weights = result.model.architecture.num_params() <= max_weight_params
    weights = {s.name for s in result.model.architecture.param_specs()}
    layers = _layers(result)
    posterior = {
        k: v.detach().cpu().numpy()
        for k, v in result.guide.samples.items()
        if include_weights or k not in weights
    }
    dims = {k: site_dims(k, tuple(v.shape[2:]), layers) for k, v in posterior.items()}
    groups: dict[str, Any] = {
        "posterior": az.dict_to_dataset(posterior, dims=dims),
        "sample_stats": az.dict_to_dataset({k: v.cpu().numpy() for k, v in result.guide.stats.items()}),
    }
    if train is not None:
        groups.update(_train_groups(result, tuple(train), train[0].numel() <= max_input_values, seed))
    if x is not None:
        groups.update(_new_data_groups(result, x, y, x.numel() <= max_input_values, seed))
    groups["posterior"].attrs.update(_attrs(result))
    groups["posterior"].attrs["thinning_stride"] = stride
    annotate_target_scaling(groups, result)  # y_mean / y_std: which groups are on which scale
    return az.InferenceData(**groups)


def all_draws_predict(result: NUTSResult, x: Tensor, **kwargs: Any) -> Predictions:
    """``predict`` over every posterior draw exactly once (in chain order)."""
    total = result.num_draws
    return predict(result, x, num_samples=total, **draw_chunks(result, total), **kwargs)
