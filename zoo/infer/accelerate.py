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


def _snapshot(state: dict[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


def _restore(modules: tuple[torch.nn.Module, ...], values: dict[str, Tensor]) -> None:
    """Rebind every buffer to a fresh copy of its value in ``values`` (rebinding rather than ``copy_``: two
    buffers of a guide may share storage, e.g. views of one local)."""
    for key, v in values.items():
        i, name = key.split(".", 1)
        owner, _, leaf = name.rpartition(".")
        mod = modules[int(i)].get_submodule(owner) if owner else modules[int(i)]
        mod._buffers[leaf] = v.clone()


def _finite(state: dict[str, Tensor]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in state.values())


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
    r = {k: theta1[k] - theta0[k] for k in theta0}
    v = {k: theta2[k] - theta1[k] - r[k] for k in theta0}
    rn = math.sqrt(sum(float((t.double() ** 2).sum()) for t in r.values()))
    vn = math.sqrt(sum(float((t.double() ** 2).sum()) for t in v.values()))
    record = {"alpha": -1.0, "accepted": False, "sweeps": 2, "backtracks": 0}
    if vn == 0.0 or rn == 0.0 or not math.isfinite(rn / vn):
        return elbo2, record
    alpha = min(-1.0, -rn / vn)
    for attempt in range(max_backtracks + 1):
        if alpha >= -1.0 + 1e-12:
            break
        _restore(modules, {k: theta0[k] - 2.0 * alpha * r[k] + alpha**2 * v[k] for k in theta0})
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
