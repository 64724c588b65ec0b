"""What a fit returns (:class:`FitResult`) and the stopping rule it carries (:class:`ConvergenceMonitor`)."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyro
import pyro.optim
import torch
from pyro.infer.elbo import ELBO
from torch import Tensor

from zoo.core.validation import check_positive, check_positive_int
from zoo.infer.config import FitConfig
from zoo.infer.predict import Predictions, predict
from zoo.infer.snapshot import write_checkpoint

__all__ = ["FitResult", "ConvergenceMonitor", "guide_class_path"]


def guide_class_path(guide: object) -> str:
    """``module.QualName`` of a guide's class (recorded in the spec, checked when a checkpoint is loaded)."""
    cls = type(guide)
    return f"{cls.__module__}.{cls.__qualname__}"


class ConvergenceMonitor:
    """Stop when the ELBO stops changing.

    With ``window = 1`` (exact ELBOs, CAVI) it stops after ``patience`` consecutive steps whose relative
    change ``|e_t - e_{t-1}| / max(1, |e_t|)`` is below ``tol`` — the rule of paper 000 §4 ("three
    consecutive ELBO values change by less than a threshold").  With ``window = w > 1`` (noisy Monte
    Carlo ELBOs) the same test is applied to the means of consecutive non-overlapping windows of ``w``
    steps.
    """

    def __init__(self, tol: float, patience: int = 3, window: int = 1) -> None:
        self.tol = check_positive("tol", tol)
        self.patience = check_positive_int("patience", patience)
        self.window = check_positive_int("window", window)
        self._buf: list[float] = []
        self._prev: float | None = None
        self._hits = 0

    def update(self, elbo: float) -> bool:
        """Record one ELBO value; True once the stopping rule fires."""
        self._buf.append(elbo)
        if len(self._buf) < self.window:
            return False
        cur = sum(self._buf) / len(self._buf)
        self._buf = []
        if self._prev is not None and abs(cur - self._prev) / max(1.0, abs(cur)) < self.tol:
            self._hits += 1
        else:
            self._hits = 0
        self._prev = cur
        return self._hits >= self.patience

    def state_dict(self) -> dict:
        return {"buf": list(self._buf), "prev": self._prev, "hits": self._hits}

    def load_state_dict(self, s: dict) -> None:
        self._buf, self._prev, self._hits = list(s["buf"]), s["prev"], s["hits"]

    def to_dict(self) -> dict[str, Any]:
        """Settings and state as plain data (for checkpoints)."""
        return {"tol": self.tol, "patience": self.patience, "window": self.window, "state": self.state_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConvergenceMonitor:
        monitor = cls(d["tol"], d["patience"], d["window"])
        monitor.load_state_dict(d["state"])
        return monitor


@dataclass
class FitResult:
    """Everything a fit produced: model, guide, ELBO trace, timing, seed, config and resumable state.

    ``config`` is the fit's :class:`~zoo.infer.config.FitConfig` as a flat dict (``FitConfig.record``:
    the fields plus the ``metadata`` entries, e.g. the target standardization ``y_mean``/``y_std`` that
    :func:`~zoo.infer.predict.predict` undoes); :attr:`fit_config` gives it back as a config object.
    """

    model: torch.nn.Module
    guide: Callable
    elbo: list[float] = field(default_factory=list)
    steps: int = 0
    wall_time: float = 0.0
    seed: int = 0
    config: dict = field(default_factory=dict)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    converged: bool = False
    param_state: dict = field(default_factory=lambda: {"params": {}, "constraints": {}})
    optim: pyro.optim.PyroOptim | None = None
    loss: ELBO | None = None
    loop_state: dict = field(default_factory=dict)
    spec: dict | None = None
    example: tuple | None = None  # (x[:2], y[:2]) on CPU: lets a loaded guide set itself up

    @contextlib.contextmanager
    def activate(self) -> Iterator[dict]:
        """Enter this fit's Pyro param-store scope (needed to evaluate a guide built from ``pyro.param``)."""
        with pyro.get_param_store().scope(self.param_state) as state:
            yield state

    def predict(self, x: Tensor, **kwargs: Any) -> Predictions:
        """Posterior predictive summary; see :func:`zoo.infer.predict.predict`."""
        return predict(self, x, **kwargs)

    def save(self, path: str | os.PathLike) -> None:
        """Atomically write a checkpoint; see :func:`zoo.infer.checkpoint.save`."""
        write_checkpoint(self, path)

    @property
    def fit_config(self) -> FitConfig:
        """:attr:`config` as a :class:`~zoo.infer.config.FitConfig` (non-field entries in ``metadata``)."""
        return FitConfig.from_record(self.config)

    @property
    def final_elbo(self) -> float:
        return self.elbo[-1] if self.elbo else math.nan
