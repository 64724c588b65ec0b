"""The checkpoint file format: what :func:`zoo.infer.checkpoint.save` writes and ``load`` reads.

A checkpoint is a ``torch.save`` file of plain data only (tensors, dicts, lists, tuples, strings, numbers,
``None``; see :mod:`zoo.infer.codec`), so ``torch.load(path, weights_only=True)`` reads it without
unpickling objects.  It holds the model and guide ``state_dict``, the fit's Pyro param-store scope
(constraints by name), the optimizer's per-parameter state, every RNG state, the minibatch position, the
stopping monitor, the ELBO trace, the fit config and the registry ``spec`` that rebuilds model and guide.

``format`` is ``"pyro-bnn-zoo/checkpoint-<VERSION>"``; :func:`read_checkpoint` refuses other versions,
truncated files and foreign files with a ``ValueError`` naming the path.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from zoo.infer.codec import check_plain, encode_constraint, encode_loss, rng_state
from zoo.io import atomic_torch_save

__all__ = ["FORMAT", "VERSION", "checkpoint_dict", "read_checkpoint", "write_checkpoint"]

VERSION = 2
FORMAT = f"pyro-bnn-zoo/checkpoint-{VERSION}"
_FORMAT_RE = re.compile(r"pyro-bnn-zoo/checkpoint-(\d+)")
_SCAN_BYTES = 4 << 20  # the pickle (with the format string) is at the start of a torch file


def _optim_spec(optim) -> dict | None:
    if optim is None:
        return None
    return {
        "class": type(optim).__name__,
        "constructor": getattr(optim.pt_optim_constructor, "__name__", None),
        "args": dict(optim.pt_optim_args) if isinstance(optim.pt_optim_args, dict) else None,
        # a loaded, not yet stepped optimizer keeps its state "waiting to be consumed": save that too
        "state": {**getattr(optim, "_state_waiting_to_be_consumed", {}), **optim.get_state()},
    }


def _param_store(param_state: dict) -> dict:
    return {
        "params": dict(param_state["params"]),
        "constraints": {
            name: encode_constraint(c, f"param_store: parameter {name!r}")
            for name, c in param_state["constraints"].items()
        },
    }


def _loop(loop_state: dict) -> dict:
    loop = dict(loop_state)
    gen = loop.pop("gen", None)
    monitor = loop.pop("monitor", None)
    return {
        **loop,
        "gen_state": None if gen is None else gen.get_state(),
        "monitor": None if monitor is None else monitor.to_dict(),
    }


def checkpoint_dict(result: Any) -> dict[str, Any]:
    """The plain-data checkpoint of a :class:`~zoo.infer.result.FitResult` (``TypeError`` naming the
    entry that could not be stored, ``ValueError`` for a constraint without a name)."""
    with result.activate():  # PyroOptim names its per-parameter states through the param store
        optim_spec = _optim_spec(result.optim)
    guide = result.guide
    ckpt = {
        "format": FORMAT,
        "version": VERSION,
        "spec": result.spec,
        "model_state": result.model.state_dict(),
        "guide_state": guide.state_dict() if isinstance(guide, torch.nn.Module) else None,
        "param_store": _param_store(result.param_state),
        "optim": optim_spec,
        "rng": rng_state(),
        "loop": _loop(result.loop_state),
        "elbo": [float(v) for v in result.elbo],
        "steps": result.steps,
        "wall_time": result.wall_time,
        "seed": result.seed,
        "config": dict(result.config),
        "converged": result.converged,
        "device": str(result.device),
        "example": result.example,
        "loss": None if result.loss is None else encode_loss(result.loss),
    }
    check_plain(ckpt)
    return ckpt


def write_checkpoint(result: Any, path: str | os.PathLike) -> None:
    """Write ``result``'s checkpoint to ``path`` atomically (see :mod:`zoo.io`)."""
    atomic_torch_save(checkpoint_dict(result), path)


def _version_in_file(path: Path) -> int | None:
    """The format version named in a file torch cannot read with ``weights_only`` (an older checkpoint
    with pickled objects, or a truncated one), found without unpickling anything."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
                data = z.read(name)[:_SCAN_BYTES] if name else b""
        else:
            with open(path, "rb") as fh:
                data = fh.read(_SCAN_BYTES)
    except (OSError, zipfile.BadZipFile):
        return None
    m = re.search(_FORMAT_RE.pattern.encode(), data)
    return int(m.group(1)) if m else None


def _version_error(path: Path, version: int) -> ValueError:
    return ValueError(
        f"path: {str(path)!r} is a pyro-bnn-zoo checkpoint of format version {version}; this version of "
        f"the zoo reads format version {VERSION} only (refit, or load it with the zoo that wrote it)"
    )


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a checkpoint file (``weights_only``); ``ValueError`` naming ``path`` if it is not one
    of this version."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no checkpoint at {str(path)!r}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, corrupt, foreign, or holding pickled objects
        version = _version_in_file(path)
        if version is not None and version != VERSION:
            raise _version_error(path, version) from None
        reason = (str(e).splitlines() or [""])[0][:200]
        raise ValueError(
            f"path: {str(path)!r} is not a readable pyro-bnn-zoo checkpoint (truncated, corrupt or a "
            f"foreign file; {type(e).__name__}: {reason})"
        ) from None
    fmt = ckpt.get("format") if isinstance(ckpt, dict) else None
    m = _FORMAT_RE.fullmatch(fmt) if isinstance(fmt, str) else None
    if m is None:
        raise ValueError(f"path: {str(path)!r} is not a pyro-bnn-zoo checkpoint")
    if int(m.group(1)) != VERSION:
        raise _version_error(path, int(m.group(1)))
    return ckpt
