"""``zoo fit MODEL --inference nuts`` and the ``nuts`` protocol rows: a registry model sampled with NUTS
(:func:`zoo.infer.mcmc.fit_nuts`) on a named dataset, scored like a variational run.

A run selects NUTS through its :class:`~zoo.experiments.config.RunConfig` ``fit_options``:
``{"inference": "nuts", "chains": 4, "warmup": 500, "samples": 500, ...}`` (every other key a
:class:`~zoo.infer.mcmc.NUTSConfig` field); :func:`zoo.experiments.runs.fit_on_dataset` hands such runs to
:func:`fit_nuts_on_dataset`.  Conventions are those of :mod:`zoo.experiments.runs` (inputs and regression
targets standardized on the training split, metrics on the original scale), except that the predictive
averages over *every* posterior draw (``num_samples`` is not used for the test metrics).  The row adds the
sampler's diagnostics: divergences, the largest weight-space R-hat and smallest bulk/tail ESS, and R-hat /
bulk ESS of the network output at the test inputs (``pred_*``, invariant to the hidden units' permutation
and sign symmetries).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pyro

from zoo.data import Dataset, load_dataset
from zoo.data.provenance import input_record, table_record
from zoo.experiments.config import RunConfig
from zoo.experiments.outputs import RunOutput, score_predictions, train_set_metrics
from zoo.experiments.registry import get_entry
from zoo.infer.mcmc import NUTSConfig, fit_nuts
from zoo.infer.mcmc_export import all_draws_predict, predictive_diagnostics

__all__ = [
    "INFERENCE_KEY",
    "PROTOCOL_NUTS",
    "NUTS_DATASETS",
    "nuts_config",
    "nuts_run_specs",
    "fit_nuts_on_dataset",
]

logger = logging.getLogger(__name__)

#: the ``fit_options`` key that selects the inference method
INFERENCE_KEY = "inference"

#: RunConfig settings of variational fits that a NUTS run does not use
_VI_ONLY = ("steps", "lr", "batch_size", "max_seconds", "posttrain_lr")


#: the NUTS settings of the protocols' ``nuts`` rows (a smaller budget: ``zoo reproduce ... --set
#: fit_options='{"inference": "nuts", ...}'``, which only reaches the rows that set ``fit_options``)
PROTOCOL_NUTS = {
    INFERENCE_KEY: "nuts",
    "chains": 4,
    "warmup": 500,
    "samples": 500,
    "max_tree_depth": 8,
    "jit_compile": True,
}
#: the UCI datasets of the ``nuts`` rows (the two of Sheinkman & Wade's (2025) Table 4 that the zoo's
# standard splits hold)
NUTS_DATASETS = ("uci:yacht", "uci:bostonHousing")


def nuts_run_specs(model: str, splits: Sequence[int] | None, kwargs: Mapping[str, Any] | None = None) -> list:
    """The ``nuts`` rows of a UCI protocol: ``model`` on :data:`NUTS_DATASETS`, splits ``splits`` (default
    0-4), one hidden layer of 50 units, :data:`PROTOCOL_NUTS`; ``kwargs`` adds run settings (e.g. builder
    ``options``)."""
    from zoo.experiments.protocol import RunSpec

    splits = list(range(5)) if splits is None else list(splits)
    run = {"hidden": [50], **dict(kwargs or {}), "fit_options": dict(PROTOCOL_NUTS)}
    return [RunSpec("nuts", model, d, k, dict(run)) for d in NUTS_DATASETS for k in splits]


def nuts_config(cfg: RunConfig) -> NUTSConfig:
    """The :class:`NUTSConfig` of a run: ``fit_options`` (less ``inference``) over the run's seed and
    progress setting; a bad key or value is a ``ValueError``/``TypeError`` naming it."""
    options = {k: v for k, v in cfg.fit_options.items() if k != INFERENCE_KEY}
    return NUTSConfig.from_dict(
        {"seed": cfg.seed, "progress": cfg.progress, **options}, what="fit_options of a NUTS run"
    )


def _check(cfg: RunConfig) -> NUTSConfig:
    if cfg.posttrain_steps:
        raise ValueError("posttrain_steps: a NUTS run has no variational structure to post-train")
    ignored = [k for k in _VI_ONLY if getattr(cfg, k) is not None]
    if ignored:
        logger.info("NUTS run: the variational settings %s are not used", ignored)
    return nuts_config(cfg)


def _row(model: str, ds: Dataset, cfg: RunConfig, result: Any, scores: dict) -> dict:
    d, ncfg = result.diagnostics, result.config
    chains = result.chain_stats
    return {
        "model": model,
        "guide": "nuts",
        "inference": "nuts",
        "dataset": ds.name,
        "split": cfg.split,
        "n_train": ds.n_train,
        "n_test": ds.n_test,
        "fit_seconds": round(result.wall_time, 3),
        "elbo": math.nan,
        "steps": result.steps,
        "seed": cfg.seed,
        "chains": ncfg["chains"],
        "warmup": ncfg["warmup"],
        "samples": ncfg["samples"],
        "max_tree_depth": ncfg["max_tree_depth"],
        "divergences": d["divergences"],
        "rhat_max": d["rhat_max"],
        "ess_bulk_min": d["ess_bulk_min"],
        "ess_tail_min": d["ess_tail_min"],
        "accept_prob": [round(c["mean_accept_prob"], 4) for c in chains],
        "step_size": [c["step_size"] for c in chains],
        "chain_seconds": [round(c["seconds"], 2) for c in chains],
        "chain_cpu_seconds": [round(c["cpu_seconds"], 2) for c in chains],
        **scores,
    }


def fit_nuts_on_dataset(model: str, dataset: str | Dataset, cfg: RunConfig) -> RunOutput:
    """Load ``dataset``, build registry ``model`` (``cfg.hidden``, ``cfg.options``), sample it with NUTS
    (:func:`nuts_config`), score the all-draws predictive on the test split and add the diagnostics."""
    ncfg = _check(cfg)
    entry = get_entry(model)
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset, cfg.split, data_dir=cfg.data_dir)
    pyro.set_rng_seed(cfg.seed)
    m, _, spec = cfg.build(model, ds)
    # the data's record, as variational runs keep it: raw_inputs=True works on a loaded NUTS fit too
    record = {"split": cfg.split, **table_record(ds), **input_record(ds)}
    result = fit_nuts(m, ds, ncfg.replace(metadata={**ncfg.metadata, **record}), spec=spec)
    _, _, xte, yte = ds.tensors(device=result.device)
    pred = all_draws_predict(result, xte, seed=cfg.seed)
    scores = score_predictions(ds, pred, yte)
    if pred.loc is not None:
        scores.update(predictive_diagnostics(pred.loc, result.guide.num_chains))
    run = RunOutput(result, ds, _row(model, ds, cfg, result, scores), pred)
    if cfg.train_metrics:
        run.metrics.update(train_set_metrics(run, num_samples=cfg.num_samples))
    if entry.extra_metrics is not None:
        run.metrics.update(entry.extra_metrics(run))
    return run
