"""Save / load / resume a fit, atomically.

A checkpoint holds everything needed to continue a fit bit-for-bit on CPU: the model and guide
``state_dict`` (closed-form buffers included), the fit's Pyro param-store scope, the optimizer's
per-parameter state, every RNG state (torch CPU/CUDA, numpy, Python, the minibatch generator), the
minibatch position, the stopping monitor, the ELBO trace and the registry ``spec`` from which model
and guide are rebuilt.  Files are written to a temporary file in the target folder, flushed, fsynced
and renamed over the destination, so a crash never leaves a half-written checkpoint.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import pyro
import torch

from zoo.infer.loop import ConvergenceMonitor, FitResult, make_optimizer

__all__ = ["save", "load", "atomic_write_bytes", "atomic_torch_save"]

FORMAT = "pyro-bnn-zoo/checkpoint-1"
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read the process umask (os.umask can only be read by setting it)


def _atomic(path: str | os.PathLike, write) -> None:
    path = Path(path)
    if path.exists() and path.is_dir():
        raise ValueError(f"path {str(path)!r} is a directory")
    if not path.parent.exists():
        raise ValueError(f"path: folder {str(path.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    _atomic(path, lambda fh: fh.write(data))


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    _atomic(path, lambda fh: torch.save(obj, fh))


def _rng_state() -> dict:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": np.random.get_state(),  # noqa: NPY002 - pyro.set_rng_seed seeds the legacy global RNG
        "python": random.getstate(),
    }


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])
    np.random.set_state(s["numpy"])  # noqa: NPY002
    random.setstate(s["python"])


def _optim_spec(optim) -> dict | None:
    if optim is None:
        return None
    return {
        "class": type(optim).__name__,
        "constructor": getattr(optim.pt_optim_constructor, "__name__", None),
        "args": optim.pt_optim_args if isinstance(optim.pt_optim_args, dict) else None,
        "state": optim.get_state(),
    }


def save(result: FitResult, path: str | os.PathLike) -> None:
    """Write ``result`` to ``path`` atomically (``torch.save`` format)."""
    if not isinstance(result, FitResult):
        raise TypeError(f"result must be a FitResult, got {type(result).__name__}")
    loop = dict(result.loop_state)
    gen = loop.pop("gen", None)
    monitor = loop.pop("monitor", None)
    with result.activate():  # PyroOptim names its per-parameter states through the param store
        optim_spec = _optim_spec(result.optim)
    ckpt = {
        "format": FORMAT,
        "spec": result.spec,
        "model_state": result.model.state_dict(),
        "guide_state": result.guide.state_dict() if isinstance(result.guide, torch.nn.Module) else None,
        "param_store": {k: dict(v) for k, v in result.param_state.items()},
        "optim": optim_spec,
        "rng": _rng_state(),
        "loop": {
            **loop,
            "gen_state": None if gen is None else gen.get_state(),
            "monitor": None
            if monitor is None
            else (monitor.tol, monitor.patience, monitor.window, monitor.state_dict()),
        },
        "elbo": list(result.elbo),
        "steps": result.steps,
        "wall_time": result.wall_time,
        "seed": result.seed,
        "config": result.config,
        "converged": result.converged,
        "device": str(result.device),
        "example": result.example,
        "loss": {
            "module": type(result.loss).__module__,
            "class": type(result.loss).__qualname__,
            "num_particles": getattr(result.loss, "num_particles", 1),
        },
    }
    atomic_torch_save(ckpt, path)


def _rebuild_optim(spec: dict | None, config: dict):
    if spec is None:
        return None
    ctor = (spec.get("constructor") or "Adam").lower()
    name = {
        "adam": "adam",
        "clippedadam": "clipped_adam",
        "sgd": "sgd",
        "adagrad": "adagrad",
        "rmsprop": "rmsprop",
    }
    if ctor not in name or spec.get("args") is None:
        raise ValueError("optimizer: this checkpoint's optimizer cannot be rebuilt by name; pass optimizer=")
    args = dict(spec["args"])
    lr = args.pop("lr", config.get("lr", 1e-2))
    optim = make_optimizer(name[ctor], lr, **args)
    optim.set_state(spec["state"])
    return optim


def _rebuild_loss(spec: dict):
    """The saved ELBO class with its particle count (``Trace_ELBO`` for old checkpoints)."""
    import importlib

    from pyro.infer import Trace_ELBO

    try:
        cls = getattr(importlib.import_module(spec["module"]), spec["class"])
    except (KeyError, ImportError, AttributeError):
        cls = Trace_ELBO
    try:
        return cls(num_particles=spec.get("num_particles", 1))
    except TypeError:
        return cls()


def load(path: str | os.PathLike, *, model=None, guide=None, optimizer=None, device=None) -> FitResult:
    """Load a checkpoint written by :func:`save`.

    Model and guide are rebuilt from the checkpoint's registry ``spec`` unless given (custom models
    must be passed).  RNG states are restored last, so :func:`zoo.infer.loop.resume` continues the
    exact random stream of the original run.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no checkpoint at {str(path)!r}")
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"path: {str(path)!r} is not a pyro-bnn-zoo checkpoint")
    from zoo.core.validation import resolve_device
    from zoo.experiments.registry import build_from_spec

    dev = resolve_device(device if device is not None else ckpt["device"])
    if model is None or guide is None:
        if ckpt["spec"] is None:
            raise ValueError("model/guide: this checkpoint has no registry spec; pass model= and guide=")
        m2, g2 = build_from_spec(ckpt["spec"])
        model = model if model is not None else m2
        guide = guide if guide is not None else g2
    model.to(dev)
    param_state = {
        "params": {k: v.to(dev) for k, v in ckpt["param_store"]["params"].items()},
        "constraints": ckpt["param_store"]["constraints"],
    }
    result = FitResult(
        model=model,
        guide=guide,
        seed=ckpt["seed"],
        config=ckpt["config"],
        device=dev,
        param_state=param_state,
        spec=ckpt["spec"],
        example=ckpt.get("example"),
    )
    if isinstance(guide, torch.nn.Module):
        guide.to(dev)
        # Materialize lazily created parameters (autoguides) inside the fit's scope: PyroParams are
        # created from the param store, so they take the stored values.
        ex = ckpt.get("example")
        x0 = ex[0].to(dev) if ex else torch.zeros(2, model.architecture.in_features, device=dev)
        y0 = ex[1].to(dev) if ex and ex[1] is not None else None
        with torch.no_grad(), result.activate(), pyro.poutine.block():
            guide(x0, y0)
        if ckpt["guide_state"] is not None:
            guide.load_state_dict(ckpt["guide_state"])
    model.load_state_dict(ckpt["model_state"])
    result.optim = optimizer if optimizer is not None else _rebuild_optim(ckpt["optim"], ckpt["config"])
    if optimizer is not None and ckpt["optim"] is not None:
        optimizer.set_state(ckpt["optim"]["state"])
    result.loss = _rebuild_loss(ckpt["loss"])
    loop = dict(ckpt["loop"])
    gen = torch.Generator()
    if loop.pop("gen_state") is not None:
        gen.set_state(ckpt["loop"]["gen_state"])
    mon = loop.pop("monitor")
    result.loop_state = {**loop, "gen": gen}
    if mon is not None:
        m = ConvergenceMonitor(mon[0], mon[1], mon[2])
        m.load_state_dict(mon[3])
        result.loop_state["monitor"] = m
    result.elbo = list(ckpt["elbo"])
    result.steps = ckpt["steps"]
    result.wall_time = ckpt["wall_time"]
    result.converged = ckpt["converged"]
    _set_rng_state(ckpt["rng"])
    return result
