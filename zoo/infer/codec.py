"""Plain-data forms of what a checkpoint must hold, so that ``torch.load(path, weights_only=True)`` reads it.

A checkpoint may contain only tensors, dicts, lists, tuples, strings, numbers, booleans and ``None``:

* parameter-store constraints are stored by name (``{"name": "positive"}``,
  ``{"name": "interval", "args": [a, b]}``, ``{"name": "independent", "args": [base, n]}``), see
  :func:`encode_constraint`; a constraint without a name is an error when saving;
* the random number generators' states (torch, CUDA, numpy, Python) as tensors and numbers
  (:func:`rng_state` / :func:`set_rng_state`, built on ``pyro.util.get_rng_state``);
* the training ELBO by module and class name (:func:`encode_loss` / :func:`decode_loss`);
* :func:`check_plain` names the first entry of anything else before a file is written.
"""

from __future__ import annotations

import importlib
import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyro.distributions.constraints as constraints
import pyro.util
import torch
from pyro.infer.elbo import ELBO
from torch.distributions.constraints import Constraint

__all__ = [
    "check_plain",
    "decode_constraint",
    "decode_loss",
    "encode_constraint",
    "encode_loss",
    "rng_state",
    "set_rng_state",
]

#: named constraint objects (``constraints.positive``, ``constraints.simplex``, ...) by identity
_NAMED: dict[int, str] = {}
for _name in sorted(dir(constraints)):
    _obj = getattr(constraints, _name)
    if isinstance(_obj, Constraint):
        _NAMED.setdefault(id(_obj), _name)
_SINGLETONS = {name: getattr(constraints, name) for name in _NAMED.values()}

#: parametrized constraint classes: factory name and the attributes that are its arguments
_PARAMETRIZED = {
    constraints.interval: ("interval", ("lower_bound", "upper_bound")),
    constraints.half_open_interval: ("half_open_interval", ("lower_bound", "upper_bound")),
    constraints.integer_interval: ("integer_interval", ("lower_bound", "upper_bound")),
    constraints.greater_than: ("greater_than", ("lower_bound",)),
    constraints.greater_than_eq: ("greater_than_eq", ("lower_bound",)),
    constraints.less_than: ("less_than", ("upper_bound",)),
    constraints.independent: ("independent", ("base_constraint", "reinterpreted_batch_ndims")),
}
_FACTORIES = {name: cls for cls, (name, _) in _PARAMETRIZED.items()}

#: packages whose ELBO classes a checkpoint may name (others must be passed to ``load(loss=...)``)
LOSS_PACKAGES = ("pyro", "zoo", "guides")


def _same_singleton(c: Constraint) -> str | None:
    """The name of a named constraint ``c`` equals (same class, same plain attributes), if any."""
    for name, s in _SINGLETONS.items():
        if type(s) is type(c):
            a, b = vars(s), vars(c)
            if a.keys() == b.keys() and not any(torch.is_tensor(v) for v in (*a.values(), *b.values())):
                if a == b:
                    return name
    return None


def encode_constraint(c: Constraint, where: str = "constraint") -> dict[str, Any]:
    """``c`` as plain data; ``ValueError`` (naming ``where``) if it has no name."""
    name = _NAMED.get(id(c))
    if name is not None:
        return {"name": name}
    if type(c) in _PARAMETRIZED:
        factory, attrs = _PARAMETRIZED[type(c)]
        args = [getattr(c, a) for a in attrs]
        if factory == "independent":
            args[0] = encode_constraint(args[0], where)
        return {"name": factory, "args": args}
    name = _same_singleton(c)
    if name is not None:
        return {"name": name}
    raise ValueError(
        f"{where}: constraint {c!r} ({type(c).__name__}) cannot be stored in a checkpoint; supported are "
        f"the named constraints of pyro.distributions.constraints ({', '.join(sorted(_SINGLETONS))}) and "
        f"{', '.join(sorted(_FACTORIES))}(...)"
    )


def decode_constraint(d: Mapping[str, Any]) -> Constraint:
    """Inverse of :func:`encode_constraint`."""
    name = d.get("name")
    if name in _SINGLETONS and "args" not in d:
        return _SINGLETONS[name]
    if name in _FACTORIES:
        args = list(d.get("args", ()))
        if name == "independent":
            args[0] = decode_constraint(args[0])
        return _FACTORIES[name](*args)
    raise ValueError(f"constraint: unknown constraint {d!r} in checkpoint")


def rng_state() -> dict[str, Any]:
    """Every global RNG state (``pyro.util.get_rng_state`` plus CUDA) as tensors and numbers."""
    s = pyro.util.get_rng_state()
    version, internal, gauss = s["random"]
    kind, keys, pos, has_gauss, cached = s["numpy"]
    return {
        "torch": s["torch"],
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "random": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
    }


def set_rng_state(s: Mapping[str, Any]) -> None:
    """Restore the states saved by :func:`rng_state` (CUDA states only where CUDA is available)."""
    version, internal, gauss = s["random"]
    kind, keys, pos, has_gauss, cached = s["numpy"]
    pyro.util.set_rng_state(
        {
            "torch": s["torch"],
            "random": (version, tuple(int(v) for v in internal.tolist()), gauss),
            "numpy": (kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached),
        }
    )
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def encode_loss(loss: ELBO) -> dict[str, Any]:
    return {
        "module": type(loss).__module__,
        "class": type(loss).__qualname__,
        "num_particles": getattr(loss, "num_particles", 1),
    }


def decode_loss(d: Mapping[str, Any]) -> ELBO:
    """The saved ELBO class with its particle count.  Only classes of :data:`LOSS_PACKAGES` or of an
    already imported module are rebuilt (a checkpoint names a class, it cannot make ``load`` import
    arbitrary code); ``ValueError`` otherwise."""
    module, qualname = str(d.get("module")), str(d.get("class"))
    allowed = module in sys.modules or module.split(".")[0] in LOSS_PACKAGES
    cls = None
    if allowed and "." not in qualname:
        try:
            cls = getattr(importlib.import_module(module), qualname, None)
        except ImportError:
            cls = None
    if not (isinstance(cls, type) and issubclass(cls, ELBO)):
        raise ValueError(f"loss: cannot rebuild the ELBO {module}.{qualname} of this checkpoint; pass loss=")
    try:
        return cls(num_particles=d.get("num_particles", 1))
    except TypeError:
        return cls()


_SCALARS = (str, bytes, int, float, bool, type(None))  # exact types: numpy scalars are refused
_TORCH = (torch.Tensor, torch.Size, torch.dtype, torch.device)
_MAPPINGS = (dict, OrderedDict)
_SEQUENCES = (list, tuple, set, frozenset)


def check_plain(obj: Any, where: str = "checkpoint") -> None:
    """Raise ``TypeError`` naming the first entry of ``obj`` that ``weights_only`` loading would refuse."""
    if type(obj) in _SCALARS or isinstance(obj, _TORCH):
        return
    if type(obj) in _MAPPINGS:
        for k, v in obj.items():
            if type(k) not in _SCALARS:
                raise TypeError(f"{where}: key {k!r} ({type(k).__name__}) cannot be stored in a checkpoint")
            check_plain(v, f"{where}[{k!r}]")
        return
    if type(obj) in _SEQUENCES:
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be stored in a checkpoint "
        "(only tensors, dicts, lists, tuples, strings, numbers and None load with weights_only=True)"
    )
