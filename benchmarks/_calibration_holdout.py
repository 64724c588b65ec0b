"""The ``--holdout`` and ``--train-noise`` studies of ``benchmarks/calibration.py`` (issue 17): the held-out
rows, the noise factor chosen on them by a fit without them (or on the training rows by the fit itself), that
factor applied to the fit on all training rows, and the report's table of it."""

from __future__ import annotations

import dataclasses

import numpy as np

from zoo.eval.metrics import gaussian_nll, rmse

#: the standard normal's 0.975 quantile: the Gaussian 95 % interval is mean +- Z95 sd
Z95 = 1.959963984540054


def holdout_dataset(ds, share: float, seed: int) -> tuple:
    """``(dataset, n_val)``: ``ds`` with a seeded ``share`` of its training rows
    (:func:`zoo.experiments.conformal.hold_out_rows`) moved in front of its test rows, where the fit does not
    see them.  Inputs keep the standardization of the full training rows."""
    from zoo.experiments.conformal import hold_out_rows

    if not 0.0 < share < 1.0:
        raise ValueError(f"holdout: the held-out share must be in (0, 1), got {share!r}")
    fit, held = hold_out_rows(ds, share, seed)
    both = dataclasses.replace(
        fit, x_test=np.concatenate([held.x_test, ds.x_test]), y_test=np.concatenate([held.y_test, ds.y_test])
    )
    return both, held.n_test


def noise_factor(pred, y: np.ndarray, n_val: int) -> float:
    """The noise factor ``c`` that the first ``n_val`` rows of ``pred`` (the held-out rows, targets ``y``)
    choose: :func:`zoo.eval.metrics.heldout_noise_scale` on their per-draw ``loc`` and ``scale``."""
    from zoo.eval.metrics import heldout_noise_scale

    if pred.loc is None or pred.scale is None:
        raise ValueError("pred: the held-out noise scale needs the predictive's per-draw loc and scale")
    loc, scale = pred.loc.double().cpu().numpy(), pred.scale.double().cpu().numpy()
    return heldout_noise_scale(y[:n_val], loc[:, :n_val], scale[:, :n_val])


def predictive_factor(pred, y: np.ndarray, n_val: int) -> float:
    """The factor ``s`` on the standard deviation of the moment-matched Gaussian predictive ``N(mean, var)``
    that the first ``n_val`` rows choose: the closed-form maximum of their Gaussian log-likelihood,
    ``s^2 = mean_n (y_n - mean_n)^2 / var_n`` (the "sigma scaling" of Laves et al. 2020, arXiv:2006.13707,
    which scales the whole predictive, weight spread included, not only the noise)."""
    mean, var = pred.mean.double().cpu().numpy()[:n_val], pred.var.double().cpu().numpy()[:n_val]
    return float(np.sqrt(np.mean((y[:n_val] - mean) ** 2 / var)))


def heldout_factors(model: str, held, n_val: int, cfg) -> dict[str, float]:
    """Fit registry ``model`` with ``cfg`` on ``held``'s training rows (:func:`holdout_dataset`) and return
    the factors its held-out rows choose: ``{"noise": c, "predictive": s, "conformal": q}``
    (:func:`noise_factor`, :func:`predictive_factor`, :func:`zoo.eval.metrics.conformal_scale` at 0.95), and
    ``"conformal_coverage"``: the coverage of that fit's split-conformal interval ``mean +- q sd`` on the test
    rows (Lei et al. 2018, §2.2: at least 0.95 in expectation over splits, by exchangeability), with
    ``"conformal_nll"`` / ``"conformal_rmse"``: that fit's test NLL with its Gaussian predictive's sd times
    ``q / 1.96`` and its test RMSE (what fitting on fewer rows costs)."""
    import torch

    from zoo.experiments.runs import fit_on_dataset

    run = fit_on_dataset(model, held, dataclasses.replace(cfg, train_metrics=False))
    y = run.dataset.tensors(device=torch.device("cpu"))[3].reshape(-1).double().numpy()
    pred = run.predictions
    q, test = conformal_scale_on(pred, y, n_val)
    mean, var = pred.mean.double().cpu().numpy()[n_val:], pred.var.double().cpu().numpy()[n_val:]
    return {
        "noise": noise_factor(pred, y, n_val),
        "predictive": predictive_factor(pred, y, n_val),
        "conformal": q,
        "conformal_coverage": test,
        "conformal_nll": gaussian_nll(y[n_val:], mean, (q / Z95) ** 2 * var),
        "conformal_rmse": rmse(y[n_val:], mean),
    }


def conformal_scale_on(pred, y: np.ndarray, n_val: int) -> tuple[float, float]:
    """``(q, coverage)``: the split-conformal factor the first ``n_val`` rows of ``pred`` choose and the
    coverage of ``mean +- q sd`` on the rows after them."""
    from zoo.eval.metrics import conformal_scale

    mean, var = pred.mean.double().cpu().numpy(), pred.var.double().cpu().numpy()
    q = conformal_scale(y[:n_val], mean[:n_val], var[:n_val])
    return q, inside(y[n_val:], mean[n_val:], var[n_val:], q)


def inside(y: np.ndarray, mean: np.ndarray, var: np.ndarray, q: float) -> float:
    """Fraction of ``y`` in ``mean +- q sqrt(var)``."""
    return float(np.mean(np.abs(y - mean) <= q * np.sqrt(var)))


def conformal_fields(pred, y: np.ndarray, factors: dict) -> dict:
    """A ``--holdout`` row's conformal fields: ``conformal_quantile`` (``q``), ``coverage95_conformal`` (the
    held-out fit's split-conformal coverage of the test rows, with ``nll_conformal`` and ``rmse_conformal``
    of that fit) and ``coverage95_conformal_full`` (``q`` on the
    fit on all training rows, ``pred``, which has seen the held-out rows: no guarantee there)."""
    mean, var = pred.mean.double().cpu().numpy(), pred.var.double().cpu().numpy()
    return {
        "conformal_quantile": factors["conformal"],
        "coverage95_conformal": factors["conformal_coverage"],
        "nll_conformal": factors["conformal_nll"],
        "rmse_conformal": factors["conformal_rmse"],
        "coverage95_conformal_full": inside(y, mean, var, factors["conformal"]),
    }


def scale_noise(dataset, pred, y: np.ndarray, c: float, s: float | None = None) -> tuple:
    """``pred`` with every draw's noise scale times ``c`` (the mean is unchanged, the variance gains
    ``(c^2 - 1)`` times the draws' mean noise variance), and the row's extra fields: ``noise_scale`` (``c``),
    ``coverage95_unscaled`` / ``nll_unscaled`` (``pred`` as it was) and ``scores`` (the scaled metrics);
    with ``s``, also ``predictive_scale`` (``s``) and the Gaussian ``coverage95_predictive`` /
    ``nll_predictive`` of ``N(mean, s^2 var)``."""
    from zoo.experiments.outputs import score_predictions
    from zoo.infer.predict import Predictions

    if pred.loc is None or pred.scale is None:
        raise ValueError("pred: scaling the noise needs the predictive's per-draw loc and scale")
    for name, value in (("c", c), ("s", 1.0 if s is None else s)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name}: the factor must be finite and positive, got {value!r}")
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
    if s is not None:
        wide = score_predictions(dataset, Predictions(pred.task, mean=mean, var=s * s * var), y)
        extra |= {
            "predictive_scale": s,
            "coverage95_predictive": wide["coverage95"],
            "nll_predictive": wide["nll"],
        }
    return scaled, extra


def conformal_table(summary: list[dict]) -> list[str]:
    """Markdown lines: every ``--holdout`` label with conformal fields, its split-conformal factor over the
    Gaussian quantile and the 95 % coverage of the fit as it is, of the held-out fit's split-conformal
    interval, and of that factor on the fit on all training rows; the NLL of the fit as it is and of the
    held-out fit's Gaussian predictive widened by ``q / 1.96``; the RMSE of the two fits."""
    rows = [e for e in summary if e.get("conformal_quantile") is not None]
    if not rows:
        return []
    lines = [
        "Split conformal (`--holdout`, Lei et al. 2018, JASA 113, §2.2): the held-out rows choose the "
        "factor q on the predictive sd (`zoo.eval.metrics.conformal_scale`; any run: `zoo fit --conformal`); "
        "q / 1.96 is how many times "
        "too wide the Gaussian interval was. Coverage95 of the default's fit → of the held-out fit's "
        "interval mean ± q sd on the test rows (guaranteed ≥ 0.95 in expectation) → of q on the fit on "
        "all training rows.",
        "",
        "| model | dataset | splits | q / 1.96 | coverage95: default → split conformal → q on the full fit | "
        "NLL: default → split conformal | RMSE: default → the held-out fit |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in rows:
        lines.append(
            f"| {e['model']} | {e['dataset']} | {e['splits']} | {e['conformal_quantile'] / Z95:.2f} | "
            f"{e['coverage95_unscaled']:.3f} → {e['coverage95_conformal']:.3f} → "
            f"{e['coverage95_conformal_full']:.3f} | {e['nll_unscaled']:.3f} → {e['nll_conformal']:.3f} | "
            f"{e['rmse']:.3g} → {e['rmse_conformal']:.3g} |"
        )
    return [*lines, ""]


def holdout_table(summary: list[dict]) -> list[str]:
    """Markdown lines: every label with a noise factor ``c`` chosen after the fit — on held-out training rows
    by a second fit without them (``--holdout``, also the Gaussian predictive's factor ``s``) or on the
    training rows themselves (``--train-noise``) — with its coverage95 and NLL on the fit on all training
    rows: unscaled, with the noise scale times the mean ``c``, and with the predictive's scale times the
    mean ``s``."""
    held = [e for e in summary if e.get("noise_scale") is not None]
    if not held:
        return []
    lines = [
        "Noise scale chosen after the fit: the fit on all training rows (the default's row), unscaled → with "
        "its noise scale times c → with its Gaussian predictive's scale times s.  c is chosen on held-out "
        "training rows by a second fit without them (`--holdout`, which also chooses s) or on the training "
        "rows themselves (`--train-noise`: the c that maximizes their own mixture predictive's likelihood, "
        "which counts the spread of q(W) at them once, not twice as the ELBO's noise and the predictive "
        "do).",
        "",
        "| model | dataset | splits | c chosen on | c | s | "
        "coverage95: unscaled → noise × c → predictive × s | NLL: unscaled → noise × c → predictive × s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in held:
        pred = e.get("predictive_scale") is not None
        s_text = f"{e['predictive_scale']:.2f}" if pred else "–"
        cov_p = f"{e['coverage95_predictive']:.3f}" if pred else "–"
        nll_p = f"{e['nll_predictive']:.3f}" if pred else "–"
        rows = e.get("noise_scale_rows", "held-out")
        lines.append(
            f"| {e['model']} | {e['dataset']} | {e['splits']} | {rows} | {e['noise_scale']:.2f} | {s_text} | "
            f"{e['coverage95_unscaled']:.3f} → {e['coverage95']:.3f} → {cov_p} | "
            f"{e['nll_unscaled']:.3f} → {e['nll']:.3f} → {nll_p} |"
        )
    return [*lines, ""]
