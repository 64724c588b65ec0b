"""Per-covariate inclusion counts of a variable-selection protocol: for every variant, the share of its fits
that select each covariate, true covariates marked — the bars of Skaaret-Lund, Storvik & Hubin (2023,
arXiv:2305.03395, Fig. 5), as a markdown table under the protocol's summary.  Rows contribute when they carry
``selected`` and ``truth`` (0/1 lists; :func:`zoo.families.lbbnn.entry.selection_metrics`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from zoo.eval.selection import inclusion_frequencies

__all__ = ["inclusion_lines"]


def inclusion_lines(rows: Sequence[Mapping]) -> list[str]:
    """Markdown lines (empty when no row has a selection): one table per dataset, a row per variant."""
    by_dataset: dict[str, dict[str, list[Mapping]]] = {}
    for r in rows:
        if "selected" in r and "truth" in r:
            by_dataset.setdefault(r["dataset"], {}).setdefault(r["variant"], []).append(r)
    lines: list[str] = []
    for ds, variants in by_dataset.items():
        truth = np.asarray(next(iter(variants.values()))[0]["truth"], dtype=bool)
        names = [f"**{j + 1}**" if t else str(j + 1) for j, t in enumerate(truth)]
        lines += [
            "",
            f"Inclusion frequency per covariate on {ds} (share of the fits that select it; true covariates "
            "in bold):",
            "",
            "| variant | fits | " + " | ".join(names) + " |",
            "|" + "---|" * (len(names) + 2),
        ]
        for variant, rs in variants.items():
            if any(np.asarray(r["truth"], dtype=bool).tolist() != truth.tolist() for r in rs):
                raise ValueError(f"rows: the fits of {variant!r} on {ds!r} disagree on the true covariates")
            freq = inclusion_frequencies([r["selected"] for r in rs])
            lines.append(f"| {variant} | {len(rs)} | " + " | ".join(f"{f:.2g}" for f in freq) + " |")
    return lines
