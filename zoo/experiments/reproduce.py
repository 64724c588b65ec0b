"""Paper protocols run over splits: ``zoo reproduce NAME --out DIR``.

A :class:`Protocol` lists its runs (model × dataset × split × options); :func:`run_protocol` executes
them (optionally in worker processes, one torch thread each), then writes ``DIR/NAME.json`` (per-split
rows + mean ± sd per dataset/variant) and ``DIR/NAME.md`` (a table next to the paper's numbers), both
made by :mod:`zoo.experiments.protocol_report`.  Committed results live in ``benchmarks/results/``.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from zoo.core.validation import check_positive_int
from zoo.data import load_dataset
from zoo.experiments.config import RunConfig
from zoo.experiments.dispatch import DispatchConfig
from zoo.experiments.ensemble import ensemble_weights, fit_ensemble
from zoo.experiments.host import host
from zoo.experiments.journal import JournalMismatch, load_journal, run_journaled
from zoo.experiments.protocol import Protocol, RunSpec
from zoo.experiments.protocol_report import (
    departures,
    protocol_list,
    protocol_markdown,
    recorded_overrides,
    render_markdown,
    summarize,
)
from zoo.experiments.registry import load_plugins
from zoo.experiments.runs import dumps_json, fit_on_dataset
from zoo.io import atomic_write_many

__all__ = [
    "Protocol",
    "RunSpec",
    "PROTOCOLS",
    "available_protocols",
    "check_overrides",
    "check_protocol_data",
    "format_protocols",
    "register_protocol",
    "render_protocol",
    "python_call",
    "run_config",
    "run_protocol",
]

logger = logging.getLogger(__name__)

#: RunSpec keys that make a row an ensemble (:func:`~zoo.experiments.ensemble.fit_ensemble`); not in RunConfig
ENSEMBLE_KEYS = ("ensemble", "zeta")


PROTOCOLS: dict[str, Protocol] = {}


def available_protocols() -> list[str]:
    load_plugins()
    return sorted(PROTOCOLS)


def format_protocols() -> str:
    """What ``zoo reproduce --list`` prints: each protocol's name, what it runs and the paper's numbers it
    is compared with (:func:`zoo.experiments.protocol_report.protocol_list`)."""
    return "\n".join(protocol_list({n: PROTOCOLS[n] for n in available_protocols()}))


def render_protocol(name: str, out_dir: str | os.PathLike) -> Path:
    """Write ``DIR/NAME.md`` again from ``DIR/NAME.json`` with the protocol's current description and paper
    source (no fit; the JSON is not changed); returns the path written."""
    if name not in available_protocols():
        raise ValueError(f"name: unknown protocol {name!r}; available: {', '.join(available_protocols())}")
    src = Path(out_dir) / f"{name}.json"
    md = render_markdown(PROTOCOLS[name], json.loads(src.read_text()))
    atomic_write_many({src.with_suffix(".md"): md.encode()})
    return src.with_suffix(".md")


def _check_replace(previous: Path, overrides: dict | None, fresh: bool) -> None:
    """Refuse, before any fit, to replace or merge into a finished ``NAME.json`` made with other overrides
    (``--steps``/``--set``) unless ``fresh`` (``--fresh``, alias ``--overwrite``, as ``zoo fit
    --overwrite``): a smoke run must not silently take the place of a finished result."""
    if fresh or not previous.exists():
        return
    then = recorded_overrides(json.loads(previous.read_text()))
    now = json.loads(json.dumps(overrides or {}))
    if then != now:
        raise JournalMismatch(
            f"{previous} holds a finished run of other settings (overrides: {json.dumps(then)} there, "
            f"{json.dumps(now)} now); write to another --out, or pass --overwrite (fresh=True) to replace it"
        )


def register_protocol(p: Protocol) -> Protocol:
    if p.name in PROTOCOLS:
        raise ValueError(f"name: protocol {p.name!r} already registered")
    PROTOCOLS[p.name] = p
    return p


def run_config(spec: RunSpec) -> tuple[int, float, RunConfig]:
    """``(ensemble size, zeta, RunConfig)`` of a protocol run: its ``kwargs`` with the split as data split
    and seed; a bad or unknown key is a ``ValueError``/``TypeError`` naming it and the run."""
    kwargs = dict(spec.kwargs)
    k = kwargs.pop("ensemble", 1)
    zeta = kwargs.pop("zeta", 0.1)
    prune = kwargs.pop("prune", None)
    what = f"run {spec.variant}/{spec.dataset}/split {spec.split}"
    try:
        check_positive_int("ensemble", k)
        _check_prune(prune, k)
        ensemble_weights([0.0], zeta)  # validates zeta
        cfg = RunConfig.from_dict(
            {**kwargs, "split": spec.split, "seed": spec.split, "progress": False}, what=what
        )
        if (cfg.conformal is not None or cfg.conformal_folds is not None) and k > 1:
            raise ValueError("conformal: calibrates one fit; not with ensemble")
    except (TypeError, ValueError) as e:
        if what in str(e):
            raise
        raise type(e)(f"{what}: {e}") from None
    return k, float(zeta), cfg


def _check_prune(prune: object, k: int) -> None:
    from zoo.sparsity.runs import PRUNE_METHODS

    if prune is not None and prune not in PRUNE_METHODS:
        raise ValueError(f"prune must be one of {', '.join(PRUNE_METHODS)} or absent, got {prune!r}")
    if prune is not None and k > 1:
        raise ValueError("prune: prunes one fit; not with ensemble")


def _run_one(spec: RunSpec) -> dict:
    """One protocol row; ``ensemble: K`` in the spec's kwargs makes it a K-member ELBO-weighted ensemble
    (:func:`zoo.experiments.ensemble.fit_ensemble`, members fitted in this worker); ``prune: "projpred"``
    adds the projection-predictive pruning columns of :func:`zoo.sparsity.runs.prune_run` (draws seeded by
    the split)."""
    torch.set_num_threads(1)
    import pyro

    pyro.enable_validation(False)
    t0 = time.perf_counter()
    k, zeta, cfg = run_config(spec)
    if k > 1:
        metrics = fit_ensemble(spec.model, spec.dataset, cfg, k=k, zeta=zeta).metrics
    else:
        run = fit_on_dataset(spec.model, spec.dataset, cfg)
        metrics = run.metrics
        if spec.kwargs.get("prune"):
            from zoo.sparsity import ProjpredConfig
            from zoo.sparsity.runs import prune_run

            metrics.update(prune_run(run, ProjpredConfig(seed=spec.split)))
    row = {"variant": spec.variant, **metrics, "total_seconds": round(time.perf_counter() - t0, 3)}
    # rows are keyed by the spec's dataset string: an alias (``uci:boston``) must not lose its row to the
    # loader's canonical name (``uci:bostonHousing``), which is kept beside it
    if row.get("dataset") != spec.dataset:
        row["dataset_name"] = row.get("dataset")
        row["dataset"] = spec.dataset
    return row


def _preflight(specs: Sequence[RunSpec]) -> None:
    """Check every run's settings (:func:`run_config`) and load each dataset of the protocol once before
    any worker starts, so a bad setting, a missing data root or a bad split fails at once with a message
    naming it (and nothing is written)."""
    seen = set()
    for s in specs:
        _, _, cfg = run_config(s)
        if s.dataset not in seen:
            seen.add(s.dataset)
            load_dataset(s.dataset, s.split, data_dir=cfg.data_dir)


def select_variants(
    specs: list[RunSpec], variants: Sequence[str] | None, opt_in: Sequence[str] = ()
) -> list[RunSpec]:
    """The runs of the named ``variants`` only (``None``: every run but those of the ``opt_in`` variants,
    which run only when named); an unknown name is a ValueError."""
    if variants is None:
        return [s for s in specs if s.variant not in set(opt_in)]
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
    _preflight(select_variants(PROTOCOLS[name].runs(splits), variants, PROTOCOLS[name].opt_in))


def _key(variant: str, dataset: str, split: int) -> tuple[str, str, int]:
    return (str(variant), str(dataset), int(split))


def _spec_key(s: RunSpec) -> tuple[str, str, int]:
    return _key(s.variant, s.dataset, s.split)


def _row_key(r: dict) -> tuple[str, str, int]:
    return _key(r["variant"], r["dataset"], r["split"])


def check_overrides(overrides: dict | None) -> None:
    """``ValueError`` naming any override that is not a run setting (a :class:`RunConfig` field, or
    ``ensemble``/``zeta``)."""
    known = {*RunConfig.field_names(), *ENSEMBLE_KEYS}
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise ValueError(f"overrides: unknown run setting(s) {unknown}; valid: {sorted(known)}")


def _apply_overrides(specs: list[RunSpec], overrides: dict | None) -> list[RunSpec]:
    """``steps`` applies to every fit; any other key only where the protocol sets it (so e.g. a post-training
    override does not reach a baseline that has no post-training)."""
    check_overrides(overrides)
    if not overrides:
        return specs
    unused = sorted(k for k in overrides if k != "steps" and not any(k in s.kwargs for s in specs))
    if unused:
        logger.warning("overrides %s: no selected run of the protocol sets them, so none is changed", unused)
    return [
        RunSpec(
            s.variant,
            s.model,
            s.dataset,
            s.split,
            {**s.kwargs, **{k: v for k, v in overrides.items() if k == "steps" or k in s.kwargs}},
        )
        for s in specs
    ]


def _journal_line(row: dict, spec: RunSpec | None) -> str:
    """A journal line: the row, with the run's config (``RunConfig.to_dict``) when it was fitted now."""
    entry = row if spec is None else {**row, "run_config": run_config(spec)[2].to_dict()}
    return dumps_json(entry).replace("\n", " ")


def _progress_line(row: dict, done: int, total: int, metrics: Sequence[str]) -> str:
    return f"[{done}/{total}] {row['variant']} {row['dataset']} split {row['split']}: " + ", ".join(
        f"{m}={row.get(m, float('nan')):.4g}" for m in metrics
    )


def _run_all(
    p: Protocol,
    specs: list[RunSpec],
    done: dict,
    journal: Path,
    header: dict,
    cfg: DispatchConfig,
    progress: bool,
) -> dict:
    """Fit the runs not in ``done`` on ``cfg``'s backend, journaling each finished row (fsynced, with its
    run config); returns all rows by key, without their run configs."""
    n_done = sum(_spec_key(s) in done for s in specs)
    if progress and n_done:
        logger.info("resuming %s: %d of %d fits found in %s", p.name, n_done, len(specs), journal)

    def on_row(row: dict, n: int, total: int) -> None:
        if progress:
            logger.info(_progress_line(row, n, total, p.metrics))

    results = run_journaled(
        specs,
        _run_one,
        journal=journal,
        signature=header,
        done=done,
        key=_row_key,
        task_key=_spec_key,
        dispatch_config=cfg,
        on_row=on_row,
        line=lambda row, spec: _journal_line(row, spec),
    )
    return {k: {c: v for c, v in r.items() if c != "run_config"} for k, r in results.items()}


def _merge_previous(previous: Path, specs: list[RunSpec], rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """Rows of an earlier ``NAME.json`` that this run does not redo, prepended; and the merge history."""
    old = json.loads(previous.read_text())
    mine = {_spec_key(s) for s in specs}
    kept = [r for r in old.get("rows", []) if _row_key(r) not in mine]
    earlier = old.get("history", [])
    own = max(len(kept) - sum(int(h.get("rows", 0)) for h in earlier), 0)  # rows that run itself made
    history = earlier + [
        {"command": old.get("command"), "wall_seconds": old.get("wall_seconds"), "rows": own}
    ]
    return kept + rows, history


def python_call(name: str, out_dir: str | os.PathLike, **settings) -> str:
    """The Python call :func:`run_protocol` records when no shell ``command`` is given, e.g.
    ``zoo.experiments.reproduce.run_protocol('NAME', 'DIR', splits=[0], overrides={'steps': 3})``
    (``settings`` at their defaults left out; it evaluates after ``import zoo.experiments.reproduce``)."""
    defaults = {"splits": None, "jobs": 1, "overrides": None, "merge": False, "variants": None}
    given = {k: list(v) if isinstance(v, (range, tuple)) else v for k, v in settings.items()}
    args = [repr(str(name)), repr(os.fspath(out_dir))]
    args += [f"{k}={given[k]!r}" for k in defaults if given.get(k, defaults[k]) not in (defaults[k], {})]
    return f"zoo.experiments.reproduce.run_protocol({', '.join(args)})"


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
    fresh: bool = False,
    dispatch: DispatchConfig | None = None,
) -> dict:
    """Run protocol ``name`` and write ``NAME.json`` / ``NAME.md`` atomically into ``out_dir``.

    Fits run on ``dispatch``'s backend (:mod:`zoo.experiments.dispatch`; default ``jobs`` loky worker
    processes, one torch thread each); the rows do not depend on the backend.  Each finished fit is
    appended to ``DIR/NAME.partial.jsonl`` (fsynced, with its run config); an interrupted run started
    again with the same protocol and overrides resumes from it, and it is removed once the results are
    written.  A journal of other overrides is refused (:class:`~zoo.experiments.journal.JournalMismatch`,
    naming them) before any fit, unless ``fresh=True``, which sets it aside under a dated name and starts
    over (:func:`zoo.experiments.journal.load_journal`).  A finished ``DIR/NAME.json`` made with other
    overrides is refused the same way (it is replaced, or merged into, only with ``fresh=True``); a run with
    overrides that change a selected run is marked off budget in both files.  ``merge=True`` keeps the rows
    of an existing ``DIR/NAME.json`` whose (variant, dataset, split) this run does not redo, so a protocol
    can be completed split range by split range (and, with ``variants``, variant by variant).  Progress is
    logged (``logging``, INFO).

    ``command`` is how the run is recorded (journal header, ``NAME.json``, ``NAME.md``): the CLI passes its
    shell command; called from Python without one, the Python call itself is recorded
    (:func:`python_call`, with splits, overrides and variants), so the record reproduces the run."""
    if name not in available_protocols():
        raise ValueError(
            f"protocol: unknown protocol {name!r}; available: {', '.join(available_protocols())}"
        )
    p = PROTOCOLS[name]
    selected = select_variants(p.runs(splits), variants, p.opt_in)
    specs = _apply_overrides(selected, overrides)
    _preflight(specs)
    cfg = dispatch or DispatchConfig(jobs=jobs)
    out = Path(out_dir)
    previous = out / f"{name}.json"
    _check_replace(previous, overrides, fresh)
    journal = out / f"{name}.partial.jsonl"
    signature = {"protocol": name, "overrides": overrides or {}}
    done = load_journal(journal, signature, _row_key, fresh=fresh)
    command = command or python_call(
        name, out_dir, splits=splits, jobs=cfg.jobs, overrides=overrides, merge=merge, variants=variants
    )
    t0 = time.perf_counter()
    head = {**signature, "command": command}
    results = _run_all(p, specs, done, journal, head, cfg, progress)
    rows = [results[_spec_key(s)] for s in specs if _spec_key(s) in results]
    history: list[dict] = []
    if merge and previous.exists():
        rows, history = _merge_previous(previous, specs, rows)
    summary = summarize(rows, p.metrics)
    header = {
        "protocol": name,
        "command": command,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, jobs={cfg.jobs}, backend={cfg.backend}",
        "torch": torch.__version__,
        # the driver's CPU kernels, on which the rows' last digits depend (zoo.experiments.host)
        "host": host(),
        "wall_seconds": time.perf_counter() - t0,
        "overrides": overrides or {},
        # the overrides that change a selected run: a smoke run or an ablation ("off budget" in NAME.md)
        "off_budget": departures(selected, overrides),
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
    # both files are written in full before either replaces an earlier one (a full disk changes neither)
    md = protocol_markdown(p, summary, {**header, "history": history, "rows": rows})
    atomic_write_many({out / f"{name}.json": dumps_json(doc).encode(), out / f"{name}.md": md.encode()})
    journal.unlink()
    return doc
