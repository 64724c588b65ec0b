"""The chains of :func:`zoo.infer.mcmc.fit_nuts`: :func:`run_chain` samples one chain with Pyro's ``NUTS`` /
``MCMC``; :func:`run_chains` runs them in ``spawn`` worker processes (one per core up to the number of
chains) or, as a fallback, one after the other in this process.

Chain ``k`` is seeded with :func:`chain_seed` ``(seed, k)`` before its kernel is built, so its draws do not
depend on the scheduling.  In parallel mode the workers send their iteration counts to one progress bar
of this process through a queue.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import queue as queue_module
import time
import warnings
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide import initialization as init
from torch import Tensor
from tqdm import tqdm  # plain text bar: no ipywidgets needed, no widget warning in notebooks

from zoo.infer.mcmc_stats import RecordingNUTS, stack_stats

__all__ = [
    "INIT_STRATEGIES",
    "chain_seed",
    "default_workers",
    "kernel_settings",
    "make_kernel",
    "run_chain",
    "run_chains",
]

logger = logging.getLogger(__name__)

#: ``NUTSConfig.init`` names and Pyro's initialization strategies (:mod:`pyro.infer.autoguide.initialization`)
INIT_STRATEGIES = {
    "uniform": init.init_to_uniform,
    "median": init.init_to_median,
    "mean": init.init_to_mean,
    "sample": init.init_to_sample,
    "feasible": init.init_to_feasible,
}

_PROGRESS: Any = None  # a worker process's progress queue (set by _init_worker)
_REPORT_EVERY = 10  # iterations per progress message


def chain_seed(seed: int, chain: int) -> int:
    """The seed of chain ``chain``: ``numpy.random.SeedSequence([seed, chain])`` (not the scheduling)."""
    return int(np.random.SeedSequence([int(seed), int(chain)]).generate_state(1)[0])


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_workers(chains: int, parallel: bool | None) -> int:
    """Worker processes for ``chains`` chains: 1 for ``parallel=False`` or one chain; otherwise one per
    available core up to ``chains`` (``parallel=None`` needs at least two cores, ``True`` forces two or
    more workers even on one core).  ``parallel=None`` inside a worker process (a fit fanned out by
    :mod:`zoo.experiments.dispatch`: loky, Dask or Ray already use the cores) runs the chains in that
    process: its children could not even start there (a loky worker's start method is not one a plain
    ``spawn`` child knows)."""
    if parallel is False or chains == 1:
        return 1
    if parallel is None and mp.current_process().name != "MainProcess":
        return 1
    cores = _cores()
    if parallel is None:
        return min(chains, cores) if cores > 1 else 1
    return min(chains, max(cores, 2))


def kernel_settings(cfg: Any) -> dict[str, Any]:
    """The keyword arguments of Pyro's ``NUTS`` for a :class:`~zoo.infer.mcmc.NUTSConfig` (diagonal or,
    with ``full_mass``, dense mass matrix and step size adapted during warm-up)."""
    return {
        "target_accept_prob": cfg.target_accept,
        "max_tree_depth": cfg.max_tree_depth,
        "jit_compile": cfg.jit_compile,
        "ignore_jit_warnings": True,
        "max_plate_nesting": 1,
        "init_strategy": INIT_STRATEGIES[cfg.init],
        "full_mass": bool(getattr(cfg, "full_mass", False)),
    }


def make_kernel(model: torch.nn.Module, cfg: Any) -> RecordingNUTS:
    """Pyro's NUTS kernel on ``model`` with the settings of a :class:`~zoo.infer.mcmc.NUTSConfig`, recording
    the per-draw sampler statistics (:class:`~zoo.infer.mcmc_stats.RecordingNUTS`)."""
    return RecordingNUTS(model, **kernel_settings(cfg))


class _Hook:
    """MCMC ``hook_fn``: records the log density (``-potential energy``, unconstrained space) and the sampler
    statistics (:class:`~zoo.infer.mcmc_stats.RecordingNUTS`) of each kept draw and, after the last one
    (before the kernel resets), its divergences, acceptance statistics and adapted step size; reports
    progress to the parent process."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.lp: list[float] = []
        self.stats: list[dict] = []
        self.final: dict[str, Any] = {}
        self.pending = 0

    def __call__(self, kernel: RecordingNUTS, params: dict, stage: str, i: int) -> None:
        if stage.startswith("Sample"):
            self.lp.append(-float(kernel._potential_energy_last))
            self.stats.append(dict(kernel.last_stats))
            if i == self.samples - 1:
                diag = kernel.diagnostics()
                self.final = {
                    "divergences": [int(d) for d in diag["divergences"]],
                    "accept_rate": float(diag["acceptance rate"]),
                    "mean_accept_prob": float(kernel._mean_accept_prob),
                    "step_size": float(kernel.step_size),
                }
        if _PROGRESS is not None:
            self.pending += 1
            if self.pending >= _REPORT_EVERY:
                self.flush()

    def flush(self) -> None:
        if _PROGRESS is not None and self.pending:
            _PROGRESS.put(self.pending)
        self.pending = 0


def run_chain(
    model: torch.nn.Module, x: Tensor, y: Tensor, cfg: Any, chain: int, show_bar: bool = False
) -> dict[str, Any]:
    """Sample chain ``chain``: ``{"samples": {site: (samples, *shape)}, "lp", "divergences" (kept-draw
    indices), "stats" (per-draw sampler statistics ``{name: (samples,)}``:
    :data:`~zoo.infer.mcmc_stats.STAT_DTYPES`), "num_divergences", "accept_rate" (fraction of iterations
    that moved), "mean_accept_prob" (the statistic the step size is adapted to), "step_size", "seconds",
    "cpu_seconds", "seed"}``."""
    seed = chain_seed(cfg.seed, chain)
    pyro.set_rng_seed(seed)
    hook = _Hook(cfg.samples)
    if getattr(cfg, "gibbs", False):
        return _gibbs_chain(model, x, y, cfg, seed, hook, show_bar)
    kernel = make_kernel(model, cfg)
    mcmc = MCMC(
        kernel, num_samples=cfg.samples, warmup_steps=cfg.warmup, hook_fn=hook, disable_progbar=not show_bar
    )
    t0, c0 = time.perf_counter(), time.process_time()
    with pyro.get_param_store().scope(), warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*torch.jit.trace.*deprecated", category=DeprecationWarning
        )
        mcmc.run(x, y)
    hook.flush()
    return {
        "samples": {k: v.detach().cpu().clone() for k, v in mcmc.get_samples().items()},
        "lp": torch.tensor(hook.lp, dtype=torch.float64),
        "stats": stack_stats(hook.stats),
        **hook.final,
        "num_divergences": len(hook.final["divergences"]),
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "seed": seed,
    }


def _gibbs_chain(
    model: torch.nn.Module, x: Tensor, y: Tensor, cfg: Any, seed: int, hook: _Hook, show_bar: bool
) -> dict:
    """A NUTS-within-Gibbs chain (:mod:`zoo.infer.mcmc_gibbs`), with the fields of :func:`run_chain`."""
    from zoo.infer.mcmc_gibbs import run_gibbs_chain

    bar = tqdm(total=cfg.warmup + cfg.samples, desc="NUTS within Gibbs", leave=False) if show_bar else None

    def tick() -> None:
        if bar is not None:
            bar.update(1)
        if _PROGRESS is not None:
            hook.pending += 1
            if hook.pending >= _REPORT_EVERY:
                hook.flush()

    t0, c0 = time.perf_counter(), time.process_time()
    try:
        with pyro.get_param_store().scope():
            out = run_gibbs_chain(model, x, y, cfg, kernel_settings(cfg), tick)
    finally:
        if bar is not None:
            bar.close()
    hook.flush()
    return {
        **out,
        "num_divergences": len(out["divergences"]),
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "seed": seed,
    }


def _init_worker(progress: Any, threads: int) -> None:
    global _PROGRESS
    _PROGRESS = progress
    torch.set_num_threads(threads)


def _sequential(model: torch.nn.Module, x: Tensor, y: Tensor, cfg: Any) -> list[dict]:
    before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        return [run_chain(model, x, y, cfg, k, show_bar=cfg.progress) for k in range(cfg.chains)]
    finally:
        torch.set_num_threads(before)


def _relay(progress: Any, futures: list[Future], total: int, chains: int) -> None:
    """Show the workers' progress messages on one bar until every chain has finished."""
    bar = tqdm(total=total, desc=f"NUTS, {chains} chains", leave=False)
    try:
        while not all(f.done() for f in futures):
            try:
                bar.update(progress.get(timeout=0.2))
            except queue_module.Empty:
                pass
    finally:
        bar.close()


def _parallel(model: torch.nn.Module, x: Tensor, y: Tensor, cfg: Any, workers: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    progress = ctx.Queue() if cfg.progress else None
    threads = cfg.threads if cfg.threads is not None else torch.get_num_threads()
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(progress, threads)
    )
    try:
        futures = [pool.submit(run_chain, model, x, y, cfg, k) for k in range(cfg.chains)]
        if progress is not None:
            _relay(progress, futures, cfg.chains * (cfg.warmup + cfg.samples), cfg.chains)
        return [f.result() for f in futures]
    except BaseException:  # an interrupt (or a failed chain) stops the other chains too
        _stop(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes (``shutdown`` alone waits for running chains to finish)."""
    pool.shutdown(wait=False, cancel_futures=True)
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


def _picklable(model: torch.nn.Module) -> bool:
    try:
        pickle.dumps(model)
    except Exception as e:  # a model from a __main__ script, a lambda attribute, ...
        logger.warning("NUTS: the model cannot be sent to worker processes (%s); chains run sequentially", e)
        return False
    return True


def run_chains(model: torch.nn.Module, x: Tensor, y: Tensor, cfg: Any) -> list[dict]:
    """Every chain of ``cfg`` (a :class:`~zoo.infer.mcmc.NUTSConfig`), in chain order (module docstring)."""
    workers = default_workers(cfg.chains, cfg.parallel)
    if workers > 1 and _picklable(model):
        try:
            return _parallel(model, x, y, cfg, workers)
        except BrokenProcessPool as e:  # e.g. a worker cannot start or import the model's module
            logger.warning("NUTS: worker processes failed (%s); running the chains sequentially", e)
    return _sequential(model, x, y, cfg)
