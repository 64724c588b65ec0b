"""A per-fit journal: one JSON signature line, then one fsynced JSON line per finished fit.

The same format as ``zoo reproduce``'s ``NAME.partial.jsonl`` (:mod:`zoo.experiments.reproduce`): a run
killed at any point loses at most the fit in progress, and a run started again with the same signature
resumes from the rows found.  :func:`run_journaled` fits what is left (in worker processes when
``jobs > 1``) and appends each row as it finishes.

Unlike ``reproduce`` (which silently starts over when the signature differs), :func:`read_journal` with
``strict=True`` refuses a journal of a different run, so a folder is never shared by two configurations.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from zoo.experiments.runs import dumps_json
from zoo.io import append_line, atomic_write_text

__all__ = ["JournalMismatch", "read_journal", "run_journaled"]

logger = logging.getLogger(__name__)


class JournalMismatch(ValueError):
    """A journal or result file belongs to a run with another signature."""


def _first_line(path: Path) -> Any:
    with open(path) as fh:
        line = fh.readline()
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def read_journal(
    path: str | Path, signature: dict, key: Callable[[dict], Hashable], *, strict: bool = True
) -> dict[Hashable, dict]:
    """Rows of the journal at ``path`` by ``key(row)`` (``{}`` when there is none).

    Raises:
        JournalMismatch: ``strict`` and the journal's signature line is not ``signature`` (the message
            says what differs).  Without ``strict`` a different journal reads as empty.
    """
    path = Path(path)
    if not path.exists():
        return {}
    found = _first_line(path)
    if found != json.loads(json.dumps(signature)):
        if strict:
            raise JournalMismatch(f"{path} belongs to another run: {describe_difference(found, signature)}")
        return {}
    done: dict[Hashable, dict] = {}
    for line in path.read_text().splitlines()[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by an interruption
            continue
        done[key(row)] = row
    return done


def describe_difference(found: Any, wanted: dict) -> str:
    """A short account of how two signatures differ (their top-level keys)."""
    wanted = json.loads(json.dumps(wanted))
    if not isinstance(found, dict):
        return "its first line is not a signature"
    keys = sorted(k for k in {*found, *wanted} if found.get(k) != wanted.get(k))
    parts = [
        f"{k}: {json.dumps(found.get(k))[:120]} there, {json.dumps(wanted.get(k))[:120]} now" for k in keys
    ]
    return "; ".join(parts) or "the signatures differ"


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
    on_row: Callable[[dict, int, int], None] | None = None,
) -> dict[Hashable, dict]:
    """Run ``worker(task)`` for each task whose ``task_key`` is not in ``done``, journaling every row.

    The journal is first rewritten atomically with the signature and the rows kept, then grows by fsynced
    appends.  ``worker`` must be a picklable top-level function when ``jobs > 1``.  ``on_row(row, n_done,
    n_total)`` is called after each row is journaled.  Returns every row (kept and new) by key."""
    todo = [t for t in tasks if task_key(t) not in done]
    results = dict(done)
    wanted = {task_key(t) for t in tasks}
    atomic_write_text(
        journal, "".join(line + "\n" for line in [json.dumps(signature), *_lines(done.values())])
    )
    with open(journal, "a") as fh:

        def record(row: dict) -> None:
            results[key(row)] = row
            append_line(fh, dumps_json(row).replace("\n", " "))
            if on_row is not None:
                on_row(row, len(wanted & results.keys()), len(wanted))

        if jobs > 1 and len(todo) > 1:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                futures = [ex.submit(worker, t) for t in todo]
                for fut in as_completed(futures):
                    record(fut.result())
        else:
            for t in todo:
                record(worker(t))
    return results


def _lines(rows: Iterable[dict]) -> list[str]:
    return [dumps_json(r).replace("\n", " ") for r in rows]
