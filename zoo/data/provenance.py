"""What a fit records about its data, so that a run folder can be reproduced and reused on new rows.

* :func:`input_record`: how the inputs were prepared: the training ``x_mean`` / ``x_std`` the zoo
  standardized them with (``standardize_x: False`` when it did not) and the ``feature_names`` (a table's
  header; ``x0, x1, ...`` otherwise).  :func:`zoo.experiments.runs.fit_on_dataset` puts it in the fit's
  config, so a checkpoint maps new raw rows itself (:meth:`zoo.infer.result.FitResult.standardize_inputs`);
* :func:`table_record`: for an own table file (``csv:PATH`` / ``npz:PATH``) the file read, the
  :class:`~zoo.data.tables.TableOptions` as given (``target``, ``task``, ``test_frac``, ``split_seed``,
  ``standardize``, ``true_support``) and the effective ``split_seed`` (``table.split_seed + split``: ``zoo fit
  --split-seed 3`` and ``--split 3`` read the same split and both record ``split_seed: 3``); ``{}`` for a
  registered dataset, whose name and split say it all;
* :func:`task_record`: the task and the number of classes (``None`` for regression).

Everything is plain data (lists of floats, strings), as checkpoints (``torch.load(weights_only=True)``) and
``metrics.json`` need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.data.core import Dataset

__all__ = ["input_record", "table_record", "task_record"]


def _floats(a: Any) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def input_record(ds: Dataset) -> dict[str, Any]:
    """``{"feature_names", "x_mean", "x_std"}`` of a dataset standardized by the zoo, else
    ``{"feature_names", "standardize_x": False}``."""
    names = ds.meta.get("feature_names")
    names = [str(n) for n in names] if names is not None else [f"x{j}" for j in range(ds.in_features)]
    if ds.x_mean is None or ds.x_std is None:
        return {"feature_names": names, "standardize_x": False}
    return {"feature_names": names, "x_mean": _floats(ds.x_mean), "x_std": _floats(ds.x_std)}


def table_record(ds: Dataset) -> dict[str, Any]:
    """``{"data_source", "target", "table", "split_seed"}`` of a dataset read from a table file (see the
    module docstring), ``{}`` for any other."""
    options = ds.meta.get("table_options")
    if options is None:
        return {}
    table = {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()}
    out: dict[str, Any] = {
        "data_source": str(ds.meta.get("source")),
        "target": ds.meta.get("target"),
        "table": table,
        "split_seed": int(ds.meta.get("split_seed", table.get("split_seed", 0))),
    }
    if ds.meta.get("true_support_names") is not None:
        out["true_support_names"] = list(ds.meta["true_support_names"])
    return out


def task_record(ds: Dataset) -> dict[str, Any]:
    """``{"task", "n_classes"}``."""
    return {"task": ds.task, "n_classes": None if ds.n_classes is None else int(ds.n_classes)}
