"""The leaderboard of ``zoo bench``: a benched model's row among the zoo's rows of the same suite.

Statistics (per metric; a *unit* is a (dataset, split) pair, a row's value on it the mean over its seeds):

* **per-dataset summary**: mean over the splits and its standard error ``sd / sqrt(n)`` (``ddof = 1``;
  undefined, ``null``, for one split);
* **ranks**: on each dataset the rows are ranked by their mean over the units the bench row has (ties share
  the average rank; lower is better for NLL, RMSE, ECE, FPR, higher for accuracy and TPR); a row's rank is
  the mean of its per-dataset ranks, so datasets on different scales weigh the same (the average ranks of
  Demšar 2006, "Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR 7, §3.2.2);
* **paired differences** (bench minus each zoo row) over the units present in both: per dataset the mean
  difference ``d̄`` and its standard error ``sd(d) / sqrt(n)`` — pairing on the same splits removes the
  split-to-split variation both rows share (the paired comparison of two methods, Demšar 2006, §3.1.1);
  over all datasets the mean of the per-dataset means with standard error
  ``sqrt(Σ se_d²) / D`` (datasets independent).

Zoo rows come from the committed ``benchmarks/results/bench-<suite>.json`` (:func:`load_zoo_rows`, found
next to the package, or in ``$ZOO_BENCH_RESULTS``) or, for own data, from zoo models fitted in the same run.
The figure is drawn by :mod:`zoo.experiments.leaderboard_plot`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from zoo.experiments.bench_identity import stale_zoo_rows
from zoo.experiments.runs import dumps_json
from zoo.experiments.suites import HIGHER_IS_BETTER, Suite, metrics_for_task
from zoo.io import atomic_write_many

__all__ = [
    "unit_values",
    "mean_se",
    "paired_difference",
    "average_ranks",
    "build_leaderboard",
    "leaderboard_markdown",
    "write_leaderboard",
    "leaderboard_files",
    "load_zoo_rows",
    "committed_rows_path",
    "zoo_rows_markdown",
]

logger = logging.getLogger(__name__)

Unit = tuple[str, int]


def unit_values(rows: Sequence[Mapping], label: str, metric: str) -> dict[Unit, float]:
    """``{(dataset, split): mean over seeds of metric}`` of row ``label`` (fits without it are skipped)."""
    acc: dict[Unit, list[float]] = {}
    for r in rows:
        v = r.get(metric)
        if r["label"] == label and isinstance(v, (int, float)) and math.isfinite(v):
            acc.setdefault((str(r["dataset"]), int(r["split"])), []).append(float(v))
    return {u: statistics.fmean(vs) for u, vs in acc.items()}


def mean_se(values: Sequence[float]) -> dict:
    """``{"mean", "se", "n"}``: the mean and its standard error ``sd / sqrt(n)`` (``None`` for ``n < 2``)."""
    n = len(values)
    if n == 0:
        raise ValueError("values: need at least one value")
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else None
    return {"mean": statistics.fmean(values), "se": se, "n": n}


def paired_difference(bench: Mapping[Unit, float], other: Mapping[Unit, float]) -> dict:
    """Paired differences ``bench - other`` over their common units: ``{dataset: {"mean", "se", "n"}, "all":
    {...}}``; ``"all"`` averages the per-dataset means (standard error ``sqrt(Σ se²) / D``, ``None`` when a
    dataset has one unit).  ``{}`` when no unit is common."""
    by_ds: dict[str, list[float]] = {}
    for u in sorted(bench.keys() & other.keys()):
        by_ds.setdefault(u[0], []).append(bench[u] - other[u])
    out: dict = {ds: mean_se(d) for ds, d in by_ds.items()}
    if out:
        ses = [e["se"] for e in out.values()]
        se = None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses)) / len(ses)
        out["all"] = {
            "mean": statistics.fmean(e["mean"] for e in out.values()),
            "se": se,
            "n": sum(e["n"] for e in out.values()),
        }
    return out


def _ranks(values: Mapping[str, float], higher_better: bool) -> dict[str, float]:
    """Average ranks (1 = best; ties share the mean of their positions)."""
    order = sorted(values, key=lambda k: -values[k] if higher_better else values[k])
    ranks: dict[str, float] = {}
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i : j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def average_ranks(means: Mapping[str, Mapping[str, float]], metric: str) -> dict[str, float]:
    """``{label: mean over datasets of its rank}`` from ``means[label][dataset]``."""
    datasets = sorted({d for m in means.values() for d in m})
    per: dict[str, list[float]] = {}
    for d in datasets:
        vals = {lab: m[d] for lab, m in means.items() if d in m}
        for lab, r in _ranks(vals, metric in HIGHER_IS_BETTER).items():
            per.setdefault(lab, []).append(r)
    return {lab: statistics.fmean(rs) for lab, rs in per.items()}


def _metrics(rows: Sequence[Mapping], suite: Suite) -> list[str]:
    tasks = {str(r.get("task", "regression")) for r in rows}
    out: list[str] = [m for m in suite.metrics if any(m in r for r in rows)]  # the scorer's columns first
    for t in sorted(tasks, key=lambda t: t != "regression"):
        out += [m for m in metrics_for_task(t, suite.selection) if m not in out]
    return out


def _row_entry(rows, label: str, metrics: Sequence[str], units: set[Unit]) -> dict:
    datasets: dict[str, dict] = {}
    for m in metrics:
        vals = {u: v for u, v in unit_values(rows, label, m).items() if u in units}
        for ds in sorted({u[0] for u in vals}):
            datasets.setdefault(ds, {})[m] = mean_se([v for u, v in sorted(vals.items()) if u[0] == ds])
    secs = [
        float(r["fit_seconds"])
        for r in rows
        if r["label"] == label and r.get("fit_seconds") is not None and (r["dataset"], r["split"]) in units
    ]
    return {"label": label, "datasets": datasets, "fit_seconds": statistics.fmean(secs) if secs else None}


def build_leaderboard(
    suite: Suite,
    bench_label: str,
    bench_rows: Sequence[Mapping],
    zoo_rows: Sequence[Mapping],
    *,
    off_budget: bool,
    source: str,
    note: str | None = None,
    command: str = "",
    run: Mapping | None = None,
) -> dict:
    """The leaderboard document (plain data; see the module docstring for the statistics).

    ``run``: what this run did where it may depart from the suite (``{"steps": N, "splits": [...],
    "seeds": K}``), shown beside the suite's budget."""
    bench = [{**r, "label": f"{bench_label} (bench)"} for r in bench_rows]
    label = f"{bench_label} (bench)"
    rows = [*bench, *zoo_rows]
    units = {(str(r["dataset"]), int(r["split"])) for r in bench}
    metrics = _metrics(rows, suite)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    entries = {lab: _row_entry(rows, lab, metrics, units) for lab in labels}
    ranks = {
        m: average_ranks(
            {
                lab: {d: e[m]["mean"] for d, e in en["datasets"].items() if m in e}
                for lab, en in entries.items()
            },
            m,
        )
        for m in metrics
    }
    for lab, en in entries.items():
        en["rank"] = {m: ranks[m].get(lab) for m in metrics}
        en["bench"] = lab == label
    first = metrics[0]
    order = sorted(entries.values(), key=lambda e: (e["rank"][first] is None, e["rank"][first] or 0.0))
    paired = {
        lab: {
            m: paired_difference(unit_values(bench, label, m), unit_values(zoo_rows, lab, m)) for m in metrics
        }
        for lab in labels
        if lab != label
    }
    title = f"zoo bench: {bench_label} on suite {suite.name}"
    if off_budget:
        title += " (smoke run, OFF the suite's budget: not comparable to the zoo rows)"
    return {
        "title": title,
        "suite": suite.name,
        "description": suite.description,
        "off_budget": off_budget,
        "budget": suite.budget.to_dict(),
        "hidden": list(suite.hidden),
        "run": dict(run or {}),
        "bench": label,
        "metrics": metrics,
        "datasets": sorted({u[0] for u in units}, key=list(suite.datasets).index),
        "units": sorted([list(u) for u in units]),
        "zoo_rows_source": source,
        "note": note,
        "command": command,
        "rows": order,
        "paired": paired,
    }


def _cell(e: Mapping | None, digits: int = 3) -> str:
    if not e:
        return "–"
    se = e.get("se")
    return f"{e['mean']:.{digits}g}" + ("" if se is None else f" ± {se:.2g}")


def _run_text(run: Mapping) -> str:
    parts = [] if run.get("steps") is None else [f"{run['steps']} steps/sweeps (off budget)"]
    if run.get("splits") is not None:
        parts.append(f"splits {run['splits']}")
    if run.get("seeds") is not None:
        parts.append(f"{run['seeds']} seed(s) per split")
    return ", ".join(parts) or "the suite's budget"


def leaderboard_markdown(lb: Mapping) -> str:
    """The leaderboard as Markdown: one ranked table per metric, then the paired differences."""
    b = lb["budget"]
    lines = [f"# {lb['title']}", "", lb["description"], ""]
    lines.append(
        f"Suite budget: {b['steps']} SVI steps at lr {b['lr']}, batch {b['batch_size']}, {b['cavi_sweeps']} "
        f"CAVI sweeps, hidden {tuple(lb['hidden'])}.  This run: {_run_text(lb.get('run') or {})}.  "
        f"Zoo rows: {lb['zoo_rows_source']}.  Units: {len(lb['units'])} (dataset, split) pairs."
    )
    if lb.get("note"):
        lines += ["", f"**Note:** {lb['note']}"]
    if lb.get("command"):
        lines += ["", f"Command: `{lb['command']}`"]
    for m in lb["metrics"]:
        better = "higher" if m in HIGHER_IS_BETTER else "lower"
        lines += [
            "",
            f"## {m} (mean ± SE over splits; {better} is better; rank = mean rank over datasets)",
            "",
        ]
        lines.append("| rank | row | " + " | ".join(lb["datasets"]) + " | fit s |")
        lines.append("|---|---|" + "---|" * (len(lb["datasets"]) + 1))
        for e in sorted(lb["rows"], key=lambda e: (e["rank"][m] is None, e["rank"][m] or 0.0)):
            name = f"**{e['label']}**" if e["bench"] else e["label"]
            rank = "–" if e["rank"][m] is None else f"{e['rank'][m]:.2f}"
            cells = [_cell(e["datasets"].get(d, {}).get(m)) for d in lb["datasets"]]
            fs = "–" if e["fit_seconds"] is None else f"{e['fit_seconds']:.1f}"
            lines.append(f"| {rank} | {name} | " + " | ".join(cells) + f" | {fs} |")
    if lb["paired"]:
        lines += [
            "",
            f"## Paired differences: {lb['bench']} minus each zoo row (mean ± SE over common splits)",
        ]
        for m in lb["metrics"]:
            lines += ["", f"### {m}", "", "| zoo row | " + " | ".join([*lb["datasets"], "all"]) + " |"]
            lines.append("|---|" + "---|" * (len(lb["datasets"]) + 1))
            for lab, per in lb["paired"].items():
                cells = [_cell(per[m].get(d), 2) for d in [*lb["datasets"], "all"]]
                lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_leaderboard(lb: Mapping, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``leaderboard.{json,md,png}`` together (:func:`zoo.io.atomic_write_many`: all three are written
    to temporaries first, so a failure — a full disk — replaces none of an earlier leaderboard's files)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = leaderboard_files(lb, out)
    atomic_write_many(files)
    return {p.suffix[1:]: p for p in files}


def leaderboard_files(lb: Mapping, out_dir: str | os.PathLike) -> dict[Path, bytes]:
    """The contents of ``leaderboard.{json,md,png}`` in ``out_dir`` (nothing written)."""
    from zoo.experiments.leaderboard_plot import leaderboard_png

    out = Path(out_dir)
    return {
        out / "leaderboard.json": dumps_json(dict(lb)).encode("utf-8"),
        out / "leaderboard.md": leaderboard_markdown(lb).encode("utf-8"),
        out / "leaderboard.png": leaderboard_png(lb),
    }


def committed_rows_path(suite: str) -> Path:
    """``$ZOO_BENCH_RESULTS/bench-<suite>.json``, else the repository's ``benchmarks/results`` next to the
    installed package."""
    env = os.environ.get("ZOO_BENCH_RESULTS")
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    return root / f"bench-{suite}.json"


def load_zoo_rows(suite: Suite, path: str | os.PathLike | None = None) -> tuple[list[dict], str, str | None]:
    """``(rows, source, note)`` of the committed zoo rows of ``suite``; missing rows give ``[]`` and a note
    saying how to compute them; rows computed under another suite definition, or under other model settings
    than today's (:func:`zoo.experiments.bench_identity.stale_zoo_rows`: options, guide options, fit
    defaults), a note saying so."""
    p = Path(path) if path is not None else committed_rows_path(suite.name)
    if not p.exists():
        note = (
            f"no zoo rows for suite {suite.name!r}: {p} is missing (compute them with "
            f"`python benchmarks/bench_zoo_rows.py --suite {suite.name} --work DIR` in a checkout of the "
            "repository, or point $ZOO_BENCH_RESULTS at a folder holding them); only the bench row is shown"
        )
        logger.warning(note)
        return [], str(p), note
    doc = json.loads(p.read_text())
    notes = []
    if doc.get("suite_identity") != json.loads(json.dumps(suite.identity())):
        notes.append(f"the zoo rows in {p} were computed under another definition of suite {suite.name!r}")
    labels = doc.get("specs") or list(dict.fromkeys(r["label"] for r in doc.get("rows", [])))
    stale = stale_zoo_rows(doc.get("spec_identities"), labels)
    if stale:
        notes.append(
            f"the zoo rows in {p} were computed under other settings than today's "
            f"(recompute them with `python benchmarks/bench_zoo_rows.py --suite {suite.name} --work DIR`): "
            + " | ".join(stale)
        )
    for n in notes:
        logger.warning(n)
    return list(doc.get("rows", [])), str(p), "; ".join(notes) or None


def zoo_rows_markdown(result: Mapping) -> str:
    """The committed zoo rows' summary table (mean ± SE over splits per dataset)."""
    rows = result["rows"]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    metrics = [m for m in ("nll", "rmse", "accuracy", "ece", "tpr", "fpr") if any(m in r for r in rows)]
    lines = [f"# zoo bench rows: suite {result['suite']}", "", result["description"], ""]
    v = dict(result["versions"])
    changed = v.pop("uncommitted_changes", None)
    lines += [f"Command: `{result['command']}`  ", f"Versions: {v}  "]
    if changed:
        lines.append(f"Computed from a working tree with uncommitted changes to: {', '.join(changed)}  ")
    lines += [
        f"Machine: {result['machine']}; wall time of the final invocation {result['wall_seconds']:.0f} s "
        f"(an interrupted run resumes from its journal); fitting and scoring all {len(rows)} fits took "
        f"{result.get('fits_seconds', float('nan')):.0f} s",
        "",
    ]
    for m in metrics:
        lines += [f"## {m} (mean ± SE over splits)", "", "| row | " + " | ".join(datasets) + " | fit s |"]
        lines.append("|---|" + "---|" * (len(datasets) + 1))
        for lab in dict.fromkeys(r["label"] for r in rows):
            vals = unit_values(rows, lab, m)
            cells = [
                _cell(
                    mean_se([v for u, v in vals.items() if u[0] == d])
                    if any(u[0] == d for u in vals)
                    else None
                )
                for d in datasets
            ]
            secs = [r["fit_seconds"] for r in rows if r["label"] == lab]
            lines.append(f"| {lab} | " + " | ".join(cells) + f" | {statistics.fmean(secs):.1f} |")
        lines.append("")
    return "\n".join(lines)
