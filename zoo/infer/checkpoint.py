"""Save / load / resume a fit, atomically.

A checkpoint holds everything needed to continue a fit bit-for-bit on CPU (the format:
:mod:`zoo.infer.snapshot`).  It contains plain data only, so ``torch.load(path, weights_only=True)``
reads it and loading a shared checkpoint never unpickles objects.  Files are written through
:mod:`zoo.io`: a temporary file in the target folder, flushed, fsynced and renamed over the destination,
so a crash (even ``kill -9``) never leaves a half-written checkpoint.
"""

from __future__ import annotations

import os
from typing import Any

import pyro
import pyro.optim
import torch
from pyro.infer.elbo import ELBO

from zoo.core.validation import resolve_device
from zoo.experiments.registry import build_from_spec
from zoo.infer.codec import decode_constraint, decode_loss, set_rng_state
from zoo.infer.loop import guide_class_path
from zoo.infer.optim import make_optimizer, optimizer_name
from zoo.infer.result import ConvergenceMonitor, FitResult
from zoo.infer.snapshot import read_checkpoint, write_checkpoint
from zoo.io import atomic_torch_save, atomic_write_bytes

__all__ = ["save", "load", "atomic_write_bytes", "atomic_torch_save"]


def save(result: FitResult, path: str | os.PathLike) -> None:
    """Write ``result`` to ``path`` atomically (``torch.save`` format, loadable with ``weights_only``)."""
    if not isinstance(result, FitResult):
        raise TypeError(f"result must be a FitResult, got {type(result).__name__}")
    write_checkpoint(result, path)


def _rebuild_optim(spec: dict | None, config: dict) -> pyro.optim.PyroOptim | None:
    if spec is None:
        return None
    name = optimizer_name(spec.get("constructor") or "Adam")
    if name is None or spec.get("args") is None:
        raise ValueError("optimizer: this checkpoint's optimizer cannot be rebuilt by name; pass optimizer=")
    args = dict(spec["args"])
    lr = args.pop("lr", config.get("lr", 1e-2))
    optim = make_optimizer(name, lr, **args)
    optim.set_state(spec["state"])
    return optim


def _model_and_guide(ckpt: dict, model, guide) -> tuple[torch.nn.Module, Any]:
    """Model and guide: the ones given, else rebuilt from the checkpoint's registry spec; a spec whose guide
    is not the one that was fitted (``guide_class``, recorded by :func:`zoo.infer.loop.fit`) needs
    ``guide=``."""
    if model is None or guide is None:
        spec = ckpt["spec"]
        if spec is None:
            raise ValueError(
                "model/guide: this checkpoint has no registry spec (the model was not built by zoo.build); "
                "pass model= and guide="
            )
        m2, g2 = build_from_spec(spec)
        fitted = spec.get("guide_class")
        if guide is None and fitted is not None and guide_class_path(g2) != fitted:
            raise ValueError(
                f"guide: this checkpoint was fitted with guide {fitted}, but its spec rebuilds "
                f"{guide_class_path(g2)} (guide {spec.get('guide')!r} of {spec.get('model')!r}); pass guide="
            )
        model = model if model is not None else m2
        guide = guide if guide is not None else g2
    return model, guide


def _restore_guide(result: FitResult, ckpt: dict) -> None:
    guide, dev = result.guide, result.device
    if not isinstance(guide, torch.nn.Module):
        return
    guide.to(dev)
    # Materialize lazily created parameters (autoguides) inside the fit's scope: PyroParams are
    # created from the param store, so they take the stored values.
    ex = ckpt.get("example")
    x0 = ex[0].to(dev) if ex else torch.zeros(2, result.model.architecture.in_features, device=dev)
    y0 = ex[1].to(dev) if ex and ex[1] is not None else None
    with torch.no_grad(), result.activate(), pyro.poutine.block():
        guide(x0, y0)
    if ckpt["guide_state"] is not None:
        guide.load_state_dict(ckpt["guide_state"])


def _loop_state(saved: dict) -> dict:
    loop = dict(saved)
    gen = torch.Generator()
    gen_state = loop.pop("gen_state")
    if gen_state is not None:
        gen.set_state(gen_state)
    monitor = loop.pop("monitor")
    state = {**loop, "gen": gen}
    if monitor is not None:
        state["monitor"] = ConvergenceMonitor.from_dict(monitor)
    return state


def load(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module | None = None,
    guide: Any = None,
    optimizer: pyro.optim.PyroOptim | None = None,
    loss: ELBO | None = None,
    device: str | torch.device | None = None,
) -> FitResult:
    """Load a checkpoint written by :func:`save`.

    Model and guide are rebuilt from the checkpoint's registry ``spec`` unless given (a fit of a model
    made by :func:`zoo.experiments.registry.build` records it without ``spec=``; custom models must be
    passed, as must a guide other than the spec's), as are the optimizer and the ELBO
    (``optimizer=``/``loss=`` replace them).  RNG states are restored last, so
    :func:`zoo.infer.loop.resume` continues the exact random stream of the original run.  A file that is
    not a checkpoint of this format version is a ``ValueError`` naming it.
    """
    ckpt = read_checkpoint(path)
    dev = resolve_device(device if device is not None else ckpt["device"])
    model, guide = _model_and_guide(ckpt, model, guide)
    model.to(dev)
    store = ckpt["param_store"]
    result = FitResult(
        model=model,
        guide=guide,
        seed=ckpt["seed"],
        config=dict(ckpt["config"]),
        device=dev,
        param_state={
            "params": {k: v.to(dev) for k, v in store["params"].items()},
            "constraints": {k: decode_constraint(c) for k, c in store["constraints"].items()},
        },
        spec=ckpt["spec"],
        example=ckpt.get("example"),
    )
    _restore_guide(result, ckpt)
    model.load_state_dict(ckpt["model_state"])
    if optimizer is not None:
        if ckpt["optim"] is not None:
            optimizer.set_state(ckpt["optim"]["state"])
        result.optim = optimizer
    else:
        result.optim = _rebuild_optim(ckpt["optim"], ckpt["config"])
    result.loss = loss if loss is not None else (decode_loss(ckpt["loss"]) if ckpt["loss"] else None)
    result.loop_state = _loop_state(ckpt["loop"])
    result.elbo = list(ckpt["elbo"])
    result.steps = ckpt["steps"]
    result.wall_time = ckpt["wall_time"]
    result.converged = ckpt["converged"]
    set_rng_state(ckpt["rng"])
    return result
