"""Fit committed results again and compare them: ``zoo reproduce NAME --verify`` (and
``benchmarks/calibration.py --verify``).

A committed row is worth citing only if the code gives it back. A fit is deterministic on one machine and
thread count, because the split, the starts and every draw are seeded. So if today's code on the same host
does not give a row back, other code made it: a run started on a working tree that changed before the
commit, or a later change of the fit. Across CPUs the float32 kernels round differently, and a fit's digits
move as they would with another seed (:mod:`zoo.experiments.host`). So the comparison says whether the two
hosts are the same.

:func:`verify_protocol` fits the runs of a protocol that the splits and variants select into a temporary
folder, with :func:`zoo.experiments.reproduce.run_protocol`. It then compares each row's metrics with the
committed ``DIR/NAME.json`` and writes nothing there. :func:`comparison` is the table and the counts that
both ``--verify`` commands print.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoo.experiments.dispatch import DispatchConfig

__all__ = [
    "check_same_fit",
    "check_tolerance",
    "comparison",
    "host_status",
    "relative_differences",
    "summary_line",
    "table_head",
    "verify_protocol",
]


def check_tolerance(tolerance: object) -> float:
    """The largest relative difference a comparison passes: a finite number >= 0, else ``ValueError``
    (:func:`zoo.core.validation.check_positive`, its ``TypeError`` for a non-number raised as a
    ``ValueError`` too, since both mean a bad setting)."""
    from zoo.core.validation import check_positive

    try:
        return check_positive("tolerance", tolerance, allow_zero=True)
    except TypeError as e:
        raise ValueError(str(e)) from e


def relative_differences(old: dict, new: dict, fields: Sequence[str]) -> dict[str, float]:
    """``|new - old| / max(|old|, 1e-12)`` of each of ``fields`` that both rows have as numbers. The value
    is ``inf`` where one of the two is not finite and they differ."""
    out = {}
    for key in fields:
        a, b = old.get(key), new.get(key)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (a, b)):
            continue
        a, b = float(a), float(b)
        if a == b:
            out[key] = 0.0
        elif not (math.isfinite(a) and math.isfinite(b)):
            out[key] = math.inf
        else:
            out[key] = abs(b - a) / max(abs(a), 1e-12)
    return out


def host_status(old: dict | None, new: dict | None) -> str:
    """``"same"`` when both hosts (:func:`zoo.experiments.host.host`) are recorded and equal, ``"other"``
    when they differ, and ``"not recorded"`` when one is missing (committed before results recorded it)."""
    if not old or not new:
        return "not recorded"
    return "same" if old == new else "other"


def comparison(
    pairs: Sequence[tuple[Sequence[object], dict, dict, str]], fields: Sequence[str], tolerance: float
) -> tuple[list[str], dict[str, int]]:
    """Markdown lines and counts for ``(key cells, committed row, new row, host status)`` pairs.

    Each line gives the key cells, each field as committed → now, the largest relative difference and the
    host status. The counts are ``{"rows", "beyond", "beyond_same_host"}``. A row beyond ``tolerance`` on
    the same host was made by other code."""
    tolerance = check_tolerance(tolerance)
    counts = {"rows": len(pairs), "beyond": 0, "beyond_same_host": 0}
    lines = []
    for cells, old, new, status in pairs:
        diff = relative_differences(old, new, fields)
        worst = max(diff.values(), default=0.0)
        beyond = worst > tolerance
        counts["beyond"] += beyond
        counts["beyond_same_host"] += beyond and status == "same"
        values = [f"{old[k]:.6g} → {new[k]:.6g}" if k in diff else "–" for k in fields]
        flag = " **beyond**" if beyond else ""
        lines.append(
            f"| {' | '.join(map(str, cells))} | " + " | ".join(values) + f" | {worst:.2e}{flag} | {status} |"
        )
    return lines, counts


def table_head(keys: Sequence[str], fields: Sequence[str]) -> list[str]:
    """The two header lines of :func:`comparison`'s table: the key columns, each field, the largest relative
    difference and the host status."""
    cols = [*keys, *(f"{k}: committed → now" for k in fields), "max rel. diff", "host"]
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]


def summary_line(counts: dict[str, int], tolerance: float) -> str:
    """One sentence on the counts of :func:`comparison`."""
    n, bad, same = counts["rows"], counts["beyond"], counts["beyond_same_host"]
    return (
        f"{n - bad} of {n} rows reproduced within relative {tolerance:g}; of the {bad} beyond it, {same} on "
        f"the same host (other code) and {bad - same} on another or an unrecorded host (CPU kernels round "
        "differently: zoo.experiments.host)"
    )


def check_same_fit(specs: Sequence, rows: dict, key: object) -> None:
    """``ValueError`` before any fit when a run would fit another model or guide than its committed row
    records (the protocol or an entry's default guide changed since the rows were made): the comparison
    would then measure that change, not the host or the code of the same fit."""
    from zoo.experiments.registry import get_entry

    for spec in specs:
        row = rows[key(spec)]
        guide = spec.kwargs.get("guide") or get_entry(spec.model).default_guide
        now, then = (spec.model, guide), (row.get("model", spec.model), row.get("guide", guide))
        if now != then:
            raise ValueError(
                f"protocol: run {key(spec)} now fits {now[0]}:{now[1]} but its committed row was fitted with "
                f"{then[0]}:{then[1]}; the protocol (or the entry's default guide) changed since the rows "
                "were made, so --verify cannot compare them: pin the committed guide in the protocol's runs, "
                "or rerun the protocol"
            )


def verify_protocol(
    name: str,
    out_dir: str | os.PathLike,
    *,
    splits: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
    overrides: dict | None = None,
    tolerance: float = 1e-6,
    dispatch: DispatchConfig | None = None,
) -> tuple[list[str], dict[str, int]]:
    """Fit the selected runs of protocol ``name`` again and compare them with ``out_dir/NAME.json``.

    The arguments select runs as :func:`~zoo.experiments.reproduce.run_protocol` does. Before any fit,
    ``ValueError`` is raised if there is no committed ``NAME.json``, if a selected run has no committed row,
    or if the tolerance is bad. The new fits go to a temporary folder and ``out_dir`` is not written.
    Returns the lines to print (the command that made the committed rows, then the table with its header)
    and the counts of :func:`comparison`."""
    from zoo.experiments.reproduce import (
        PROTOCOLS,
        _apply_overrides,
        _row_key,
        _spec_key,
        available_protocols,
        run_protocol,
        select_variants,
    )

    tolerance = check_tolerance(tolerance)  # before any fit
    if name not in available_protocols():
        raise ValueError(
            f"protocol: unknown protocol {name!r}; available: {', '.join(available_protocols())}"
        )
    record = Path(out_dir) / f"{name}.json"
    if not record.exists():
        raise ValueError(f"out_dir: no committed {record.name} in {os.fspath(out_dir)!r} to verify against")
    committed = json.loads(record.read_text())
    rows = {_row_key(r): r for r in committed.get("rows", [])}
    p = PROTOCOLS[name]
    specs = _apply_overrides(select_variants(p.runs(splits), variants, p.opt_in), overrides)
    missing = [k for k in map(_spec_key, specs) if k not in rows]
    if missing:
        raise ValueError(
            f"splits/variants: {len(missing)} selected run(s) have no committed row, e.g. {missing[0]}"
        )
    check_same_fit(specs, rows, _spec_key)
    with tempfile.TemporaryDirectory() as tmp:
        doc = run_protocol(
            name,
            tmp,
            splits=splits,
            variants=variants,
            overrides=overrides,
            progress=False,
            dispatch=dispatch,
        )
    status = host_status(committed.get("host"), doc.get("host"))
    pairs = [(_row_key(r), rows[_row_key(r)], r, status) for r in doc["rows"]]
    lines, counts = comparison(pairs, p.metrics, tolerance)
    made_by = f"Committed rows: {record}, made by `{committed.get('command', '?')}` (settings must match)."
    return [made_by, "", *table_head(("variant", "dataset", "split"), p.metrics), *lines], counts
