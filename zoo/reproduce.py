"""Paper protocols run over splits: ``zoo reproduce NAME --out DIR``.

A :class:`Protocol` lists its runs (model × dataset × split × options); :func:`run_protocol` executes
them (optionally in worker processes, one torch thread each), then writes ``DIR/NAME.json`` (per-split
rows + mean ± sd per dataset/variant) and ``DIR/NAME.md`` (a table next to the paper's numbers).
Committed results live in ``benchmarks/results/``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .jobs import dumps_json, fit_on_dataset

__all__ = [
    "Protocol",
    "RunSpec",
    "PROTOCOLS",
    "available_protocols",
    "check_protocol_data",
    "register_protocol",
    "run_protocol",
]


@dataclass(frozen=True)
class RunSpec:
    variant: str
    model: str
    dataset: str
    split: int
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str
    runs: Callable[[Sequence[int] | None], list[RunSpec]]
    metrics: Sequence[str]
    paper: dict = field(default_factory=dict)  # {(variant, dataset): {metric: value}} reference numbers
    paper_source: str = ""


PROTOCOLS: dict[str, Protocol] = {}


def available_protocols() -> list[str]:
    from .registry import load_plugins

    load_plugins()
    return sorted(PROTOCOLS)


def register_protocol(p: Protocol) -> Protocol:
    if p.name in PROTOCOLS:
        raise ValueError(f"name: protocol {p.name!r} already registered")
    PROTOCOLS[p.name] = p
    return p


def _run_one(spec: RunSpec) -> dict:
    torch.set_num_threads(1)
    import pyro

    pyro.enable_validation(False)
    t0 = time.perf_counter()
    out = fit_on_dataset(
        spec.model, spec.dataset, split=spec.split, progress=False, seed=spec.split, **spec.kwargs
    )
    row = {"variant": spec.variant, **out.metrics, "total_seconds": round(time.perf_counter() - t0, 3)}
    return row


def _summarize(rows: list[dict], metrics: Sequence[str]) -> dict:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["dataset"]), []).append(r)
    summary = {}
    for (variant, ds), rs in groups.items():
        entry = {"n_splits": len(rs)}
        for m in (*metrics, "fit_seconds"):
            vals = [r[m] for r in rs if r.get(m) is not None]
            if vals:
                entry[m] = {
                    "mean": statistics.fmean(vals),
                    "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                }
        summary.setdefault(variant, {})[ds] = entry
    return summary


def _markdown(p: Protocol, summary: dict, header: dict) -> str:
    lines = [
        f"# {p.name}",
        "",
        p.description,
        "",
        f"Command: `{header['command']}`  ",
        f"Machine: {header['machine']}; wall time {header['wall_seconds']:.0f} s; torch {header['torch']}",
        "",
    ]
    cols = list(p.metrics)
    lines.append("| variant | dataset | splits | " + " | ".join(cols) + " | fit s | paper |")
    lines.append("|" + "---|" * (len(cols) + 5))
    for variant, per_ds in summary.items():
        for ds, e in per_ds.items():
            cells = [f"{e[m]['mean']:.3g} ± {e[m]['sd']:.2g}" if m in e else "–" for m in cols]
            ref = p.paper.get((variant, ds), {})
            ref_s = ", ".join(f"{k} {v}" for k, v in ref.items()) or "–"
            fs = e.get("fit_seconds", {}).get("mean", float("nan"))
            lines.append(
                f"| {variant} | {ds} | {e['n_splits']} | " + " | ".join(cells) + f" | {fs:.1f} | {ref_s} |"
            )
    if p.paper_source:
        lines += ["", f"Paper numbers: {p.paper_source}"]
    return "\n".join(lines) + "\n"


def _preflight(specs: Sequence[RunSpec]) -> None:
    """Load each dataset of the protocol once before any worker starts, so a missing data root or a bad
    split fails at once with the loader's message (and nothing is written)."""
    from .data import load_dataset

    seen = set()
    for s in specs:
        if s.dataset not in seen:
            seen.add(s.dataset)
            load_dataset(s.dataset, s.split, data_dir=s.kwargs.get("data_dir"))


def check_protocol_data(name: str, splits: Sequence[int] | None = None) -> None:
    """Raise (``FileNotFoundError``/``ValueError``) now if protocol ``name`` cannot load its data."""
    if name not in available_protocols():
        raise ValueError(
            f"protocol: unknown protocol {name!r}; available: {', '.join(available_protocols())}"
        )
    _preflight(PROTOCOLS[name].runs(splits))


def run_protocol(
    name: str,
    out_dir: str | os.PathLike,
    *,
    splits: Sequence[int] | None = None,
    jobs: int = 1,
    command: str = "",
    overrides: dict | None = None,
    progress: bool = True,
) -> dict:
    """Run protocol ``name`` and write ``NAME.json`` / ``NAME.md`` atomically into ``out_dir``."""
    from .checkpoint import atomic_write_bytes

    if name not in available_protocols():
        raise ValueError(
            f"protocol: unknown protocol {name!r}; available: {', '.join(available_protocols())}"
        )
    p = PROTOCOLS[name]
    specs = p.runs(splits)
    if overrides:
        specs = [RunSpec(s.variant, s.model, s.dataset, s.split, {**s.kwargs, **overrides}) for s in specs]
    _preflight(specs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows: list[dict] = []
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            for i, row in enumerate(ex.map(_run_one, specs)):
                rows.append(row)
                if progress:
                    print(
                        f"[{i + 1}/{len(specs)}] {row['variant']} {row['dataset']} split {row['split']}: "
                        + ", ".join(f"{m}={row.get(m, float('nan')):.4g}" for m in p.metrics),
                        flush=True,
                    )
    else:
        for i, s in enumerate(specs):
            rows.append(_run_one(s))
            if progress:
                row = rows[-1]
                print(
                    f"[{i + 1}/{len(specs)}] {row['variant']} {row['dataset']} split {row['split']}: "
                    + ", ".join(f"{m}={row.get(m, float('nan')):.4g}" for m in p.metrics),
                    flush=True,
                )
    summary = _summarize(rows, p.metrics)
    header = {
        "protocol": name,
        "command": command or f"zoo reproduce {name} --out {out_dir}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, jobs={jobs}",
        "torch": torch.__version__,
        "wall_seconds": time.perf_counter() - t0,
    }
    doc = {
        **header,
        "description": p.description,
        "summary": summary,
        "rows": rows,
        "paper": {f"{k[0]}|{k[1]}": v for k, v in p.paper.items()},
        "paper_source": p.paper_source,
    }
    atomic_write_bytes(out / f"{name}.json", dumps_json(doc).encode())
    atomic_write_bytes(out / f"{name}.md", _markdown(p, summary, header).encode())
    return doc
