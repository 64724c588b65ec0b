"""Scale or shape: the width ratio the coverage at each level implies (``benchmarks/calibration.py``).

Say the predictive of a test point is ``N(mu, s^2)`` and its residual is ``N(0, (s / c)^2)``. Then the
central interval of level ``a``, ``mu ± z_a s`` with ``z_a = Phi^-1((1 + a) / 2)``, covers it with
probability ``2 Phi(c z_a) - 1``. So the coverage at level ``a`` gives

    c_a = Phi^-1((1 + coverage_a) / 2) / z_a,

the factor by which the intervals are too wide (``c > 1``) or too narrow (``c < 1``)
(:func:`zoo.eval.metrics.interval_width_ratio`).

- If the residuals have the predictive's shape, ``c_a`` is the same at every level. The miss is then one of
  scale, which a better noise variance or a scale factor fixes.
- If ``c_a`` falls with the level, the residuals are more peaked and heavier-tailed than the predictive.
  The intervals are too wide in the middle and about right far out. No single scale fixes that, and a
  heavier-tailed likelihood does.
- If ``c_a`` rises with the level, the residuals are lighter-tailed than the predictive.

This is the probit-ratio reading of a reliability diagram: Gneiting, Balabdaoui & Raftery (2007),
"Probabilistic forecasts, calibration and sharpness", JRSS B 69, §3.
"""

from __future__ import annotations

__all__ = ["shape_table"]

#: the levels the table reads: the middle and the level of the target
SHAPE_LEVELS = ("0.5", "0.8", "0.95")


def _cell(entry: dict) -> str:
    from zoo.eval.metrics import interval_width_ratio

    ratios = [interval_width_ratio(float(lv), entry["coverage"][lv]) for lv in SHAPE_LEVELS]
    return " / ".join("–" if r is None else f"{r:.2f}" for r in ratios)


def shape_table(summary: list[dict], labels: list[str]) -> list[str]:
    """Markdown lines: for the summary entries of ``labels``, one row per label and one column per data
    set, each cell ``c_0.5 / c_0.8 / c_0.95`` (:func:`width_ratio`); ``[]`` if none of them is there."""
    entries = {(e["model"], e["dataset"]): e for e in summary if e["model"] in labels}
    if not entries:
        return []
    datasets = list(dict.fromkeys(d for _, d in entries))
    lines = [
        "Scale or shape: how many times too wide the intervals are at levels "
        + ", ".join(SHAPE_LEVELS)
        + ", read from each level's coverage as if the residuals had the predictive's shape "
        "(`c = Phi^-1((1 + coverage) / 2) / Phi^-1((1 + level) / 2)`, `benchmarks/_calibration_shape.py`). "
        "Equal values: a miss of scale. Values that fall with the level: residuals more peaked and "
        "heavier-tailed than the predictive, which no single scale fixes. Values that rise: lighter tails.",
        "",
        "| model | " + " | ".join(datasets) + " |",
        "|---|" + "---|" * len(datasets),
    ]
    for label in labels:
        cells = [_cell(entries[(label, d)]) if (label, d) in entries else "" for d in datasets]
        if any(cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]
