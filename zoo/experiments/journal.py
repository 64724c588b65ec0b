"""A per-fit journal: one JSON signature line, then one fsynced JSON line per finished fit.

``zoo reproduce`` (``NAME.partial.jsonl``) and ``zoo bench`` (``bench.partial.jsonl``) keep one while they
run: a run killed at any point loses at most the fits in progress, and the same command started again
resumes from the rows found.  :func:`run_journaled` fits what is left through
:func:`zoo.experiments.dispatch.dispatch` (any backend; a worker that dies has its fit re-run) and appends
each row the moment it arrives, so the journal is the single record of what is done.

**A journal is never discarded.**  :func:`read_journal` refuses the journal of another run (its signature
line differs from the current command's in a setting that changes the rows) with
:class:`JournalMismatch`, naming each differing setting; :func:`load_journal` adds how to go on: the same
command resumes, ``--fresh`` (``fresh=True``) starts over and keeps the old journal beside it as
``STEM.<UTC time>.jsonl`` (:func:`set_aside`).  A damaged line (cut by a kill, or edited by hand) is
skipped with a warning naming its line number; the other rows are kept.  A damaged *signature* line cannot
be checked and is refused like a mismatch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from zoo.experiments.dispatch import DispatchConfig, open_backend
from zoo.experiments.runs import dumps_json
from zoo.io import append_line, atomic_write_text

__all__ = ["JournalMismatch", "load_journal", "read_journal", "run_journaled", "set_aside"]

logger = logging.getLogger(__name__)


class JournalMismatch(ValueError):
    """A journal or result file belongs to a run with another signature."""

    flag = "--out"


def _plain(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def _signature_line(path: Path) -> tuple[Any, list[str]]:
    lines = path.read_text(errors="replace").splitlines()
    try:
        return (json.loads(lines[0]) if lines else None), lines[1:]
    except json.JSONDecodeError:
        return None, lines[1:]


def read_journal(
    path: str | Path, signature: dict, key: Callable[[dict], Hashable], *, strict: bool = True
) -> dict[Hashable, dict]:
    """Rows of the journal at ``path`` by ``key(row)`` (``{}`` when there is none).

    The journal's first line must hold every key of ``signature`` with the same value (it may hold more,
    e.g. the command that started it).  Damaged lines are skipped with a warning.

    Raises:
        JournalMismatch: ``strict`` and the signature differs or is damaged (the message says what
            differs).  Without ``strict`` such a journal reads as empty (it is not touched).
    """
    path = Path(path)
    if not path.exists():
        return {}
    found, lines = _signature_line(path)
    wanted = _plain(signature)
    if not isinstance(found, dict) or {k: found.get(k) for k in wanted} != wanted:
        if strict:
            raise JournalMismatch(f"{path} belongs to another run: {describe_difference(found, wanted)}")
        return {}
    done: dict[Hashable, dict] = {}
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            done[key(row)] = row
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            logger.warning("%s: line %d is damaged and is skipped (%.60r)", path, number, line)
    return done


def describe_difference(found: Any, wanted: dict) -> str:
    """A short account of how a journal's signature differs from ``wanted`` (``wanted``'s keys)."""
    wanted = _plain(wanted)
    if not isinstance(found, dict):
        return "its first line (the signature) is damaged or missing"
    keys = sorted(k for k in wanted if found.get(k) != wanted.get(k))
    parts = [
        f"{k}: {json.dumps(found.get(k))[:120]} there, {json.dumps(wanted.get(k))[:120]} now" for k in keys
    ]
    return "; ".join(parts) or "the signatures differ"


def set_aside(path: str | Path) -> Path:
    """Rename the journal ``STEM.jsonl`` to ``STEM.<UTC time>.jsonl`` beside it; returns the new path."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    target = path.with_name(f"{base}.{stamp}.jsonl")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{base}.{stamp}-{n}.jsonl")
    os.replace(path, target)
    logger.warning("started afresh: the earlier journal %s is kept as %s", path, target)
    return target


def load_journal(
    path: str | Path, signature: dict, key: Callable[[dict], Hashable], *, fresh: bool = False
) -> dict[Hashable, dict]:
    """Rows to resume from: :func:`read_journal` (strict); with ``fresh`` an existing journal is set aside
    (:func:`set_aside`) and nothing is resumed.

    Raises:
        JournalMismatch: the journal belongs to another run; the message names the differing settings and
            the two ways on (the command that started it, or ``--fresh``)."""
    path = Path(path)
    if fresh:
        if path.exists():
            set_aside(path)
        return {}
    try:
        return read_journal(path, signature, key)
    except JournalMismatch as e:
        raise JournalMismatch(
            f"{e}. Its finished fits are kept: run the command that started it to resume them, or pass "
            "--fresh (fresh=True) to start over (the journal is then kept beside it under a dated name)"
        ) from None


def _default_line(row: dict, task: Any) -> str:
    return dumps_json(row).replace("\n", " ")


def run_journaled(
    tasks: Sequence[Any],
    worker: Callable[[Any], dict],
    *,
    journal: str | Path,
    signature: dict,
    done: dict[Hashable, dict],
    key: Callable[[dict], Hashable],
    task_key: Callable[[Any], Hashable],
    jobs: int = 1,
    dispatch_config: DispatchConfig | None = None,
    on_row: Callable[[dict, int, int], None] | None = None,
    line: Callable[[dict, Any], str] | None = None,
) -> dict[Hashable, dict]:
    """Run ``worker(task)`` for each task whose ``task_key`` is not in ``done``, journaling every row.

    The journal is first rewritten atomically with the signature and the rows kept (damaged lines are
    dropped there), then grows by one fsynced append per finished fit.  Fits are dispatched by
    ``dispatch_config`` (default: ``jobs`` loky processes); ``worker`` must then be a picklable top-level
    function.  ``line(row, task)`` is the journal line of a row (``task`` is ``None`` for a kept row whose
    task is not in ``tasks``; default: the row as JSON).  ``on_row(row, n_done, n_total)`` is called after
    each row is journaled.  Returns every row (kept and new) by key."""
    cfg = dispatch_config or DispatchConfig(jobs=jobs)
    line = line or _default_line
    todo = [t for t in tasks if task_key(t) not in done]
    by_key = {task_key(t): t for t in tasks}
    results = dict(done)
    kept = [line(r, by_key.get(k)) for k, r in done.items()]
    with open_backend(cfg) as run:  # a cluster that cannot start fails here, before anything is written
        Path(journal).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(journal, "".join(f"{s}\n" for s in [json.dumps(signature), *kept]))
        with open(journal, "a") as fh:
            for i, row in run(worker, todo):
                results[key(row)] = row
                append_line(fh, line(row, todo[i]))
                if on_row is not None:
                    on_row(row, len(by_key.keys() & results.keys()), len(by_key))
    return results
