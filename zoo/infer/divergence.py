"""A diverged fit is an error, not a result: what :func:`zoo.infer.loop.run_steps` checks after every step.

A step has **diverged** when

1. its reported ELBO is not finite; or
2. a value it produced is not finite: a parameter of the fit's param-store scope, a floating-point buffer
   of the guide or the model (closed-form CAVI factors, auxiliary rates), or a distribution parameter
   inside the step (a Pyro/torch error raised on a NaN or an infinity); or
3. the ELBO **blew up**: one step's ELBO is more than :data:`SPIKE_NATS_PER_DATUM` (1000) nats per
   training point below the best single-step ELBO so far — a factor ``e^1000`` in every point's density,
   far beyond any minibatch or Monte Carlo noise (a batch of one scales one point's log-likelihood by
   ``N``: a residual of 20 noise standard deviations costs 200 N), while an optimizer thrown off by too large
   a step does it at once (``mfvi-bnn``, ``lr = 1.0``, batch 1 on diabetes: from -2.7e3 to -8.3e5 in its
   second step, then a fit with 35 times the normal RMSE and an ELBO that only rises afterwards); or
4. the ELBO **collapsed**: the mean ELBO of a window of :data:`COLLAPSE_WINDOW` consecutive steps
   (non-overlapping windows, so Monte Carlo and minibatch noise is averaged) falls more than
   :data:`COLLAPSE_NATS_PER_DATUM` nats per training point below the best window mean so far.  The ELBO is a
   sum over the ``N`` training points, so the rule reads ``mean_w < best_w - 10 N``: every point's
   expected log-likelihood (or its share of the KL) worse by ``e^10`` than at the fit's best — no learning
   rate schedule, minibatch noise or stage switch of a healthy fit moves a window mean that far, while an
   optimizer drifting off (too large a learning rate, a batch of one) does within a few windows.

The loop then raises :class:`DivergenceError` naming the step, what diverged (the ELBO, the parameter or
buffer, or the distribution site) and the guide, with a hint; nothing is returned, so no metrics are
written for a diverged fit.

The hint depends on the step.  From step 2 on it is about the optimizer and the data (learning rate, batch
size, scaling).  At **step 1** no update has taken effect yet: the first ELBO and its gradients are those of
the guide's *initial* values, so the learning rate is not the cause.  The hint then names the largest
initial value of the guide (:func:`initial_values` records it during the first step: the guide module's
parameters and buffers before the step, and every parameter the optimizer receives, created lazily by an
autoguide included, before its update) and points at the prior's hyperparameters and the guide's
initialization (``init_loc_fn``, ``init_scale``): e.g. an ``AutoNormal`` initialized at the prior median of
an inverse-gamma scale with a tiny shape starts at an unconstrained location near 82 (a scale of ``e^82``).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Iterator

import pyro
import torch
from torch import Tensor

__all__ = [
    "COLLAPSE_NATS_PER_DATUM",
    "COLLAPSE_WINDOW",
    "SPIKE_NATS_PER_DATUM",
    "DivergenceError",
    "check_collapse",
    "first_nonfinite",
    "initial_values",
    "step_error",
]

#: non-overlapping window (steps) whose mean ELBO the collapse rule compares
COLLAPSE_WINDOW = 50
#: how far (nats per training point) a window mean may fall below the best one before the fit has collapsed
COLLAPSE_NATS_PER_DATUM = 10.0
#: how far (nats per training point) one step's ELBO may fall below the best single step before it blew up
SPIKE_NATS_PER_DATUM = 1000.0

HINT = (
    "lower the learning rate (lr), use a larger batch_size, standardize inputs and targets, "
    "or check the data for extreme values"
)
#: the hint at step 1, where the guide's initial values, not the optimizer, made the fit non-finite
FIRST_STEP_HINT = (
    "the fit failed at its first step, before any parameter update took effect, so the learning rate is "
    "not the cause: the guide's initial values are{largest}; check the prior's hyperparameters (a very "
    "heavy-tailed or wide prior puts a median-initialized guide far out) and the guide's initialization "
    "(init_loc_fn, init_scale), or the data for extreme values"
)


def first_step_hint(largest: tuple[str, float] | None) -> str:
    """:data:`FIRST_STEP_HINT` naming the largest-magnitude initial value ``(name, value)`` if known."""
    if largest is None:
        return FIRST_STEP_HINT.format(largest="")
    name, value = largest
    note = f", exp({value:.3g}) = {math.exp(value):.3g} if it is a log-scale" if 20 < value < 700 else ""
    return FIRST_STEP_HINT.format(
        largest=f" (the largest in magnitude: {name!r} = {value:.6g}, unconstrained{note})"
    )


class DivergenceError(ValueError, FloatingPointError):
    """A fit diverged (module docstring).  A ``ValueError`` (the zoo's error for bad settings: the fit's
    settings cannot fit this data) and, for code written before it existed, a ``FloatingPointError``.
    ``initial``: the largest-magnitude initial guide value ``(name, value)``, named in the hint at step 1."""

    def __init__(
        self, step: int, what: str, guide: object, detail: str = "", initial: tuple[str, float] | None = None
    ) -> None:
        self.step, self.what, self.guide = step, what, type(guide).__name__
        self.initial = initial
        msg = f"the fit diverged at step {step}: {what} (guide {self.guide})"
        if detail:
            msg += f"; {detail}"
        super().__init__(f"{msg}; hint: {first_step_hint(initial) if step == 1 else HINT}")


def _largest(found: dict, named: Iterable[tuple[str, Tensor]]) -> None:
    """Keep in ``found`` (``{"name", "value", "magnitude"}``) the finite entry of largest magnitude among
    ``named``."""
    with torch.no_grad():
        for name, t in named:
            if not torch.is_tensor(t) or not t.is_floating_point() or not t.numel():
                continue
            flat = t.detach().reshape(-1)
            mag = torch.where(torch.isfinite(flat), flat.abs(), torch.zeros_like(flat))
            i = int(mag.argmax())
            if float(mag[i]) > found.get("magnitude", -1.0):
                found.update(name=name, value=float(flat[i]), magnitude=float(mag[i]))


@contextlib.contextmanager
def initial_values(svi: object, guide: object) -> Iterator[dict]:
    """Around a fit's first step: record the guide's largest-magnitude initial value in the yielded dict
    (``{"name", "value", "magnitude"}``; empty when the guide has none): its module parameters and floating
    buffers before the step, and each parameter the SVI optimizer receives before its update (so an
    autoguide's lazily created parameters count).  ``svi.optim`` is restored afterwards."""
    found: dict = {}
    if isinstance(guide, torch.nn.Module):
        _largest(found, ((n.removesuffix("_unconstrained"), p) for n, p in guide.named_parameters()))
        _largest(found, guide.named_buffers())
    optim = getattr(svi, "optim", None)
    if optim is None:
        yield found
        return

    def recording(params, *args, **kwargs):
        store = pyro.get_param_store()
        _largest(found, ((store.param_name(p) or "parameter", p) for p in params))
        return optim(params, *args, **kwargs)

    svi.optim = recording
    try:
        yield found
    finally:
        svi.optim = optim


def _named_tensors(
    params: Iterable[tuple[str, Tensor]], model: torch.nn.Module, guide: object
) -> Iterator[tuple[str, str, Tensor]]:
    """``(kind, name, tensor)`` of every tensor a step may have made non-finite (labels built only when
    one has)."""
    for name, value in params:
        yield "parameter", name, value
    for owner, label in ((guide, "guide buffer"), (model, "model buffer")):
        if isinstance(owner, torch.nn.Module):
            for name, buf in owner.named_buffers():
                if buf.is_floating_point() and buf.numel():
                    yield label, name, buf


def first_nonfinite(
    params: Iterable[tuple[str, Tensor]], model: torch.nn.Module, guide: object
) -> str | None:
    """The first of ``params`` (``(name, tensor)`` pairs, e.g. the param store's ``named_parameters()``)
    or floating buffer of guide/model holding a NaN or an infinity (``"parameter 'fc0.weight_loc' (3 of 12
    entries non-finite)"``), else ``None``.  One fused norm per dtype over all tensors first, so a healthy
    step costs a few kernel calls."""
    named = list(_named_tensors(params, model, guide))
    if not named:
        return None
    with torch.no_grad():
        groups: dict[tuple, list[Tensor]] = {}
        for _, _, t in named:
            groups.setdefault((t.dtype, t.device), []).append(t.detach())
        if all(bool(torch.isfinite(torch.stack(torch._foreach_norm(ts))).all()) for ts in groups.values()):
            return None
        for kind, name, t in named:
            bad = int((~torch.isfinite(t.detach())).sum())
            if bad:
                return f"{kind} {name!r} ({bad} of {t.numel()} entries non-finite)"
    return None  # a norm overflowed on huge but finite values: not a NaN or an infinity


def check_collapse(state: dict, elbo: float, n: int) -> str | None:
    """Update the plain-data ``state`` of rules 3 and 4 (``{"best_step", "best", "buf"}``, kept in the fit's
    loop state and checkpoints) with one ELBO; a description when the ELBO blew up or collapsed (module
    docstring), else ``None``."""
    elbo = float(elbo)
    best_step = state.get("best_step")
    if best_step is not None and elbo < best_step - SPIKE_NATS_PER_DATUM * n:
        return (
            f"the ELBO blew up: {elbo:.6g} is more than {SPIKE_NATS_PER_DATUM:g} nats per training point "
            f"(N = {n}) below the best step so far, {best_step:.6g}"
        )
    if best_step is None or elbo > best_step:
        state["best_step"] = elbo
    buf = state.setdefault("buf", [])
    buf.append(elbo)
    if len(buf) < COLLAPSE_WINDOW:
        return None
    mean = math.fsum(buf) / len(buf)
    buf.clear()
    best = state.get("best")
    if best is None or mean > best:
        state["best"] = mean
        return None
    if mean < best - COLLAPSE_NATS_PER_DATUM * n:
        return (
            f"the ELBO collapsed: its mean over the last {COLLAPSE_WINDOW} steps is {mean:.6g}, more than "
            f"{COLLAPSE_NATS_PER_DATUM:g} nats per training point (N = {n}) below its best window mean "
            f"{best:.6g}"
        )
    return None


def step_error(
    error: Exception,
    step: int,
    params: Iterable[tuple[str, Tensor]],
    model: torch.nn.Module,
    guide: object,
    initial: tuple[str, float] | None = None,
) -> DivergenceError | None:
    """The :class:`DivergenceError` behind an exception raised inside step ``step``: a non-finite parameter
    or buffer, or a distribution that refused a NaN/infinite parameter (Pyro's validation); ``None`` when
    the error is something else (it is then re-raised unchanged).  ``initial`` as for
    :class:`DivergenceError`."""
    text = str(error)
    bad = first_nonfinite(params, model, guide)
    if bad is not None:
        return DivergenceError(step, f"{bad}", guide, f"the step raised {type(error).__name__}", initial)
    invalid = "found invalid values" in text or re.search(r"\b(nan|inf)\b", text.lower()) is not None
    if isinstance(error, (ValueError, RuntimeError)) and invalid:
        site = _site_of(error)
        first = text.strip().splitlines()[0][:300]
        return DivergenceError(step, f"a non-finite value inside the step{site}", guide, first, initial)
    return None


def _site_of(error: Exception) -> str:
    """`` at site 'NAME'`` when Pyro named the sample site the error came from."""
    text = str(error)
    for marker in ("at site '", "site '"):
        i = text.find(marker)
        if i >= 0:
            j = text.find("'", i + len(marker))
            if j > 0:
                return f" at site {text[i + len(marker) - 1 : j + 1]}"
    return ""
