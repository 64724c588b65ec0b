"""Conformal intervals of the registry defaults on the UCI standard splits (issue 17): per split, the fit on
all training rows (its Gaussian 95 % interval, as the protocols score it), its CV+ interval from ``K`` more
fits (``fit_on_dataset(..., conformal_folds=K)``, Barber et al. 2021) and the split-conformal interval of a
fit on 80 % of the rows (``conformal=0.2``, Lei et al. 2018).

Each finished split is journaled to ``OUT/conformal-uci.partial.jsonl`` (an interrupted run resumes there);
the summary goes to ``OUT/conformal-uci.{json,md}``, over the rows already committed there (the rows a run
redoes are replaced, the others kept).

Usage::

    ZOO_DATA_DIR=/work/shared/data python benchmarks/conformal_uci.py --models mfvi-bnn \\
        --datasets yacht --splits 0 1 2 [--folds 5] [--share 0.2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from zoo.io import atomic_write_text

NAME = "conformal-uci"
FIELDS = ("coverage95", "coverage_cv_plus", "coverage_conformal", "width_ratio", "nll", "nll_conformal")


def fit_split(model: str, dataset: str, split: int, folds: int, share: float) -> dict:
    """One split's row: the full fit's test metrics with its CV+ fields, and the split-conformal fit's."""
    from zoo.experiments.runs import fit_on_dataset

    t0 = time.perf_counter()
    data = f"uci:{dataset}"
    cv = fit_on_dataset(model, data, split=split, seed=split, progress=False, conformal_folds=folds).metrics
    sc = fit_on_dataset(model, data, split=split, seed=split, progress=False, conformal=share).metrics
    return {
        "model": model,
        "dataset": dataset,
        "split": split,
        "folds": folds,
        "share": share,
        "rmse": cv["rmse"],
        "nll": cv["nll"],
        "coverage95": cv["coverage95"],
        "coverage_cv_plus": cv["coverage_cv_plus"],
        "width_ratio": cv["width_cv_plus"] / cv["width_gaussian"],
        "coverage_conformal": sc["coverage_conformal"],
        "nll_conformal": sc["nll_conformal"],
        "rmse_conformal": sc["rmse"],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _key(row: dict) -> tuple:
    return row["model"], row["dataset"], row["split"]


def merge_rows(new: list[dict], earlier: Path) -> list[dict]:
    """The rows of ``earlier`` (a committed ``conformal-uci.json``) with those ``new`` redoes replaced, then
    the rest of ``new``."""
    old = json.loads(earlier.read_text())["rows"] if earlier.exists() else []
    fresh = {_key(r): r for r in new}
    kept = [fresh.pop(_key(r), r) for r in old]
    return kept + list(fresh.values())


def _mean(rows: list[dict], field: str) -> str:
    vals = [r[field] for r in rows if r.get(field) is not None]
    return f"{statistics.fmean(vals):.3f}" if vals else "–"


def table(rows: list[dict]) -> list[str]:
    """Markdown lines: per model, dataset and block of ten splits (0–9: the calibration target's), the mean
    of each field."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["dataset"], r["folds"], r["share"], r["split"] // 10), []).append(r)
    lines = [
        "| model | dataset | splits | coverage95: Gaussian | CV+ | split conformal | CV+ width / Gaussian "
        "width | NLL: full fit | split conformal | seconds per split |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, dataset, folds, share, _), rs in sorted(groups.items()):
        splits = sorted(r["split"] for r in rs)
        lines.append(
            f"| {model} | {dataset} | {splits[0]}–{splits[-1]} ({len(splits)}) | {_mean(rs, 'coverage95')} | "
            f"{_mean(rs, 'coverage_cv_plus')} (K={folds}) | {_mean(rs, 'coverage_conformal')} ({share:g}) | "
            f"{_mean(rs, 'width_ratio')} | {_mean(rs, 'nll')} | {_mean(rs, 'nll_conformal')} | "
            f"{statistics.fmean(r['seconds'] for r in rs):.0f} |"
        )
    return lines


def render(rows: list[dict], out: Path, commands: list[str]) -> None:
    doc = {"commands": commands, "rows": rows}
    head = [
        f"# {NAME}",
        "",
        "Conformal intervals of registry defaults on UCI standard splits (`benchmarks/conformal_uci.py`): "
        "the fit on all training rows (Gaussian 95 % coverage as the protocols score it), its CV+ interval "
        "(`zoo fit --conformal-folds K`, Barber, Candès, Ramdas & Tibshirani 2021, Ann. Statist. 49, §3) and "
        "the split-conformal interval of a fit on the other rows (`zoo fit --conformal SHARE`, Lei et al. "
        "2018, JASA 113, §2.2). Means over splits; one CPU thread per process.",
        "",
        "Commands: " + "; ".join(f"`{c}`" for c in commands),
        "",
    ]
    atomic_write_text(out / f"{NAME}.json", json.dumps(doc, indent=1) + "\n")
    atomic_write_text(out / f"{NAME}.md", "\n".join([*head, *table(rows), ""]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["mfvi-bnn"])
    p.add_argument("--datasets", nargs="+", default=["yacht"])
    p.add_argument("--splits", type=int, nargs="+", default=[0])
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--share", type=float, default=0.2)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = p.parse_args(argv)
    if not os.environ.get("ZOO_DATA_DIR"):
        p.error("needs ZOO_DATA_DIR (e.g. /work/shared/data)")
    from zoo.experiments.config import RunConfig
    from zoo.experiments.registry import get_entry

    try:  # every setting checked before any fit
        for m in a.models:
            get_entry(m)
        RunConfig(conformal_folds=a.folds)
        RunConfig(conformal=a.share)
    except (TypeError, ValueError) as e:
        p.error(str(e))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / f"{NAME}.partial.jsonl"
    done = [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []
    seen = {_key(r) for r in done if (r["folds"], r["share"]) == (a.folds, a.share)}
    for model in a.models:
        for dataset in a.datasets:
            for split in a.splits:
                if (model, dataset, split) in seen:
                    continue
                row = fit_split(model, dataset, split, a.folds, a.share)
                with journal.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                done.append(row)
                print(f"{model} {dataset} {split}: " + ", ".join(f"{k}={row[k]:.3f}" for k in FIELDS))
    earlier = out / f"{NAME}.json"
    commands = json.loads(earlier.read_text())["commands"] if earlier.exists() else []
    command = "python benchmarks/conformal_uci.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    render(merge_rows(done, earlier), out, [*commands, command])
    journal.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
