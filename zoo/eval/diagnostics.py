"""ArviZ export of a fit (:func:`to_inference_data`) and a summary that means something for VI draws
(:func:`vi_summary`).

ArviZ's ``from_pyro`` only accepts ``pyro.infer.MCMC`` objects (ArviZ 0.x, ``arviz/data/io_pyro.py``), so VI
fits go through ``az.from_dict`` with a chain axis of size 1 (Kumar, Carroll, Hartikainen & Martin 2019,
"ArviZ a unified library for exploratory analysis of Bayesian models in Python", JOSS 4(33), 1143).  The
groups follow ArviZ's InferenceData schema (``arviz.data.inference_data.SUPPORTED_GROUPS``), so ArviZ warns
about none of them:

* ``posterior`` — ``S`` i.i.d. draws from the guide of every latent site (``chain = 1``, ``draw = S``),
  named as the model's sample sites, with named dims: ``fc0.weight`` → ``(fc0_out, fc0_in)``, and any other
  site of layer ``fc0`` (a prior's scales, e.g. ``fc0.tau2``) gets ``fc0_out`` / ``fc0_in`` on the axes whose
  length matches the layer's (for a 1-D site of a square layer, ``fc0_out``: node-wise scales index the
  receiving units); fit facts and the ELBO trace (``elbo_trace``, one value per optimization step; netCDF
  reads a one-step trace back as a scalar) are attributes of this group;
* for the *training* data (``train=(x, y)``): ``posterior_predictive`` (joint draws of the observed site,
  ``obs``), ``observed_data`` (``obs``), ``log_likelihood`` (pointwise ``log p(y_n | θ_s)``, for ``az.loo`` /
  ``az.waic``) and ``constant_data`` (``x``);
* for *new* data (``x``, e.g. the test set): ``predictions`` (``obs`` draws) and
  ``predictions_constant_data`` (the inputs ``x`` and, when given, the targets ``y`` to score them against).

Inputs are stored when they hold at most ``max_input_values`` numbers (MNIST-sized sets are left out).

**Units.**  A regression fit on standardized targets (``y_mean`` / ``y_std`` recorded in ``fit.config``)
has its posterior sites (``sigma2``, the weights) on the standardized scale ``(y - y_mean) / y_std``, while
``observed_data``, ``posterior_predictive``, ``log_likelihood`` and ``predictions`` are in the original
units; every group then carries the attributes ``y_mean``, ``y_std`` and ``target_scaling`` saying which
(:func:`annotate_target_scaling`).

**Which diagnostics mean something for VI draws.**  The draws are i.i.d. from q, not a Markov chain:
R-hat is not defined for one chain, and the autocorrelation-based ESS of ``az.summary`` only re-estimates
what is known exactly (ESS = S).  :func:`vi_summary` reports mean, sd, HDI, and the Monte Carlo standard
errors and ESS of i.i.d. draws, without ArviZ's shape warnings.  Meaningful besides: posterior predictive
checks (``az.plot_ppc``), the ELBO trace, and PSIS-LOO / WAIC from the training log-likelihood (``az.loo``;
Vehtari, Gelman & Gabry 2017, arXiv:1507.04544) where its Pareto k are small: importance weights between
the guide and the leave-one-out posterior can be heavy-tailed for guides with discrete or per-row latents
(the LBBNN's inclusion indicators) or far from the posterior; compare on held-out data (``zoo bench``)
then.  ``log_likelihood[s, n]`` conditions on the global parameters of draw ``s`` only: a model with per-row
local latents (the bow-tie) has them integrated out (``model.marginal_log_likelihood``,
:mod:`zoo.infer.predict`).  Convergence of
VI is judged by the ELBO trace and by agreement across seeds (fits from several seeds stacked as chains give
:func:`vi_summary` an R-hat column that measures exactly that).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import arviz as az
import numpy as np
import pandas as pd
import pyro
import torch
import xarray as xr
from pyro import poutine, validation_enabled
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from zoo.core.validation import check_positive_int, check_tensor
from zoo.eval.units import annotate_target_scaling, check_target_units, likelihood_attrs
from zoo.infer.mcmc_export import site_dims  # one naming of posterior dims, VI and NUTS
from zoo.infer.predict import _guide_trace, log_likelihood, posterior_samples, predictive_samples
from zoo.io import atomic_write_path

if TYPE_CHECKING:
    from zoo.infer.result import FitResult

__all__ = [
    "to_inference_data",
    "annotate_target_scaling",
    "save_netcdf",
    "vi_summary",
    "iid_mcse_mean",
    "iid_mcse_sd",
]

logger = logging.getLogger(__name__)


def _layers(fit: FitResult) -> dict[str, tuple[int, int]]:
    """``{layer: (out, in)}`` from the architecture's weight specs (``fc0.weight`` → ``fc0``)."""
    out = {}
    for spec in fit.model.architecture.param_specs():
        if spec.role == "weight" and len(spec.shape) == 2:
            out[spec.name.rsplit(".", 1)[0]] = (int(spec.shape[0]), int(spec.shape[1]))
    return out


def _posterior_group(
    fit: FitResult, num_samples: int, include_weights: bool, seed: int | None
) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """``S`` guide draws of every latent site (chain axis of size 1) and their named dims; weight and bias
    sites only with ``include_weights``."""
    shapes = {s.name: s.shape for s in fit.model.architecture.param_specs()}
    layers = _layers(fit)
    posterior: dict[str, np.ndarray] = {}
    dims: dict[str, list[str]] = {}
    for name, v in posterior_samples(fit, num_samples, seed=seed).items():
        if name in shapes and not include_weights:
            continue
        # float64: float32 overflows ArviZ's moment statistics for large scales (a horseshoe's theta ~ 1e10)
        arr = v.detach().cpu().double().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
        if name in shapes:
            arr = arr.reshape(num_samples, *shapes[name])
        posterior[name] = arr[None]
        dims[name] = site_dims(name, arr.shape[1:], layers)
    return posterior, dims


def _zero_targets(fit: FitResult, x: Tensor) -> Tensor:
    """Placeholder targets of the model's task for two rows (only to name the observed site)."""
    lik = fit.model.likelihood
    k = int(getattr(lik, "out_features", 1))
    if lik.task != "regression":
        return torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    return torch.zeros(x.shape[0], *((k,) if k > 1 else ()), dtype=x.dtype, device=x.device)


def _observed_site(fit: FitResult, x: Tensor, y: Tensor | None) -> str:
    """The name of the model's observed sample site (``"obs"`` for the zoo's likelihoods): the model replayed
    on two guide draws at two rows, as prediction runs it; the RNG state is left as it was."""
    x0 = x[:2]
    y0 = y[:2] if y is not None else _zero_targets(fit, x0)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices), torch.no_grad(), fit.activate(), validation_enabled(False):
        guide_trace = _guide_trace(fit.guide, 2, x0)  # 2 draws: a particle dim of 1 would be squeezed
        with pyro.plate("_num_draws", 2, dim=-2):
            trace = poutine.trace(poutine.replay(fit.model, trace=guide_trace)).get_trace(x0, y0)
    for name, site in trace.nodes.items():
        if (
            site["type"] == "sample"
            and site["is_observed"]
            and not site["infer"].get("_deterministic")  # pyro.deterministic sites are observed Deltas
            and not site_is_subsample(site)
        ):
            return name
    return "obs"


def _fit_attrs(fit: FitResult, num_samples: int) -> dict[str, object]:
    """Facts about the fit and the ELBO trace, stored as attributes of the posterior group."""
    return {
        "inference": "variational",
        "draws": (
            "i.i.d. from the fitted guide (one chain); summarize with zoo.eval.diagnostics.vi_summary; "
            "draw s is the same parameter draw in posterior, log_likelihood, posterior_predictive and "
            "predictions"
        ),
        "guide": type(fit.guide).__name__,
        "model": (fit.spec or {}).get("model", type(fit.model).__name__),
        "steps": int(fit.steps),
        "seed": int(fit.seed),
        "final_elbo": float(fit.final_elbo),
        "fit_seconds": float(fit.wall_time),
        "num_draws": int(num_samples),
        "elbo_trace": np.asarray(fit.elbo, dtype=np.float64),
        **likelihood_attrs(fit),
    }


def _check_pair(what: str, fit: FitResult, x: object, y: object) -> None:
    """``x`` (N, in_features) float and ``y`` (N,) / (N, k) with N rows, before anything is drawn."""
    check_tensor(f"{what}x", x, ndim=2, dtype_kind="float")
    expected = fit.model.architecture.in_features
    if x.shape[1] != expected:
        raise ValueError(f"{what}x has {x.shape[1]} features but the model expects {expected}")
    if y is not None:
        check_tensor(f"{what}y", y, ndim=(1, 2))
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"{what}y has {y.shape[0]} rows but {what}x has {x.shape[0]}")


def _check_args(fit: FitResult, x, y, train) -> tuple | None:
    if x is None and y is not None:
        raise ValueError("y: the targets of new data need their inputs x")
    if x is not None:
        _check_pair("", fit, x, y)
    if train is None:
        return None
    if not isinstance(train, (tuple, list)) or len(train) != 2:
        raise TypeError(f"train must be a pair (x_train, y_train) of tensors, got {type(train).__name__}")
    if train[1] is None:
        raise ValueError("train: y_train is required (the observed data of the fit)")
    _check_pair("train: ", fit, train[0], train[1])
    return tuple(train)


def _draw_dims(site: str, samples: Tensor) -> list[str]:
    return ["obs_id"] if samples.dim() == 2 else ["obs_id", f"{site}_dim_0"]


def _draws(data: dict, dims: dict) -> xr.Dataset:
    """A group of draws (leading ``chain``, ``draw`` axes)."""
    return az.dict_to_dataset(data, dims=dims)


def _data(data: dict, dims: dict) -> xr.Dataset:
    """A group of data (no ``chain``/``draw`` axes)."""
    return az.dict_to_dataset(data, dims=dims, default_dims=[])


def _pair_groups(fit, x, y, site: str, draws: tuple[int, int | None], inputs: bool) -> dict[str, dict]:
    """Draws of the observed site at ``x`` (``draws = (num_samples, seed)``; draw ``s`` under the parameter
    draw ``s`` of the posterior group: :func:`zoo.infer.predict.predictive_samples`), the inputs (when
    ``inputs``) and the targets, as plain arrays, with their dims."""
    samples = predictive_samples(fit, x, num_samples=draws[0], seed=draws[1])
    out = {"draws": {site: samples.cpu().numpy()[None]}, "inputs": {}, "targets": {}}
    if inputs:
        out["inputs"] = {"x": x.detach().cpu().numpy()}
    if y is not None:
        out["targets"] = {"y": y.detach().cpu().numpy()}
    out["dims"] = {
        site: _draw_dims(site, samples),
        "x": ["obs_id", "feature"],
        "y": ["obs_id"] if y is None or y.dim() == 1 else ["obs_id", f"{site}_dim_0"],
    }
    return out


def _train_groups(
    fit, data, site: str, draws: tuple[int, int | None], inputs: bool, max_marginal: int
) -> dict[str, xr.Dataset]:
    """The groups of the data the fit saw: ``posterior_predictive``, ``observed_data`` and ``log_likelihood``
    (named as the observed site), ``constant_data`` (``x``).  For a model that integrates per-row latents
    out by Monte Carlo (``marginal_log_likelihood``), ``log_likelihood`` is left out beyond ``max_marginal``
    (rows x draws), with a warning and a ``posterior_predictive`` attribute saying so."""
    x, y = data
    g = _pair_groups(fit, x, y, site, draws, inputs)
    check_target_units("train", fit, g["targets"]["y"], g["draws"][site])
    groups = {
        "posterior_predictive": _draws(g["draws"], g["dims"]),
        "observed_data": _data({site: g["targets"]["y"]}, {site: g["dims"]["y"]}),
    }
    marginal = callable(getattr(fit.model, "marginal_log_likelihood", None))
    if marginal and x.shape[0] * draws[0] > max_marginal:
        why = (
            f"log_likelihood left out: {type(fit.model).__name__} integrates its per-row latents out by "
            f"Monte Carlo, and {x.shape[0]} rows x {draws[0]} draws exceed "
            f"max_marginal_values={max_marginal} (pass a larger one, or fewer num_samples, to export it)"
        )
        logger.warning(why)
        groups["posterior_predictive"].attrs["log_likelihood"] = why
    else:
        ll = log_likelihood(fit, x, y, num_samples=draws[0], seed=draws[1])
        groups["log_likelihood"] = _draws({site: ll.cpu().numpy()[None]}, {site: ["obs_id"]})
        groups["log_likelihood"].attrs.update(_pointwise_attrs(fit))
    if g["inputs"]:
        groups["constant_data"] = _data(g["inputs"], g["dims"])
    return groups


def _pointwise_attrs(fit) -> dict[str, str]:
    """What ``log_likelihood[s, n]`` is, for a model with per-row local latents (e.g. the bow-tie's gates)."""
    text = "log p(y_n | theta_s), theta_s the posterior group's draw s"
    if callable(getattr(fit.model, "marginal_log_likelihood", None)):
        text += (
            "; the model's per-row local latents integrated out by Monte Carlo with common random numbers "
            f"({type(fit.model).__name__}.marginal_log_likelihood)"
        )
    return {"pointwise": text, **likelihood_attrs(fit)}


def _new_data_groups(fit, x, y, site: str, draws: tuple[int, int | None], inputs: bool) -> dict:
    """``predictions`` (draws of the observed site at new inputs) and ``predictions_constant_data`` (``x``
    and the targets ``y`` to score them against)."""
    g = _pair_groups(fit, x, y, site, draws, inputs)
    if y is not None:
        check_target_units("y", fit, g["targets"]["y"], g["draws"][site])
    groups = {"predictions": _draws(g["draws"], g["dims"])}
    const = {**g["inputs"], **g["targets"]}
    if const:
        groups["predictions_constant_data"] = _data(const, g["dims"])
    return groups


def to_inference_data(
    fit: FitResult,
    x: Tensor | None = None,
    y: Tensor | None = None,
    num_samples: int = 200,
    *,
    train: tuple[Tensor, Tensor] | None = None,
    include_weights: bool | None = None,
    max_weight_params: int = 50_000,
    max_input_values: int = 100_000,
    seed: int | None = 0,
    max_marginal_values: int = 250_000,
) -> az.InferenceData:
    """Export a :class:`~zoo.infer.result.FitResult` to ``arviz.InferenceData`` (see module docstring).

    A NUTS fit (:class:`zoo.infer.mcmc_result.NUTSResult`, any result with its own ``to_inference_data``)
    is exported by that method (:func:`zoo.infer.mcmc_export.to_inference_data`): every chain and draw
    kept, with ``sample_stats``; ``num_samples``, ``include_weights``, ``max_weight_params`` and ``seed``
    do not apply to it.

    **Target scale.**  ``y`` and ``train``'s targets must be on the scale of the fit's own targets *as
    recorded*: in original units when the fit recorded ``y_mean`` / ``y_std`` (``zoo fit``,
    :func:`zoo.experiments.runs.fit_on_dataset`, ``fit(..., metadata={"y_mean": .., "y_std": ..})``), else
    on the scale the fit was trained on.  Targets that look like the other scale (compared with the
    recorded standardization and with the predictive draws) give a warning naming ``train`` or ``y``
    (:func:`zoo.eval.units.check_target_units`).

    :param x: new inputs (e.g. the test set): draws go to ``predictions``, ``x`` to
        ``predictions_constant_data``.
    :param y: targets at ``x`` (stored as ``predictions_constant_data.y`` to score the predictions against).
    :param train: ``(x_train, y_train)``, the data the fit saw: ``posterior_predictive``, ``observed_data``,
        ``log_likelihood`` (what ``az.loo``, ``az.waic`` and ``az.plot_ppc`` read) and ``constant_data``.
    :param include_weights: export weight/bias sites; default only when the network has at most
        ``max_weight_params`` parameters (hyperparameters and scales are always exported).
    :param max_input_values: inputs are stored only up to this many numbers.
    :param max_marginal_values: for a model whose pointwise likelihood integrates per-row latents out by
        Monte Carlo (the bow-tie's ``marginal_log_likelihood``, ~0.1-0.3 ms per row and draw on a CPU core),
        ``log_likelihood`` is exported only up to this many training rows x draws (else left out, with a
        warning and a ``posterior_predictive`` attribute saying so).
    :param seed: draw ``s`` is the same parameter draw in every group (``posterior``, ``log_likelihood``,
        ``posterior_predictive``, ``predictions``): all come from the seeding scheme of
        :mod:`zoo.infer.predict` with this seed, whatever the guide (a guide's own ``predictive``, which
        makes its own draws, is not used here).
    """
    if callable(getattr(type(fit), "to_inference_data", None)):  # a NUTS result: chains kept
        return fit.to_inference_data(x, y, train=train, max_input_values=max_input_values)
    num_samples = check_positive_int("num_samples", num_samples)
    train = _check_args(fit, x, y, train)
    if include_weights is None:
        include_weights = fit.model.architecture.num_params() <= max_weight_params
    posterior, dims = _posterior_group(fit, num_samples, include_weights, seed)
    groups = {"posterior": _draws(posterior, dims)}
    probe = train if train is not None else (x, y)
    site = _observed_site(fit, *probe) if probe[0] is not None else "obs"
    draws = (num_samples, seed)
    if train is not None:
        max_marginal = check_positive_int("max_marginal_values", max_marginal_values)
        groups.update(
            _train_groups(fit, train, site, draws, train[0].numel() <= max_input_values, max_marginal)
        )
    if x is not None:
        groups.update(_new_data_groups(fit, x, y, site, draws, x.numel() <= max_input_values))
    groups["posterior"].attrs.update(_fit_attrs(fit, num_samples))
    annotate_target_scaling(groups, fit)
    return az.InferenceData(**groups)


def iid_mcse_mean(draws: np.ndarray) -> float:
    """Monte Carlo standard error of the mean of i.i.d. draws: ``sd / sqrt(S)`` (sd with ``ddof=1``)."""
    v = np.asarray(draws, dtype=np.float64).ravel()
    return float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def iid_mcse_sd(draws: np.ndarray) -> float:
    """Monte Carlo standard error of the sd of i.i.d. draws by the delta method:
    ``Var(s) ≈ (m4 - m2^2) / (4 m2 S)`` with central moments ``m2``, ``m4`` (``sd / sqrt(2 S)`` for normal
    draws; heavier tails give more).  Zero for constant draws."""
    v = np.asarray(draws, dtype=np.float64).ravel()
    if v.size < 2:
        return float("nan")
    c = v - v.mean()
    m2, m4 = float(np.mean(c**2)), float(np.mean(c**4))
    if m2 <= 0.0:
        return 0.0
    return float(np.sqrt(max(m4 - m2**2, 0.0) / (4.0 * m2 * v.size)))


def _iid_ess(draws: np.ndarray) -> float:
    return float(np.asarray(draws).size)


def vi_summary(
    idata: az.InferenceData,
    var_names: Sequence[str] | None = None,
    *,
    hdi_prob: float = 0.94,
    **kwargs,
) -> pd.DataFrame:
    """``az.summary`` for i.i.d. variational draws: mean, sd, HDI, ``mcse_mean`` / ``mcse_sd`` of i.i.d.
    draws (:func:`iid_mcse_mean`, :func:`iid_mcse_sd`) and ``ess`` = the number of draws (exact for
    independent draws).  No R-hat for one chain (it is undefined; ArviZ would log shape warnings and print
    NaN); with several chains (e.g. fits from different seeds, stacked with ``az.concat(..., dim="chain")``)
    an ``r_hat`` column (rank-normalized split R-hat; Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
    arXiv:1903.08008) measures agreement across fits, and the MCSEs then treat all draws as one i.i.d.
    sample.  ``kwargs`` go to ``az.summary`` (e.g. ``round_to``, ``coords``)."""
    if not isinstance(idata, az.InferenceData):
        raise TypeError(f"idata must be an arviz.InferenceData, got {type(idata).__name__}")
    if "posterior" not in idata.groups():
        raise ValueError(f"idata: no posterior group to summarize (groups: {idata.groups()})")
    funcs = {"mcse_mean": iid_mcse_mean, "mcse_sd": iid_mcse_sd, "ess": _iid_ess}
    table = az.summary(
        idata, var_names=var_names, kind="stats", hdi_prob=hdi_prob, stat_funcs=funcs, extend=True, **kwargs
    )
    if idata.posterior.sizes["chain"] > 1:
        diag = az.summary(idata, var_names=var_names, kind="diagnostics", **kwargs)
        table["r_hat"] = diag["r_hat"]
    return table


def save_netcdf(idata: az.InferenceData, path: str | os.PathLike) -> None:
    """Write ``idata`` to ``path`` atomically (temporary file in the same folder, then rename).

    The file gets the permissions of any file the process creates (``0o666`` less the umask, as for the
    run folder's ``metrics.json``): the temporary file is created through :mod:`zoo.io` with mode
    ``0o666``, so the operating system applies the umask, and that mode is set again after the netCDF
    writer has written it (a writer may replace the file it is given): :func:`zoo.io.atomic_write_path`."""
    atomic_write_path(path, lambda tmp: idata.to_netcdf(str(tmp)))  # a missing folder: ValueError
