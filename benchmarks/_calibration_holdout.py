"""The ``--holdout`` study of ``benchmarks/calibration.py`` (issue 17): the held-out rows, the noise factor
chosen on them by a fit without them, that factor applied to the fit on all training rows, and the report's
table of it."""

from __future__ import annotations

import numpy as np


def holdout_dataset(ds, share: float, seed: int) -> tuple:
    """``(dataset, n_val)``: ``ds`` with a seeded ``share`` of its training rows (at least one, leaving at
    least two) moved in front of its test rows, where the fit does not see them.  Inputs keep the
    standardization of the full training rows."""
    import dataclasses

    if not 0.0 < share < 1.0:
        raise ValueError(f"holdout: the held-out share must be in (0, 1), got {share!r}")
    n = ds.x_train.shape[0]
    n_val = min(max(1, round(share * n)), n - 2)
    perm = np.random.default_rng(seed).permutation(n)
    val, fit = perm[:n_val], perm[n_val:]
    held = dataclasses.replace(
        ds,
        x_train=ds.x_train[fit],
        y_train=ds.y_train[fit],
        x_test=np.concatenate([ds.x_train[val], ds.x_test]),
        y_test=np.concatenate([ds.y_train[val], ds.y_test]),
    )
    return held, n_val


def noise_factor(pred, y: np.ndarray, n_val: int) -> float:
    """The noise factor ``c`` that the first ``n_val`` rows of ``pred`` (the held-out rows, targets ``y``)
    choose: :func:`zoo.eval.metrics.heldout_noise_scale` on their per-draw ``loc`` and ``scale``."""
    from zoo.eval.metrics import heldout_noise_scale

    if pred.loc is None or pred.scale is None:
        raise ValueError("pred: the held-out noise scale needs the predictive's per-draw loc and scale")
    loc, scale = pred.loc.double().cpu().numpy(), pred.scale.double().cpu().numpy()
    return heldout_noise_scale(y[:n_val], loc[:, :n_val], scale[:, :n_val])


def heldout_factor(model: str, held, n_val: int, cfg) -> float:
    """Fit registry ``model`` with ``cfg`` on ``held``'s training rows (:func:`holdout_dataset`) and return
    the noise factor its held-out rows choose (:func:`noise_factor`)."""
    import dataclasses

    import torch

    from zoo.experiments.runs import fit_on_dataset

    run = fit_on_dataset(model, held, dataclasses.replace(cfg, train_metrics=False))
    y = run.dataset.tensors(device=torch.device("cpu"))[3].reshape(-1).double().numpy()
    return noise_factor(run.predictions, y, n_val)


def scale_noise(dataset, pred, y: np.ndarray, c: float) -> tuple:
    """``pred`` with every draw's noise scale times ``c`` (the mean is unchanged, the variance gains
    ``(c^2 - 1)`` times the draws' mean noise variance), and the row's extra fields: ``noise_scale`` (``c``),
    ``coverage95_unscaled`` / ``nll_unscaled`` (``pred`` as it was) and ``scores`` (the scaled metrics)."""
    from zoo.experiments.outputs import score_predictions
    from zoo.infer.predict import Predictions

    if pred.loc is None or pred.scale is None:
        raise ValueError("pred: scaling the noise needs the predictive's per-draw loc and scale")
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"c: the noise factor must be finite and positive, got {c!r}")
    loc, scale = pred.loc.double().cpu(), pred.scale.double().cpu()
    mean, var = pred.mean.double().cpu(), pred.var.double().cpu()
    raw = Predictions(pred.task, mean=mean, var=var, loc=loc, scale=scale)
    noise = (scale**2).mean(0)
    scaled = Predictions(pred.task, mean=mean, var=var + (c * c - 1.0) * noise, loc=loc, scale=c * scale)
    before = score_predictions(dataset, raw, y)
    extra = {
        "noise_scale": c,
        "coverage95_unscaled": before["coverage95"],
        "nll_unscaled": before["nll"],
        "scores": score_predictions(dataset, scaled, y),
    }
    return scaled, extra


def holdout_table(summary: list[dict]) -> list[str]:
    """Markdown lines: every ``--holdout`` label's mean noise factor ``c`` and its coverage95 and NLL, next
    to the same fits unscaled and to the label without ``+holdout`` (the fit on all training rows)."""
    cells = {(e["model"], e["dataset"]): e for e in summary}
    held = [e for e in summary if e.get("noise_scale") is not None]
    if not held:
        return []
    lines = [
        "Held-out noise scale (`--holdout`): the fit on all training rows, unscaled and with its noise "
        "scale times c, chosen on held-out rows by a second fit without them; and the label without "
        "`+holdout` (the same fit, as committed).",
        "",
        "| model | dataset | splits | c | coverage95 committed → unscaled → scaled | "
        "NLL committed → unscaled → scaled |",
        "|---|---|---|---|---|---|",
    ]
    for e in held:
        base = cells.get((e["model"].removesuffix("+holdout"), e["dataset"]))
        cov0, nll0 = (f"{base['coverage95']:.3f}", f"{base['nll']:.3f}") if base else ("–", "–")
        lines.append(
            f"| {e['model']} | {e['dataset']} | {e['splits']} | {e['noise_scale']:.2f} | "
            f"{cov0} → {e['coverage95_unscaled']:.3f} → {e['coverage95']:.3f} | "
            f"{nll0} → {e['nll_unscaled']:.3f} → {e['nll']:.3f} |"
        )
    return [*lines, ""]
