"""Symmetry-invariant quantities of a fitted posterior (a NUTS result or any guide), the ones a reference
stores and a guide is scored on.

A BNN's weights are identified only up to a relabeling of the hidden units of each layer, so chains (and
guides) that sit in equivalent modes disagree on every weight while agreeing on everything that matters
(Izmailov, Vikram, Hoffman & Wilson 2021, "What Are Bayesian Neural Network Posteriors Really Like?",
arXiv:2104.14421, §9).  The quantities here are invariant to that relabeling:

* :func:`predictive_draws`: per-draw network output ``f`` and predictive draws of ``y`` at test inputs
  (regression, original target scale) or per-draw ``P(y = 1)`` (binary);
* :func:`unit_norms`: for every hidden layer, the Euclidean norms of the units' incoming weight vectors,
  **sorted within each draw** (a permutation of the units permutes the norms);
* :func:`shrinkage_draws`: the horseshoe's node-wise shrinkage factors ``κ_k = 1 / (1 + τ̃_k² v²)``
  (Piironen & Vehtari 2017, arXiv:1707.01694, §2.2; :func:`zoo.eval.scores.shrinkage_factors`), sorted
  within each draw.

Every function takes ``num_draws`` draws of a :class:`~zoo.infer.result.FitResult`; for a NUTS result with
``num_draws`` equal to its number of draws they come in storage order (chain-major), so they reshape to
``(chain, draw, ...)`` for R-hat and ESS.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import torch
from pyro import poutine

from zoo.eval.scores import shrinkage_factors
from zoo.infer.predict import _guide_trace, _latent_sites, _ready, predict

__all__ = ["predictive_draws", "unit_norms", "shrinkage_draws", "hidden_weight_specs"]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def predictive_draws(result: Any, x: torch.Tensor, num_draws: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Regression: ``{"f": (S, N), "y": (S, N), "sigma": (S,)}`` (per-draw output, predictive draws and
    noise scale on the original target scale); binary: ``{"p": (S, N)}`` per-draw ``P(y = 1)``."""
    kw: dict[str, Any] = {"num_samples": num_draws, "seed": seed}
    if not hasattr(result.guide, "predictive"):
        kw["sample_chunk"] = num_draws
        kw["return_samples"] = True
    pred = predict(result, x, **kw)
    if pred.task == "regression":
        loc, scale, samples = (
            _np(getattr(pred, k)).reshape(num_draws, -1) for k in ("loc", "scale", "samples")
        )
        return {"f": loc, "y": samples, "sigma": scale[:, 0]}
    if pred.task != "binary":
        raise ValueError(f"result: references cover regression and binary tasks, got {pred.task!r}")
    return {"p": _np(pred.draw_probs[..., 1])}


def hidden_weight_specs(model: Any) -> list:
    """The weight specs of the hidden layers (all but the output layer)."""
    weights = [s for s in model.specs if s.role == "weight"]
    return weights[:-1]


def _prior_params(result: Any, num_draws: int, seed: int) -> dict[str, torch.Tensor]:
    """The network parameters of ``num_draws`` draws: the model's prior replayed on the guide's draws."""
    model = result.model
    x = torch.zeros(2, model.architecture.in_features, device=result.device)
    with torch.no_grad(), result.activate():
        gtr = _guide_trace(result.guide, num_draws, x, seed)
        with pyro.plate("_num_draws", num_draws, dim=-2):
            return poutine.replay(model.prior.sample_params, trace=gtr)(model.specs)


def _guide_draws(result: Any, num_draws: int, seed: int) -> dict[str, torch.Tensor]:
    """``{site: (S, ...)}``: one vectorized guide call of ``num_draws`` draws seeded by ``seed`` (the draws
    the committed scoreboard rows were scored on; :func:`zoo.infer.predict.posterior_samples` seeds its
    chunks from ``seed`` instead)."""
    _ready(result)
    x = torch.zeros(1, result.model.architecture.in_features, device=result.device)
    with torch.no_grad(), result.activate():
        return dict(_latent_sites(_guide_trace(result.guide, num_draws, x, seed), num_draws))


def unit_norms(result: Any, num_draws: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``{"fc0": (S, K0), ...}``: per hidden layer, the sorted norms of the units' incoming weights."""
    specs = hidden_weight_specs(result.model)
    if not specs:
        return {}
    params = _prior_params(result, num_draws, seed)
    out = {}
    for spec in specs:
        w = params[spec.name]
        w = w.reshape(-1, *spec.shape)
        if w.shape[0] == 1:
            w = w.expand(num_draws, *spec.shape)
        if w.shape[0] != num_draws:
            raise ValueError(f"result: {spec.name} has {w.shape[0]} draws, expected {num_draws}")
        norms = torch.linalg.vector_norm(
            w.movedim(1 + spec.unit_dim, 1).reshape(num_draws, spec.shape[spec.unit_dim], -1), dim=-1
        )
        out[spec.name.split(".")[0]] = np.sort(_np(norms), axis=1)
    return out


def shrinkage_draws(
    result: Any, num_draws: int, seed: int = 0, samples: dict[str, torch.Tensor] | None = None
) -> dict[str, np.ndarray]:
    """``{"fc0": (S, K0), ...}``: per hidden layer with horseshoe scales (sites ``<layer>.tau2``,
    ``<layer>.v2``, and ``hs.c2`` when regularized), the sorted shrinkage factors; ``{}`` for other priors.
    ``samples``: draws ``{site: (S, ...)}`` to use instead of drawing from the guide."""
    if samples is None:
        samples = _guide_draws(result, num_draws, seed)
    out = {}
    c2 = samples.get("hs.c2")
    for spec in hidden_weight_specs(result.model):
        layer = spec.name.split(".")[0]
        tau2, v2 = samples.get(f"{layer}.tau2"), samples.get(f"{layer}.v2")
        if tau2 is None or v2 is None:
            continue
        kappa = shrinkage_factors(
            _np(tau2).reshape(num_draws, -1),
            _np(v2).reshape(num_draws),
            None if c2 is None else _np(c2).reshape(num_draws),
        )
        out[layer] = np.sort(kappa, axis=1)
    return out
