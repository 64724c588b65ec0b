"""What ``zoo reproduce`` writes of a protocol's rows (:mod:`zoo.experiments.reproduce`): the summary of
``NAME.json`` (:func:`summarize`: mean ± sd, min and max over splits per variant and dataset) and the table of
``NAME.md`` (:func:`protocol_markdown`: one row per variant and dataset next to the paper's numbers, and the
per-covariate inclusion tables of a variable-selection protocol, :mod:`zoo.experiments.selection_table`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from zoo.experiments.protocol import Protocol
from zoo.experiments.selection_table import inclusion_lines

__all__ = ["summarize", "protocol_markdown"]


def summarize(rows: list[dict], metrics: Sequence[str]) -> dict:
    """``{variant: {dataset: entry}}``: per (variant, dataset) the number of splits, each of ``metrics``
    (and ``fit_seconds``, ``sweeps``) as mean, sd (0 for one split), min and max over the rows that have
    it, and for closed-form fits how many stopped by the convergence rule (``converged``)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["dataset"]), []).append(r)
    summary = {}
    for (variant, ds), rs in groups.items():
        entry = {"n_splits": len(rs)}
        if any("sweeps" in r for r in rs):  # closed-form fits: the stopping rule fired, after how many sweeps
            entry["converged"] = sum(bool(r.get("converged")) for r in rs)
        for m in (*metrics, "fit_seconds", "sweeps"):
            vals = [r[m] for r in rs if r.get(m) is not None]
            if vals:
                entry[m] = {
                    "mean": statistics.fmean(vals),
                    "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                    "min": min(vals),
                    "max": max(vals),
                }
        summary.setdefault(variant, {})[ds] = entry
    return summary


def _cpu(header: dict) -> str:
    """`` (CPU, kernels)`` of a header that records its host (:mod:`zoo.experiments.host`), else ``""``."""
    h = header.get("host")
    return f" ({h['cpu']}, {h['isa']} kernels)" if h else ""


def protocol_markdown(p: Protocol, summary: dict, header: dict) -> str:
    """``NAME.md``: the command, machine and wall time of ``header`` (and of the runs merged into it), a
    row per (variant, dataset) of :func:`summarize` with the paper's numbers beside it, then the inclusion
    tables of a variable-selection protocol (:func:`zoo.experiments.selection_table.inclusion_lines`)."""
    lines = [
        f"# {p.name}",
        "",
        p.description,
        "",
        f"Command: `{header['command']}`  ",
        f"Machine: {header['machine']}{_cpu(header)}; wall time {header['wall_seconds']:.0f} s; "
        f"torch {header['torch']}",
        "",
    ]
    for h in header.get("history", []):
        lines[-1:-1] = [f"Merged with {h['rows']} rows from `{h['command']}` ({h['wall_seconds']:.0f} s)  "]
    cols = list(p.metrics)
    closed_form = any("converged" in e for per_ds in summary.values() for e in per_ds.values())
    extra = " converged | sweeps |" if closed_form else ""
    lines.append("| variant | dataset | splits | " + " | ".join(cols) + " |" + extra + " fit s | paper |")
    lines.append("|" + "---|" * (len(cols) + 5 + 2 * closed_form))
    for variant, per_ds in summary.items():
        for ds, e in per_ds.items():
            cells = [f"{e[m]['mean']:.3g} ± {e[m]['sd']:.2g}" if m in e else "–" for m in cols]
            if closed_form:
                sweeps = f"{e['sweeps']['mean']:.0f}" if "sweeps" in e else "–"
                cells += [f"{e['converged']}/{e['n_splits']}" if "converged" in e else "–", sweeps]
            ref = p.paper.get((variant, ds), {})
            ref_s = ", ".join(f"{k} {v}" for k, v in ref.items()) or "–"
            fs = e.get("fit_seconds", {}).get("mean", float("nan"))
            lines.append(
                f"| {variant} | {ds} | {e['n_splits']} | " + " | ".join(cells) + f" | {fs:.1f} | {ref_s} |"
            )
    lines += inclusion_lines(header.get("rows", ()))
    if p.paper_source:
        lines += ["", f"Paper numbers: {p.paper_source}"]
    return "\n".join(lines) + "\n"
