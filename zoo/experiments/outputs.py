"""What a run produces and how it is scored: :class:`RunOutput`, the test metrics of a predictive
(:func:`score_predictions`, :func:`evaluate`) and the training-set metrics (:func:`train_set_metrics`).

Shared by every inference method of the experiments layer (the SVI/CAVI runs of
:mod:`zoo.experiments.runs` and the NUTS runs of :mod:`zoo.experiments.nuts_runs`), so neither imports
the other.  Metrics are on the original target scale (see :mod:`zoo.experiments.runs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from zoo.data import Dataset
from zoo.eval import metrics
from zoo.infer.predict import Predictions, predict
from zoo.infer.result import FitResult

__all__ = ["RunOutput", "evaluate", "score_predictions", "train_set_metrics"]


@dataclass
class RunOutput:
    result: FitResult
    dataset: Dataset
    metrics: dict
    predictions: Predictions
    train_predictions: Predictions | None = None


def score_predictions(dataset: Dataset, pred: Predictions, y_true: torch.Tensor | np.ndarray) -> dict:
    """Metrics of a predictive distribution against ``y_true`` (original target scale): regression RMSE,
    Gaussian NLL, mixture NLL over draws (when the draws are kept), 95 % coverage; classification accuracy,
    NLL, ECE (10 bins).

    ``nll`` and ``coverage95`` are those of the Gaussian with the predictive's mean and variance — except for
    a Student-t likelihood's draws (``pred.df`` set, draws kept), whose moment-matched Gaussian is not the
    model's predictive: there they are the Student-t mixture's NLL and the coverage of its central 95 %
    interval (from the PIT, :func:`zoo.eval.metrics.mixture_pit`)."""
    y = y_true.detach().cpu().numpy() if torch.is_tensor(y_true) else np.asarray(y_true)
    out: dict = {}
    if dataset.task == "regression":
        mean, var = pred.mean.cpu().numpy(), pred.var.cpu().numpy()
        out["rmse"] = metrics.rmse(y, mean)
        out["nll"] = metrics.gaussian_nll(y, mean, var)
        out["coverage95"] = metrics.coverage(y, mean, var, level=0.95)
        if pred.loc is not None and pred.scale is not None:
            loc, scale = pred.loc.cpu().numpy(), pred.scale.cpu().numpy()
            out["nll_mixture"] = metrics.mixture_nll(y, loc, scale, df=pred.df)
            out["rmse_draws"] = metrics.rmse_draws(y, loc)
            out["rmse_pointwise"] = metrics.rmse_pointwise(y, loc)
            if pred.df is not None:
                flat = (loc.shape[0], -1)  # several outputs: every scalar target is a point
                pit = metrics.mixture_pit(y.reshape(-1), loc.reshape(flat), scale.reshape(flat), df=pred.df)
                out["nll"] = out["nll_mixture"]
                out["coverage95"] = metrics.interval_coverage(pit, (0.95,))[0.95]
    else:
        probs = pred.probs.cpu().numpy()
        out["accuracy"] = metrics.accuracy(y, probs)
        out["nll"] = metrics.categorical_nll(y, probs)
        out["ece"] = metrics.ece(y, probs, n_bins=10)
    return out


def evaluate(
    result: FitResult,
    dataset: Dataset,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    num_samples: int = 100,
    seed: int = 0,
) -> tuple[dict, Predictions]:
    """Test metrics of a fit (original target scale), see :func:`score_predictions`, plus the guide's
    sparsity-report density when it has one."""
    pred = predict(result, x_test, num_samples=num_samples, seed=seed)
    out = score_predictions(dataset, pred, y_test)
    sparsity = getattr(result.guide, "sparsity_report", None)
    if callable(sparsity):
        with result.activate():
            out["density"] = float(sparsity(result.model).density)
    return out, pred


def train_set_metrics(run: RunOutput, num_samples: int = 100) -> dict:
    """Training-set metrics (``train_<metric>``) and the under-fitting gap ``nll_gap = nll - train_nll``
    (Tomczak et al. (2021) §9.3), from the same predictive as the test metrics; the training-set
    predictions are kept in
    ``run.train_predictions``."""
    xtr, ytr, _, _ = run.dataset.tensors(device=run.result.device)
    scores, pred = evaluate(
        run.result, run.dataset, xtr, ytr, num_samples=num_samples, seed=int(run.metrics["seed"])
    )
    run.train_predictions = pred
    out = {f"train_{k}": v for k, v in scores.items() if k not in ("density", "nll_mixture")}
    out["nll_gap"] = run.metrics["nll"] - out["train_nll"]
    return out
