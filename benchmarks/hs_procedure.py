"""Which part of the fitting procedure decides whether the horseshoe's pruning rule fires (issue 20, 1(a)).

Ghosh, Yao & Doshi-Velez 2019 (arXiv:1705.10388) prune unit ``k`` of layer ``l`` when
``P(tau_kl v_l < delta) > p0`` (§4.3, ``delta = 1e-3``, ``p0 = 0.9``).  Under the log-normal factors of the
guide the rule fires exactly when the 90 % quantile of ``tau_kl v_l``,
``q90 = exp(mu_tau + mu_v + 1.2816 sqrt(s_tau^2 + s_v^2))``, is below ``delta`` — so the figure that decides
it is ``q90`` of the shrunk units, reported here per fit (log10 of its median over the units the shrinkage
profile calls inactive).  The paper's Fig. 7 claim ("the non-centered parameterization prunes all but two
units" of a 15-unit network on the 2-2-1 toy) is about the box plots of ``E_q[w_kl]``, the shrinkage
profile, reported as ``units_active`` (``||E[w_kl]|| >= 0.1`` x the layer's largest).

Each variant changes one ingredient of the zoo's procedure towards what the authors' public code does
(read for behaviour only): the layer scale ``b_g`` (1e-5 in the paper's §6.5, 1 in the code), the
initialization of the log-scales (``init_scales="prior"``: from a half-Cauchy draw, as in the code, instead
of 1), the training length, and the centered parameterization as Fig. 7's contrast.  Not varied: the code's
choice of the best-minibatch-ELBO iterate and its local-reparameterization noise details.

Usage::

    python benchmarks/hs_procedure.py [--seeds 0 1 2] [--steps 5000] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from pathlib import Path

#: variant -> (builder options, guide options, steps multiplier)
VARIANTS: dict[str, tuple[dict, dict, int]] = {
    "zoo": ({}, {}, 1),
    "bg=1": ({"bg": 1.0}, {}, 1),
    "prior-init": ({}, {"init_scales": "prior"}, 1),
    "bg=1+prior-init": ({"bg": 1.0}, {"init_scales": "prior"}, 1),
    "4x-steps": ({}, {}, 4),
    "centered": ({"centered": True}, {}, 1),
}
Z90 = 1.2815515655446004  # the standard normal's 90 % quantile


def layer_scale(run) -> float:
    """log10 of the median of ``q(v_1)``, the first hidden layer's scale."""
    with run.result.activate():
        mu_v, _ = run.result.guide._lognormal("l0_v")
    return float(0.5 * mu_v.detach().reshape(-1)[0] / math.log(10))


def scale_quantiles(run) -> list[float]:
    """log10 of the 90 % quantile of ``tau_kl v_l`` per hidden unit of the first hidden layer (the rule
    fires iff it is below ``log10 delta``; checked against the guide's own pruning probabilities)."""
    guide = run.result.guide
    with run.result.activate():
        mu_t, var_t = guide._tau_marginal(0)
        mu_v, var_v = guide._lognormal("l0_v")
    # the factors are on ln tau^2 and ln v^2: ln(tau v) ~ N((mu_t + mu_v) / 2, (var_t + var_v) / 4)
    q = 0.5 * (mu_t + mu_v + Z90 * (var_t + var_v).sqrt()) / math.log(10)
    return [float(v) for v in q.detach().reshape(-1)]


def fit_variant(variant: str, seed: int, steps: int):
    """The fit of ``variant`` (:data:`VARIANTS`) on toy-hs-221 split ``seed``."""
    from zoo.experiments.runs import RunConfig, fit_on_dataset

    options, guide_options, mult = VARIANTS[variant]
    cfg = RunConfig(
        split=seed,
        seed=seed,
        hidden=(15,),
        guide="factorized",
        steps=steps * mult,
        progress=False,
        options=options,
        guide_options=guide_options,
    )
    return fit_on_dataset("hs-bnn", "toy-hs-221", cfg)


def summarize(run, variant: str, seed: int) -> dict:
    """The study row of a fit: the rule, the profile, and q90 of the shrunk and the active units."""
    import torch

    from zoo.families.horseshoe.entry import ACTIVE_FRACTION, hs_metrics

    with run.result.activate():
        report = run.result.guide.sparsity_report(run.result.model)
    norms = torch.tensor(report.extras["weight_norms"]["fc0"])
    inactive = (norms < ACTIVE_FRACTION * norms.max()).tolist()
    q90 = scale_quantiles(run)
    fires = [p > 0.9 for p in report.extras["prune_probability"]["fc0"]]
    if fires != [q < -3 for q in q90]:
        raise RuntimeError("the q90 < 1e-3 criterion disagrees with the guide's pruning probabilities")
    shrunk = [q for q, off in zip(q90, inactive) if off]
    active = [q for q, off in zip(q90, inactive) if not off]
    return {
        "variant": variant,
        "seed": seed,
        "steps": run.result.steps,
        "accuracy": run.metrics["accuracy"],
        **hs_metrics(run),
        "log10_q90_shrunk_median": statistics.median(shrunk) if shrunk else None,
        "log10_q90_active_median": statistics.median(active) if active else None,
        "log10_v_median": layer_scale(run),
        "log10_q90": q90,
        "norms": norms.tolist(),
        "fit_seconds": run.metrics["fit_seconds"],
    }


def run_one(variant: str, seed: int, steps: int) -> dict:
    return summarize(fit_variant(variant, seed, steps), variant, seed)


def _mean_sd(vals: list) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.fmean(vals):.2f} ± {sd:.2f}"


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# hs-procedure",
        "",
        "Horseshoe BNN (hs-bnn, factorized guide, 15 ReLU units) on the 2-2-1 toy (toy-hs-221, split = "
        "seed), one procedure ingredient changed per variant (see `benchmarks/hs_procedure.py`).  "
        "`units_kept`: the pruning rule P(tau v < 1e-3) > 0.9; `units_active`: the shrinkage profile "
        "(||E[w]|| >= 0.1 x max, Fig. 7's statistic); q90: the 90 % quantile of tau v — the rule fires "
        "iff log10 q90 < -3.",
        "",
        f"Command: `{command}`",
        "",
        "| variant | fits | steps | accuracy | units_kept | units_active | log10 q90, shrunk units | "
        "log10 q90, active units | log10 median v | fit s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == v]
        lines.append(
            f"| {v} | {len(rs)} | {rs[0]['steps']} | {_mean_sd([r['accuracy'] for r in rs])} | "
            f"{_mean_sd([r['units_kept'] for r in rs])} | {_mean_sd([r['units_active'] for r in rs])} | "
            f"{_mean_sd([r['log10_q90_shrunk_median'] for r in rs])} | "
            f"{_mean_sd([r['log10_q90_active_median'] for r in rs])} | "
            f"{_mean_sd([r['log10_v_median'] for r in rs])} | "
            f"{statistics.fmean(r['fit_seconds'] for r in rs):.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--out", default=None, help="write hs-procedure.{json,md} into this folder")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be >= 1")
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    for v in a.variants:
        for s in a.seeds:
            r = run_one(v, s, a.steps)
            rows.append(r)
            print(json.dumps({k: r[k] for k in r if k not in ("log10_q90", "norms")}), flush=True)
    command = "python benchmarks/hs_procedure.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(rows, command.strip())
    print(text)
    if a.out:
        from zoo.io import atomic_write_many

        wall = round(time.perf_counter() - t0, 1)
        payload = {"command": command.strip(), "wall_seconds": wall, "rows": rows}
        out = Path(a.out)
        atomic_write_many(
            {
                out / "hs-procedure.json": json.dumps(payload, indent=1).encode(),
                out / "hs-procedure.md": text.encode(),
            }
        )
    return rows


if __name__ == "__main__":
    main()
