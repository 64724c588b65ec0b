"""One fit of ``zoo bench``: the :class:`FitTask` a worker process receives and :func:`fit_task`, which
runs it.

:func:`fit_task` loads the task's dataset (:func:`load_bench_dataset`: a registry name, an own table or a
stored reference instance), fits it with ``zoo reproduce``'s :func:`zoo.experiments.runs.fit_on_dataset` on
one torch thread, and returns the leaderboard row: the run's scalar metrics, the input-selection rates of a
suite with a true support (:func:`input_selection`) and the suite's own scores, keyed by label, dataset,
split and seed.  Plans, journals and the bench record are :mod:`zoo.experiments.bench`'s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.data import load_dataset
from zoo.experiments.config import RunConfig

if TYPE_CHECKING:
    from zoo.data import Dataset, TableOptions
    from zoo.experiments.outputs import RunOutput

__all__ = ["FitTask", "fit_task", "load_bench_dataset", "input_selection"]


@dataclasses.dataclass(frozen=True)
class FitTask:
    """One fit of a plan (picklable: what a worker process receives)."""

    label: str
    model: str
    dataset: str
    split: int
    seed: int
    config: dict
    table: dict | None = None
    selection: bool = False
    plugins: tuple[str, ...] = ()
    scorer: Callable | None = None

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.label, self.dataset, self.split, self.seed)


def input_selection(run: RunOutput) -> dict:
    """TPR/FPR of the inputs a fit keeps (Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §4.1): input
    ``j`` is selected when the guide's sparsity report keeps any first-layer weight reading it.  ``{}`` when
    the data have no true support or the guide reports no sparsity."""
    from zoo.eval.selection import selection_rates

    truth = run.dataset.true_support
    report = getattr(run.result.guide, "sparsity_report", None)
    if truth is None or not callable(report):
        return {}
    with run.result.activate():
        masks = report(run.result.model).masks
    first = [
        m for k, m in masks.items() if k.endswith("weight") and m.dim() == 2 and m.shape[-1] == truth.size
    ]
    if not first:
        return {}
    tpr, fpr = selection_rates(first[0].any(dim=0).cpu().numpy(), truth)
    return {"tpr": tpr, "fpr": fpr}


def _scalars(metrics: Mapping) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) or v is None}


def load_bench_dataset(
    dataset: str, split: int, data_dir: str | Path | None, table: TableOptions | Mapping[str, Any] | None
) -> Dataset:
    """A suite's dataset: a registry name, an own table (``table``) or a stored reference instance
    (``reference:NAME``, :mod:`zoo.experiments.reference_suite`)."""
    from zoo.experiments.reference_suite import is_reference_name, load_reference_dataset

    if is_reference_name(dataset):
        return load_reference_dataset(dataset, split, data_dir)
    return load_dataset(dataset, split, data_dir=data_dir, table=table)


def fit_task(task: FitTask) -> dict:
    """Run one fit (in this process, one torch thread) and return its row."""
    import pyro
    import torch

    from zoo.experiments.registry import available
    from zoo.experiments.runs import fit_on_dataset

    torch.set_num_threads(1)
    pyro.enable_validation(False)
    if task.model not in available():  # a worker that did not inherit the plugin (spawned process)
        from zoo.experiments.plugins import load_plugin

        for p in task.plugins:
            load_plugin(p)
    t0 = time.perf_counter()
    cfg = RunConfig.from_dict(task.config)
    ds = load_bench_dataset(task.dataset, task.split, cfg.data_dir, task.table)
    run = fit_on_dataset(task.model, ds, cfg)
    metrics = dict(run.metrics)
    if task.selection and "tpr" not in metrics:
        metrics.update(input_selection(run))
    if task.scorer is not None:
        metrics.update(task.scorer(run))
    row = {
        **_scalars(metrics),
        "label": task.label,
        "dataset": task.dataset,
        "dataset_name": ds.name,
        "task": ds.task,
        "split": task.split,
        "seed": task.seed,
        "total_seconds": round(time.perf_counter() - t0, 3),
    }
    return row
