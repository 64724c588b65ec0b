"""Score a guide against a stored reference: fit ``model[:guide]`` on the instance's data, draw the same
symmetry-invariant quantities the reference stores (:mod:`zoo.reference.quantities`) and compare them with
:mod:`zoo.eval.scores`.

Score groups (each a dict of :mod:`zoo.eval.scores` keys):

* ``y``: :func:`~zoo.eval.scores.regression_scores` of the guide's predictive draws of ``y`` against the
  reference's, with the test targets (W1/W2, coverage, NLL and RMSE gaps);
* ``f``: the same for the network output ``f`` (no targets) — only when the guide's model is the
  reference's model;
* ``class``: :func:`~zoo.eval.scores.classification_scores` (agreement, total variation) of the mean
  predictive ``P(y = 1)``;
* ``inclusion``: :func:`~zoo.eval.scores.inclusion_scores` of the guide's inclusion probabilities
  (``guide.inclusion_probs()``, the LBBNN guides) against the exact ones;
* ``kappa.<layer>``: :func:`~zoo.eval.scores.shrinkage_scores` of the per-draw sorted shrinkage factors;
* ``norms.<layer>``: the mean over sorted positions of the 1-D Wasserstein-1 distance between the guide's
  and the reference's sorted unit norms (``norm_w1``).

**Other models against a reference.**  An instance lists in ``scored`` the registry models whose guides are
scored against it.  A guide of another model than the reference's is scored on the predictive of ``y``
only: in particular the bow-tie guides (``bowtie``, Sheinkman & Wade 2025, arXiv:2411.11132, §2) against
the N-GIG ReLU-MLP reference (``ngig-bnn``, the same N-GIG shrinkage prior of their Eqs. 5-7 on a plain
ReLU MLP): the bow-tie network's stochastic (Pólya-Gamma augmented) activation is a different likelihood
for ``f``, so ``f``, unit norms and shrinkage are not comparable, while the predictive distribution of
``y`` at the test inputs is what both claim to approximate.  The bow-tie model is fitted with its own
defaults (its builder options are not the N-GIG MLP's).  On a linear instance (``hidden=()``) the bow-tie
has no stochastic units and *is* the N-GIG linear regression: it is then fitted with the reference's N-GIG
hyperparameters (:class:`~zoo.families.bowtie.options.NGIGOptions`, every field, in place of its own
data-resolved defaults of App. D.1) on standardized targets, and scored as the same model, ``f`` included
(:func:`fit_settings`) — a pure measure of the CAVI approximation.

Each guide is fitted with ``seeds`` different seeds (``0..K-1``) by
:func:`zoo.experiments.runs.fit_on_dataset` (the entry's default steps, learning rate and batch size unless
``steps`` is given); the result has every seed's scores and their mean and standard deviation over seeds,
and the headline score (W2 of ``y`` / the target sd, or the total variation) next to the reference's own
Monte Carlo floor (:mod:`zoo.reference.headline`).

**Scale.**  The reference's draws are on the original target scale; a regression fit scored with
:func:`score_fit` must record the standardization of its targets (:func:`check_target_scale`).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from zoo.core.config import Config
from zoo.core.validation import check_optional, check_positive_int
from zoo.eval.scores import (
    classification_scores,
    inclusion_scores,
    regression_scores,
    shrinkage_scores,
    wasserstein_1d,
)
from zoo.eval.units import target_scale
from zoo.reference.headline import headline, reference_floor
from zoo.reference.instances import ReferenceInstance

if TYPE_CHECKING:
    from zoo.data import Dataset

__all__ = [
    "ScoreConfig",
    "bands",
    "check_spec",
    "check_target_scale",
    "fit_settings",
    "reference_data",
    "score_spec",
    "score_fit",
    "format_scores",
    "HEADLINE",
]

#: the headline score of each group (what the scoreboard shows)
HEADLINE = {"y": "w2", "f": "w2", "class": "total_variation", "inclusion": "mae", "kappa": "kappa_mae"}


@dataclasses.dataclass(frozen=True)
class ScoreConfig(Config):
    """``seeds``: fits per guide (seeds ``seed .. seed + seeds - 1``); ``steps``: training steps (``None``:
    the model's default); ``draws``: the guide's predictive draws per fit."""

    seeds: int = 1
    steps: int | None = None
    draws: int = 1000
    seed: int = 0

    def validate(self) -> None:
        check_positive_int("seeds", self.seeds)
        check_positive_int("seed", self.seed, allow_zero=True)
        check_optional("steps", self.steps, check_positive_int)
        check_positive_int("draws", self.draws)


def check_spec(spec: str, instance: ReferenceInstance) -> tuple[str, str | None]:
    """``(model, guide)`` of ``spec = "model[:guide]"``; ``ValueError`` unless the model is registered, is
    scored against ``instance`` and offers the guide."""
    from zoo.experiments.registry import get_entry

    if not isinstance(spec, str) or not spec:
        raise ValueError(f"SPEC must be 'model[:guide]', got {spec!r}")
    model, _, guide = spec.partition(":")
    entry = get_entry(model)
    if model not in instance.scored:
        raise ValueError(
            f"SPEC: {model!r} is not scored against {instance.name!r} (its models: {list(instance.scored)})"
        )
    if guide and guide not in entry.guides:
        raise ValueError(f"SPEC: {model} offers guides {list(entry.guides)}, not {guide!r}")
    return model, guide or None


def reference_data(
    instance: ReferenceInstance, arrays: dict[str, np.ndarray], data_dir: str | Path | None = None
) -> Dataset:
    """The instance's dataset, checked to have the stored reference's test inputs (``ValueError`` if the data
    or the instance changed since the reference was computed)."""
    ds = instance.dataset(data_dir)
    stored = arrays["x_test"]
    if stored.shape != ds.x_test.shape or not np.allclose(stored, ds.x_test, rtol=1e-6, atol=1e-8):
        raise ValueError(
            f"instance {instance.name!r}: its test inputs differ from the stored reference's (the data or "
            "the instance changed since it was computed); recompute it with `zoo reference compute --force`"
        )
    return ds


def fit_settings(model: str, instance: ReferenceInstance) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """``(builder options, fit options, same_model)`` of ``model``'s fits against ``instance`` (module
    docstring): the instance's options for its own model; the N-GIG hyperparameters and standardized
    targets for the bow-tie on a linear N-GIG instance (the same model); else the model's defaults."""
    if model == instance.model:
        return dict(instance.options), {}, True
    if model == "bowtie" and instance.model == "ngig-bnn" and instance.hidden == ():
        from zoo.families.bowtie.options import NGIGOptions

        ngig = NGIGOptions.from_dict(instance.options).to_dict()
        ngig.pop("activation")  # no hidden layer: no activation is applied
        gaussian = ngig.pop("student_t_df") is None and not ngig.pop("student_t_learn_df")
        if not ngig.pop("heteroscedastic") and gaussian:  # the bow-tie's noise is homoscedastic Gaussian
            return ngig, {"standardize_y": True}, True
    return {}, {}, False


def bands(x_test: np.ndarray, f: np.ndarray, y: np.ndarray) -> dict[str, list[float]] | None:
    """The predictive bands of a 1-D instance (``x_test`` of shape (N, 1), else ``None``): per test input,
    in increasing ``x``, the mean of ``f`` and the central 95 % interval of ``y`` from draws ``f``, ``y`` of
    shape (S, N) — what the scoreboard draws of each guide over the reference's."""
    x_test = np.asarray(x_test)
    if x_test.ndim != 2 or x_test.shape[1] != 1:
        return None
    order = np.argsort(x_test[:, 0])
    lo, hi = np.quantile(np.asarray(y)[:, order], [0.025, 0.975], axis=0)
    return {
        "x": x_test[order, 0].tolist(),
        "f_mean": np.asarray(f)[:, order].mean(0).tolist(),
        "y_lo": lo.tolist(),
        "y_hi": hi.tolist(),
    }


def _norm_scores(approx: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    w1 = wasserstein_1d(approx, reference, p=1)
    return {"norm_w1": float(w1.mean()), "num_units": float(w1.size)}


def draws_at_test_inputs(
    result: Any, arrays: dict[str, np.ndarray], draws: int, seed: int
) -> dict[str, np.ndarray]:
    """:func:`zoo.reference.quantities.predictive_draws` of ``result`` at the reference's test inputs."""
    from zoo.reference.quantities import predictive_draws

    x_test = torch.as_tensor(arrays["x_test"], dtype=torch.float32, device=result.device)
    return predictive_draws(result, x_test, draws, seed=seed)


def _scale_hint(instance: ReferenceInstance) -> str:
    try:
        mu, sd = instance.target_scale()
    except (OSError, ValueError):  # the data cannot be loaded here: the message names the method instead
        return "instance.target_scale()"
    return f"y_mean={mu:.6g}, y_std={sd:.6g} (instance.target_scale())"


def check_target_scale(result: Any, instance: ReferenceInstance, arrays: dict[str, np.ndarray]) -> None:
    """``ValueError`` naming ``result`` unless its predictive draws of a regression instance are on the
    original target scale, the reference's: the fit recorded its target standardization (``y_mean`` /
    ``y_std`` in ``result.config``, which ``predict`` undoes), or says it saw raw targets
    (``standardize_y: False`` in its metadata), or is a zoo run on a dataset
    (:func:`zoo.experiments.runs.fit_on_dataset`, :func:`zoo.infer.mcmc.fit_nuts` on a ``Dataset``: they
    record ``dataset`` and any standardization they apply).  Binary instances need no check."""
    if "p" in arrays or target_scale(result) is not None:
        return
    cfg = getattr(result, "config", None) or {}
    if cfg.get("standardize_y") is False or ("dataset" in cfg and "standardize_y" not in cfg):
        return  # the second: a zoo run saved before fit_tensors recorded standardize_y=False
    raise ValueError(
        "result: this regression fit records no target standardization, so its predictive draws cannot be "
        f"put on the original target scale of the draws of reference {instance.name!r} (the scores would "
        "be silently wrong). Fitted on standardized targets: pass zoo.fit(..., metadata={'y_mean': .., "
        f"'y_std': ..}}) with the instance's own {_scale_hint(instance)}, the reference's standardization, "
        "not the statistics of dataset().tensors(). Fitted on raw targets: pass "
        "metadata={'standardize_y': False}."
    )


def score_fit(
    result: Any,
    instance: ReferenceInstance,
    arrays: dict[str, np.ndarray],
    same_model: bool,
    draws: int,
    seed: int,
    pred: dict[str, np.ndarray] | None = None,
) -> dict[str, dict[str, float]]:
    """The score groups (module docstring) of one fitted ``result`` against the reference ``arrays``;
    ``pred``: its predictive draws at the reference's test inputs if already drawn
    (:func:`draws_at_test_inputs`).

    The reference's draws of ``y`` and ``f`` are on the original target scale.  A regression ``result``
    fitted on standardized targets must record the standardization (``zoo.fit(...,
    metadata={"y_mean": mu, "y_std": sd})``) with the instance's own ``(mu, sd) = instance.target_scale()``
    (also ``meta["y_mean"]``, ``meta["y_std"]`` of the stored reference; they are the full training split's
    statistics and differ from those of ``instance.dataset().tensors()``); a fit on raw targets records
    ``metadata={"standardize_y": False}``.  Anything else is a ``ValueError`` (:func:`check_target_scale`).
    """
    from zoo.reference.quantities import shrinkage_draws, unit_norms

    check_target_scale(result, instance, arrays)
    pred = draws_at_test_inputs(result, arrays, draws, seed) if pred is None else pred
    out: dict[str, dict[str, float]] = {}
    if "p" in arrays:
        out["class"] = classification_scores(pred["p"].mean(0), arrays["p_mean"])
    else:
        out["y"] = regression_scores(pred["y"], arrays["y"], y=arrays["y_test"])
        if same_model:
            out["f"] = regression_scores(pred["f"], arrays["f"])
    if "pip" in arrays and callable(getattr(result.guide, "inclusion_probs", None)):
        with result.activate():
            probs = result.guide.inclusion_probs()
        out["inclusion"] = inclusion_scores(
            torch.cat([v.reshape(-1) for v in probs.values()]).cpu(), arrays["pip"]
        )
    if not same_model:
        return out
    norm_keys = [k for k in arrays if k.startswith("norms.") and not k.endswith(("_mean", "_se"))]
    if norm_keys:
        norms = unit_norms(result, draws, seed=seed)
        for k in norm_keys:
            out[k] = _norm_scores(norms[k.split(".", 1)[1]], arrays[k])
    kappa_keys = [k for k in arrays if k.startswith("kappa.") and not k.endswith(("_mean", "_se"))]
    if kappa_keys:
        kappa = shrinkage_draws(result, draws, seed=seed)
        for k in kappa_keys:
            layer = k.split(".", 1)[1]
            if layer in kappa:  # a guide without horseshoe scale sites has no κ to score
                out[k] = shrinkage_scores(kappa[layer], arrays[k])
    return out


def _aggregate(per_seed: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """``{group: {key: {"mean", "sd"}}}`` over seeds (``sd`` with ddof 1; 0 for one seed)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for group in per_seed[0]:
        for key in per_seed[0][group]:
            v = np.array([s[group][key] for s in per_seed if group in s], dtype=float)
            sd = float(np.std(v, ddof=1)) if v.size > 1 else 0.0
            out.setdefault(group, {})[key] = {"mean": float(np.mean(v)), "sd": sd}
    return out


def score_spec(
    model: str,
    guide: str | None,
    instance: ReferenceInstance,
    reference: tuple[dict[str, np.ndarray], dict[str, Any]],
    config: ScoreConfig | None = None,
    *,
    data_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Fit ``model[:guide]`` ``config.seeds`` times on ``instance``'s data and score each fit against the
    stored ``reference`` (``(arrays, meta)`` of :func:`zoo.reference.store.load_reference`)."""
    from zoo.experiments.config import RunConfig
    from zoo.experiments.runs import fit_on_dataset

    config = config or ScoreConfig()
    arrays, meta = reference
    ds = reference_data(instance, arrays, data_dir)
    options, fit_options, same_model = fit_settings(model, instance)
    # one start per fit for every guide (an entry's best-of-starts default, zoo.experiments.starts, would
    # give some guides several): the scoreboard compares the guides' single fits across seeds
    fit_options = {"starts": [{}], **fit_options}
    per_seed, rows = [], []
    for seed in range(config.seed, config.seed + config.seeds):
        t0 = time.perf_counter()
        run = fit_on_dataset(
            model,
            ds,
            RunConfig(
                hidden=instance.hidden,
                guide=guide,
                steps=config.steps,
                seed=seed,
                progress=False,
                options=options,
                fit_options=fit_options,
            ),
        )
        pred = draws_at_test_inputs(run.result, arrays, config.draws, seed)
        scores = score_fit(run.result, instance, arrays, same_model, config.draws, seed, pred=pred)
        per_seed.append(scores)
        rows.append({"seed": seed, "seconds": time.perf_counter() - t0, "guide": run.metrics["guide"]})
        band = bands(arrays["x_test"], pred["f"], pred["y"]) if "y" in pred else None
        if band is not None:  # a 1-D regression toy: the same draws, for the scoreboard's figure
            rows[-1]["bands"] = band
    floor = reference_floor(arrays)
    return {
        "model": model,
        "guide": rows[0]["guide"],
        "instance": instance.name,
        "reference_method": meta["method"],
        "reference_created": meta.get("created"),
        "same_model": same_model,
        "seeds": config.seeds,
        "steps": config.steps,
        "draws": config.draws,
        "headline": headline(per_seed, floor, meta.get("y_std")),
        "reference_floor": floor,
        "scores": _aggregate(per_seed),
        "per_seed": [{**r, "scores": s} for r, s in zip(rows, per_seed)],
    }


def _headline_line(h: dict[str, Any]) -> str:
    name = "W2(y)/sd" if h["score"] == "w2_y/sd" else "TV(P(y=1))"
    err = f"± {h['sd']:.2g} sd over {h['seeds']} seeds" if h["seeds"] > 1 else f"± {h['se']:.2g} se"
    return f"  {name} = {h['mean']:.4g} {err}   (reference floor {h['floor']:.4g}; lower is better)"


def _error(result: dict[str, Any], group: str, key: str) -> float:
    """The ``±`` of a score: its sd over seeds, or with one seed the fit's standard error (``key_se``)."""
    if result["seeds"] == 1 and result.get("per_seed"):
        return float(result["per_seed"][0]["scores"][group].get(f"{key}_se", float("nan")))
    return float(result["scores"][group][key]["sd"])


def format_scores(result: dict[str, Any]) -> str:
    """A few lines: the headline (W2(y)/sd or the total variation, :mod:`zoo.reference.headline`) next to
    the reference's floor, then the headline score of each group; ``±`` is the sd over seeds, or with one
    seed the fit's standard error over test points (``*_se``)."""
    seeds = result["seeds"]
    how = "mean ± sd over seeds" if seeds > 1 else "± standard error over test points"
    lines = [
        f"{result['model']}/{result['guide']} vs reference {result['instance']} ({seeds} seed(s); {how}):"
    ]
    if "headline" in result:
        lines.append(_headline_line(result["headline"]))
    for group, scores in result["scores"].items():
        key = HEADLINE.get(group.split(".")[0], "norm_w1")
        shown = [k for k in (key, "w1", "nll_gap", "draw_coverage", "agreement", "auroc") if k in scores]
        errors = {k: _error(result, group, k) for k in dict.fromkeys(shown)}
        text = ", ".join(
            f"{k}={scores[k]['mean']:.4g}" + (f"±{e:.2g}" if e == e else "") for k, e in errors.items()
        )
        lines.append(f"  {group:12s} {text}")
    return "\n".join(lines)
