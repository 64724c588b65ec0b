"""The summary and report of ``benchmarks/calibration.py``: the journal's rows merged over the committed
ones (:func:`merged_rows`), their means over splits per model and data set (:func:`summarize`) and
``calibration.md`` (:func:`markdown`): the coverage of the central intervals at :data:`LEVELS` from the
PIT of the mixture predictive (Gneiting, Balabdaoui & Raftery 2007), the Gaussian 95 % coverage, NLL,
RMSE and the interval's two parts, under the target, shape, held-out, conformal and likelihood-choice
tables of the sibling modules."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from _calibration_choice import choice_summary, choice_table
from _calibration_holdout import conformal_table, holdout_table
from _calibration_shape import shape_table
from _calibration_target import DATASET_ORDER, default_labels, target_table

__all__ = ["LEVELS", "OPTIONAL", "journal_rows", "merged_rows", "summarize", "markdown"]

#: the levels of the central predictive intervals whose coverage every row records
LEVELS = (0.5, 0.8, 0.9, 0.95, 0.99)
#: row fields added after the first rows were committed (the summary has ``None`` where a split lacks one)
OPTIONAL = (
    "train_spread",
    "mse_ratio",
    "noise_scale",
    "coverage95_unscaled",
    "nll_unscaled",
    "predictive_scale",
    "coverage95_predictive",
    "nll_predictive",
    "nll_mixture",
    "conformal_quantile",
    "coverage95_conformal",
    "coverage95_conformal_full",
    "nll_conformal",
    "rmse_conformal",
)


def journal_rows(path: Path) -> list[dict]:
    """The rows of ``OUT/calibration.partial.jsonl`` (:func:`zoo.io.read_lines`)."""
    from zoo.io import read_lines

    return read_lines(path)


def merged_rows(journal: Path, record: Path) -> list[dict]:
    """The committed rows of ``record`` (``calibration.json``) with the journal's over them: a row the journal
    redoes (same model label, dataset and split) is replaced, the others are kept — so a run on a fresh
    checkout, or on other datasets, adds to the committed table instead of replacing it."""
    old = json.loads(record.read_text()).get("rows", []) if record.exists() else []
    new = journal_rows(journal)
    key = lambda r: (r["model"], r["dataset"], r["split"])  # noqa: E731
    redone = {key(r) for r in new}
    return [r for r in old if key(r) not in redone] + list({key(r): r for r in new}.values())


def summarize(rows: list[dict]) -> list[dict]:
    """Mean over splits per (model, dataset): coverage per level, coverage95, NLL, RMSE, the two causes and
    the fit time; ordered by model, then data set (:data:`DATASET_ORDER`)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["dataset"]), []).append(r)
    rank = {d: i for i, d in enumerate(DATASET_ORDER)}
    out = []
    order = sorted(groups, key=lambda k: (k[0], rank.get(k[1], len(rank)), k[1]))
    for model, ds in order:
        rs = groups[(model, ds)]
        entry = {"model": model, "dataset": ds, "splits": len(rs)}
        for key in ("coverage95", "nll", "rmse", "noise_ratio", "epistemic_share", "fit_seconds"):
            entry[key] = statistics.fmean(r[key] for r in rs)
        entry["coverage95_sd"] = statistics.stdev(r["coverage95"] for r in rs) if len(rs) > 1 else None
        for key in OPTIONAL:  # rows run before these diagnostics have none: the mean of all or nothing
            entry[key] = statistics.fmean(r[key] for r in rs) if all(key in r for r in rs) else None
        dfs = [r.get("df") for r in rs]  # a Student-t likelihood's (mean fitted) degrees of freedom
        entry["df"] = statistics.fmean(dfs) if all(d is not None for d in dfs) else None
        entry["coverage"] = {lv: statistics.fmean(r["coverage"][lv] for r in rs) for lv in rs[0]["coverage"]}
        if entry["noise_scale"] is not None:  # --holdout rows record no noise_scale_rows
            entry["noise_scale_rows"] = rs[0].get("noise_scale_rows", "held-out")
        entry["choice"] = choice_summary(rs)  # rows that chose their likelihood by the ELBO, else None
        out.append(entry)
    return out


def markdown(summary: list[dict], commands: list[str], target: list[dict] | None = None) -> str:
    """The report; ``target`` is the summary over :data:`TARGET_SPLITS` (default: ``summary``)."""
    lines = [
        "# calibration",
        "",
        "Regression calibration of the registry defaults (one hidden layer of 50 units, UCI standard "
        "splits): coverage of the central predictive intervals from the PIT of the mixture predictive, "
        "the protocols' Gaussian 95 % coverage, and the two parts of the interval: `noise ratio` "
        "(posterior mean noise variance / training MSE of the predictive mean) and `epistemic share` "
        "(output spread over draws / predictive variance); where the noise ratio comes from: `train spread` "
        "(output spread at the training inputs / training MSE; the noise ratio is about 1 + train spread) "
        "and `MSE ratio` (test / training MSE of the predictive mean; an exact linear-Gaussian posterior "
        "has MSE ratio about (1 + train spread)²), – for rows run before these two were recorded; and the "
        "mean fit time (one thread).  Labels after "
        "`+` are settings other than the defaults (the commands say which); the reliability diagram shows "
        "the defaults.  See `benchmarks/calibration.py`.",
        "",
        *(target_table(summary) if target is None else target_table(target, summary)),
        *shape_table(target or summary, default_labels(target or summary)),
        *holdout_table(summary),
        *conformal_table(summary),
        *choice_table(summary),
        "Commands (rows of every one are in the table):",
        "",
        *(f"* `{c}`" for c in commands),
        "",
        "| model | dataset | splits | "
        + " | ".join(f"cov {lv}" for lv in LEVELS)
        + " | coverage95 (Gauss) | "
        "NLL | RMSE | noise ratio | epistemic share | train spread | MSE ratio | fit s |",
        "|---|---|---|" + "---|" * len(LEVELS) + "---|---|---|---|---|---|---|---|",
    ]
    for e in summary:
        cov = " | ".join(f"{e['coverage'][str(lv)]:.3f}" for lv in LEVELS)
        lines.append(
            f"| {e['model']} | {e['dataset']} | {e['splits']} | {cov} | {e['coverage95']:.3f} | "
            f"{e['nll']:.3f} | {e['rmse']:.3g} | {e['noise_ratio']:.2f} | {e['epistemic_share']:.2f} | "
            f"{_optional(e, 'train_spread')} | {_optional(e, 'mse_ratio')} | {e['fit_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _optional(entry: dict, key: str) -> str:
    value = entry.get(key)
    return "–" if value is None else f"{value:.2f}"
