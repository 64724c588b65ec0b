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
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import torch

from zoo.experiments.runs import dumps_json, fit_on_dataset

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
    from zoo.experiments.registry import load_plugins

    load_plugins()
    return sorted(PROTOCOLS)


def register_protocol(p: Protocol) -> Protocol:
    if p.name in PROTOCOLS:
        raise ValueError(f"name: protocol {p.name!r} already registered")
    PROTOCOLS[p.name] = p
    return p


def _run_one(spec: RunSpec) -> dict:
    """One protocol row; ``ensemble: K`` in the spec's kwargs makes it a K-member ELBO-weighted ensemble
    (:func:`zoo.experiments.ensemble.fit_ensemble`, members fitted in this worker)."""
    torch.set_num_threads(1)
    import pyro

    pyro.enable_validation(False)
    t0 = time.perf_counter()
    kwargs = dict(spec.kwargs)
    k = int(kwargs.pop("ensemble", 1))
    if k > 1:
        from zoo.experiments.ensemble import fit_ensemble

        zeta = float(kwargs.pop("zeta", 0.1))
        out = fit_ensemble(
            spec.model, spec.dataset, k=k, zeta=zeta, split=spec.split, seed=spec.split, **kwargs
        )
        metrics = out.metrics
    else:
        metrics = fit_on_dataset(
            spec.model, spec.dataset, split=spec.split, progress=False, seed=spec.split, **kwargs
        ).metrics
    row = {"variant": spec.variant, **metrics, "total_seconds": round(time.perf_counter() - t0, 3)}
    # rows are keyed by the spec's dataset string: an alias (``uci:boston``) must not lose its row to the
    # loader's canonical name (``uci:bostonHousing``), which is kept beside it
    if row.get("dataset") != spec.dataset:
        row["dataset_name"] = row.get("dataset")
        row["dataset"] = spec.dataset
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
                    "min": min(vals),
                    "max": max(vals),
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
    for h in header.get("history", []):
        lines[-1:-1] = [f"Merged with {h['rows']} rows from `{h['command']}` ({h['wall_seconds']:.0f} s)  "]
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
    from zoo.data import load_dataset

    seen = set()
    for s in specs:
        if s.dataset not in seen:
            seen.add(s.dataset)
            load_dataset(s.dataset, s.split, data_dir=s.kwargs.get("data_dir"))


def select_variants(specs: list[RunSpec], variants: Sequence[str] | None) -> list[RunSpec]:
    """The runs of the named ``variants`` only (all runs for ``None``); an unknown name is a ValueError."""
    if variants is None:
        return specs
    known = list(dict.fromkeys(s.variant for s in specs))
    unknown = [v for v in variants if v not in known]
    if unknown or not variants:
        raise ValueError(f"variants: unknown {unknown or variants}; this protocol has {known}")
    return [s for s in specs if s.variant in set(variants)]


def check_protocol_data(
    name: str, splits: Sequence[int] | None = None, variants: Sequence[str] | None = None
) -> None:
    """Raise (``FileNotFoundError``/``ValueError``) now if protocol ``name`` cannot load its data (or names
    no such variant)."""
    if name not in available_protocols():
        raise ValueError(
            f"protocol: unknown protocol {name!r}; available: {', '.join(available_protocols())}"
        )
    _preflight(select_variants(PROTOCOLS[name].runs(splits), variants))


def _key(variant: str, dataset: str, split: int) -> tuple[str, str, int]:
    return (str(variant), str(dataset), int(split))


def _spec_key(s: RunSpec) -> tuple[str, str, int]:
    return _key(s.variant, s.dataset, s.split)


def _row_key(r: dict) -> tuple[str, str, int]:
    return _key(r["variant"], r["dataset"], r["split"])


def _read_journal(path: Path, signature: dict) -> dict:
    """Rows of an interrupted run with the same protocol and overrides (``{}`` if none or different)."""
    import json

    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    try:
        if not lines or json.loads(lines[0]) != signature:
            return {}
    except json.JSONDecodeError:
        return {}
    done = {}
    for line in lines[1:]:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the interruption
            continue
        done[_row_key(r)] = r
    return done


def _append_line(fh, text: str) -> None:
    fh.write(text + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def run_protocol(
    name: str,
    out_dir: str | os.PathLike,
    *,
    splits: Sequence[int] | None = None,
    jobs: int = 1,
    command: str = "",
    overrides: dict | None = None,
    progress: bool = True,
    merge: bool = False,
    variants: Sequence[str] | None = None,
) -> dict:
    """Run protocol ``name`` and write ``NAME.json`` / ``NAME.md`` atomically into ``out_dir``.

    Each finished fit is appended to ``DIR/NAME.partial.jsonl`` (fsynced); an interrupted run started
    again with the same protocol and overrides resumes from it, and it is removed once the results are
    written.  ``merge=True`` keeps the rows of an existing ``DIR/NAME.json`` whose (variant, dataset,
    split) this run does not redo, so a protocol can be completed split range by split range (and, with
    ``variants``, variant by variant)."""
    import json

    from zoo.infer.checkpoint import atomic_write_bytes

    if name not in available_protocols():
        raise ValueError(
            f"protocol: unknown protocol {name!r}; available: {', '.join(available_protocols())}"
        )
    p = PROTOCOLS[name]
    specs = select_variants(p.runs(splits), variants)
    if overrides:
        # ``steps`` applies to every fit; any other key only where the protocol sets it (so e.g. a
        # post-training override does not reach a baseline that has no post-training)
        specs = [
            RunSpec(
                s.variant,
                s.model,
                s.dataset,
                s.split,
                {**s.kwargs, **{k: v for k, v in overrides.items() if k == "steps" or k in s.kwargs}},
            )
            for s in specs
        ]
    _preflight(specs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / f"{name}.partial.jsonl"
    signature = {"protocol": name, "overrides": overrides or {}}
    done = _read_journal(journal, signature)
    todo = [s for s in specs if _spec_key(s) not in done]
    if progress and done:
        print(
            f"resuming {name}: {len(specs) - len(todo)} of {len(specs)} fits found in {journal}", flush=True
        )
    t0 = time.perf_counter()
    results: dict[tuple[str, str, int], dict] = {k: v for k, v in done.items()}
    wanted = {_spec_key(s) for s in specs}
    with open(journal, "w") as fh:
        _append_line(fh, json.dumps(signature))
        for r in done.values():
            _append_line(fh, dumps_json(r).replace("\n", " "))

        def record(row: dict) -> None:
            results[_row_key(row)] = row
            _append_line(fh, dumps_json(row).replace("\n", " "))
            if progress:
                print(
                    f"[{len(wanted.intersection(results))}/{len(specs)}] "
                    f"{row['variant']} {row['dataset']} split {row['split']}: "
                    + ", ".join(f"{m}={row.get(m, float('nan')):.4g}" for m in p.metrics),
                    flush=True,
                )

        if jobs > 1:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                for fut in as_completed([ex.submit(_run_one, s) for s in todo]):
                    record(fut.result())
        else:
            for s in todo:
                record(_run_one(s))
    rows = [results[_spec_key(s)] for s in specs if _spec_key(s) in results]
    history: list[dict] = []
    previous = out / f"{name}.json"
    if merge and previous.exists():
        old = json.loads(previous.read_text())
        mine = {_spec_key(s) for s in specs}
        kept = [r for r in old.get("rows", []) if _row_key(r) not in mine]
        rows = kept + rows
        earlier = old.get("history", [])
        own = max(len(kept) - sum(int(h.get("rows", 0)) for h in earlier), 0)  # rows that run itself made
        history = earlier + [
            {"command": old.get("command"), "wall_seconds": old.get("wall_seconds"), "rows": own}
        ]
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
        "history": history,
        "description": p.description,
        "summary": summary,
        "rows": rows,
        "paper": {f"{k[0]}|{k[1]}": v for k, v in p.paper.items()},
        "paper_source": p.paper_source,
    }
    atomic_write_bytes(out / f"{name}.json", dumps_json(doc).encode())
    atomic_write_bytes(out / f"{name}.md", _markdown(p, summary, {**header, "history": history}).encode())
    journal.unlink()
    return doc
