"""Re-fit committed rows of ``benchmarks/calibration.py`` and compare them (``--verify``).

A committed calibration row is only worth citing if the code reproduces it.  A fit is deterministic on one
machine and thread count (seeded data split, starts and draws), so a row that today's code on the same host
does not give back was made by other code: a run started on a working tree that changed before the commit,
or a later change of the fit.  Across CPUs the float32 kernels round differently and a fit's digits move as
with another seed (:mod:`zoo.experiments.host`), so each row records its ``host`` and the comparison says
whether the hosts are the same.

``--verify`` re-fits the committed rows that the ``--models``/``--datasets``/``--splits`` filters select,
prints each field as committed → now with the largest relative difference and the host status, and exits
with status 1 when a row is beyond ``--tolerance``; it writes nothing.  A labelled row (``model+label``) is
re-fitted from the ``recipe`` it records (builder and guide options, steps, held-out share, candidate
likelihoods); labelled rows committed before rows recorded one are refused, since their options live only
in the command that made them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

__all__ = ["FIELDS", "committed_rows", "differences", "host_status", "refit_arguments", "verify"]

#: the fields compared: the scores of the target table and the noise ratio, which the noise factor sets
FIELDS = ("rmse", "nll", "coverage95", "noise_ratio")


def committed_rows(
    rows: list[dict], models: Iterable[str], datasets: Iterable[str], splits: Iterable[int]
) -> list[dict]:
    """The committed rows among ``models`` × ``datasets`` × ``splits``: the registry defaults, and labelled
    rows (``model+label``) that record the ``recipe`` they were fitted with.

    Raises ``ValueError`` when no committed row matches, or when a labelled row has no recipe (it was
    committed before rows recorded one; its options are in the command that made it)."""
    models, datasets, splits = list(models), set(datasets), set(splits)
    chosen = [r for r in rows if r["model"] in models and r["dataset"] in datasets and r["split"] in splits]
    if not chosen:
        raise ValueError(
            f"--verify: no committed row of models {models}, datasets {sorted(datasets)}, splits "
            f"{sorted(splits)}"
        )
    bare = sorted({r["model"] for r in chosen if "+" in r["model"] and "recipe" not in r})
    if bare:
        raise ValueError(
            f"--verify: labelled rows of {bare} record no recipe (committed before rows did); their options "
            "are in the command that made them"
        )
    return chosen


def refit_arguments(row: dict) -> dict:
    """The keyword arguments of ``calibration.fit_row`` that fit ``row`` again: its spec, data set, split,
    label and recorded ``recipe`` (none for a registry default's row committed before recipes)."""
    spec, _, label = row["model"].partition("+")
    where = {"spec": spec, "dataset": row["dataset"], "split": row["split"], "label": label}
    return {**where, **row.get("recipe", {})}


def differences(old: dict, new: dict) -> dict[str, float]:
    """Relative difference ``|new - old| / max(|old|, 1e-12)`` of each of :data:`FIELDS` both rows have
    (``inf`` where one of them is not finite and they differ)."""
    out = {}
    for key in FIELDS:
        if key not in old or key not in new:
            continue
        a, b = float(old[key]), float(new[key])
        if a == b:
            out[key] = 0.0
        elif not (math.isfinite(a) and math.isfinite(b)):
            out[key] = math.inf
        else:
            out[key] = abs(b - a) / max(abs(a), 1e-12)
    return out


def host_status(old: dict, new: dict) -> str:
    """``"same"`` when both rows record the same :func:`zoo.experiments.host.host`, ``"other"`` when they
    differ, ``"not recorded"`` for a row committed before rows recorded it."""
    if "host" not in old or "host" not in new:
        return "not recorded"
    return "same" if old["host"] == new["host"] else "other"


def verify(rows: list[dict], refit: Callable[[dict], dict], tolerance: float) -> tuple[list[str], dict]:
    """Re-fit every row with ``refit(row)`` and compare: markdown lines (one per row: its fields as
    committed → now, the largest relative difference and whether the two hosts are the same,
    :func:`host_status`) and the counts ``{"rows", "beyond", "beyond_same_host"}``.  A row beyond
    ``tolerance`` on the same host was made by other code; on another host it may differ by rounding alone
    (:mod:`zoo.experiments.host`)."""
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"--tolerance must be a finite number >= 0, got {tolerance}")
    head = " | ".join(f"{k}: committed → now" for k in FIELDS)
    lines = [f"| model | dataset | split | {head} | max rel. diff | host |", "|" + "---|" * (len(FIELDS) + 5)]
    counts = {"rows": len(rows), "beyond": 0, "beyond_same_host": 0}
    for old in rows:
        new = refit(old)
        diff = differences(old, new)
        worst = max(diff.values(), default=0.0)
        status = host_status(old, new)
        beyond = worst > tolerance
        counts["beyond"] += beyond
        counts["beyond_same_host"] += beyond and status == "same"
        cells = [f"{old[k]:.6g} → {new[k]:.6g}" if k in diff else "–" for k in FIELDS]
        key = f"| {old['model']} | {old['dataset']} | {old['split']} | "
        flag = " **beyond**" if beyond else ""
        lines.append(key + " | ".join(cells) + f" | {worst:.2e}{flag} | {status} |")
    return lines, counts
