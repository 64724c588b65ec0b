"""ArviZ export of a fit: :func:`to_inference_data`.

ArviZ's ``from_pyro`` only accepts ``pyro.infer.MCMC`` objects (ArviZ 0.x, ``arviz/data/io_pyro.py``), so VI
fits go through ``az.from_dict`` with a chain axis of size 1 (Kumar, Carroll, Hartikainen & Martin 2019,
"ArviZ a unified library for exploratory analysis of Bayesian models in Python", JOSS 4(33), 1143).
Groups:

* ``posterior`` — ``S`` i.i.d. draws from the guide of every latent site (``chain = 1``, ``draw = S``),
  with named dims per site (``fc0.weight`` → ``(fc0_out, fc0_in)``; a layer's bias shares ``fc0_out``);
* ``posterior_predictive`` — joint draws of ``y`` at the given inputs;
* ``log_likelihood`` — pointwise ``log p(y_n | θ_s)`` (``S x N``), for ``az.loo`` / ``az.waic``;
* ``observed_data`` — ``y``;
* ``vi_trace`` — the ELBO per optimization step (dim ``step``); fit facts are in the posterior attrs.

**Which diagnostics mean something for VI draws.**  The draws are i.i.d. from q, not a Markov chain:
R-hat, ESS and MCSE-of-the-chain in ``az.summary`` are *not* convergence diagnostics here (R-hat ≈ 1 and
ESS ≈ S by construction; use ``az.summary(..., kind="stats")``).  Meaningful: posterior summaries of
q (means, sds, HDIs), PSIS-LOO / WAIC from the log-likelihood (``az.loo``; its Pareto-k flags
influential points; Vehtari, Gelman & Gabry 2017, arXiv:1507.04544), posterior predictive checks
(``az.plot_ppc``), LOO-PIT calibration, and the ELBO
trace.  Convergence of VI is judged by the ELBO trace and by agreement across seeds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import arviz as az
import numpy as np
import xarray as xr
from torch import Tensor

from zoo.core.validation import check_positive_int
from zoo.infer.predict import log_likelihood, posterior_samples, predict

if TYPE_CHECKING:
    from zoo.infer.loop import FitResult

__all__ = ["to_inference_data", "save_netcdf"]


def _site_dims(name: str, shape: tuple[int, ...]) -> list[str]:
    if name.endswith(".weight") and len(shape) == 2:
        layer = name[: -len(".weight")]
        return [f"{layer}_out", f"{layer}_in"]
    if name.endswith(".bias") and len(shape) == 1:
        return [f"{name[: -len('.bias')]}_out"]
    return [f"{name}_dim_{i}" for i in range(len(shape))]


def _posterior_group(
    fit: FitResult, num_samples: int, include_weights: bool, seed: int | None
) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """``S`` guide draws of every latent site (chain axis of size 1) and their named dims; weight and bias
    sites only with ``include_weights``."""
    shapes = {s.name: s.shape for s in fit.model.architecture.param_specs()}
    posterior: dict[str, np.ndarray] = {}
    dims: dict[str, list[str]] = {}
    for name, v in posterior_samples(fit, num_samples, seed=seed).items():
        if name in shapes and not include_weights:
            continue
        arr = v.detach().cpu().numpy()
        if name in shapes:
            arr = arr.reshape(num_samples, *shapes[name])
        posterior[name] = arr[None]
        dims[name] = _site_dims(name, arr.shape[1:])
    return posterior, dims


def _fit_attrs(fit: FitResult, num_samples: int, n_obs: int) -> dict[str, object]:
    """Facts about the fit, stored as attributes of the posterior group."""
    return {
        "inference": "variational",
        "guide": type(fit.guide).__name__,
        "model": (fit.spec or {}).get("model", type(fit.model).__name__),
        "steps": int(fit.steps),
        "seed": int(fit.seed),
        "final_elbo": float(fit.final_elbo),
        "fit_seconds": float(fit.wall_time),
        "num_draws": int(num_samples),
        "n_obs": int(n_obs),
    }


def _elbo_trace(fit: FitResult) -> xr.Dataset:
    return xr.Dataset(
        {"elbo": ("step", np.asarray(fit.elbo, dtype=np.float64))},
        coords={"step": np.arange(1, len(fit.elbo) + 1)},
    )


def to_inference_data(
    fit: FitResult,
    x: Tensor,
    y: Tensor | None = None,
    num_samples: int = 200,
    *,
    include_weights: bool | None = None,
    max_weight_params: int = 50_000,
    seed: int | None = 0,
) -> az.InferenceData:
    """Export a :class:`~zoo.infer.loop.FitResult` to ``arviz.InferenceData`` (see module docstring).

    :param x: inputs at which to draw the posterior predictive / log-likelihood (e.g. the test set).
    :param y: observed targets at ``x`` (omit for prediction-only export: no log-likelihood then).
    :param include_weights: export weight/bias sites; default only when the network has at most
        ``max_weight_params`` parameters (hyperparameters and scales are always exported).
    """
    num_samples = check_positive_int("num_samples", num_samples)
    if include_weights is None:
        include_weights = fit.model.architecture.num_params() <= max_weight_params
    posterior, dims = _posterior_group(fit, num_samples, include_weights, seed)
    pred = predict(fit, x, num_samples=num_samples, keep_draws=False, return_samples=True, seed=seed)
    dims["y"] = ["obs_id"] if pred.samples.dim() == 2 else ["obs_id", "y_dim"]
    groups: dict[str, dict[str, np.ndarray]] = {
        "posterior": posterior,
        "posterior_predictive": {"y": pred.samples.cpu().numpy()[None]},
    }
    if y is not None:
        ll = log_likelihood(fit, x, y, num_samples=num_samples, seed=seed)
        groups["log_likelihood"] = {"y": ll.cpu().numpy()[None]}
        groups["observed_data"] = {"y": y.detach().cpu().numpy()}
    n = x.shape[0]
    idata = az.from_dict(**groups, dims=dims, coords={"obs_id": np.arange(n)})
    idata.posterior.attrs.update(_fit_attrs(fit, num_samples, n))
    idata.add_groups({"vi_trace": _elbo_trace(fit)})
    return idata


def save_netcdf(idata: az.InferenceData, path: str | os.PathLike) -> None:
    """Write ``idata`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"path: folder {str(path.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        idata.to_netcdf(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
