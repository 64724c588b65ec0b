"""Ensembles of K variational fits weighted by their ELBOs (Sheinkman & Wade (2025) §3.6).

Any registry model can be ensembled: :func:`fit_ensemble` fits K members that differ only in their seed
(member ``i`` uses ``seed + SEED_STRIDE * i``, so member 0 *is* the single fit with ``seed``), in-process
or through :func:`zoo.experiments.dispatch.dispatch` (``jobs`` loky worker processes, or a Dask/Ray
cluster; one torch thread each), and :func:`combine_predictions` mixes their
predictive distributions with weights ``w_k ∝ exp(zeta · ELBO_k)``:

* regression: ``E[y] = Σ w_k E_k[y]``, ``Var[y] = Σ w_k (Var_k + E_k²) − E[y]²`` (the mixture's moments);
  per-draw ``loc``/``scale`` are pooled with each member contributing draws in proportion to ``w_k``;
* classification: ``p(y) = Σ w_k p_k(y)``.

``zeta`` tempers the weights (paper: ``ζ ∈ (0, 0.1]``, value not reported; ``ζ = 0`` gives the uniform
mixture).  Members return only tensors (predictions, ELBO, metrics), so workers need no shared state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zoo.core.config import resolve
from zoo.data import Dataset, load_dataset
from zoo.data.provenance import input_record, table_record, task_record
from zoo.experiments.config import RunConfig
from zoo.experiments.dispatch import DispatchConfig, dispatch
from zoo.experiments.runs import dumps_json, fit_on_dataset, is_run_entry, score_predictions, write_run
from zoo.infer.predict import Predictions
from zoo.io import atomic_write_text, staged_folder

__all__ = ["SEED_STRIDE", "EnsembleOutput", "combine_predictions", "ensemble_weights", "fit_ensemble"]

SEED_STRIDE = 10_007
F64 = torch.float64


def ensemble_weights(elbos: Sequence[float], zeta: float = 0.1) -> torch.Tensor:
    """``w_k ∝ exp(zeta · ELBO_k)`` (Sheinkman & Wade (2025) §3.6), computed stably; ``zeta >= 0``."""
    if len(elbos) == 0:
        raise ValueError("elbos: need at least one member")
    if not (isinstance(zeta, (int, float)) and zeta >= 0 and zeta == zeta and zeta != float("inf")):
        raise ValueError(f"zeta: must be a finite number >= 0, got {zeta!r}")
    e = torch.tensor([float(v) for v in elbos], dtype=F64)
    if not torch.isfinite(e).all():
        raise ValueError(f"elbos: must be finite, got {list(elbos)}")
    return torch.softmax(zeta * e, 0)


def combine_predictions(
    members: Sequence[Predictions], elbos: Sequence[float], zeta: float = 0.1, seed: int | None = 0
) -> Predictions:
    """Mix the members' predictive distributions with ELBO weights (see module docstring).

    ``extras["weights"]`` holds ``w``; ``seed`` fixes which per-draw locations are kept from each member."""
    if len(members) == 0 or len(members) != len(elbos):
        raise ValueError("members/elbos: must be non-empty sequences of the same length")
    tasks = {p.task for p in members}
    if len(tasks) != 1:
        raise ValueError(f"members: mixed tasks {sorted(tasks)}")
    w = ensemble_weights(elbos, zeta)
    wt = [float(v) for v in w]
    task = members[0].task
    if task != "regression":
        if any(p.probs is None for p in members):
            raise ValueError("members: classification predictions need probs")
        probs = sum(wk * p.probs.double() for wk, p in zip(wt, members))
        return Predictions(task, probs=probs.to(members[0].probs.dtype), extras={"weights": wt})
    if any(p.mean is None or p.var is None for p in members):
        raise ValueError("members: regression predictions need mean and var")
    dfs = {p.df for p in members}
    if len(dfs) != 1:
        raise ValueError(f"members: mixed per-draw predictives (Student-t df {sorted(map(str, dfs))})")
    mean = sum(wk * p.mean.double() for wk, p in zip(wt, members))
    second = sum(wk * (p.var.double() + p.mean.double() ** 2) for wk, p in zip(wt, members))
    var = (second - mean**2).clamp_min(0)
    dt = members[0].mean.dtype
    locs = scales = None
    if all(p.loc is not None and p.scale is not None for p in members):
        s_total = min(p.loc.shape[0] for p in members)
        gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
        picks = torch.multinomial(w, s_total, replacement=True, generator=gen)
        counts = torch.bincount(picks, minlength=len(members)).tolist()
        chosen = [(p.loc[:c], p.scale[:c]) for p, c in zip(members, counts) if c > 0]
        locs = torch.cat([a for a, _ in chosen], 0)
        scales = torch.cat([b for _, b in chosen], 0)
    return Predictions(
        task, mean=mean.to(dt), var=var.to(dt), loc=locs, scale=scales, extras={"weights": wt}, df=dfs.pop()
    )


@dataclass
class EnsembleOutput:
    """A finished ensemble: combined metrics and predictions, and each member's metrics/ELBO."""

    metrics: dict
    predictions: Predictions
    members: list[dict] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)


def _member(args: tuple) -> dict:
    """Fit one member (in a worker or in-process); return tensors and metrics only."""
    model, ds, cfg, out_dir = args
    run = fit_on_dataset(model, ds, cfg)
    if out_dir is not None:
        write_run(run, out_dir)
    return {"metrics": run.metrics, "test": run.predictions, "train": run.train_predictions}


def _check_sizes(k: object, jobs: object, zeta: float) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k: the ensemble size must be an int >= 1, got {k!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs: must be an int >= 1, got {jobs!r}")
    ensemble_weights([0.0], zeta)  # validates zeta before anything is fitted


def _fit_members(
    model: str, ds: Dataset, cfg: RunConfig, k: int, dcfg: DispatchConfig, out_dir: Path | None
) -> list[dict]:
    tasks = [
        (
            model,
            ds,
            cfg.replace(seed=cfg.seed + SEED_STRIDE * i, progress=False),
            None if out_dir is None else os.fspath(out_dir / f"member_{i}"),
        )
        for i in range(k)
    ]
    results: list[dict] = [{}] * k
    for i, r in dispatch(_member, tasks, dcfg):
        results[i] = r
    return results


def _scores(ds: Dataset, results: list[dict], elbos: list[float], zeta: float, seed: int):
    """The ensemble's test metrics (and the uniform-weight columns) and its combined predictions."""
    pred = combine_predictions([r["test"] for r in results], elbos, zeta, seed=seed)
    _, _, _, yte = ds.tensors()
    scores = score_predictions(ds, pred, yte)
    if zeta > 0 and len(results) > 1:
        # the same members under uniform weights (zeta -> 0): with ELBOs hundreds of nats apart, zeta = 0.1
        # puts all the weight on the best-ELBO member, and these columns show what averaging alone gives
        upred = combine_predictions([r["test"] for r in results], elbos, 0.0, seed=seed)
        scores.update({f"uniform_{m}": v for m, v in score_predictions(ds, upred, yte).items()})
    densities = [r["metrics"]["density"] for r in results if r["metrics"].get("density") is not None]
    if densities:
        scores["density"] = sum(densities) / len(densities)
    return scores, pred


def _train_columns(ds: Dataset, results: list[dict], elbos: list[float], zeta: float, seed: int) -> dict:
    tpred = combine_predictions([r["train"] for r in results], elbos, zeta, seed=seed)
    _, ytr, _, _ = ds.tensors()
    return {f"train_{m}": v for m, v in score_predictions(ds, tpred, ytr).items() if m != "nll_mixture"}


def fit_ensemble(
    model: str,
    dataset: str | Dataset,
    config: RunConfig | Mapping[str, Any] | None = None,
    *,
    k: int = 4,
    jobs: int = 1,
    zeta: float = 0.1,
    out_dir: str | os.PathLike | None = None,
    dispatch: DispatchConfig | None = None,
    **kwargs: Any,
) -> EnsembleOutput:
    """Fit ``k`` members of registry ``model`` on ``dataset`` (seeds ``seed + SEED_STRIDE * i``) in ``jobs``
    processes (or on ``dispatch``'s backend, :mod:`zoo.experiments.dispatch`), combine them
    (:func:`combine_predictions`) and score the ensemble on the test set (and the training set with
    ``train_metrics=True``).  ``config`` and the remaining keywords are the members'
    :class:`~zoo.experiments.config.RunConfig` (``seed``, ``split``, ``hidden``, ``guide``, ``steps``,
    ``options``, ...), as for :func:`zoo.experiments.runs.fit_on_dataset`.

    ``out_dir``: a run folder holding each member's run (``member_i``,
    :func:`zoo.experiments.runs.write_run`) and the ensemble's ``metrics.json``, written atomically
    (:func:`zoo.io.staged_folder`): it replaces an earlier run there only once every member is written, and
    a failure (a full disk included, :class:`zoo.io.RunFolderError`) leaves the earlier run untouched.  On a
    remote Dask/Ray cluster ``out_dir`` must be on a filesystem the workers share."""
    cfg = resolve(RunConfig, config, kwargs)
    _check_sizes(k, jobs, zeta)
    if cfg.conformal is not None or cfg.conformal_folds is not None:  # members' seeds: other rows
        raise ValueError("conformal: split-conformal intervals calibrate one fit; not an ensemble's members")
    dcfg = dispatch or DispatchConfig(jobs=min(jobs, k))
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset, cfg.split, data_dir=cfg.data_dir)
    if out_dir is None:
        return _ensemble(ds, cfg, zeta, _fit_members(model, ds, cfg, k, dcfg, None))
    with staged_folder(out_dir, is_run_entry) as stage:
        out = _ensemble(ds, cfg, zeta, _fit_members(model, ds, cfg, k, dcfg, stage))
        record = {**task_record(ds), **table_record(ds), **input_record(ds)}  # as each member's
        atomic_write_text(stage / "metrics.json", dumps_json({**out.metrics, **record}))
    return out


def _ensemble(ds: Dataset, cfg: RunConfig, zeta: float, results: list[dict]) -> EnsembleOutput:
    """The combined output of the fitted members ``results``."""
    k = len(results)
    elbos = [r["metrics"]["elbo"] for r in results]
    scores, pred = _scores(ds, results, elbos, zeta, cfg.seed)
    first = results[0]["metrics"]
    info = {
        **{key: first[key] for key in ("model", "guide", "dataset")},
        "split": cfg.split,
        "n_train": first["n_train"],
        "n_test": first["n_test"],
        "ensemble_size": k,
        "zeta": zeta,
        "weights": [float(v) for v in pred.extras["weights"]],
        "member_elbos": elbos,
        "fit_seconds": sum(r["metrics"]["fit_seconds"] for r in results),
        "elbo": max(elbos),
        "seed": cfg.seed,
        **scores,
    }
    if all(r["train"] is not None for r in results):
        info.update(_train_columns(ds, results, elbos, zeta, cfg.seed))
        info["nll_gap"] = info["nll"] - info["train_nll"]
    return EnsembleOutput(info, pred, [r["metrics"] for r in results], info["weights"])
