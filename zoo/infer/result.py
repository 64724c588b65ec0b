"""What a fit returns (:class:`FitResult`) and the stopping rule it carries (:class:`ConvergenceMonitor`)."""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyro
import pyro.optim
import torch
from pyro.infer.elbo import ELBO
from torch import Tensor

from zoo.core.validation import check_positive, check_positive_int
from zoo.infer.config import FitConfig
from zoo.infer.predict import Predictions, predict
from zoo.infer.snapshot import write_checkpoint

__all__ = ["FitResult", "ConvergenceMonitor", "guide_class_path", "OFF_SCALE"]

OFF_SCALE = 10.0
"""``predict`` on a fit trained on standardized inputs warns when a column of ``x`` has ``|mean|`` or sd
above this: standardized training columns have mean 0 and sd 1, so such inputs are almost surely raw."""


def guide_class_path(guide: object) -> str:
    """``module.QualName`` of a guide's class (recorded in the spec, checked when a checkpoint is loaded)."""
    cls = type(guide)
    return f"{cls.__module__}.{cls.__qualname__}"


class ConvergenceMonitor:
    """Stop when the ELBO stops changing.

    With ``window = 1`` (exact ELBOs, CAVI) it stops after ``patience`` consecutive steps whose relative
    change ``|e_t - e_{t-1}| / max(1, |e_t|)`` is below ``tol`` — the rule of Sheinkman & Wade (2025) §4
    ("three
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

    Input standardization: a fit of :func:`zoo.experiments.runs.fit_on_dataset` (so every ``zoo fit`` run)
    on standardized inputs records the training ``x_mean`` / ``x_std`` and the ``feature_names`` in
    ``config`` (``standardize_x: False`` when the inputs were used as they are); a Python fit can record
    them with ``fit(..., metadata={"x_mean": [...], "x_std": [...]})``.  :meth:`standardize_inputs` and
    ``predict(x_raw, raw_inputs=True)`` apply them to new raw rows.
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

    def predict(self, x: Tensor, *, raw_inputs: bool = False, **kwargs: Any) -> Predictions:
        """Posterior predictive summary at ``x``; see :func:`zoo.infer.predict.predict` for the keywords
        (``num_samples``; ``seed=``: the draws depend on it alone, so the same seed gives the same
        predictions, while without it every call draws afresh from the global RNG).

        Regression predictions are in target units when the fit recorded ``y_mean``/``y_std`` (every
        ``zoo fit`` / ``fit_on_dataset`` fit, or ``fit(..., metadata={"y_mean": mu, "y_std": sd})``),
        else on the scale of the ``y`` the fit was given.  ``raw_inputs=True``: ``x`` holds raw rows in
        the file's feature order, standardized here first (:meth:`standardize_inputs`).  Without it, inputs
        far off the standardized training scale (a column ``|mean|`` or sd above :data:`OFF_SCALE`) give a
        ``UserWarning``."""
        if raw_inputs:
            x = self.standardize_inputs(x)
        else:
            self._warn_off_scale(x)
        return predict(self, x, **kwargs)

    def _input_stats(self) -> tuple[np.ndarray, np.ndarray] | None:
        mean, std = self.config.get("x_mean"), self.config.get("x_std")
        if mean is None or std is None:
            return None
        return np.asarray(mean, dtype=np.float64).reshape(-1), np.asarray(std, dtype=np.float64).reshape(-1)

    def standardize_inputs(self, x: Any) -> Tensor:
        """New raw input rows ``(m, d)`` (tensor, array or nested list; the training file's feature order,
        ``config["feature_names"]``) mapped as the training inputs were: ``(x - x_mean) / x_std`` with the
        recorded training statistics (unchanged for a fit recorded with ``standardize_x: False``), as a
        tensor of the model's dtype on the fit's device, ready for ``predict`` or ``to_inference_data``.

        Raises:
            ValueError: ``x`` is not a finite 2-D numeric array with the training width, or the fit
                recorded no input statistics (a fit on inputs prepared by hand: prepare new rows the same
                way, or record them with ``fit(..., metadata={"x_mean": ..., "x_std": ...})``).
        """
        stats = self._input_stats()
        if stats is None and self.config.get("standardize_x") is not False:
            raise ValueError(
                "x: this fit recorded no input standardization (config has no x_mean/x_std): it was fitted "
                "on inputs prepared outside the zoo; prepare new rows the same way, or record the "
                "statistics with fit(..., metadata={'x_mean': [...], 'x_std': [...]})"
            )
        raw = x.detach().cpu().numpy() if isinstance(x, Tensor) else x
        try:
            arr = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"x must be numeric rows (m, d), got {type(x).__name__}: {exc}") from None
        arr = arr[None, :] if arr.ndim == 1 else arr
        width = int(self.spec["in_features"]) if self.spec else (None if stats is None else stats[0].size)
        if arr.ndim != 2 or (width is not None and arr.shape[1] != width):
            names = self.config.get("feature_names")
            raise ValueError(
                f"x must have shape (m, {width}) (the training features"
                + (f" {names}" if names else "")
                + f"), got {tuple(arr.shape)}"
            )
        if not np.isfinite(arr).all():
            raise ValueError("x contains NaN or inf; drop or impute those rows first")
        if stats is not None:
            arr = (arr - stats[0]) / stats[1]
        dtype = next((t.dtype for t in self.model.parameters() if t.is_floating_point()), None)
        dtype = dtype or next((t.dtype for t in self.model.buffers() if t.is_floating_point()), None)
        return torch.as_tensor(arr, dtype=dtype or torch.get_default_dtype(), device=self.device)

    def _warn_off_scale(self, x: Tensor) -> None:
        """The ``UserWarning`` of :meth:`predict` for raw-looking inputs to a standardized fit."""
        stats = self._input_stats()
        if stats is None or not isinstance(x, Tensor) or x.dim() != 2 or x.shape[0] == 0:
            return
        if not x.is_floating_point() or x.shape[1] != stats[0].size:
            return  # predict names the wrong input
        cols = x.detach().to(torch.float64)
        mean, sd = cols.mean(0).abs(), cols.std(0, unbiased=False)
        j = int(torch.argmax(torch.maximum(mean, sd)))
        worst = float(torch.maximum(mean, sd)[j])
        if math.isfinite(worst) and worst > OFF_SCALE:
            names = self.config.get("feature_names")
            col = repr(names[j]) if names and j < len(names) else str(j)
            warnings.warn(
                f"x: column {col} has |mean| {float(mean[j]):.3g} and sd {float(sd[j]):.3g}, but this fit "
                f"was trained on standardized inputs (mean 0, sd 1; training raw mean {stats[0][j]:.4g}, sd "
                f"{stats[1][j]:.4g}): raw rows give wrong predictions; pass predict(x, raw_inputs=True) or "
                "standardize_inputs(x)",
                UserWarning,
                stacklevel=3,
            )

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
