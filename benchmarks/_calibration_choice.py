"""The table of noise models chosen by the ELBO in ``benchmarks/calibration.py``: rows fitted with
``--likelihoods A B ...`` (:mod:`zoo.experiments.starts`) record the kept likelihood and every candidate's
ELBO; per model and data set this table counts the kept likelihoods and gives each later candidate's ELBO
minus the first's (in the order the command names them), mean and range over the splits."""

from __future__ import annotations

import statistics
from collections import Counter

__all__ = ["choice_summary", "choice_table"]


def choice_summary(rows: list[dict]) -> dict | None:
    """``{"kept": {name: count}, "gains": [(mean, min, max), ...]}`` of one (model, data set)'s rows, or
    ``None`` unless every row chose among the same number of likelihoods."""
    counts = {r.get("likelihoods") for r in rows}
    if not rows or len(counts) != 1 or None in counts:
        return None
    (n,) = counts
    kept = Counter(r["likelihood_name"] for r in rows)
    gains = []
    for i in range(1, n):
        diff = [r[f"likelihood_elbo_{i}"] - r["likelihood_elbo_0"] for r in rows]
        gains.append((statistics.fmean(diff), min(diff), max(diff)))
    return {"kept": dict(sorted(kept.items())), "gains": gains}


def choice_table(summary: list[dict]) -> list[str]:
    """Markdown lines of the entries of ``summary`` with a ``choice`` (:func:`choice_summary`); ``[]`` if
    none."""
    chosen = [e for e in summary if e.get("choice")]
    if not chosen:
        return []
    lines = [
        "Noise model chosen by the ELBO (rows fitted with `--likelihoods`; ELBO difference in nats, each "
        "candidate after the first against the first, as the command names them):",
        "",
        "| model | dataset | splits | kept | ELBO difference: mean [min, max] | coverage95 | NLL | RMSE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in chosen:
        kept = ", ".join(f"{name} {k}" for name, k in e["choice"]["kept"].items())
        gains = "; ".join(f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}]" for m, lo, hi in e["choice"]["gains"])
        lines.append(
            f"| {e['model']} | {e['dataset']} | {e['splits']} | {kept} | {gains} | {e['coverage95']:.3f} | "
            f"{e['nll']:.3f} | {e['rmse']:.3g} |"
        )
    return [*lines, ""]
