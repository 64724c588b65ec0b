"""Start a data-parallel fit on ``nproc`` local processes and run its loop (:mod:`zoo.infer.distributed`).

:func:`zoo.infer.loop.fit` with ``nproc = k > 1`` calls :func:`launch_fit`: ``k`` ranks are spawned
(``torch.multiprocessing``, start method ``spawn``), join one process group through a rendezvous file in a
private temporary folder (gloo on CPU; NCCL with one GPU per rank on CUDA), and each runs the same
:func:`~zoo.infer.loop.fit` on a pickled copy of model, guide and data.  Inside the group
:func:`zoo.infer.loop.run_steps` hands over to :func:`run_steps_distributed`.  Only rank 0 runs the
callbacks and writes: it saves its final fit as a checkpoint in the temporary folder
(:func:`zoo.infer.checkpoint.save`, atomic), which the calling process loads into *its* model and guide —
so the caller gets a normal :class:`~zoo.infer.result.FitResult`, checkpoints it with
``zoo.checkpoint.save`` and :func:`launch_resume` continues it on ``k`` ranks again.  Under ``torchrun``
(``torch.distributed`` already initialized) no process is spawned: every launched process is a rank.
The loop hands this module its own ``fit``/``resume`` and per-step functions as arguments: the launcher
never imports the loop that calls it, so the import graph stays acyclic.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import pyro.optim
import torch
import torch.multiprocessing as mp
from pyro.infer import ELBO, SVI
from torch import Tensor
from tqdm.auto import tqdm

from zoo.core.guide import ClosedFormGuide
from zoo.infer import distributed as D
from zoo.infer.config import FitConfig
from zoo.infer.result import FitResult

__all__ = ["launch_fit", "launch_resume", "run_steps_distributed"]

log = logging.getLogger(__name__)


def _check_picklable(payload: dict) -> None:
    for name, value in payload.items():
        try:
            pickle.dumps(value)
        except Exception as e:  # noqa: BLE001 - any pickling failure is the user's argument
            raise TypeError(
                f"{name}: nproc > 1 sends it to the worker processes, but it cannot be pickled ({e}); "
                "use module-level functions/objects or nproc=1"
            ) from e


def _links(guide) -> list[tuple]:
    """``(module, _model, master)`` of every Pyro autoguide in ``guide``: their ``__getstate__`` clears these
    references (weakrefs are not picklable) on the pickled object itself, so they are put back after
    pickling, in the caller and (``_model`` only; ``master`` is rebuilt by ``__setstate__``) in the ranks."""
    if not isinstance(guide, torch.nn.Module):
        return []
    return [(m, m._model, m.master) for m in guide.modules() if hasattr(m, "_model") and hasattr(m, "master")]


def _relink(links: list[tuple]) -> None:
    for module, model_ref, master in links:
        module._model, module.master = model_ref, master


def _relink_models(guide, model_refs: list) -> None:
    mods = [m for m in guide.modules() if hasattr(m, "_model")] if isinstance(guide, torch.nn.Module) else []
    for module, ref in zip(mods, model_refs):
        module._model = ref


def _pickled_run(world: int, job: str, payload: dict, guide, folder: str | None = None) -> str:
    """Check ``payload`` pickles, spawn the ranks (they run ``job``), restore the guide's references."""
    links = _links(guide)
    payload["model_refs"] = [ref for _, ref, _ in links]
    try:
        _check_picklable(payload)
        # plain pickle bytes, not torch.multiprocessing's shared-memory tensors: each rank must own its
        # parameters (shared storage would apply every rank's optimizer update to one tensor)
        blob = pickle.dumps(payload)
        folder = folder or tempfile.mkdtemp(prefix="zoo-dist-")
        try:
            mp.start_processes(
                _worker, args=(world, folder, job, blob), nprocs=world, join=True, start_method="spawn"
            )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # a failed rank leaves nothing behind
            raise
    finally:
        _relink(links)
    return folder


def _check_gpus(device: Any, nproc: int) -> None:
    """NCCL needs one GPU per rank on a node: refuse ``nproc`` CUDA ranks with fewer GPUs, before spawning."""
    if device is not None and torch.device(device).type == "cuda" and "RANK" not in os.environ:
        found = torch.cuda.device_count()
        if found < nproc:
            raise ValueError(f"nproc: {nproc} CUDA ranks need {nproc} GPUs (one each), found {found}")


def _device_for_rank(device: Any, rank: int) -> Any:
    if device is not None and torch.device(device).type == "cuda":
        index = rank % max(1, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return f"cuda:{index}"
    return device


def _worker(rank: int, world: int, folder: str, job: str, blob: bytes) -> None:
    """Rank ``rank``: join the group, run ``fit``/``resume``, rank 0 saves the result for the caller."""
    from zoo.infer import checkpoint

    payload = pickle.loads(blob)
    _relink_models(payload["guide"], payload["model_refs"])
    cfg = payload.get("config")
    device = _device_for_rank(getattr(cfg, "device", payload.get("device")), rank)
    init = "file://" + os.path.join(folder, "rendezvous")
    with D.process_group(rank, world, init, D.backend_for(device)):
        callbacks = payload["callbacks"]  # every rank knows them, rank 0 alone runs them
        if job == "fit":
            cfg = cfg.replace(device=device, progress=cfg.progress and rank == 0)
            result = payload["fit_fn"](
                payload["model"], payload["guide"], payload["x"], payload["y"], cfg,
                optimizer=payload["optimizer"], loss=payload["loss"], callbacks=callbacks,
                spec=payload["spec"],
            )  # fmt: skip
        else:
            result = checkpoint.load(
                os.path.join(folder, "start.pt"), model=payload["model"], guide=payload["guide"],
                optimizer=payload["optimizer"], loss=payload["loss"], device=device,
            )  # fmt: skip
            result = payload["resume_fn"](
                result, payload["x"], payload["y"], payload["steps"],
                progress=payload["progress"] and rank == 0, callbacks=callbacks,
            )  # fmt: skip
        if rank == 0:
            checkpoint.save(result, os.path.join(folder, "result.pt"))


def _load_back(folder: str, model, guide, optimizer, loss):
    from zoo.infer import checkpoint

    try:
        return checkpoint.load(
            os.path.join(folder, "result.pt"), model=model, guide=guide, optimizer=optimizer, loss=loss
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def launch_fit(
    model: torch.nn.Module,
    guide: Callable,
    x: Tensor,
    y: Tensor | None,
    cfg: FitConfig,
    *,
    optimizer: pyro.optim.PyroOptim,
    loss: ELBO | None,
    callbacks: Sequence,
    spec: dict | None,
    fit_fn: Callable[..., FitResult],
) -> FitResult:
    """``fit_fn`` (:func:`zoo.infer.loop.fit`) on ``cfg.nproc`` spawned ranks; returns rank 0's fit, loaded
    into ``model``/``guide`` (module docstring).  Everything is checked before any process starts."""
    D.check_data_parallel(guide, cfg.nproc)
    _check_gpus(cfg.device, cfg.nproc)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _fit_under_torchrun(model, guide, x, y, cfg, optimizer, loss, callbacks, spec, fit_fn)
    payload = {
        "model": model, "guide": guide, "x": x.detach().cpu(), "y": None if y is None else y.detach().cpu(),
        "config": cfg, "optimizer": optimizer, "loss": loss, "callbacks": tuple(callbacks), "spec": spec,
        "fit_fn": fit_fn,
    }  # fmt: skip
    log.info("data-parallel fit on %d processes", cfg.nproc)
    folder = _pickled_run(cfg.nproc, "fit", payload, guide)
    return _load_back(folder, model, guide, optimizer, loss)


def _fit_under_torchrun(model, guide, x, y, cfg, optimizer, loss, callbacks: Sequence, spec, fit_fn) -> Any:
    """This process is one rank started by ``torchrun`` (``RANK``/``WORLD_SIZE`` set): join its ``env://``
    group and fit; every rank returns the same fit, rank 0 alone runs the callbacks."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != cfg.nproc:
        raise ValueError(f"nproc: torchrun started {world} processes (WORLD_SIZE) but nproc is {cfg.nproc}")
    device = _device_for_rank(cfg.device, int(os.environ.get("LOCAL_RANK", rank)))
    cfg = cfg.replace(device=device, progress=cfg.progress and rank == 0)
    with D.process_group(rank, world, "env://", D.backend_for(device)):
        return fit_fn(
            model, guide, x, y, cfg, optimizer=optimizer, loss=loss,
            callbacks=callbacks, spec=spec,
        )  # fmt: skip


def launch_resume(
    result: FitResult,
    x: Tensor,
    y: Tensor | None,
    steps: int,
    *,
    progress: bool,
    callbacks: Sequence,
    resume_fn: Callable[..., FitResult],
) -> FitResult:
    """``resume_fn`` (:func:`zoo.infer.loop.resume`) on ``result.config["nproc"]`` ranks; ``result`` is
    updated in place (and returned)."""
    from zoo.infer import checkpoint
    from zoo.infer.optim import optimizer_name

    world = int(result.config["nproc"])
    D.check_data_parallel(result.guide, world)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a rank started by torchrun: resume in place
        rank = int(os.environ["RANK"])
        with D.process_group(rank, int(os.environ["WORLD_SIZE"]), "env://", D.backend_for(result.device)):
            return resume_fn(result, x, y, steps, progress=progress and rank == 0, callbacks=callbacks)
    # A used PyroOptim keeps per-tensor state that set_state cannot replace: rebuild it by name from the
    # checkpoint (ranks and caller alike) where possible, so its state follows the loaded parameters.
    optim = None if optimizer_name(result.optim) is not None else result.optim
    payload = {
        "model": result.model, "guide": result.guide, "x": x.detach().cpu(),
        "y": None if y is None else y.detach().cpu(), "optimizer": optim, "loss": result.loss,
        "callbacks": tuple(callbacks), "steps": steps, "progress": progress, "device": str(result.device),
        "resume_fn": resume_fn,
    }  # fmt: skip
    folder = tempfile.mkdtemp(prefix="zoo-dist-")
    try:
        checkpoint.save(result, os.path.join(folder, "start.pt"))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _pickled_run(world, "resume", payload, result.guide, folder)
    new = _load_back(folder, result.model, result.guide, optim, result.loss)
    vars(result).update(vars(new))
    return result


# ---------------------------------------------------------------------------------------------- the loop
def _local_rows(idx, n: int, st: D.DistState, device) -> tuple[torch.Tensor, float]:
    """This rank's chunk of the global batch ``idx`` (``None``: all ``n`` rows) and its weight."""
    total = n if idx is None else len(idx)
    start, stop = D.shard_bounds(total, st.rank, st.world)
    local = torch.arange(start, stop, device=device) if idx is None else idx[start:stop]
    return local, (stop - start) / total


def _closed_form(guide, model, data: tuple, local, sharded: bool) -> float | None:
    """The guide's closed-form update and (already all-reduced) ELBO on this rank's rows."""
    x, y = data
    with torch.no_grad():
        if sharded:  # full-batch CAVI: the guide holds this rank's rows only
            guide.closed_form_update(model, x, y)
            elbo = guide.closed_form_elbo(model, x, y)
        else:
            guide.closed_form_update(model, x, y, subsample=local)
            elbo = guide.closed_form_elbo(model, x, y, subsample=local)
    return None if elbo is None else float(elbo)


def run_steps_distributed(
    result: FitResult,
    x: Tensor,
    y: Tensor | None,
    steps: int,
    *,
    progress: bool,
    callbacks: Sequence,
    next_batch: Callable,
    record: Callable,
) -> FitResult:
    """:func:`zoo.infer.loop.run_steps` on one rank of a data-parallel group (module docstrings);
    ``next_batch``/``record``: the loop's batch drawing and ELBO bookkeeping."""
    import time

    st = D.active()
    guide, model, n = result.guide, result.model, x.shape[0]
    batch_size = result.config.get("batch_size")
    closed = isinstance(guide, ClosedFormGuide)
    sharded = closed and (batch_size is None or batch_size >= n)
    uses_grad = getattr(guide, "uses_gradients", True)
    t0 = time.perf_counter()
    with result.activate():
        svi = D.DistributedSVI(model, guide, result.optim, result.loss)
        rows = slice(*D.shard_bounds(n, st.rank, st.world))
        data = (x[rows], None if y is None else y[rows]) if sharded else (x, y)
        if sharded:
            guide.shard_rows(model, x, y, rows)
        bar = tqdm(total=steps, disable=not progress or st.rank != 0, desc=f"fit x{st.world}", leave=False)
        try:
            for _ in range(steps):
                idx = next_batch(result.loop_state, n, batch_size, result.device)
                local, weight = _local_rows(idx, n, st, result.device)
                elbo = _one_step(svi, result, (x, y), data, local, weight, sharded, uses_grad)
                bar.update(1)
                stop = record(result, elbo, callbacks if st.rank == 0 else ())
                if callbacks:  # a rank-0 callback may stop the fit; the stopping rule is the same everywhere
                    stop = float(D.all_sum(torch.tensor(float(stop), dtype=torch.float64))) > 0
                if stop:
                    break
        finally:
            bar.close()
            result.wall_time += time.perf_counter() - t0
        if sharded:
            guide.gather_rows(n)
    return result


def _one_step(svi: SVI, result, full: tuple, data: tuple, local, weight: float, sharded: bool, grad: bool):
    x, y = full
    loss = svi.step(x, y, subsample=local, weight=weight) if grad else None
    if isinstance(result.guide, ClosedFormGuide):
        elbo = _closed_form(result.guide, result.model, data, local, sharded)
        if elbo is not None:
            return elbo
    if loss is None:
        with torch.no_grad():
            loss = svi.evaluate_loss(x, y, subsample=local, weight=weight)
    return -float(loss)
