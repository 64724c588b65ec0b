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

from collections.abc import Callable, Iterable

__all__ = ["FIELDS", "committed_rows", "refit_arguments", "verify"]

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


def verify(rows: list[dict], refit: Callable[[dict], dict], tolerance: float) -> tuple[list[str], dict]:
    """Re-fit every row with ``refit(row)`` and compare (:func:`zoo.experiments.verify.comparison` over
    :data:`FIELDS`, each row's own ``host``): the table's lines, with its header, and the counts
    ``{"rows", "beyond", "beyond_same_host"}``."""
    from zoo.experiments.verify import check_tolerance, comparison, host_status, table_head

    tolerance = check_tolerance(tolerance)  # before any fit
    pairs = []
    for old in rows:
        new = refit(old)
        status = host_status(old.get("host"), new.get("host"))
        pairs.append(((old["model"], old["dataset"], old["split"]), old, new, status))
    lines, counts = comparison(pairs, FIELDS, tolerance)
    return [*table_head(("model", "dataset", "split"), FIELDS), *lines], counts
