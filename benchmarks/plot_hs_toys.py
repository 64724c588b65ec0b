"""Figures for ``zoo reproduce hs-toys`` (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §6.2.1 Figs. 6
and 15, §6.2.2 Fig. 7).

Reads the protocol's JSON (``benchmarks/results/hs-toys.json``) and writes one PNG with two panels:

* cubic toy: mean test log-likelihood per point (−NLL, ± 1 sd over trials) against the hidden width for the
  Gaussian-prior BNN and the horseshoe BNN with the factorized and structured guides;
* 2-2-1 toy: hidden units kept out of 15, by the paper's pruning rule (P(τv < 1e-3) > 0.9) and by the
  shrinkage profile (‖E[w_kl]‖ ≥ 0.1 × the largest), for the non-centered and centered priors.

Usage::

    python benchmarks/plot_hs_toys.py [benchmarks/results/hs-toys.json] [--out benchmarks/results/hs-toys.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WIDTHS = (10, 100, 1000)
FAMILIES = {"gauss": "Gaussian prior (MF-VI)", "hs-fact": "HS, factorized", "hs-struct": "HS, structured"}


def _values(rows: list[dict], variant: str, key: str) -> list[float]:
    return [r[key] for r in rows if r["variant"] == variant and r.get(key) is not None]


def _mean_sd(vals: list[float]) -> tuple[float, float]:
    if not vals:
        return float("nan"), 0.0
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="?", default="benchmarks/results/hs-toys.json")
    p.add_argument("--out", default=None, help="PNG path (default: next to the JSON)")
    args = p.parse_args(argv)
    src = Path(args.results)
    rows = json.loads(src.read_text())["rows"]
    out = Path(args.out) if args.out else src.with_suffix(".png")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (tag, label) in enumerate(FAMILIES.items()):
        stats = [_mean_sd([-v for v in _values(rows, f"{tag}-{w}", "nll")]) for w in WIDTHS]
        xs = [w * (1.0 + 0.08 * (i - 1)) for w in WIDTHS]  # small offsets so error bars do not overlap
        means, sds = [m for m, _ in stats], [s for _, s in stats]
        ax1.errorbar(xs, means, yerr=sds, marker="o", capsize=3, label=label)
    ax1.set_xscale("log")
    ax1.set_xlabel("hidden units")
    ax1.set_ylabel("test log-likelihood per point")
    ax1.set_title("cubic toy (5 trials, ± 1 sd)")
    ax1.legend()

    names = ("hs221-noncentered", "hs221-centered")
    for j, (key, label) in enumerate((("units_kept", "pruning rule"), ("units_active", "shrinkage profile"))):
        stats = [_mean_sd([float(v) for v in _values(rows, n, key)]) for n in names]
        ax2.bar(
            [k + 0.38 * j for k in range(len(names))],
            [m for m, _ in stats],
            width=0.36,
            yerr=[s for _, s in stats],
            capsize=3,
            label=label,
        )
    ax2.axhline(2, color="k", lw=0.8, ls="--")
    ax2.set_xticks([k + 0.19 for k in range(len(names))], ["non-centered", "centered"])
    ax2.set_ylabel("hidden units kept (of 15; truth 2)")
    ax2.set_title("2-2-1 toy (5 trials)")
    ax2.legend()
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(out)
    plt.close(fig)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
