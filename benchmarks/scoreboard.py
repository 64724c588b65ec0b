"""Scoreboard: every applicable guide of every registry entry scored against every stored reference posterior
(:mod:`zoo.reference`), ``K`` seeds each, into ``benchmarks/results/scoreboard.{json,md,png}``.

For each stored instance, every guide of every model in the instance's ``scored`` list is fitted with
:func:`zoo.experiments.runs.fit_on_dataset` on the instance's data (seeds ``0..K-1``) and scored by
:func:`zoo.reference.score.score_spec` (W1/W2 of the predictive draws of ``y`` and ``f``, NLL/RMSE gaps,
coverage; agreement / total variation; inclusion MAE / AUROC; sorted-κ MAE; sorted unit-norm W1).  The
headline score of a regression instance is the W2 between the guide's and the reference's predictive draws of
``y`` divided by the training-target standard deviation (``w2_y/sd``: scale-free, so instances compare); of a
binary instance the total variation of ``P(y = 1)``.  On 1-D instances every fit also keeps its predictive
bands, drawn over the reference's into ``scoreboard-bands.png`` (``benchmarks/scoreboard_bands.py``).
Lower is better; 0 is the reference itself (up to its
Monte Carlo error).

Every finished fit is journaled to ``OUT/scoreboard.partial.jsonl`` (one line per instance, spec and seed),
so an interrupted run resumes where it stopped; a fit that raises is recorded with its error and skipped.
The rendered ``scoreboard.json`` keeps every fit's row too, and a render merges the journal into it (rows the
journal redoes are replaced), so a run on a fresh checkout or on a subset of the instances adds to the board.

Usage::

    python benchmarks/scoreboard.py [--seeds 5] [--steps N] [--instances a,b] [--models m1,m2]
                                    [--guides g1,g2] [--out benchmarks/results]
                                    [--root benchmarks/reference] [--render-only]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
from scoreboard_bands import FIGURE, plot_bands

logger = logging.getLogger("scoreboard")


def _specs(inst, models: set[str] | None, guides: set[str] | None = None) -> list[tuple[str, str]]:
    from zoo.experiments.registry import get_entry

    out = []
    for model in inst.scored:
        if models and model not in models:
            continue
        out.extend((model, g) for g in get_entry(model).guides if not guides or g in guides)
    return out


def _journal(path: Path) -> list[dict]:
    from zoo.io import read_lines

    return read_lines(path)


def _run(args: argparse.Namespace, journal: Path) -> None:
    import pyro

    from zoo.io import append_line
    from zoo.reference.instances import INSTANCES
    from zoo.reference.score import ScoreConfig, score_spec
    from zoo.reference.store import load_reference, stored_names

    pyro.enable_validation(False)
    done = {(r["instance"], r["model"], r["guide"], r["seed"]) for r in _journal(journal)}
    names = [n for n in INSTANCES if n in set(stored_names(args.root))]
    if args.instances:
        names = [n for n in names if n in args.instances.split(",")]
    models = set(args.models.split(",")) if args.models else None
    guides = set(args.guides.split(",")) if args.guides else None
    with open(journal, "a") as fh:
        for name in names:
            inst, ref = INSTANCES[name], load_reference(args.root, name)
            for model, guide in _specs(inst, models, guides):
                for seed in range(args.seeds):
                    if (name, model, guide, seed) in done:
                        continue
                    t0 = time.perf_counter()
                    row = {
                        "instance": name,
                        "model": model,
                        "guide": guide,
                        "seed": seed,
                        "steps": args.steps,
                    }
                    try:
                        res = score_spec(
                            model, guide, inst, ref, ScoreConfig(seeds=1, steps=args.steps, seed=seed)
                        )
                        row["scores"] = res["per_seed"][0]["scores"]
                        if res["per_seed"][0].get("bands"):  # a 1-D toy: the bands of the figure
                            row["bands"] = res["per_seed"][0]["bands"]
                    except Exception as e:  # a guide that fails is recorded, the board goes on
                        row["error"] = f"{type(e).__name__}: {e}"
                        logger.warning(
                            "%s %s:%s seed %d failed: %s", name, model, guide, seed, traceback.format_exc()
                        )
                    row["seconds"] = round(time.perf_counter() - t0, 2)
                    append_line(fh, json.dumps(row))
                    logger.info("%s %s:%s seed %d: %.0f s", name, model, guide, seed, row["seconds"])


# ----------------------------------------------------------------------------------------------- render


def _aggregate(rows: list[dict], metas: dict[str, dict]) -> dict:
    """``{instance: {"model:guide": {"headline": {mean, sd}, group: {key: {mean, sd}}, "errors"}}}``; the
    headline of a fit is :func:`zoo.reference.headline.headline_value` (W2(y)/sd or TV)."""
    from zoo.reference.headline import headline_value

    runs: dict = {}
    for r in rows:
        runs.setdefault(r["instance"], {}).setdefault(f"{r['model']}:{r['guide']}", []).append(r)
    board: dict = {}
    for name, specs in runs.items():
        for spec, rs in specs.items():
            ok = [r for r in rs if "scores" in r]
            cell: dict = {
                "seeds": len(ok),
                "errors": [{"seed": r["seed"], "error": r["error"]} for r in rs if "error" in r],
                "seconds_mean": float(np.mean([r["seconds"] for r in ok])) if ok else float("nan"),
            }
            board.setdefault(name, {})[spec] = cell
            if not ok:
                continue
            heads = np.array([headline_value(r["scores"], metas[name].get("y_std")) for r in ok])
            cell["headline"] = {
                "mean": float(heads.mean()),
                "sd": float(heads.std(ddof=1)) if len(ok) > 1 else 0.0,
            }
            for group in ok[0]["scores"]:
                for key in ok[0]["scores"][group]:
                    v = np.array([r["scores"][group][key] for r in ok if group in r["scores"]], dtype=float)
                    sd = float(np.std(v, ddof=1)) if v.size > 1 else 0.0
                    cell.setdefault(group, {})[key] = {"mean": float(np.nanmean(v)), "sd": sd}
    return board


def _fmt(cell: dict, group: str, key: str, scale: float = 1.0) -> str:
    v = cell.get(group, {}).get(key)
    if v is None or not math.isfinite(v["mean"]):
        return "–"
    return f"{v['mean'] / scale:.3g} ± {v['sd'] / scale:.2g}"


def _markdown(board: dict, metas: dict, floors: dict, commands: list[str], steps: dict | None = None) -> str:
    lines = [
        "# Scoreboard: guides against reference posteriors",
        "",
        "Commands (each added its instances' fits to the board; training steps are in each heading):",
        "",
        *[f"* `{c}`" for c in commands],
        "",
        "Reference store: `benchmarks/reference/` (`zoo reference list`).",
        "Headline: W2 of the predictive draws of y / train-target sd (regression) or total variation of",
        "P(y = 1) (binary); lower is better; mean ± sd over seeds.  Other columns: see",
        "`zoo/reference/score.py` (f: network output, only for guides of the reference's own model).",
        "Every fit is journaled in `scoreboard.partial.jsonl` and kept in `scoreboard.json`'s `rows`;",
        "*reference floor*: the reference's kept draws, first half against second half (NUTS: chains 0-1",
        "against 2-3), the Monte Carlo floor of the headline (about sqrt(2) times that of a full-size",
        "score).",
        "",
    ]
    for name, cells in board.items():
        m = metas[name]
        d = m["diagnostics"]
        how = "exact enumeration" if m["method"] == "enumeration" else f"NUTS, {d['draws_total']} draws"
        size = f"n_train {m['n_train']}, n_test {m['n_test']}"
        used = (steps or {}).get(name, [None])
        trained = ", ".join("each model's default" if k is None else str(k) for k in used)
        lines += [f"## {name}: {m['model']} on {m['dataset']} ({size}; {how}; training steps: {trained})", ""]
        regression = m["task"] == "regression"
        sd = m.get("y_std") or 1.0
        if regression:
            head = (
                "| guide | seeds | W2(y)/sd | W2(f)/sd | NLL gap | y-draw cov. (0.95) | PIP MAE | PIP AUROC "
                "| κ MAE | s/fit |"
            )
        else:
            head = "| guide | seeds | TV | agreement | s/fit |"
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
        fl = floors[name]
        floor = f"{fl['w2'] / sd:.3g}" if "w2" in fl else f"{fl['total_variation']:.3g}"
        lines.append(f"| *reference floor* | – | {floor} |" + " |" * (head.count("|") - 4))
        for spec, c in sorted(cells.items(), key=lambda kv: kv[1].get("headline", {}).get("mean", math.inf)):
            err = f" ({len(c['errors'])} failed)" if c["errors"] else ""
            if regression:
                kappa = next((k for k in c if k.startswith("kappa.")), None)
                cols = [
                    _fmt(c, "y", "w2", sd),
                    _fmt(c, "f", "w2", sd),
                    _fmt(c, "y", "nll_gap"),
                    _fmt(c, "y", "draw_coverage"),
                    _fmt(c, "inclusion", "mae"),
                    _fmt(c, "inclusion", "auroc"),
                    _fmt(c, kappa, "kappa_mae") if kappa else "–",
                ]
            else:
                cols = [_fmt(c, "class", "total_variation"), _fmt(c, "class", "agreement")]
            secs = c["seconds_mean"]
            secs = f"{secs:.0f}" if secs >= 10 else f"{secs:.2g}"
            lines.append(f"| {spec}{err} | {c['seeds']} | " + " | ".join(cols) + f" | {secs} |")
        lines.append("")
    return "\n".join(lines)


def _heatmap(board: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    instances = list(board)
    specs = sorted({s for cells in board.values() for s in cells})
    grid = np.full((len(specs), len(instances)), np.nan)
    for j, name in enumerate(instances):
        for i, spec in enumerate(specs):
            h = board[name].get(spec, {}).get("headline")
            if h is not None:
                grid[i, j] = h["mean"]
    fig, ax = plt.subplots(figsize=(1.1 * len(instances) + 3, 0.32 * len(specs) + 1.5))
    im = ax.imshow(np.log10(grid), aspect="auto", cmap="YlOrRd")
    ax.set_xticks(range(len(instances)), instances, rotation=45, ha="right")
    ax.set_yticks(range(len(specs)), specs, fontsize=7)
    for i in range(len(specs)):
        for j in range(len(instances)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2g}", ha="center", va="center", fontsize=6, color="k")
    fig.colorbar(im, ax=ax, label="log10 headline (W2(y)/sd or TV)")
    ax.set_title("guides vs reference posteriors (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fit_key(r: dict) -> tuple:
    return (r["instance"], r["model"], r["guide"], r["seed"])


def _merged(rows: list[dict], old: dict) -> tuple[list[dict], dict]:
    """The journal's rows over the committed record ``old``: its per-fit ``rows`` that the journal does not
    redo, and the cells of instances it holds no rows of (a record written before rows were kept), so a run
    on a fresh checkout (no journal) or on a subset of instances adds to the board instead of replacing it."""
    rows = list({_fit_key(r): r for r in rows}.values())  # a fit journaled twice counts once (the last)
    fresh = {_fit_key(r) for r in rows}
    rows = [r for r in old.get("rows", []) if _fit_key(r) not in fresh] + rows
    have = {r["instance"] for r in rows}
    carried = {n: cells for n, cells in old.get("board", {}).items() if n not in have}
    return rows, carried


def _render(args: argparse.Namespace, journal: Path, command: str | None) -> None:
    from zoo.experiments.runs import dumps_json
    from zoo.io import atomic_write_text
    from zoo.reference.headline import reference_floor
    from zoo.reference.instances import INSTANCES
    from zoo.reference.store import load_reference

    out = Path(args.out)
    old = json.loads((out / "scoreboard.json").read_text()) if (out / "scoreboard.json").exists() else {}
    rows, carried = _merged(_journal(journal), old)
    names = [n for n in INSTANCES if n in carried or any(r["instance"] == n for r in rows)]
    refs = {n: load_reference(args.root, n) for n in names}
    metas = {n: meta for n, (_, meta) in refs.items()}
    floors = {n: reference_floor(arrays) for n, (arrays, _) in refs.items()}
    fresh = _aggregate(rows, metas)
    board = {n: fresh[n] if n in fresh else carried[n] for n in names}
    old_steps = old.get("instance_steps", {})
    steps = {
        n: sorted({r.get("steps") for r in rows if r["instance"] == n}, key=str) or old_steps.get(n, [None])
        for n in names
    }
    commands = [*old.get("commands", [old["command"]] if "command" in old else [])]
    commands += [command] if command else []  # a re-render (--render-only) ran no fit
    command = command or old.get("command", "")
    record = {
        "command": command,
        "commands": commands,
        "seeds": args.seeds,
        "steps": args.steps,
        "instance_steps": steps,
        "floors": floors,
        "board": board,
        "rows": rows,
    }
    drawn = plot_bands(rows, refs, out / FIGURE)
    text = _markdown(board, metas, floors, commands, steps)
    if drawn:
        text += (
            "\n## Predictive bands on the 1-D toys\n\nThe reference's mean of f and central 95 % interval of "
            f"y (grey) under each guide's (first seed, blue) on {', '.join(drawn)}; dots: test targets.\n\n"
            f"![predictive bands]({FIGURE})\n"
        )
    atomic_write_text(out / "scoreboard.json", dumps_json(record))
    atomic_write_text(out / "scoreboard.md", text)
    if board:
        _heatmap(board, out / "scoreboard.png")


def main(argv: list[str] | None = None) -> int:
    from zoo.reference.store import default_root

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=None, help="training steps (default: each model's)")
    p.add_argument("--instances", default=None, help="comma-separated subset of the stored instances")
    p.add_argument("--models", default=None, help="comma-separated subset of the models")
    p.add_argument("--guides", default=None, help="comma-separated subset of the guides")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--root", default=str(default_root()))
    p.add_argument("--render-only", action="store_true", help="rebuild json/md/png from the journal")
    args = p.parse_args(argv)
    if args.seeds <= 0 or (args.steps is not None and args.steps <= 0):
        p.error("--seeds and --steps must be > 0")
    logging.basicConfig(format="%(asctime)s %(message)s", stream=sys.stdout, level=logging.INFO)
    import torch

    torch.set_num_threads(int(os.environ.get("ZOO_NUM_THREADS", "1")))
    journal = Path(args.out) / "scoreboard.partial.jsonl"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/scoreboard.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not args.render_only:
        _run(args, journal)
    _render(args, journal, None if args.render_only else command.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
