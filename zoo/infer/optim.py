"""One fused torch optimizer behind Pyro's ``PyroOptim`` interface.

``pyro.optim.Adam`` builds one ``torch.optim.Adam`` *per parameter tensor* and steps them one by one.  A
flow guide has dozens of parameter tensors (every MADE layer's weight and bias), a horseshoe guide a
handful per layer, and the per-tensor Python overhead adds up: the fused optimizer makes a one-neuron
LBBNN-FLOW step 1.22x faster (``benchmarks/optim_speed.py``, RESULTS.md).
:class:`FusedPyroOptim` keeps Pyro's contract — parameters appear dynamically, ``optim_args``
may be a dict or a per-parameter callable (one param group per distinct argument set), parameters absent
from a step's trace are not updated, and ``get_state``/``set_state`` use PyroOptim's per-parameter format
(so checkpoints written with ``pyro.optim.Adam`` load here and vice versa) — but steps every parameter with
one multi-tensor (``foreach``) optimizer.  The update is the same algorithm, parameter by parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyro
import pyro.optim
import torch
from pyro.optim import PyroOptim

from zoo.core.validation import check_positive

__all__ = ["FusedPyroOptim", "make_optimizer", "optimizer_name"]

#: the torch optimizers behind the fused names of :func:`make_optimizer`
_FUSED = {
    "adam": torch.optim.Adam,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
    "adagrad": torch.optim.Adagrad,
}
#: constructor class name (lower case) -> :func:`make_optimizer` name
_BY_CONSTRUCTOR = {
    "adam": "adam",
    "clippedadam": "clipped_adam",
    "sgd": "sgd",
    "adagrad": "adagrad",
    "rmsprop": "rmsprop",
}


def _freeze_args(args: dict) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in args.items()))


class FusedPyroOptim(PyroOptim):
    """A ``PyroOptim`` stepping all parameters with one ``optim_constructor`` instance (``foreach=True``).

    :param optim_constructor: a ``torch.optim.Optimizer`` class accepting ``foreach`` (Adam, AdamW, SGD,
        RMSprop, Adagrad).
    :param optim_args: a dict of optimizer arguments, or a callable ``name -> dict`` (per parameter, as in
        Pyro; parameters with equal arguments share a param group).
    """

    def __init__(self, optim_constructor: type[torch.optim.Optimizer], optim_args: dict | Callable) -> None:
        if not (isinstance(optim_constructor, type) and issubclass(optim_constructor, torch.optim.Optimizer)):
            raise TypeError(
                f"optim_constructor must be a torch.optim.Optimizer class, got {optim_constructor!r}"
            )
        super().__init__(optim_constructor, optim_args)
        self._opt: torch.optim.Optimizer | None = None
        self._groups: dict[tuple, dict] = {}
        self._seen: dict[torch.Tensor, dict] = {}

    def _add(self, p: torch.Tensor) -> None:
        args = dict(self._get_optim_args(p))
        key = _freeze_args(args)
        if self._opt is None:
            self._opt = self.pt_optim_constructor([p], **{"foreach": True, **args})
            self._groups[key] = self._opt.param_groups[0]
        elif key not in self._groups:
            self._opt.add_param_group({"params": [p], **args})
            self._groups[key] = self._opt.param_groups[-1]
        else:
            self._groups[key]["params"].append(p)
        self._seen[p] = self._groups[key]
        self.optim_objs[p] = self._opt  # PyroOptim bookkeeping (e.g. code that checks membership)
        state = self._state_waiting_to_be_consumed.pop(pyro.get_param_store().param_name(p), None)
        if state is not None:
            saved = state["state"].get(0, state["state"].get("0"))
            if saved:
                # copies (the saved dict may be shared); "step" stays a CPU scalar, as torch keeps it
                self._opt.state[p] = {
                    k: (v.detach().clone() if k == "step" else v.detach().to(p).clone())
                    if torch.is_tensor(v)
                    else v
                    for k, v in saved.items()
                }

    def __call__(self, params: Iterable[torch.Tensor], *args, **kwargs) -> None:
        current = list(params)
        for p in current:
            if p not in self._seen:
                self._add(p)
        if self._opt is None:
            return
        # parameters not in this step's trace keep their state untouched, as with per-parameter optimizers
        present = set(current)
        hidden = [(p, p.grad) for p in self._seen if p not in present and p.grad is not None]
        for p, _ in hidden:
            p.grad = None
        try:
            self._opt.step(*args, **kwargs)
        finally:
            for p, g in hidden:
                p.grad = g

    def get_state(self) -> dict:
        """``{param name: single-parameter optimizer state dict}`` — PyroOptim's format."""
        out = {}
        store = pyro.get_param_store()
        for p, group in self._seen.items():
            meta = {k: v for k, v in group.items() if k != "params"}
            state = self._opt.state.get(p, {}) if self._opt is not None else {}
            out[store.param_name(p)] = {
                "state": {0: {k: v.clone() if torch.is_tensor(v) else v for k, v in state.items()}}
                if state
                else {},
                "param_groups": [{**meta, "params": [0]}],
            }
        return out


def make_optimizer(name: str = "adam", lr: float = 1e-2, **kwargs) -> PyroOptim:
    """A Pyro optimizer by name (``adam``, ``clipped_adam``, ``sgd``, ``adagrad``, ``rmsprop``).

    ``adam``/``sgd``/``rmsprop``/``adagrad`` are :class:`FusedPyroOptim` (one ``foreach`` torch optimizer
    over every parameter; checkpoint state in ``pyro.optim``'s per-parameter format); ``clipped_adam`` is
    Pyro's own per-parameter ``ClippedAdam``."""
    if name in _FUSED:
        return FusedPyroOptim(_FUSED[name], {"lr": check_positive("lr", lr), **kwargs})
    if name == "clipped_adam":
        return pyro.optim.ClippedAdam({"lr": check_positive("lr", lr), **kwargs})
    raise ValueError(f"optimizer must be one of {sorted([*_FUSED, 'clipped_adam'])}, got {name!r}")


def optimizer_name(optim: PyroOptim | str) -> str | None:
    """The :func:`make_optimizer` name that rebuilds ``optim``'s kind (a ``PyroOptim`` or its torch
    constructor's class name, e.g. ``"Adam"``); ``None`` if there is none."""
    ctor = optim if isinstance(optim, str) else getattr(optim.pt_optim_constructor, "__name__", "")
    return _BY_CONSTRUCTOR.get(ctor.lower())
