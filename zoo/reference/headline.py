"""The headline score of a guide against a reference posterior, and the reference's own Monte Carlo floor —
what ``zoo reference score`` prints and writes to ``scores.json`` and what ``benchmarks/scoreboard.py``
tabulates.

* Regression: the Wasserstein-2 distance between the guide's and the reference's predictive draws of ``y``
  (mean over test points; :func:`zoo.eval.scores.regression_scores`) divided by the standard deviation of
  the training targets (the reference's ``meta["y_std"]``): ``w2_y/sd``, scale-free, so instances compare.
* Binary: the total variation between the guide's and the reference's mean ``P(y = 1)``.

Lower is better; 0 is the reference itself, up to its Monte Carlo error.  That error is measured by
:func:`reference_floor`: the reference's kept draws, first half against second half (for NUTS references,
whose draws are stored chain by chain, chains 0-1 against 2-3, so between-chain disagreement shows too).
With ``S/2`` draws a side the floor is about ``sqrt(2)`` times the Monte Carlo floor of a score with ``S``
draws a side.  The metrics follow Izmailov, Vikram, Hoffman & Wilson 2021, "What Are Bayesian Neural
Network Posteriors Really Like?", arXiv:2104.14421.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from zoo.eval.scores import classification_scores, regression_scores

__all__ = ["reference_floor", "headline_value", "headline"]


def reference_floor(arrays: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The reference against itself (module docstring): ``{"w2", "draws_per_half"}`` (regression, W2 in
    target units) or ``{"total_variation"}`` (binary)."""
    key = "p" if "p" in arrays else "y"
    if key not in arrays:
        raise ValueError(f"arrays: a stored reference holds draws 'y' or 'p', got keys {sorted(arrays)}")
    half = arrays[key].shape[0] // 2
    if half < 1:
        raise ValueError(f"arrays: {key!r} holds {arrays[key].shape[0]} draw(s); the floor needs two")
    a, b = arrays[key][:half], arrays[key][half : 2 * half]
    if key == "p":
        return {"total_variation": classification_scores(a.mean(0), b.mean(0))["total_variation"]}
    return {"w2": regression_scores(a, b)["w2"], "draws_per_half": float(half)}


def _scale(y_std: float | None) -> float:
    return float(y_std) if y_std else 1.0


def headline_value(scores: Mapping[str, Mapping[str, float]], y_std: float | None) -> float:
    """The headline of one fit's score groups (:func:`zoo.reference.score.score_fit`): ``w2`` of ``y``
    divided by ``y_std`` (the reference's ``meta["y_std"]``), or the total variation of a binary instance."""
    if "class" in scores:
        return float(scores["class"]["total_variation"])
    return float(scores["y"]["w2"]) / _scale(y_std)


def _headline_se(scores: Mapping[str, Mapping[str, float]], y_std: float | None) -> float:
    if "class" in scores:
        return float(scores["class"].get("total_variation_se", np.nan))
    return float(scores["y"].get("w2_se", np.nan)) / _scale(y_std)


def headline(
    per_seed: Sequence[Mapping[str, Mapping[str, float]]], floor: Mapping[str, float], y_std: float | None
) -> dict[str, Any]:
    """The headline over the fits of several seeds: ``{"score": "w2_y/sd" | "total_variation", "mean",
    "sd"`` (over seeds, ddof 1; ``nan`` for one seed), ``"se"`` (the fits' mean standard error over test
    points: the Monte Carlo and test-set error of one fit), ``"seeds"``, ``"floor"`` (:func:`reference_floor`
    in the same units), ``"y_std"}``."""
    if not per_seed:
        raise ValueError("per_seed: no fit to summarize")
    values = np.array([headline_value(s, y_std) for s in per_seed], dtype=float)
    ses = np.array([_headline_se(s, y_std) for s in per_seed], dtype=float)
    binary = "class" in per_seed[0]
    return {
        "score": "total_variation" if binary else "w2_y/sd",
        "mean": float(values.mean()),
        "sd": float(values.std(ddof=1)) if values.size > 1 else float("nan"),
        "se": float(ses.mean()),
        "seeds": int(values.size),
        "floor": float(floor["total_variation"] if binary else floor["w2"] / _scale(y_std)),
        "y_std": None if binary else _scale(y_std),
    }
