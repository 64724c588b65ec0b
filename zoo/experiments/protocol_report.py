"""What ``zoo reproduce`` writes of a protocol's rows (:mod:`zoo.experiments.reproduce`): the summary of
``NAME.json`` (:func:`summarize`: mean ± sd, min and max over splits per variant and dataset) and the table of
``NAME.md`` (:func:`protocol_markdown`: one row per variant and dataset next to the paper's numbers, and the
per-covariate inclusion tables of a variable-selection protocol, :mod:`zoo.experiments.selection_table`);
which overrides take a run off the protocol's own settings (:func:`departures`, marked "off budget" in both
files), the overrides a written ``NAME.json`` was made with (:func:`recorded_overrides`), ``NAME.md`` written
again from a ``NAME.json`` (:func:`render_markdown`) and the one-line list of ``zoo reproduce --list``
(:func:`protocol_list`)."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping, Sequence

from zoo.experiments.protocol import Protocol, RunSpec
from zoo.experiments.selection_table import inclusion_lines

__all__ = [
    "departures",
    "off_budget_line",
    "protocol_list",
    "protocol_markdown",
    "recorded_overrides",
    "render_markdown",
    "summarize",
]

_MISSING = object()


def departures(specs: Sequence[RunSpec], overrides: Mapping | None) -> dict:
    """The ``overrides`` that change a selected run of the protocol (``specs``, before the overrides):
    ``steps`` wherever a run does not set that very value (a run without ``steps`` has its entry's budget),
    any other key where a run sets it to another value.  Non-empty means the run is off the protocol's
    budget: a smoke run or an ablation, not comparable with the paper's numbers or the committed rows."""
    out = {}
    for k, v in (overrides or {}).items():
        own = [s.kwargs.get(k, _MISSING) for s in specs if k == "steps" or k in s.kwargs]
        if any(o is _MISSING or _plain(o) != _plain(v) for o in own):
            out[k] = v
    return out


def _plain(obj: object) -> object:
    return json.loads(json.dumps(obj))


def _value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def recorded_overrides(doc: Mapping) -> dict:
    """The overrides a ``NAME.json`` was made with: its ``overrides`` field, else (files written before it
    was recorded) the ``--steps N`` and ``--set KEY=VALUE`` of its recorded command."""
    if isinstance(doc.get("overrides"), dict):
        return _plain(doc["overrides"])
    command = str(doc.get("command") or "")
    found = {k: _value(v) for k, v in re.findall(r"--set[ =]([A-Za-z_]\w*)=(\S+)", command)}
    steps = re.search(r"--steps[ =](\d+)", command)
    if steps:
        found["steps"] = int(steps.group(1))
    return found


def off_budget_line(header: Mapping) -> list[str]:
    """The "off budget" marker of ``NAME.md`` (empty when the run kept the protocol's own settings)."""
    off = header.get("off_budget")
    if off is None and "overrides" not in header:  # written before the marker: its command says
        off = recorded_overrides(header)
    if not off:
        return []
    return [
        f"**Off budget**: run with `{json.dumps(off, sort_keys=True)}` in place of the protocol's own "
        "settings (a smoke run or an ablation); these rows are not comparable with the paper's numbers.",
        "",
    ]


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
        *off_budget_line(header),
    ]
    at = lines.index("", 4)  # the merged runs go under the command and machine lines
    lines[at:at] = [
        f"Merged with {h['rows']} rows from `{h['command']}` ({h['wall_seconds']:.0f} s)  "
        for h in header.get("history", [])
    ]
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


def render_markdown(p: Protocol, doc: Mapping) -> str:
    """``NAME.md`` written again from a ``NAME.json`` (``doc``): its rows, summary, command, machine and
    history, with the protocol's current description and paper source."""
    return protocol_markdown(p, doc["summary"], doc)


_ABBREVIATIONS = {"app", "eq", "eqs", "fig", "figs", "sec", "al", "cf", "e.g", "i.e", "vs", "no", "tab"}


def _first(text: str, width: int) -> str:
    """The first sentence of ``text`` on one line, cut to ``width`` characters."""
    line = " ".join(text.split())
    for m in re.finditer(r"(\S+)\. (?=[A-Z(])", line):
        if m.group(1).split("(")[-1].lower() not in _ABBREVIATIONS:
            line = line[: m.start() + len(m.group(1))]
            break
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def protocol_list(protocols: Mapping[str, Protocol], width: int = 100) -> list[str]:
    """``zoo reproduce --list``: per protocol its name, what it runs (the description's first sentence) and
    the paper's table or section it is compared with (``paper_source``)."""
    lines = []
    for name in sorted(protocols):
        p = protocols[name]
        lines += [name, f"  runs:  {_first(p.description, width)}"]
        lines.append(f"  paper: {_first(p.paper_source, width) if p.paper_source else '(no paper numbers)'}")
    return lines
