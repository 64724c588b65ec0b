"""SQUAREM acceleration of closed-form (CAVI / EM) fixed-point iterations, with a monotone-ELBO safeguard.

A full-batch closed-form sweep is a fixed-point map ``theta -> F(theta)`` on the guide's state (and the
model's, where an EM step updates a prior hyperparameter).  Coordinate ascent converges linearly, slowly
when the factors are strongly coupled (the bow-tie's weights, activations and Pólya-Gamma locals).  SQUAREM
(Varadhan & Roland 2008, "Simple and globally convergent methods for accelerating the convergence of any EM
algorithm", Scand. J. Statist. 35, 335-353, scheme S3) extrapolates two sweeps into one squared step::

    theta1 = F(theta0),  theta2 = F(theta1),  r = theta1 - theta0,  v = theta2 - theta1 - r,
    alpha = -||r|| / ||v||  (alpha <= -1),  theta' = theta0 - 2 alpha r + alpha^2 v,
    theta'' = F(theta')                                                     (the stabilizing sweep)

``alpha = -1`` gives ``theta' = theta2``: the plain iteration.  **Safeguard**: ``theta''`` is kept only if
its ELBO is at least that of ``theta2`` (two plain sweeps, which never lower the ELBO of a coordinate ascent)
and every state entry and the ELBO are finite; otherwise ``alpha`` is moved halfway to ``-1`` (Varadhan &
Roland §5's backtracking) up to ``max_backtracks`` times, and then the cycle falls back to ``theta2``.  So an
accelerated cycle's ELBO is never below the plain iteration's after two sweeps, and never decreases from one
cycle to the next; a fixed point of the accelerated iteration is a fixed point of ``F``.

The state is every floating-point buffer of the guide and of the model (those a sweep leaves unchanged have
``r = v = 0`` and are not moved).  Used through the loop (:func:`zoo.infer.loop.fit` with
``accelerate="squarem"``) by any :class:`~zoo.core.guide.ClosedFormGuide` that needs no gradients
(``uses_gradients = False``) on full-batch steps; every cycle costs three sweeps and three ELBO evaluations
(counted in ``result.loop_state["sweeps"]``).  Written here rather than taken from a library: the Python
SQUAREM ports work on flat numpy vectors, while the state here is a set of torch buffers on the guide's
device whose extrapolation must be checked with the guide's own ELBO.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["ACCELERATORS", "squarem_cycle", "state_buffers"]

logger = logging.getLogger(__name__)

#: the accepted values of ``accelerate`` (``None``: the plain sweep)
ACCELERATORS = ("squarem",)


def state_buffers(*modules: torch.nn.Module) -> dict[str, Tensor]:
    """The floating-point buffers of ``modules`` (the fixed-point state), keyed ``"<i>.<name>"``."""
    out = {}
    for i, m in enumerate(modules):
        for name, buf in m.named_buffers():
            if buf.is_floating_point():
                out[f"{i}.{name}"] = buf
    return out


class _Value:
    """A snapshot of one buffer, kept compact: a buffer that is an expanded view (stride 0 along some
    dimensions, e.g. one covariance matrix shared by every data point) is stored as the one slice it
    repeats, so the extrapolation costs what the slice costs and a restored buffer is again an expanded
    view (the guide's shortcuts for such buffers keep working).  ``repeats``: how many entries of the
    buffer each stored entry stands for (norms are of the full buffer)."""

    __slots__ = ("data", "shape", "repeats")

    def __init__(self, data: Tensor, shape: torch.Size) -> None:
        self.data, self.shape = data, shape
        self.repeats = math.prod(shape) // max(data.numel(), 1) if data.numel() else 1

    @classmethod
    def of(cls, t: Tensor) -> _Value:
        t = t.detach()
        index = tuple(0 if st == 0 and n > 1 else slice(None) for st, n in zip(t.stride(), t.shape))
        if any(isinstance(i, int) for i in index):
            keep = tuple(slice(0, 1) if isinstance(i, int) else i for i in index)
            return cls(t[keep].clone(), t.shape)
        return cls(t.clone(), t.shape)

    def like(self, data: Tensor) -> _Value:
        return _Value(data, self.shape)

    def tensor(self) -> Tensor:
        """A fresh buffer of this value (an expanded view when compact)."""
        return self.data.clone().expand(self.shape) if self.data.shape != self.shape else self.data.clone()


def _snapshot(state: dict[str, Tensor]) -> dict[str, _Value]:
    return {k: _Value.of(v) for k, v in state.items()}


def _aligned(a: _Value, b: _Value) -> tuple[Tensor, Tensor]:
    """The data of two snapshots of one buffer in a common form (full if only one is compact)."""
    if a.data.shape == b.data.shape:
        return a.data, b.data
    return a.data.expand(a.shape), b.data.expand(b.shape)


def _combine(a: _Value, b: _Value, fn: Callable[[Tensor, Tensor], Tensor]) -> _Value:
    x, y = _aligned(a, b)
    return _Value(fn(x, y), a.shape)


def _sq_norm(values: dict[str, _Value]) -> float:
    return sum(float((v.data.double() ** 2).sum()) * v.repeats for v in values.values())


def _restore(modules: tuple[torch.nn.Module, ...], values: dict[str, _Value]) -> None:
    """Rebind every buffer to a fresh copy of its value in ``values`` (rebinding rather than ``copy_``: two
    buffers of a guide may share storage, e.g. views of one local)."""
    for key, v in values.items():
        i, name = key.split(".", 1)
        owner, _, leaf = name.rpartition(".")
        mod = modules[int(i)].get_submodule(owner) if owner else modules[int(i)]
        mod._buffers[leaf] = v.tensor()


def _finite(state: dict[str, Tensor]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in state.values())


def _extrapolate(t0: _Value, r: _Value, v: _Value, alpha: float) -> _Value:
    """``theta0 - 2 alpha r + alpha^2 v`` of one buffer."""
    step = _combine(r, v, lambda a, b: alpha**2 * b - 2.0 * alpha * a)
    return _combine(t0, step, torch.add)


def squarem_cycle(
    sweep: Callable[[], None],
    elbo: Callable[[], float],
    modules: tuple[torch.nn.Module, ...],
    max_backtracks: int = 4,
) -> tuple[float, dict]:
    """One SQUAREM cycle (module docstring) on the buffers of ``modules``; ``sweep()`` applies ``F`` in place
    and ``elbo()`` evaluates the ELBO of the current state.  Returns the ELBO of the state it leaves and a
    record ``{"alpha", "accepted", "sweeps", "backtracks"}``."""
    def live() -> dict[str, Tensor]:  # refetched after every sweep: a sweep may rebind its buffers
        return state_buffers(*modules)

    theta0 = _snapshot(live())
    sweep()
    now = live()
    if set(now) != set(theta0) or any(now[k].shape != theta0[k].shape for k in now):  # the first sweep
        return elbo(), {"alpha": -1.0, "accepted": False, "sweeps": 1, "backtracks": 0}  # set the shapes
    theta1 = _snapshot(now)
    sweep()
    theta2 = _snapshot(live())
    elbo2 = elbo()
    r = {k: _combine(theta1[k], theta0[k], torch.sub) for k in theta0}
    v = {k: _combine(_combine(theta2[k], theta1[k], torch.sub), r[k], torch.sub) for k in theta0}
    rn, vn = math.sqrt(_sq_norm(r)), math.sqrt(_sq_norm(v))
    record = {"alpha": -1.0, "accepted": False, "sweeps": 2, "backtracks": 0}
    if vn == 0.0 or rn == 0.0 or not math.isfinite(rn / vn):
        return elbo2, record
    alpha = min(-1.0, -rn / vn)
    for attempt in range(max_backtracks + 1):
        if alpha >= -1.0 + 1e-12:
            break
        _restore(modules, {k: _extrapolate(theta0[k], r[k], v[k], alpha) for k in theta0})
        try:
            sweep()
            record["sweeps"] += 1
            value = elbo() if _finite(live()) else math.nan
        except (ValueError, RuntimeError, ArithmeticError) as e:  # e.g. an extrapolated precision not PD
            logger.debug("SQUAREM: the extrapolated state failed (%s); backtracking", e)
            value = math.nan
        if math.isfinite(value) and value >= elbo2:
            record.update(alpha=alpha, accepted=True, backtracks=attempt)
            return value, record
        alpha = (alpha - 1.0) / 2.0
    _restore(modules, theta2)
    record["backtracks"] = max_backtracks
    return elbo2, record
