"""The main job: fit a registry model on a named dataset, evaluate it, and write the run folder.

Used by ``zoo fit`` and ``zoo reproduce``.  Protocol conventions:

* inputs standardized with training statistics (the dataset loader does it); the fit's config records
  them with the feature names and, for an own table file, how it was read (:mod:`zoo.data.provenance`),
  so the checkpoint predicts on new raw rows (``FitResult.predict(x_raw, raw_inputs=True)``);
* regression targets standardized with training statistics *for fitting*; predictions are mapped back
  and every metric is reported on the original target scale (the UCI protocol of Hernández-Lobato &
  Adams 2015; Sheinkman & Wade (2025) reports raw-scale RMSE too);
* regression metrics from the predictive mean/variance: RMSE, Gaussian NLL (``nll``), 95 % coverage,
  plus the mixture NLL over draws (``nll_mixture``); classification: accuracy, NLL, ECE (10 bins).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyro
import torch

from zoo.core.config import resolve
from zoo.core.validation import check_bool, resolve_device
from zoo.data import Dataset, load_dataset
from zoo.data.provenance import input_record, table_record, task_record
from zoo.data.tensors import fit_tensors as _prepare
from zoo.eval import metrics
from zoo.experiments.config import RunConfig
from zoo.experiments.outputs import RunOutput, evaluate, score_predictions, train_set_metrics
from zoo.experiments.registry import get_entry
from zoo.experiments.starts import choose, fit_elbo, likelihood_name, resolve_likelihoods, resolve_starts
from zoo.infer.checkpoint import save
from zoo.infer.loop import fit, resume
from zoo.infer.optim import make_optimizer
from zoo.infer.predict import predict
from zoo.infer.result import FitResult
from zoo.io import atomic_write_text, check_free_space, staged_folder

__all__ = [
    "RunConfig",
    "RunOutput",
    "RUN_FILES",
    "fit_on_dataset",
    "evaluate",
    "is_run_entry",
    "ood_metrics",
    "score_predictions",
    "train_set_metrics",
    "write_run",
]


def _loss(fit_defaults: Mapping, model, guide):
    """The training objective: ``fit_defaults["loss"]`` (a factory ``(model, guide) -> ELBO or None``), else
    the guide's own ``default_loss()`` (e.g. LCRT), else ``None`` (``Trace_ELBO``)."""
    factory = fit_defaults.get("loss")
    loss = factory(model, guide) if callable(factory) else None
    if loss is None and callable(getattr(guide, "default_loss", None)):
        loss = guide.default_loss()
    return loss


def default_steps(defaults: Mapping, n_train: int, batch_size: int | None) -> int:
    """An entry's default number of steps: ``defaults["steps"]``, raised where ``defaults["min_epochs"]`` asks
    for more passes over ``n_train`` rows at ``batch_size`` (a fixed step count is few epochs on the large
    data sets: 5000 steps of 128 rows are 87 epochs of kin8nm and 60 of naval)."""
    steps = int(defaults.get("steps", 1000))
    min_epochs = defaults.get("min_epochs")
    if min_epochs is not None and batch_size is not None:
        steps = max(steps, math.ceil(float(min_epochs) * n_train / batch_size))
    return steps


def _fit_kwargs(cfg: RunConfig, d: Mapping, ds: Dataset, dev: torch.device) -> dict[str, Any]:
    """The settings passed to the fit function (``zoo.infer.loop.fit`` or an entry's ``fit_fn``)."""
    bs = cfg.batch_size if cfg.batch_size is not None else d.get("batch_size")
    if bs is not None and bs >= ds.n_train:
        bs = None
    out: dict[str, Any] = {
        "steps": cfg.steps if cfg.steps is not None else default_steps(d, ds.n_train, bs),
        "lr": cfg.lr if cfg.lr is not None else float(d.get("lr", 1e-2)),
        "optimizer": str(d.get("optimizer", "adam")),
        "batch_size": bs,
        "tol": d.get("tol"),
        "seed": cfg.seed,
        "device": dev,
        "progress": cfg.progress,
    }
    if cfg.max_seconds is not None:
        out["callbacks"] = (_time_budget(float(cfg.max_seconds)),)
    return out


def _gradient_free(result: FitResult) -> bool:
    return "sweeps" in result.loop_state and not getattr(result.guide, "uses_gradients", True)


def _row(model: str, spec: dict, ds: Dataset, cfg: RunConfig, result: FitResult, bs, scores: dict) -> dict:
    return {
        "model": model,
        "guide": spec["guide"],
        "dataset": ds.name,
        "split": cfg.split,
        "n_train": ds.n_train,
        "n_test": ds.n_test,
        "fit_seconds": round(result.wall_time, 3),
        "elbo": result.final_elbo,
        "steps": result.steps,
        # the loop's stopping rule fired (``tol``); closed-form (CAVI) fits also count their sweeps (a SQUAREM
        # step is one cycle of several)
        "converged": bool(result.converged),
        **({"sweeps": int(result.loop_state["sweeps"])} if _gradient_free(result) else {}),
        "epochs": round(result.steps * (bs or ds.n_train) / ds.n_train, 2),
        "seed": cfg.seed,
        **scores,
    }


def _posttrain(run: RunOutput, cfg: RunConfig, d: Mapping, data: tuple, extra_metrics) -> None:
    """Freeze the guide's structure, train ``posttrain_steps`` more and add ``post_<metric>`` columns."""
    result, info = run.result, run.metrics
    if not callable(getattr(result.guide, "freeze_structure", None)):
        raise ValueError(f"posttrain_steps: guide {info['guide']!r} has no structure to freeze")
    result.guide.freeze_structure()
    lr = cfg.posttrain_lr if cfg.posttrain_lr is not None else cfg.lr
    lr = lr if lr is not None else float(d.get("lr", 1e-2))
    result.optim = make_optimizer(str(d.get("optimizer", "adam")), lr)
    xtr, ytr, xte, yte = data
    resume(result, xtr, ytr, cfg.posttrain_steps, progress=cfg.progress)
    post, run.predictions = evaluate(
        result, run.dataset, xte, yte, num_samples=cfg.num_samples, seed=cfg.seed
    )
    if extra_metrics is not None:
        post.update(extra_metrics(run))
    info.update({f"post_{k}": v for k, v in post.items()})
    info["posttrain_steps"] = cfg.posttrain_steps


def fit_on_dataset(
    model: str, dataset: str | Dataset, config: RunConfig | Mapping[str, Any] | None = None, **kwargs: Any
) -> RunOutput:
    """Load ``dataset``, build registry ``model``, fit with the entry's defaults (overridable), evaluate.

    Settings come from ``config`` (a :class:`~zoo.experiments.config.RunConfig` or a mapping) updated by
    keywords (``split``, ``hidden``, ``guide``, ``steps``, ``lr``, ``batch_size``, ``seed``, ``device``,
    ``progress``, ``num_samples``, ``data_dir``, ``options`` (model builder), ``guide_options``, ...).

    ``max_seconds``: a wall-clock training budget; the fit stops after the first step that ends past it
    (``steps`` stays the cap) and the row records the steps done (``steps``) and ``epochs``; with several
    ``starts`` each start has the whole budget.

    ``posttrain_steps``: after scoring, freeze the guide's structure (``guide.freeze_structure()``: the
    LBBNN inclusion probabilities, Hubin & Storvik (2019) Algorithm 1 stage 3), train ``posttrain_steps``
    more steps with
    a fresh optimizer at ``posttrain_lr`` (default: the main learning rate), and add every test and extra
    metric again as ``post_<metric>`` (the un-post-trained values stay in the row; ``run`` holds the
    post-trained fit).

    ``fit_options``: extra keyword arguments of the registry entry's ``fit_fn`` (e.g. the LBBNN's
    ``{"stage_lrs": "short"}``); for entries fitted by :func:`zoo.infer.loop.fit` only ``accelerate``
    (``{"accelerate": "squarem"}``: SQUAREM on closed-form sweeps, :mod:`zoo.infer.accelerate`); for every
    entry ``standardize_y`` (a bool) overrides the entry's default of fitting standardized regression
    targets (Sheinkman & Wade's (2025) bow-tie fits raw ones), ``starts`` (a list of guide-option mappings;
    ``[{}]``:
    one fit) fits once per start and keeps the fit with the highest ELBO (:mod:`zoo.experiments.starts`;
    default: the entry's ``fit_defaults["starts"]`` for the run's guide), and ``likelihoods`` (e.g.
    ``["gaussian", "t4"]``) fits every start under each likelihood and keeps the highest ELBO of all (the
    row records ``likelihood``, the kept index, and each ``likelihood_elbo_<i>``).

    ``conformal`` (a share in (0, 1), regression): hold that share of the training rows out, fit on the
    rest, and add split-conformal intervals at ``conformal_level`` (default 0.95) to the row
    (:mod:`zoo.experiments.conformal`: ``conformal_quantile``, ``coverage_conformal``, ...)."""
    cfg = resolve(RunConfig, config, kwargs)
    if cfg.conformal is not None or cfg.conformal_folds is not None:
        return _fit_conformal(model, dataset, cfg)
    if cfg.fit_options.get("inference") == "nuts":  # NUTS instead of VI: zoo.experiments.nuts_runs
        from zoo.experiments.nuts_runs import fit_nuts_on_dataset

        return fit_nuts_on_dataset(model, dataset, cfg)
    entry = get_entry(model)
    d = dict(entry.fit_defaults)
    fit_options = dict(cfg.fit_options)
    # Protocols differ: most standardize targets; Sheinkman & Wade (2025) fits raw targets
    # (standardize_y=False).
    standardize = check_bool("standardize_y", fit_options.pop("standardize_y", d.get("standardize_y", True)))
    loop_keys = {"accelerate", "noise_refit"}  # FitConfig settings a run may pass to zoo.infer.loop.fit
    choices = {"starts", "likelihoods"}
    if entry.fit_fn is None and set(fit_options) - loop_keys - choices:
        raise ValueError(
            f"fit_options: model {model!r} is fitted by zoo.infer.loop.fit, which takes only "
            f"{sorted(loop_keys | choices | {'standardize_y'})} here; got {sorted(cfg.fit_options)}"
        )
    likelihoods = resolve_likelihoods(fit_options, cfg.options)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset, cfg.split, data_dir=cfg.data_dir)
    dev = resolve_device(cfg.device)
    xtr, ytr, xte, yte, extra = _prepare(ds, dev, standardize_y=standardize)
    starts = resolve_starts(fit_options, d, cfg.guide or entry.default_guide, cfg.guide_options)
    for key in choices:
        fit_options.pop(key, None)
    # the guide's random initialization happens at build time: seed it, so a fit does not depend on what
    # ran before it in the same process (protocol workers run many fits each); every start under every
    # likelihood is built (its options checked) before any is fitted
    builds = []
    for lik in likelihoods:
        for start in starts:
            pyro.set_rng_seed(cfg.seed)
            builds.append(_start_config(cfg, start, lik).build(model, ds))
    fitter = entry.fit_fn or fit
    fits = []
    for m, g, spec in builds:
        fit_kwargs = _fit_kwargs(cfg, d, ds, dev)
        config = {**extra, "dataset": ds.name, "split": cfg.split, **table_record(ds), **input_record(ds)}
        result = fitter(
            m, g, xtr, ytr, loss=_loss(d, m, g), config=config, spec=spec, **fit_kwargs, **fit_options
        )
        fits.append((result, spec))
    (result, spec), start_info = _choose_fit(fits, len(starts), likelihoods, xtr, ytr, cfg.seed)
    scores, pred = evaluate(result, ds, xte, yte, num_samples=cfg.num_samples, seed=cfg.seed)
    run = RunOutput(result, ds, _row(model, spec, ds, cfg, result, fit_kwargs["batch_size"], scores), pred)
    run.metrics.update(start_info)
    if cfg.train_metrics:
        run.metrics.update(train_set_metrics(run, num_samples=cfg.num_samples))
    if entry.extra_metrics is not None:
        run.metrics.update(entry.extra_metrics(run))
    if cfg.posttrain_steps:
        _posttrain(run, cfg, d, (xtr, ytr, xte, yte), entry.extra_metrics)
    return run


def _fit_conformal(model: str, dataset: str | Dataset, cfg: RunConfig) -> RunOutput:
    """Split conformal: hold ``cfg.conformal`` of the training rows out
    (:func:`zoo.experiments.conformal.calibration_split`, checked before any fit), fit on the rest, and add
    the split-conformal fields to the row.  CV+: fit on all rows, once more per fold of
    ``cfg.conformal_folds`` (:func:`zoo.experiments.cv_plus.cv_plus_fields`), and add the CV+ fields."""
    from zoo.experiments import conformal, cv_plus

    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset, cfg.split, data_dir=cfg.data_dir)
    plain = dataclasses.replace(cfg, conformal=None, conformal_folds=None)
    if cfg.conformal_folds is not None:
        fields = cv_plus.cv_plus_fields(  # checks the folds and rows before its first fit
            ds, cfg.conformal_folds, cfg.conformal_level, cfg, lambda d: fit_on_dataset(model, d, plain)
        )
        run = fit_on_dataset(model, ds, plain)
        run.metrics.update(fields)
        run.metrics["width_gaussian"] = cv_plus.gaussian_width(run.predictions, cfg.conformal_level)
        return run
    fit_rows, calibration = conformal.calibration_split(ds, cfg.conformal, cfg.seed, cfg.conformal_level)
    run = fit_on_dataset(model, fit_rows, plain)
    conformal.add_conformal_fields(run, calibration, cfg)
    return run


def _start_config(cfg: RunConfig, start: Mapping[str, Any], likelihood: Mapping[str, Any]) -> RunConfig:
    """``cfg`` with the start's guide options and the likelihood's builder options laid over its own."""
    return dataclasses.replace(
        cfg, options={**cfg.options, **likelihood}, guide_options={**cfg.guide_options, **start}
    )


def _choose_fit(
    fits: list[tuple[FitResult, dict]], n_starts: int, likelihoods: list[dict], x, y, seed: int
) -> tuple[tuple[FitResult, dict], dict]:
    """The fit with the highest ELBO estimate (``fits`` likelihood-major, ``n_starts`` per likelihood;
    :func:`zoo.experiments.starts.choose`) and the row's record of the choice (with the kept
    ``likelihood_name`` and the total ``fit_seconds``); one fit is returned as it is."""
    if len(fits) == 1:
        return fits[0], {}
    est = [fit_elbo(r, x, y, seed=seed) for r, _ in fits]
    i, j, info = choose([est[k : k + n_starts] for k in range(0, len(est), n_starts)])
    if len(likelihoods) > 1:
        info["likelihood_name"] = likelihood_name(likelihoods[i])
    info["fit_seconds"] = round(sum(r.wall_time for r, _ in fits), 3)
    return fits[i * n_starts + j], info


def _time_budget(seconds: float):
    """A :func:`zoo.infer.loop.fit` callback that stops the fit once ``seconds`` of wall time have passed."""
    start = time.perf_counter()

    def callback(step: int, elbo: float, result: FitResult) -> None:
        if time.perf_counter() - start > seconds:
            raise StopIteration

    return callback


OOD_PARTNER = {"mnist10k": "kmnist10k", "kmnist10k": "mnist10k"}


def ood_metrics(run: RunOutput, ood: str | Dataset | None = None, num_samples: int = 100) -> dict:
    """Out-of-domain predictive entropy (Hubin & Storvik (2019) §4.2: an MNIST model on KMNIST should be
    uncertain):
    mean per-point entropy of the model-averaged probabilities on the in-domain test set (``entropy_in``)
    and on the test inputs of ``ood`` (``entropy_ood``; default: :data:`OOD_PARTNER` of the run's
    dataset), plus the mean mutual information (epistemic part) on both when per-draw probabilities are
    available."""
    if run.dataset.task == "regression":
        raise ValueError("run: out-of-domain entropy needs a classification run")
    if ood is None:
        if run.dataset.name not in OOD_PARTNER:
            raise ValueError(f"ood: no default out-of-domain set for {run.dataset.name!r}; pass one")
        ood = OOD_PARTNER[run.dataset.name]
    ds_ood = ood if isinstance(ood, Dataset) else load_dataset(ood, int(run.metrics.get("split", 0)))
    if ds_ood.in_features != run.dataset.in_features:
        raise ValueError(
            f"ood: {ds_ood.name} has {ds_ood.in_features} inputs, the model {run.dataset.in_features}"
        )
    _, _, xo, _ = ds_ood.tensors(device=run.result.device)
    pred_o = predict(run.result, xo, num_samples=num_samples, seed=int(run.metrics.get("seed", 0)))
    out = {
        "entropy_in": float(metrics.predictive_entropy(run.predictions.probs).mean()),
        "entropy_ood": float(metrics.predictive_entropy(pred_o.probs).mean()),
    }
    if run.predictions.draw_probs is not None and pred_o.draw_probs is not None:
        out["mi_in"] = float(metrics.mutual_information(run.predictions.draw_probs).mean())
        out["mi_ood"] = float(metrics.mutual_information(pred_o.draw_probs).mean())
    return out


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def dumps_json(obj: Any) -> str:
    """Indented JSON of plain data; non-finite floats become ``null``, numpy scalars numbers."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(w) for k, w in v.items()}
        if isinstance(v, list):
            return [clean(w) for w in v]
        return v

    return json.dumps(clean(obj), indent=2, default=_json_default) + "\n"


#: the files of a run folder (``zoo fit --out DIR``); an ensemble's folder adds ``member_<i>`` folders
RUN_FILES = ("metrics.json", "checkpoint.pt", "posterior.nc")
_MEMBER = re.compile(r"member_\d+")


def is_run_entry(name: str) -> bool:
    """Whether ``name`` in a run folder belongs to the run (replaced as a whole by the next run there)."""
    return name in RUN_FILES or _MEMBER.fullmatch(name) is not None


def _netcdf_bytes(idata) -> int:
    """About what ``posterior.nc`` takes on disk: the arrays' bytes plus 10 % and 1 MiB of HDF5 overhead."""
    return int(1.1 * sum(idata[g].nbytes for g in idata.groups())) + 2**20


def write_run(run: RunOutput, out_dir: str | os.PathLike, num_samples: int = 200) -> dict[str, Path]:
    """Write the run folder ``out_dir``: ``metrics.json``, ``posterior.nc`` (ArviZ) and ``checkpoint.pt``.

    The folder is written atomically (:func:`zoo.io.staged_folder`): the files go to a temporary sibling
    folder that replaces an earlier run at ``out_dir`` only once all three are complete.  A failure, a full
    disk included (the free space is checked before the netCDF writer, which crashes instead of raising
    when the disk fills), raises :class:`zoo.io.RunFolderError` and leaves the earlier run untouched.
    Files in ``out_dir`` that are not a run's (:func:`is_run_entry`) are kept.

    ``posterior.nc`` follows ArviZ's schema (:func:`zoo.eval.diagnostics.to_inference_data`): the training
    set as ``observed_data`` / ``posterior_predictive`` / ``log_likelihood`` (``az.loo``, ``az.plot_ppc``),
    the test set as ``predictions`` / ``predictions_constant_data``, all on the original target scale.

    ``metrics.json`` is the run's row plus the data's record (:mod:`zoo.data.provenance`): ``task`` and
    ``n_classes``, for an own table the file, its table options and the effective ``split_seed``, and the
    ``feature_names`` with the training ``x_mean`` / ``x_std`` of standardized inputs."""
    from zoo.eval.diagnostics import save_netcdf, to_inference_data  # arviz: imported when needed

    xtr, ytr, xte, yte = run.dataset.tensors(device=run.result.device)
    export = getattr(run.result, "to_inference_data", None)  # a NUTS fit exports its chains itself
    if callable(export):
        idata = export(xte, yte, train=(xtr, ytr))
    else:
        idata = to_inference_data(run.result, xte, yte, num_samples=num_samples, train=(xtr, ytr))
    names = {"metrics": "metrics.json", "posterior": "posterior.nc", "checkpoint": "checkpoint.pt"}
    with staged_folder(out_dir, is_run_entry) as stage:
        save(run.result, stage / names["checkpoint"])
        check_free_space(stage, _netcdf_bytes(idata), "posterior.nc")
        save_netcdf(idata, stage / names["posterior"])
        record = {**task_record(run.dataset), **table_record(run.dataset), **input_record(run.dataset)}
        atomic_write_text(stage / names["metrics"], dumps_json({**run.metrics, **record}))
    out = Path(out_dir)
    return {k: out / v for k, v in names.items()}
