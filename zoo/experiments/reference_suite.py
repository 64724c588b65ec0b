"""The ``reference`` suite of ``zoo bench``: every guide scored against the stored gold-standard posteriors.

Each stored reference instance (:mod:`zoo.reference`: exact spike-and-slab enumeration or NUTS with >= 4
chains that passed the posteriordb-style gate) becomes a bench dataset ``reference:NAME``: the instance's
pinned data (its subsample of rows), its hidden widths and — for the instance's own model — its builder
options, so a guide of that model is fitted to exactly the posterior the reference holds.  Models other than
the instance's (e.g. the bow-tie guides on the N-GIG instance, whose deterministic-ReLU model they approximate
up to the stochastic activation) are fitted with their own defaults and scored on the predictive only.

The data of ``reference:NAME`` do not depend on the split index: split ``s`` is a replicate whose only
difference is the fit seed (``s + 1000 k`` as every suite), so the suite's five splits are five seeds and
the leaderboard's ``± se`` is the seed-to-seed spread of the approximation error.

Scores (lower is better; 0 is the reference itself up to its Monte Carlo error), after Izmailov et al. 2021
("What Are Bayesian Neural Network Posteriors Really Like?", ICML, arXiv:2104.14421, §4 and the NeurIPS 2021
BDL competition metrics): ``w2_y_sd`` — mean over test points of the 1-D Wasserstein-2 distance between the
guide's and the reference's predictive draws of ``y``, divided by the training-target standard deviation;
``w1_y_sd`` the same with W1; ``nll_gap_ref`` the test NLL of the guide minus the reference's; binary
instances: ``tv`` the mean total variation of ``P(y = 1)`` and ``disagreement`` = 1 - top-1 agreement;
spike-and-slab instances: ``pip_mae`` the mean absolute error of the inclusion probabilities.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np

from zoo.data.core import Dataset, check_split

__all__ = [
    "PREFIX",
    "METRICS",
    "is_reference_name",
    "load_reference_dataset",
    "reference_scorer",
    "stored_instances",
]

logger = logging.getLogger(__name__)

PREFIX = "reference:"

#: the columns the scorer adds, each lower-is-better
METRICS = ("w2_y_sd", "w1_y_sd", "nll_gap_ref", "tv", "disagreement", "pip_mae")


def is_reference_name(name: object) -> bool:
    return isinstance(name, str) and name.strip().startswith(PREFIX)


def _instance(name: str):
    from zoo.reference.instances import get_instance

    return get_instance(name.strip()[len(PREFIX) :])


def load_reference_dataset(name: str, split: int = 0, data_dir: str | Path | None = None) -> Dataset:
    """The pinned data of instance ``reference:NAME`` (module docstring: the split is a replicate index).

    Its ``meta`` records the instance (``reference_instance``), the widths (``hidden``) and, for every model
    fitted as the instance's own model (:func:`zoo.reference.score.fit_settings`), its builder and fit
    options (``model_options``, ``model_fit_options``), which ``zoo bench`` applies to that model's fits."""
    from zoo.reference.score import fit_settings

    check_split(split)
    inst = _instance(name)
    ds = inst.dataset(data_dir)
    same = {m: fit_settings(m, inst) for m in inst.scored}
    same = {m: s for m, s in same.items() if s[2]}
    meta = {
        **ds.meta,
        "reference_instance": inst.name,
        "hidden": list(inst.hidden),
        "model_options": {m: s[0] for m, s in same.items()},
        "model_fit_options": {m: s[1] for m, s in same.items()},
    }
    return dataclasses.replace(ds, meta=meta)


@functools.lru_cache(maxsize=8)
def _stored(root: str, name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from zoo.reference.store import load_reference

    return load_reference(root, name)


def reference_scorer(run: Any) -> dict[str, float]:
    """Score one bench fit (a :class:`~zoo.experiments.outputs.RunOutput` on a ``reference:`` dataset)
    against its stored reference (columns: module docstring)."""
    from zoo.reference.instances import get_instance
    from zoo.reference.score import fit_settings, reference_data, score_fit
    from zoo.reference.store import default_root

    name = run.dataset.meta.get("reference_instance")
    if name is None:
        raise ValueError("the reference scorer needs a reference:NAME dataset")
    inst = get_instance(name)
    arrays, meta = _stored(str(default_root()), name)
    reference_data(inst, arrays)  # the stored test inputs are the instance's (else: recompute it)
    seed = int(run.metrics.get("seed", 0))
    scores = score_fit(run.result, inst, arrays, fit_settings(run.metrics.get("model"), inst)[2], 1000, seed)
    out: dict[str, float] = {}
    if "y" in scores:
        sd = float(meta.get("y_std") or 1.0)
        out["w2_y_sd"] = scores["y"]["w2"] / sd
        out["w1_y_sd"] = scores["y"]["w1"] / sd
        if "nll_gap" in scores["y"]:
            out["nll_gap_ref"] = scores["y"]["nll_gap"]
    if "class" in scores:
        out["tv"] = scores["class"]["total_variation"]
        out["disagreement"] = 1.0 - scores["class"]["agreement"]
    if "inclusion" in scores:
        out["pip_mae"] = scores["inclusion"]["mae"]
    return out


def stored_instances(root: str | Path | None = None) -> list[str]:
    """The names of the instances stored under ``root`` (default
    :func:`zoo.reference.store.default_root`), in :data:`~zoo.reference.instances.INSTANCES` order."""
    from zoo.reference.instances import INSTANCES
    from zoo.reference.store import default_root, stored_names

    stored = set(stored_names(root if root is not None else default_root()))
    return [n for n in INSTANCES if n in stored]
