"""Wall-clock cost of the vectorized bow-tie CAVI (Sheinkman & Wade 2025, arXiv:2411.11132, App. A; issue 3).

Modes (any combination; with none, the ``--sizes`` table is printed):

* default / ``--sizes N:width:depth ...``: seconds per CAVI sweep and per closed-form ELBO on synthetic data
  (D_in = 8). Counting flops from App. A's orders (a few times N·D·(D+1)² per sweep) gives 0.1–1 s per sweep
  for UCI sizes (N <= 930, D = 50) in float64 torch.
* ``--n-sweep``: seconds per sweep for N in ``--ns`` (default 1k, 2k, ..., 32k) synthetic points, D_in = 8,
  one hidden layer of ``--width`` (default 50, the width of the paper's UCI networks, "1x50"), and the
  least-squares slope of log(time) on log(N): App. A says the cost is linear in N (slope ~ 1).
* ``--boston``: boston housing (``uci:bostonHousing`` split 0, registry ``bowtie`` 1x50 with its defaults,
  raw targets), time to converge by ``zoo.infer.loop.fit`` with the paper's rule (three consecutive relative
  ELBO changes < ``--tol`` = 1e-5, §4 / App. D.1), capped at ``--max-sweeps`` (reported if hit), the sweeps
  looser tolerances would have needed, then the median time of one sweep and one ELBO at the final state.
* ``--pernode``: two per-node numpy references of the *whole* sweep (``benchmarks/_bowtie_pernode.py``,
  written from the paper's updates, Eqs. 13–19 and App. A): A loops over layers, nodes *and* data points in
  Python (the loop structure of the authors' numpy code), B loops over layers and nodes with numpy over the
  data points. Both against :meth:`BowtieCAVIGuide.sweep` (V) from the same state on the same data (boston
  when ``ZOO_DATA_DIR`` is set): per-factor and total times, speed-ups, and "equal accuracy" = max abs/rel
  difference of every updated variational parameter after one sweep.

Times are medians over repetitions (the machine is shared); one thread (torch and numpy BLAS) unless
``--threads``.  ``--heap-malloc`` keeps glibc from ``mmap``-ing (and page-faulting anew) every block above
32 MB, which otherwise makes large-N sweeps look super-linear on this VM.  Usage::

    python benchmarks/bowtie_speed.py --sizes 270:20:1 900:50:1 --sweeps 3
    python benchmarks/bowtie_speed.py --n-sweep [--heap-malloc] [--ns 1000 2000 4000] [--sweeps 3]
    ZOO_DATA_DIR=/work/shared/data python benchmarks/bowtie_speed.py --boston [--seeds 0 1 2]
    ZOO_DATA_DIR=/work/shared/data python benchmarks/bowtie_speed.py --pernode [--reps 5] [--loop-reps 1]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time

import numpy as np
import torch

# a sibling module: importable when this file is run as a script (``python benchmarks/bowtie_speed.py``)
from _bowtie_pernode import hyper_from_model, reference_sweep, state_from_guide, state_keys

from guides.bowtie.cavi import BowtieCAVIGuide
from zoo.families.bowtie.model import BowtieModel

NS = (1000, 2000, 4000, 8000, 16000, 32000)


def _synthetic(n: int, d_in: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, dtype=torch.float64, generator=gen)
    y = torch.sin(x[:, 0]) * 3 + x[:, 1] + 0.3 * torch.randn(n, dtype=torch.float64, generator=gen)
    return x, y


def _median_time(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


# ----------------------------------------------------------------------------------- sweep vs N / size
def time_sweep(n: int, width: int, depth: int, sweeps: int, seed: int = 0) -> dict:
    """Median seconds per CAVI sweep and per closed-form ELBO for N = ``n`` synthetic points of dimension
    8, ``depth`` hidden layers of ``width`` units (one untimed warm-up sweep)."""
    x, y = _synthetic(n, seed=seed)
    torch.manual_seed(seed)
    model = BowtieModel(8, (width,) * depth, 1, noise_rate=None).double()
    guide = BowtieCAVIGuide(model)
    with torch.no_grad():
        guide.initialize(model, x, y)
        guide.sweep(model, x, y)  # warm-up
        sweep_s = _median_time(lambda: guide.sweep(model, x, y), sweeps)
        elbo_s = _median_time(lambda: guide.elbo(model, x, y), sweeps)
    return {"n": n, "width": width, "depth": depth, "sweep_s": sweep_s, "elbo_s": elbo_s}


def run_sizes(sizes: list[str], sweeps: int) -> None:
    print("\n### Seconds per CAVI sweep (synthetic, D_in = 8)\n")
    print("| N | width | L | s/sweep | s/ELBO |\n|---|---|---|---|---|")
    for size in sizes:
        n, width, depth = (int(v) for v in size.split(":"))
        r = time_sweep(n, width, depth, sweeps)
        print(f"| {n} | {width} | {depth} | {r['sweep_s']:.4f} | {r['elbo_s']:.4f} |", flush=True)


def run_n_sweep(ns: list[int], width: int, sweeps: int) -> dict:
    """Sweep time for each N and the least-squares slope of log(time) on log(N) (App. A: linear in N)."""
    print(f"\n### Sweep time vs N (synthetic, D_in = 8, 1x{width}, median of {sweeps} sweeps)\n")
    print("| N | s/sweep | s/ELBO | us/point/sweep |\n|---|---|---|---|")
    rows = []
    for n in ns:
        r = time_sweep(n, width, 1, sweeps)
        rows.append(r)
        print(f"| {n} | {r['sweep_s']:.4f} | {r['elbo_s']:.4f} | {1e6 * r['sweep_s'] / n:.1f} |", flush=True)
    slope = math.nan
    if len(rows) >= 2:
        slope = float(np.polyfit(np.log([r["n"] for r in rows]), np.log([r["sweep_s"] for r in rows]), 1)[0])
    print(f"\nslope of log(s/sweep) on log(N): {slope:.3f} (1 = linear in N)")
    return {"rows": rows, "slope": slope}


# ----------------------------------------------------------------------------------- boston
def _boston(hidden: list[int]):
    from zoo.data import load_dataset
    from zoo.experiments.registry import build

    ds = load_dataset("uci:bostonHousing", split=0)
    xtr, ytr, xte, yte = ds.tensors(dtype=torch.float64)
    model, guide, _ = build("bowtie", ds.in_features, ds.out_features, "regression", hidden=hidden)
    return model, guide, xtr, ytr, xte, yte


def _sweeps_to(elbos: list[float], tol: float, patience: int = 3) -> int | None:
    """First sweep at which ``patience`` consecutive relative changes ``|e_t - e_{t-1}| / max(1, |e_t|)``
    are below ``tol`` (the rule of :class:`zoo.infer.loop.ConvergenceMonitor`), or None."""
    hits = 0
    for t in range(1, len(elbos)):
        hits = hits + 1 if abs(elbos[t] - elbos[t - 1]) / max(1.0, abs(elbos[t])) < tol else 0
        if hits >= patience:
            return t + 1
    return None


def run_boston(seeds: list[int], max_sweeps: int, tol: float, reps: int) -> list[dict]:
    """Time to converge (``zoo.infer.loop.fit``, paper stopping rule) and median time per sweep / ELBO; also
    when looser tolerances would have stopped the same run, and the last relative ELBO change."""
    from zoo.eval.metrics import rmse
    from zoo.infer.loop import fit
    from zoo.infer.predict import predict

    loose = (1e-3, 1e-4)
    print(
        f"\n### Boston housing (split 0, 1x50, registry defaults): CAVI to convergence (3 consecutive "
        f"relative ELBO changes < {tol:g}, cap {max_sweeps} sweeps)\n"
    )
    print(
        "| seed | s/sweep | s/ELBO | sweeps | converged | s to stop | last rel. change | "
        + " | ".join(f"sweeps to {t:g}" for t in loose)
        + " | final ELBO | test RMSE |\n"
        + "|---" * (9 + len(loose))
        + "|"
    )
    out = []
    for seed in seeds:
        model, guide, xtr, ytr, xte, yte = _boston([50])
        res = fit(model, guide, xtr, ytr, steps=max_sweeps, tol=tol, seed=seed, progress=False)
        test_rmse = float(rmse(predict(res, xte, num_samples=10).mean, yte))
        with torch.no_grad():
            sweep_s = _median_time(lambda g=guide, m=model, a=xtr, b=ytr: g.sweep(m, a, b), reps)
            elbo_s = _median_time(lambda g=guide, m=model, a=xtr, b=ytr: g.elbo(m, a, b), reps)
        e = res.elbo
        last = abs(e[-1] - e[-2]) / max(1.0, abs(e[-1])) if len(e) > 1 else math.nan
        r = {
            "seed": seed,
            "sweep_s": sweep_s,
            "elbo_s": elbo_s,
            "sweeps": res.steps,
            "converged": bool(res.converged),
            "wall_s": res.wall_time,
            "last_rel_change": last,
            "sweeps_to": {t: _sweeps_to(e, t) for t in loose},
            "elbo": e[-1],
            "rmse": test_rmse,
        }
        out.append(r)
        conv = "yes" if r["converged"] else f"**no (cap {max_sweeps} hit)**"
        to = " | ".join("-" if r["sweeps_to"][t] is None else str(r["sweeps_to"][t]) for t in loose)
        print(
            f"| {seed} | {sweep_s:.4f} | {elbo_s:.4f} | {r['sweeps']} | {conv} | {r['wall_s']:.2f} | "
            f"{last:.1e} | {to} | {r['elbo']:.2f} | {test_rmse:.3f} |",
            flush=True,
        )
    return out


# ----------------------------------------------------------------------------------- per-node reference
def _compare(guide, ref: dict) -> dict[str, tuple[float, float]]:
    """Max abs and max relative (``|a-b| / max(1, |b|)``) difference per updated parameter group."""
    groups: dict[str, tuple[float, float]] = {}
    for key in state_keys(guide.num_hidden):
        a = getattr(guide, key).detach().cpu().double().numpy()
        b = ref[key]
        diff = np.abs(a - b)
        name = key.rstrip("0123456789") if key[-1].isdigit() else key
        absd = float(diff.max()) if diff.size else 0.0
        reld = float((diff / np.maximum(1.0, np.abs(b))).max()) if diff.size else 0.0
        old = groups.get(name, (0.0, 0.0))
        groups[name] = (max(old[0], absd), max(old[1], reld))
    return groups


def run_pernode(
    data: str, n: int, hidden: list[int], reps: int, loop_reps: int, warm: int, seed: int
) -> dict:
    """Per-node numpy sweeps (nodes looped, data points vectorized; nodes *and* data points looped) vs the
    vectorized sweep, same state and data: per-factor times, speed-ups, max differences after one sweep."""
    if data == "boston":
        model, guide, x, y, _, _ = _boston(hidden)
        label = f"boston split 0, N = {x.shape[0]}, D_in = {x.shape[1]}"
    else:
        from zoo.experiments.registry import build

        x, y = _synthetic(n, seed=seed)
        model, guide, _ = build("bowtie", x.shape[1], 1, "regression", hidden=hidden)
        label = f"synthetic, N = {n}, D_in = {x.shape[1]}"
    arch = "x".join(str(h) for h in hidden)
    torch.manual_seed(seed)
    with torch.no_grad():
        guide.initialize(model, x, y)
        for _ in range(warm):  # move away from the initialization (B = 0.01 I, S = 0.01 I)
            guide.sweep(model, x, y)
    snapshot = {k: v.clone() for k, v in guide.state_dict().items()}
    st0, hp = state_from_guide(guide), hyper_from_model(model)
    xn, yn = x.double().numpy(), y.double().numpy()

    refs, ref_times = {}, {}
    for loop_points, r in ((True, loop_reps), (False, reps)):
        runs = []
        for _ in range(r):
            t0 = time.perf_counter()
            refs[loop_points], times = reference_sweep(xn, yn, st0, hp, loop_points=loop_points)
            times["total"] = time.perf_counter() - t0
            runs.append(times)
        ref_times[loop_points] = runs

    vec_times: list[dict] = []
    for _ in range(reps):
        guide.load_state_dict(snapshot)
        times: dict[str, float] = {}
        clock = [time.perf_counter()]

        def cb(name: str, times=times, clock=clock) -> None:
            now = time.perf_counter()
            times[name] = now - clock[0]
            clock[0] = now

        t0 = time.perf_counter()
        with torch.no_grad():
            guide.sweep(model, x, y, callback=cb)
        times["total"] = time.perf_counter() - t0
        vec_times.append(times)
    diffs = {lp: _compare(guide, refs[lp]) for lp in refs}

    names = list(vec_times[0])

    def med(runs: list[dict]) -> dict[str, float]:
        return {k: statistics.median(t[k] for t in runs) for k in names}

    loops, node, vec = med(ref_times[True]), med(ref_times[False]), med(vec_times)
    print(
        f"\n### Per-node numpy references vs vectorized sweep ({label}, {arch} hidden, state after {warm} "
        f"sweeps; medians of {loop_reps} / {reps} / {reps} runs)\n"
    )
    print(
        "A: Python loops over nodes *and* data points (the authors' loop structure); B: loops over nodes, "
        "numpy over data points; V: `BowtieCAVIGuide.sweep` (torch, batched over nodes and points).\n"
    )
    print(
        "| factor | A per-node x per-point (ms) | B per-node (ms) | V vectorized (ms) | A/V | B/V |\n"
        "|---|---|---|---|---|---|"
    )
    for k in names:
        label_k = "**whole sweep**" if k == "total" else f"`{k}`"
        print(
            f"| {label_k} | {1e3 * loops[k]:.2f} | {1e3 * node[k]:.2f} | {1e3 * vec[k]:.2f} | "
            f"{loops[k] / vec[k]:.1f}x | {node[k] / vec[k]:.1f}x |"
        )
    print("\nEqual accuracy: max |V - A| and max |V - B| per parameter after one sweep from the same state\n")
    print("| parameter | max abs V-A | max rel V-A | max abs V-B | max rel V-B |\n|---|---|---|---|---|")
    for k in diffs[False]:
        (aa, ra), (ab, rb) = diffs[True][k], diffs[False][k]
        print(f"| `{k}` | {aa:.1e} | {ra:.1e} | {ab:.1e} | {rb:.1e} |")
    worst = max(a for d in diffs.values() for a, _ in d.values())
    print(
        f"\n(relative = |diff| / max(1, |reference|).)  Overall max abs diff {worst:.1e}; "
        f"whole-sweep speed-up of V: {loops['total'] / vec['total']:.1f}x over A, "
        f"{node['total'] / vec['total']:.1f}x over B."
    )
    return {"loops": loops, "node": node, "vec": vec, "diffs": diffs}


# ----------------------------------------------------------------------------------- CLI
def _heap_only_malloc() -> bool:
    """glibc: serve every allocation from the heap and never trim it (``mallopt(M_MMAP_MAX, 0)``,
    ``mallopt(M_TRIM_THRESHOLD, 2^31 - 1)``).  By default blocks above 32 MB (one (N, 50, 50) float64 tensor
    for N > 1700) are fresh ``mmap``s, page-faulted anew every time; on a loaded VM that fault cost grows the
    sweep time faster than N.  Returns False where this is not glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-4, 0)) and bool(libc.mallopt(-1, 2**31 - 1))
    except (OSError, AttributeError):
        return False


def _limit_threads(n: int):
    """One thread for torch *and* numpy's BLAS (threadpoolctl when available)."""
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - numpy then uses its default (set OPENBLAS_NUM_THREADS)
        return contextlib.nullcontext()
    return threadpool_limits(n)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=None, help="N:width:depth triples (default mode)")
    p.add_argument("--sweeps", type=int, default=3, help="timed sweeps per size (median)")
    p.add_argument("--n-sweep", action="store_true", help="sweep time vs N and the log-log slope")
    p.add_argument("--ns", type=int, nargs="+", default=list(NS), help="N values for --n-sweep")
    p.add_argument("--width", type=int, default=50, help="hidden width for --n-sweep")
    p.add_argument("--boston", action="store_true", help="time to converge on boston 1x50")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="--boston seeds")
    p.add_argument("--max-sweeps", type=int, default=500, help="--boston sweep cap")
    p.add_argument("--tol", type=float, default=1e-5, help="--boston relative ELBO tolerance")
    p.add_argument("--pernode", action="store_true", help="per-node numpy reference vs vectorized sweep")
    p.add_argument("--pernode-data", choices=("boston", "synthetic"), default=None)
    p.add_argument("--pernode-n", type=int, default=455, help="N for --pernode-data synthetic")
    p.add_argument("--hidden", type=int, nargs="+", default=[50], help="hidden widths for --pernode")
    p.add_argument("--warm", type=int, default=3, help="sweeps before the --pernode snapshot")
    p.add_argument("--reps", type=int, default=5, help="repetitions (median) for --boston / --pernode")
    p.add_argument("--loop-reps", type=int, default=1, help="repetitions of the per-point loop reference")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--heap-malloc",
        action="store_true",
        help="glibc: no mmap for large blocks, no heap trimming (takes page faults out of the timings)",
    )
    p.add_argument("--threads", type=int, default=int(os.environ.get("ZOO_NUM_THREADS", "1")))
    a = p.parse_args(argv)
    for name in ("sweeps", "max_sweeps", "reps", "loop_reps", "threads", "width"):
        if getattr(a, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if a.warm < 0:
        raise ValueError("--warm must be >= 0")
    has_data = bool(os.environ.get("ZOO_DATA_DIR"))
    if a.boston and not has_data:
        raise SystemExit("--boston needs ZOO_DATA_DIR (e.g. /work/shared/data)")
    heap = _heap_only_malloc() if a.heap_malloc else False
    if a.heap_malloc and not heap:
        print("--heap-malloc: mallopt unavailable (not glibc); default allocator used")
    with _limit_threads(a.threads):
        print(
            f"torch {torch.__version__}, numpy {np.__version__}, threads {a.threads}, "
            f"allocator {'glibc heap-only (--heap-malloc)' if heap else 'default'}"
        )
        if a.sizes is not None or not (a.n_sweep or a.boston or a.pernode):
            run_sizes(a.sizes or ["270:20:1", "400:20:1", "900:50:1", "300:20:2"], a.sweeps)
        if a.n_sweep:
            run_n_sweep(a.ns, a.width, a.sweeps)
        if a.boston:
            run_boston(a.seeds, a.max_sweeps, a.tol, a.reps)
        if a.pernode:
            data = a.pernode_data or ("boston" if has_data else "synthetic")
            run_pernode(data, a.pernode_n, a.hidden, a.reps, a.loop_reps, a.warm, a.seed)


if __name__ == "__main__":
    main()
