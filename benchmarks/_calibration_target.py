"""The target table of ``benchmarks/calibration.py`` (issue 17): the defaults' mean Gaussian 95 % coverage
per data set against the target, with the split interval of each mean, and a replication on more splits."""

from __future__ import annotations

DATASETS = ("yacht", "energy", "bostonHousing", "concrete")
#: the order of the data sets in the report (the four small sets, then the four large ones)
DATASET_ORDER = (*DATASETS, "wine-quality-red", "kin8nm", "power-plant", "naval-propulsion-plant")
#: issue 17's target for the defaults: mean Gaussian 95 % coverage over the splits inside this interval
TARGET = (0.92, 0.98)
#: the splits the target is stated on (issue 17: splits 0-9); rows of later splits are a replication, reported
#: beside the target table, never in it
TARGET_SPLITS = range(10)


def is_default(label: str) -> bool:
    """Whether a report label is a registry default: no ``+`` (settings other than the defaults), and a
    ``model:guide`` label only with the entry's default guide (``lbbnn:lcrt``, not ``lbbnn:mean-field``; a
    model the registry does not know is taken at its label)."""
    if "+" in label:
        return False
    model, _, guide = label.partition(":")
    if not guide:
        return True
    from zoo.experiments.registry import get_entry

    try:
        return guide == get_entry(model).default_guide
    except ValueError:  # not a registry entry
        return True


def default_labels(summary: list[dict]) -> list[str]:
    """The labels of the report's default settings (:func:`is_default`), sorted."""
    return sorted(dict.fromkeys(e["model"] for e in summary if is_default(e["model"])))


def split_interval(entry: dict) -> float | None:
    """Half-width of the 95 % Student-t interval of the mean coverage95 over an entry's splits,
    ``t_{0.975, n-1} sd / sqrt(n)``: how far the split mean moves with the draw of the splits (the fit's seed,
    its training rows and its test rows together); ``None`` with one split."""
    from scipy.stats import t

    n, sd = entry["splits"], entry.get("coverage95_sd")
    if n < 2 or sd is None:
        return None
    return float(t.ppf(0.975, n - 1) * sd / n**0.5)


def _cell(entry: dict) -> tuple[str, bool, bool]:
    """The target table's text of one cell, whether its mean is inside :data:`TARGET`, and whether its whole
    split interval is outside it."""
    lo, hi = TARGET
    mean, half = entry["coverage95"], split_interval(entry)
    ok = lo <= round(mean, 3) <= hi
    beyond = half is not None and (round(mean - half, 3) > hi or round(mean + half, 3) < lo)
    text = f"{mean:.3f}" if ok else f"**{mean:.3f}**"
    spread = "" if half is None else f" ± {half:.3f}"
    return f"{text}{spread} ({entry['splits']})", ok, beyond


def target_table(summary: list[dict], wider: list[dict] | None = None) -> list[str]:
    """Markdown lines: coverage95 (Gauss) of every default label (:func:`is_default`) on each data set, ± the
    half-width of its split interval (:func:`split_interval`) and the number of splits, in bold where the mean
    is outside :data:`TARGET`; how many data sets are inside, and how many are outside by more than the
    interval.

    ``summary`` should hold the :data:`TARGET_SPLITS` only; ``wider`` (the summary over every split) adds a
    line for each default cell that has more splits there (a replication on further standard splits)."""
    lo, hi = TARGET
    models = default_labels(summary)
    if not models:
        return []
    cells = {(e["model"], e["dataset"]): e for e in summary}
    datasets = [d for d in DATASET_ORDER if any((m, d) in cells for m in models)]
    lines = [
        f"Target (issue 17): mean Gaussian 95 % coverage over splits 0-{TARGET_SPLITS[-1]} within "
        f"[{lo}, {hi}] on every data set; bold is outside; ± is the half-width of the 95 % Student-t "
        "interval of that mean over the splits (their number in parentheses): `beyond` counts the cells "
        "whose whole interval is outside the target.",
        "",
        "| model | " + " | ".join(datasets) + " | inside | beyond |",
        "|---|" + "---|" * (len(datasets) + 2),
    ]
    for m in models:
        row, inside, beyond, total = [], 0, 0, 0
        for d in datasets:
            e = cells.get((m, d))
            if e is None:
                row.append("–")
                continue
            text, ok, out = _cell(e)
            inside, beyond, total = inside + ok, beyond + out, total + 1
            row.append(text)
        lines.append(f"| {m} | " + " | ".join(row) + f" | {inside}/{total} | {beyond} |")
    more = [
        e
        for e in wider or []
        if e["model"] in models and e["splits"] > cells.get((e["model"], e["dataset"]), {}).get("splits", 0)
    ]
    if more:
        lines += ["", "On more standard splits (a replication; the target above is on its own splits):", ""]
        lines += [f"* {e['model']} on {e['dataset']}: {_cell(e)[0]}" for e in more]
    return [*lines, ""]
