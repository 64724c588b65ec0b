"""The zoo's one training loop: Pyro SVI gradient steps and closed-form (CAVI) steps in one iteration.

**ELBO convention (the only one in the zoo).**  ``ELBO = sum_n E_q[log p(y_n | θ)] - KL(q || p)``: a
*sum* over all N training points and the *full* KL of every global latent.  With minibatches the model's
``pyro.plate("data", N, subsample=idx)`` scales the minibatch log-likelihood by ``N / |idx|``, so each
step's estimate is unbiased for the full-data ELBO.  Reported ELBOs (``FitResult.elbo``) are in this
unit (nats, not per datum); a guide that knows its ELBO exactly (CAVI) reports the exact value.

**One iteration** (``step t``):

1. draw the minibatch ``idx`` (an epoch permutation, without replacement, last partial batch dropped;
   ``idx = None`` for full batch);
2. if the guide has gradient parameters (``uses_gradients``, default True): one ``SVI.step``
   (``Trace_ELBO`` by default, any ``pyro.optim.PyroOptim``);
3. if the guide is a :class:`zoo.core.guide.ClosedFormGuide`: ``closed_form_update(model, x, y, idx)``
   under ``torch.no_grad()`` (the gradient optimizer never touches those buffers);
4. record the ELBO (exact if the guide provides ``closed_form_elbo``, else ``-loss``), run callbacks,
   check the stopping rule.

Every fit runs inside its own Pyro param-store scope (``FitResult.param_state``), so fits in one process
never share parameters by name; :meth:`FitResult.activate` re-enters it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pyro
import pyro.optim
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.elbo import ELBO
from torch import Tensor
from tqdm.auto import tqdm

from zoo.core.guide import ClosedFormGuide
from zoo.core.validation import check_positive, check_positive_int, check_tensor, resolve_device
from zoo.infer.optim import FusedPyroOptim

__all__ = ["FitResult", "ConvergenceMonitor", "fit", "resume", "make_optimizer", "check_data"]

Callback = Callable[[int, float, "FitResult"], None]


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


def make_optimizer(name: str = "adam", lr: float = 1e-2, **kwargs) -> pyro.optim.PyroOptim:
    """A Pyro optimizer by name (``adam``, ``clipped_adam``, ``sgd``, ``adagrad``, ``rmsprop``).

    ``adam``/``sgd``/``rmsprop``/``adagrad`` are :class:`zoo.infer.optim.FusedPyroOptim` (one ``foreach`` torch
    optimizer over every parameter; checkpoint state in ``pyro.optim``'s per-parameter format);
    ``clipped_adam`` is Pyro's own per-parameter ``ClippedAdam``."""
    if name in ("adam", "sgd", "rmsprop", "adagrad"):
        # one multi-tensor optimizer for all parameters (zoo.infer.optim): same update, less per-tensor overhead
        ctor = {
            "adam": torch.optim.Adam,
            "sgd": torch.optim.SGD,
            "rmsprop": torch.optim.RMSprop,
            "adagrad": torch.optim.Adagrad,
        }[name]
        return FusedPyroOptim(ctor, {"lr": check_positive("lr", lr), **kwargs})
    table = {
        "adam": pyro.optim.Adam,
        "clipped_adam": pyro.optim.ClippedAdam,
        "sgd": pyro.optim.SGD,
        "adagrad": pyro.optim.Adagrad,
        "rmsprop": pyro.optim.RMSprop,
    }
    if name not in table:
        raise ValueError(f"optimizer must be one of {sorted(table)}, got {name!r}")
    return table[name]({"lr": check_positive("lr", lr), **kwargs})


def check_data(x: object, y: object, task: str | None = None) -> None:
    """Validate a training pair: ``x`` (N, d) float and finite; ``y`` (N,) or (N, k) finite."""
    x = check_tensor("x", x, ndim=2, dtype_kind="float")
    if y is None:
        return
    y = check_tensor("y", y, ndim=(1, 2))
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"y has {y.shape[0]} rows but x has {x.shape[0]}")
    if task == "multiclass" and y.is_floating_point():
        raise TypeError("y must hold integer class labels (torch.long) for a classification model")
    if task == "regression" and not y.is_floating_point():
        raise TypeError("y must be a floating-point tensor for a regression model")
    if x.device != y.device:
        raise ValueError(f"y is on {y.device} but x is on {x.device}")


@dataclass
class FitResult:
    """Everything a fit produced: model, guide, ELBO trace, timing, seed, config and resumable state."""

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

    def predict(self, x: Tensor, **kwargs):
        """Posterior predictive summary; see :func:`zoo.infer.predict.predict`."""
        from zoo.infer.predict import predict

        return predict(self, x, **kwargs)

    def save(self, path) -> None:
        """Atomically write a checkpoint; see :func:`zoo.infer.checkpoint.save`."""
        from zoo.infer.checkpoint import save

        save(self, path)

    @property
    def final_elbo(self) -> float:
        return self.elbo[-1] if self.elbo else math.nan


def _next_batch(state: dict, n: int, batch_size: int | None, device: torch.device) -> Tensor | None:
    if batch_size is None or batch_size >= n:
        return None
    gen: torch.Generator = state["gen"]
    if state.get("perm") is None or state["pos"] + batch_size > n:
        state["perm"] = torch.randperm(n, generator=gen)
        state["pos"] = 0
        state["epoch"] = state.get("epoch", 0) + 1
    idx = state["perm"][state["pos"] : state["pos"] + batch_size]
    state["pos"] += batch_size
    return idx.to(device)


def fit(
    model: torch.nn.Module,
    guide: Callable,
    x: Tensor,
    y: Tensor | None,
    *,
    steps: int = 1000,
    optimizer: pyro.optim.PyroOptim | str | None = None,
    lr: float = 1e-2,
    loss: ELBO | None = None,
    num_particles: int = 1,
    batch_size: int | None = None,
    tol: float | None = None,
    patience: int = 3,
    window: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = True,
    callbacks: Sequence[Callback] = (),
    config: dict | None = None,
    spec: dict | None = None,
) -> FitResult:
    """Fit ``guide`` to ``model`` on ``(x, y)``.

    :param steps: step budget (iterations; with ``batch_size`` one step is one minibatch).
    :param optimizer: a ``PyroOptim`` (per-parameter arguments through a callable work as in Pyro) or
        a name for :func:`make_optimizer` with ``lr``; default Adam.
    :param loss: a Pyro ELBO; default ``Trace_ELBO(num_particles)``.
    :param batch_size: minibatch size (``None``: full batch).
    :param tol: stop early when the relative ELBO change is below ``tol`` (see :class:`ConvergenceMonitor`;
        ``window`` defaults to 1 for pure-CAVI guides and 50 otherwise).
    :param seed: seeds Pyro/torch/numpy/random and the minibatch order; the same seed gives the same run.
    :param device: ``"cpu"``/``"cuda"``; default ``ZOO_DEVICE`` or CPU.  Model, guide and data are moved.
    :param callbacks: ``cb(step, elbo, result)``; raising ``StopIteration`` stops the fit.
    """
    steps = check_positive_int("steps", steps, allow_zero=True)
    seed = check_positive_int("seed", seed, allow_zero=True)
    num_particles = check_positive_int("num_particles", num_particles)
    if batch_size is not None:
        batch_size = check_positive_int("batch_size", batch_size)
    if tol is not None:
        check_positive("tol", tol)
    if not callable(guide):
        raise TypeError(f"guide must be callable (a Pyro guide), got {type(guide).__name__}")
    check_data(x, y, getattr(model, "task", None))
    dev = resolve_device(device)
    model.to(dev)
    if isinstance(guide, torch.nn.Module):
        guide.to(dev)
    x = x.to(dev)
    y = None if y is None else y.to(dev)

    if optimizer is None or isinstance(optimizer, str):
        optim = make_optimizer(optimizer or "adam", lr)
    elif isinstance(optimizer, pyro.optim.PyroOptim):
        optim = optimizer
    else:
        raise TypeError(f"optimizer must be a pyro.optim.PyroOptim or a name, got {type(optimizer).__name__}")
    if loss is not None and not isinstance(loss, ELBO):
        raise TypeError(f"loss must be a pyro.infer ELBO, got {type(loss).__name__}")

    pyro.set_rng_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    pure_cavi = not getattr(guide, "uses_gradients", True)
    cfg = {
        "steps": steps,
        "lr": lr,
        "num_particles": num_particles,
        "batch_size": batch_size,
        "tol": tol,
        "patience": patience,
        "window": window if window is not None else (1 if pure_cavi else 50),
        "optimizer": getattr(optim.pt_optim_constructor, "__name__", type(optim).__name__),
        **(config or {}),
    }
    result = FitResult(
        model=model,
        guide=guide,
        seed=seed,
        config=cfg,
        device=dev,
        optim=optim,
        loss=loss if loss is not None else Trace_ELBO(num_particles=num_particles),
        loop_state={"gen": gen, "perm": None, "pos": 0, "epoch": 0},
        spec=spec,
        example=(x[:2].detach().cpu(), None if y is None else y[:2].detach().cpu()),
    )
    if tol is not None:
        result.loop_state["monitor"] = ConvergenceMonitor(tol, patience, cfg["window"])
    return run_steps(result, x, y, steps, progress=progress, callbacks=callbacks)


def resume(
    result: FitResult,
    x: Tensor,
    y: Tensor | None,
    steps: int,
    *,
    progress: bool = True,
    callbacks: Sequence[Callback] = (),
) -> FitResult:
    """Continue a fit (e.g. loaded by :func:`zoo.infer.checkpoint.load`) for ``steps`` more iterations.

    On CPU, fitting k steps, saving, loading and resuming for k more equals fitting 2k steps at once.
    """
    steps = check_positive_int("steps", steps, allow_zero=True)
    check_data(x, y, getattr(result.model, "task", None))
    x = x.to(result.device)
    y = None if y is None else y.to(result.device)
    result.converged = False
    return run_steps(result, x, y, steps, progress=progress, callbacks=callbacks)


def run_steps(
    result: FitResult,
    x: Tensor,
    y: Tensor | None,
    steps: int,
    *,
    progress: bool = True,
    callbacks: Sequence[Callback] = (),
) -> FitResult:
    model, guide = result.model, result.guide
    closed_form = isinstance(guide, ClosedFormGuide)
    uses_grad = getattr(guide, "uses_gradients", True)
    monitor: ConvergenceMonitor | None = result.loop_state.get("monitor")
    n = x.shape[0]
    batch_size = result.config.get("batch_size")
    t0 = time.perf_counter()
    with result.activate():
        svi = SVI(model, guide, result.optim, result.loss)
        bar = tqdm(total=steps, disable=not progress, desc="fit", leave=False)
        try:
            for _ in range(steps):
                idx = _next_batch(result.loop_state, n, batch_size, result.device)
                loss_value = svi.step(x, y, subsample=idx) if uses_grad else None
                elbo = None
                if closed_form:
                    with torch.no_grad():
                        guide.closed_form_update(model, x, y, subsample=idx)
                        elbo = guide.closed_form_elbo(model, x, y, subsample=idx)
                if elbo is None:
                    if loss_value is None:
                        with torch.no_grad():
                            loss_value = svi.evaluate_loss(x, y, subsample=idx)
                    elbo = -float(loss_value)
                result.elbo.append(float(elbo))
                result.steps += 1
                bar.update(1)
                if result.steps % 50 == 0:
                    bar.set_postfix(elbo=f"{elbo:.4g}")
                if not math.isfinite(elbo):
                    raise FloatingPointError(
                        f"ELBO became {elbo} at step {result.steps}; lower lr or check data"
                    )
                try:
                    for cb in callbacks:
                        cb(result.steps, elbo, result)
                except StopIteration:
                    break
                if monitor is not None and monitor.update(elbo):
                    result.converged = True
                    break
        finally:
            bar.close()
            result.wall_time += time.perf_counter() - t0
    return result
