"""``zoo bench SPEC --suite NAME --out DIR``: fit one model over a fixed suite and place it among the zoo.

A :class:`BenchSpec` names what is benched (a registry entry, ``name:guide``, with builder and guide
options); a :class:`BenchPlan` combines specs with a :class:`~zoo.experiments.suites.Suite` (datasets ×
splits × one budget) into fits (:meth:`BenchPlan.tasks`; one fit: :mod:`zoo.experiments.bench_fit`),
checked before any training (:meth:`BenchPlan.preflight`: every dataset loads, every spec builds on it,
options are valid).  :func:`run_fits` runs them with the per-fit journal of ``zoo reproduce``
(:mod:`zoo.experiments.journal`): ``DIR/bench.partial.jsonl`` while running, ``DIR/bench.json``
(signature + rows) when done.  The same plan in the same folder resumes (or, finished, refits nothing);
another plan there is refused before any fit, naming what changed.  The plan includes each model's options
with defaults filled in and a plugin's file and content hash (:mod:`zoo.experiments.bench_identity`): the
same name from an edited or another plugin file is another bench, and so is a record of signature version 1
(older zoo, without these).  A resumed bench's ``wall_seconds`` adds this run's time to the earlier ones
(:func:`earlier_wall_seconds`).

Fit settings under a suite: the suite's hidden widths (``()`` for an entry whose default architecture has
none, a linear model); SVI guides get the budget's steps, learning rate and batch size, closed-form CAVI
guides (a :class:`zoo.core.guide.ClosedFormGuide` with ``uses_gradients = False``) the budget's sweeps, full
batch (a hybrid closed-form + gradient guide, e.g. the collapsed bound, counts as SVI).  Seed ``k`` of
split ``s`` fits with seed ``s + 1000 k`` (seed 0 of split ``s`` is ``s``, as in ``zoo reproduce``).  Every
fit runs from one start (``fit_options={"starts": [{}]}``), whatever starts the entry defaults to.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.core.config import Config
from zoo.core.validation import check_mapping, check_positive_int
from zoo.data import TableOptions, is_table_name
from zoo.experiments.bench_fit import (
    FitTask,
    fit_task,
    input_selection,  # noqa: F401 (re-exported: the one fit lives in bench_fit)
    load_bench_dataset,
)
from zoo.experiments.bench_identity import SIGNATURE_VERSION, check_version, journal_signature, spec_identity
from zoo.experiments.bench_identity import describe_difference as describe_signature_difference
from zoo.experiments.config import RunConfig
from zoo.experiments.dispatch import DispatchConfig
from zoo.experiments.journal import JournalMismatch, read_journal, run_journaled
from zoo.experiments.runs import dumps_json
from zoo.experiments.suites import Suite
from zoo.io import atomic_write_many

__all__ = [
    "BenchSpec",
    "BenchPlan",
    "FitTask",
    "parse_spec",
    "run_fits",
    "write_bench",
    "fit_task",
    "BENCH_FILE",
]

logger = logging.getLogger(__name__)

BENCH_FILE = "bench.json"
JOURNAL_FILE = "bench.partial.jsonl"
SEED_STRIDE = 1000


@dataclasses.dataclass(frozen=True)
class BenchSpec(Config):
    """A model to bench: registry entry ``model`` with ``guide`` (its default when parsed without one) and
    builder/guide options; :attr:`label` names its leaderboard row."""

    model: str
    guide: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    guide_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        for name in ("model", "guide"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        check_mapping("options", self.options)
        check_mapping("guide_options", self.guide_options)

    @property
    def label(self) -> str:
        extra = {**self.options, **{f"guide.{k}": v for k, v in self.guide_options.items()}}
        opts = ",".join(f"{k}={v}" for k, v in sorted(extra.items()))
        return f"{self.model}:{self.guide}" + (f"[{opts}]" if opts else "")


def parse_spec(
    text: str, options: Mapping[str, Any] | None = None, guide_options: Mapping[str, Any] | None = None
) -> BenchSpec:
    """``"name"`` or ``"name:guide"`` of a registered (or plugin) model as a :class:`BenchSpec`.

    Raises:
        ValueError: an unknown model or guide; the message starts with ``SPEC`` and names the valid ones.
    """
    from zoo.experiments.registry import get_entry

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"SPEC: expected a model name or name:guide, got {text!r}")
    model, _, guide = text.strip().partition(":")
    try:
        entry = get_entry(model)
    except ValueError as e:
        raise ValueError(f"SPEC {text!r}: {e}") from None
    if guide and guide not in entry.guides:
        raise ValueError(f"SPEC {text!r}: {model} offers guides {list(entry.guides)}, not {guide!r}")
    return BenchSpec(model, guide or entry.default_guide, dict(options or {}), dict(guide_options or {}))


def row_key(row: Mapping) -> tuple[str, str, int, int]:
    return (str(row["label"]), str(row["dataset"]), int(row["split"]), int(row["seed"]))


@dataclasses.dataclass(frozen=True)
class BenchPlan:
    """Specs × a suite's datasets × ``splits`` × ``seeds``; ``steps`` overrides the budget (both SVI steps
    and CAVI sweeps); ``table`` the options of an own table dataset."""

    suite: Suite
    specs: tuple[BenchSpec, ...]
    splits: tuple[int, ...] | None = None
    seeds: int = 1
    steps: int | None = None
    table: TableOptions | None = None
    data_dir: str | None = None
    plugins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.specs or not all(isinstance(s, BenchSpec) for s in self.specs):
            raise TypeError("specs must be a non-empty tuple of BenchSpec")
        check_positive_int("seeds", self.seeds)
        if self.steps is not None:
            check_positive_int("steps", self.steps)
        if self.splits is not None:
            if not self.splits:
                raise ValueError("splits: give at least one split")
            for s in self.splits:
                check_positive_int("splits", s, allow_zero=True)

    @property
    def effective_splits(self) -> tuple[int, ...]:
        return tuple(self.suite.splits if self.splits is None else self.splits)

    @property
    def off_budget(self) -> bool:
        """Whether this run departs from the suite's definition (``--steps`` or other splits)."""
        return self.steps is not None or self.effective_splits != tuple(self.suite.splits)

    def signature(self) -> dict:
        """What a resume must find unchanged: the suite, the specs as given and as resolved (options with
        their defaults, plugin identity: :func:`~zoo.experiments.bench_identity.spec_identity`), splits,
        seeds, steps and table options.

        Raises:
            ValueError, TypeError: a spec's options are not valid for its entry (naming the spec)."""
        return {
            "bench": SIGNATURE_VERSION,
            "suite": self.suite.identity(),
            "specs": [s.to_dict() for s in self.specs],
            "models": [spec_identity(s) for s in self.specs],
            "splits": list(self.effective_splits),
            "seeds": self.seeds,
            "steps": self.steps,
            "table": None if self.table is None else self.table.to_dict(),
        }

    def _load(self, dataset: str, split: int):
        table = self.table if is_table_name(dataset) else None
        return load_bench_dataset(dataset, split, self.data_dir, table)

    def preflight(self) -> dict[str, dict]:
        """Load every dataset once and build every spec on it; returns per (label, dataset) fit settings.

        Raises (before anything is trained or written): ``FileNotFoundError`` (data), ``ValueError`` /
        ``TypeError`` naming the spec and dataset (a task the entry does not support, bad options)."""
        from zoo.experiments.registry import build, get_entry

        settings: dict[str, dict] = {}
        for dataset in self.suite.datasets:
            for split in self.effective_splits[1:]:  # a split the dataset does not have fails now
                self._load(dataset, split)
            ds = self._load(dataset, self.effective_splits[0])
            if self.suite.selection and ds.true_support is None:
                raise ValueError(f"suite {self.suite.name}: dataset {dataset!r} has no true support")
            for spec in self.specs:
                entry = get_entry(spec.model)
                if ds.task not in entry.tasks:
                    logger.warning("%s does not fit %s data: skipped on %s", spec.label, ds.task, dataset)
                    settings[f"{spec.label}|{dataset}"] = {"skip": True, "task": ds.task}
                    continue
                hidden = (
                    ()
                    if tuple(entry.default_hidden) == ()
                    else tuple(ds.meta.get("hidden", self.suite.hidden))
                )
                options = {**ds.meta.get("model_options", {}).get(spec.model, {}), **spec.options}
                try:
                    _, guide, _ = build(
                        spec.model,
                        ds.in_features,
                        ds.out_features,
                        ds.task,
                        hidden=hidden,
                        guide=spec.guide,
                        guide_options=dict(spec.guide_options),
                        **options,
                    )
                except (TypeError, ValueError) as e:
                    raise type(e)(f"{spec.label} on {dataset}: {e}") from None
                cavi = not getattr(guide, "uses_gradients", True)  # pure CAVI, as zoo.infer.loop
                settings[f"{spec.label}|{dataset}"] = {
                    "hidden": hidden,
                    "cavi": cavi,
                    "task": ds.task,
                    "options": options,
                    "fit_options": dict(ds.meta.get("model_fit_options", {}).get(spec.model, {})),
                }
        for spec in self.specs:
            if all(settings[f"{spec.label}|{d}"].get("skip") for d in self.suite.datasets):
                raise ValueError(f"{spec.label} fits none of the datasets of suite {self.suite.name}")
        return settings

    def run_config(self, spec: BenchSpec, st: Mapping, split: int, seed: int) -> dict:
        """The :class:`RunConfig` (as a dict) of one fit; ``st``: the (spec, dataset) settings of
        :meth:`preflight` (hidden widths, CAVI or not, the builder options)."""
        b, cavi = self.suite.budget, st["cavi"]
        steps = self.steps if self.steps is not None else (b.cavi_sweeps if cavi else b.steps)
        cfg = RunConfig(
            split=split,
            hidden=tuple(st["hidden"]),
            guide=spec.guide,
            steps=steps,
            lr=b.lr,
            batch_size=None if cavi else b.batch_size,
            seed=seed,
            progress=False,
            num_samples=b.num_samples,
            data_dir=self.data_dir,
            options=dict(st.get("options", spec.options)),
            guide_options=dict(spec.guide_options),
            # one start per fit: the budget is per fit, and an entry's default starts
            # (zoo.experiments.starts) would multiply it for some rows only
            fit_options={"starts": [{}], **st.get("fit_options", {})},
        )
        return cfg.to_dict()

    def tasks(self, settings: Mapping[str, dict] | None = None) -> list[FitTask]:
        """Every fit of the plan (``settings`` from :meth:`preflight`, computed when not given)."""
        settings = self.preflight() if settings is None else settings
        out = []
        for spec in self.specs:
            for dataset in self.suite.datasets:
                st = settings[f"{spec.label}|{dataset}"]
                if st.get("skip"):
                    continue
                table = self.table.to_dict() if self.table is not None and is_table_name(dataset) else None
                for split in self.effective_splits:
                    for k in range(self.seeds):
                        seed = split + SEED_STRIDE * k
                        cfg = self.run_config(spec, st, split, seed)
                        out.append(
                            FitTask(
                                spec.label,
                                spec.model,
                                dataset,
                                split,
                                seed,
                                cfg,
                                table,
                                self.suite.selection,
                                self.plugins,
                                self.suite.scorer,
                            )
                        )
        return out


def check_out(out: Path, signature: dict) -> dict:
    """Rows already done for ``signature`` in ``out`` (``DIR/bench.json`` or the journal); ``{}`` for a new
    folder.  Raises :class:`JournalMismatch` when ``out`` holds another bench (naming what differs) or one
    recorded under another signature version, ``ValueError`` when it holds a leaderboard without a bench
    record or is not a folder."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: {str(out)!r} exists and is not a directory")
    record = out / BENCH_FILE
    if record.exists():
        doc = json.loads(record.read_text())
        found = doc.get("signature")
        check_version(found, f"out: {str(out)!r}")
        if found != json.loads(json.dumps(signature)):
            diff = describe_signature_difference(found, signature)
            raise JournalMismatch(f"out: {str(out)!r} holds another bench ({diff}); choose another --out")
        return {row_key(r): r for r in doc.get("rows", [])}
    if (out / "leaderboard.json").exists():
        raise ValueError(f"out: {str(out)!r} holds a leaderboard but no {BENCH_FILE}; choose another --out")
    journal = out / JOURNAL_FILE
    found = journal_signature(journal)
    check_version(found, f"out: {str(out)!r} (unfinished)")
    try:
        return read_journal(journal, signature, row_key)
    except JournalMismatch:
        diff = describe_signature_difference(found, signature)
        msg = f"out: {str(out)!r} holds another, unfinished bench ({diff}); choose another --out"
        raise JournalMismatch(msg) from None


def earlier_wall_seconds(out: Path, done: Mapping) -> float:
    """Wall time already spent on the rows ``done`` in ``out``: a finished record's ``wall_seconds``, else
    (rows recovered from an interrupted run's journal) the sum of their ``total_seconds``."""
    record = out / BENCH_FILE
    if record.exists():
        wall = json.loads(record.read_text()).get("wall_seconds")
        if isinstance(wall, (int, float)) and not isinstance(wall, bool):
            return float(wall)
    return float(sum(float(r.get("total_seconds") or 0.0) for r in done.values()))


def _progress(row: dict, n: int, total: int) -> None:
    keys = [k for k in ("nll", "rmse", "accuracy", "tpr", "fpr") if row.get(k) is not None]
    vals = ", ".join(f"{k}={row[k]:.4g}" for k in keys)
    logger.info(
        "[%d/%d] %s %s split %d seed %d: %s, %.1fs",
        n,
        total,
        row["label"],
        row["dataset"],
        row["split"],
        row["seed"],
        vals,
        row.get("fit_seconds", float("nan")),
    )


def run_fits(
    plan: BenchPlan,
    out_dir: str | Path,
    *,
    jobs: int = 1,
    progress: bool = True,
    tasks: Sequence[FitTask] | None = None,
    dispatch: DispatchConfig | None = None,
    finalize: bool = True,
) -> dict:
    """Fit every task of ``plan`` not done yet in ``out_dir`` and write ``DIR/bench.json`` atomically
    (``{"signature", "rows", "wall_seconds"}``; the journal is removed).  Returns that document.
    ``finalize=False`` writes nothing yet: the caller passes the document to :func:`write_bench` with the
    files derived from it (the leaderboard), so that the folder changes as one set.

    Fits run on ``dispatch``'s backend (:mod:`zoo.experiments.dispatch`; default ``jobs`` loky worker
    processes); the rows do not depend on the backend.

    ``tasks`` defaults to ``plan.tasks()`` (preflight included).  Raises :class:`JournalMismatch` for an
    ``out_dir`` holding another bench, before any fit."""
    check_positive_int("jobs", jobs)
    out = Path(out_dir)
    signature = plan.signature()
    done = check_out(out, signature)
    earlier = earlier_wall_seconds(out, done)
    tasks = plan.tasks() if tasks is None else list(tasks)
    if progress and done:
        logger.info("resuming: %d of %d fits found in %s", len(done), len(tasks), out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = run_journaled(
        tasks,
        fit_task,
        journal=out / JOURNAL_FILE,
        signature=signature,
        done=done,
        key=row_key,
        task_key=lambda t: t.key,
        dispatch_config=dispatch or DispatchConfig(jobs=jobs),
        on_row=_progress if progress else None,
    )
    rows = [results[t.key] for t in tasks]
    wall = earlier + time.perf_counter() - t0  # a resumed bench keeps the time of the rows it reuses
    doc = {"signature": signature, "wall_seconds": round(wall, 1), "rows": rows}
    if finalize:
        write_bench(out, doc)
    return doc


def write_bench(out_dir: str | Path, doc: Mapping, extra: Mapping[Path, bytes] | None = None) -> None:
    """Write ``DIR/bench.json`` and the ``extra`` files derived from it as one set
    (:func:`zoo.io.atomic_write_many`: a failure, e.g. a full disk, replaces none of them), then remove the
    journal, which until then still holds every finished fit."""
    out = Path(out_dir)
    atomic_write_many({out / BENCH_FILE: dumps_json(dict(doc)).encode("utf-8"), **dict(extra or {})})
    (out / JOURNAL_FILE).unlink(missing_ok=True)
