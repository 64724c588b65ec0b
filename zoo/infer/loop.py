"""The zoo's one training loop: Pyro SVI gradient steps and closed-form (CAVI) steps in one iteration.

**ELBO convention (the only one in the zoo).**  ``ELBO = sum_n E_q[log p(y_n | θ)] - KL(q || p)``: a
*sum* over all N training points and the *full* KL of every global latent.  With minibatches the model's
``pyro.plate("data", N, subsample=idx)`` scales the minibatch log-likelihood by ``N / |idx|``, so each
step's estimate is unbiased for the full-data ELBO.  Reported ELBOs (``FitResult.elbo``) are in this
unit (nats, not per datum); a guide that knows its ELBO exactly (CAVI) reports the exact value.

**One iteration** (``step t``):

1. draw the minibatch ``idx`` (an epoch permutation, without replacement, last partial batch dropped;
   with ``shuffle=False`` the rows in their stored order every epoch, as the reference code of
   Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §5.1 does; ``idx = None`` for full batch);
2. if the guide has gradient parameters (``uses_gradients``, default True): one ``SVI.step``
   (``Trace_ELBO`` by default, any ``pyro.optim.PyroOptim``);
3. if the guide is a :class:`zoo.core.guide.ClosedFormGuide`: ``closed_form_update(model, x, y, idx)``
   under ``torch.no_grad()`` (the gradient optimizer never touches those buffers);
4. check the step (:mod:`zoo.infer.divergence`): a non-finite ELBO, parameter, closed-form buffer or
   distribution parameter, or an ELBO that collapsed far below its best, raises
   :class:`~zoo.infer.divergence.DivergenceError` naming the step, what diverged and the guide;
5. record the ELBO (exact if the guide provides ``closed_form_elbo``, else ``-loss``), run callbacks,
   check the stopping rule.

Every fit runs inside its own Pyro param-store scope (``FitResult.param_state``), so fits in one process
never share parameters by name; :meth:`FitResult.activate` re-enters it.

**Before the first step** :func:`fit` and :func:`resume` check the data against the model
(:func:`~zoo.infer.fit_checks.check_model_data`: the architecture's input feature count, the likelihood's
target support through :meth:`zoo.core.likelihoods.Likelihood.validate_targets`, whether or not Pyro's
validation is on; :mod:`zoo.infer.fit_checks` holds every check made before the first step), apply
``ZOO_NUM_THREADS`` (:mod:`zoo.infer.threads`), and record the registry spec that rebuilds model and guide:
``spec=`` if given, else the one :func:`zoo.experiments.registry.build` left on the model, so a fit made
through the Python API reloads with ``zoo.checkpoint.load(path)`` alone.  A pair fresh from ``zoo.build``
(no ``seed=``) gets its initial values drawn under the fit's ``seed`` (:mod:`zoo.core.build_seed`), and
:func:`resume` refuses data of other shapes than the fit's.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro
import pyro.optim
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.elbo import ELBO
from torch import Tensor
from tqdm import tqdm  # plain text bar: no ipywidgets needed, no widget warning in notebooks

from zoo.core.guide import ClosedFormGuide
from zoo.core.validation import check_positive_int, resolve_device
from zoo.data.tensors import conform_tensors
from zoo.infer import distributed
from zoo.infer.accelerate import squarem_cycle
from zoo.infer.config import FitConfig, resolve_fit_config
from zoo.infer.divergence import (
    DivergenceError,
    check_collapse,
    first_nonfinite,
    initial_values,
    step_error,
)
from zoo.infer.fit_checks import (
    check_data,
    check_fit_objects,
    check_guide_dtype,
    check_guide_fits_model,
    check_model_data,
    check_same_data,
    data_shapes,
    fit_spec,
    split_optimizer,
)
from zoo.infer.noise import refit_noise, restore_training_noise
from zoo.infer.optim import make_optimizer, optimizer_name
from zoo.infer.result import ConvergenceMonitor, FitResult, guide_class_path
from zoo.infer.threads import apply_num_threads

__all__ = [
    "FitResult",
    "FitConfig",
    "ConvergenceMonitor",
    "DivergenceError",
    "fit",
    "resume",
    "make_optimizer",
    "check_data",
    "check_model_data",
    "fit_spec",
    "guide_class_path",
]

Callback = Callable[[int, float, FitResult], None]


def _next_batch(state: dict, n: int, batch_size: int | None, device: torch.device) -> Tensor | None:
    if batch_size is None or batch_size >= n:
        return None
    gen: torch.Generator = state["gen"]
    if state.get("perm") is None or state["pos"] + batch_size > n:
        state["perm"] = torch.randperm(n, generator=gen) if state.get("shuffle", True) else torch.arange(n)
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
    config: FitConfig | Mapping[str, Any] | None = None,
    *,
    optimizer: pyro.optim.PyroOptim | str | None = None,
    loss: ELBO | None = None,
    callbacks: Sequence[Callback] = (),
    spec: dict | None = None,
    **settings: Any,
) -> FitResult:
    """Fit ``guide`` to ``model`` on ``(x, y)``.

    Settings come from ``config`` (a :class:`~zoo.infer.config.FitConfig` or a mapping) updated by
    keywords (``fit(m, g, x, y, steps=500, lr=1e-3)`` works as before configs existed):

    * ``steps``: step budget (iterations; with ``batch_size`` one step is one minibatch);
    * ``optimizer``/``lr``: an optimizer name for :func:`make_optimizer` (default Adam), or pass a
      ``PyroOptim`` instance as ``optimizer=`` (per-parameter arguments through a callable work as in Pyro);
    * ``num_particles``: particles of the default ``Trace_ELBO``;
    * ``batch_size``: minibatch size (``None``: full batch); ``shuffle``: a fresh row permutation every
      epoch (default) or, ``False``, consecutive batches in row order every epoch (last partial batch
      dropped either way);
    * ``tol``/``patience``/``window``: stop early when the relative ELBO change is below ``tol`` (see
      :class:`ConvergenceMonitor`; ``window`` defaults to 1 for pure-CAVI guides and 50 otherwise);
    * ``seed``: seeds Pyro/torch/numpy/random and the minibatch order; the same seed gives the same run;
    * ``device``: ``"cpu"``/``"cuda"``; default ``ZOO_DEVICE`` or CPU.  Model, guide and data are moved;
    * ``progress``: show a progress bar; ``metadata``: plain data recorded in ``FitResult.config``;
    * ``accelerate``: ``"squarem"`` makes each step of a gradient-free closed-form guide (CAVI) one SQUAREM
      cycle of three sweeps with a monotone-ELBO safeguard (:mod:`zoo.infer.accelerate`); full batch only.
      ``result.loop_state["sweeps"]`` counts the sweeps of every closed-form fit.
    * ``noise_refit``: after the last step, set a log-normal factor of the Gaussian noise to its exact
      optimum given the rest of ``q`` (:mod:`zoo.infer.noise`; default ``True``; training resumes from the
      value it had, so a resumed fit equals an uninterrupted one; a data-parallel fit, ``nproc > 1``, keeps
      the last iterate's factor).

    Objects stay arguments: ``loss`` (a Pyro ELBO; default ``Trace_ELBO(num_particles)``), ``callbacks``
    (``cb(step, elbo, result)``; raising ``StopIteration`` stops the fit) and the registry ``spec``
    recorded for checkpoints (default: the spec :func:`zoo.experiments.registry.build` put on the model).

    Everything is checked before the first step (:func:`~zoo.infer.fit_checks.check_model_data`: a wrong
    feature count or targets outside the likelihood's support are a ``ValueError`` naming ``x``/``y``; a
    guide in another dtype than the model is a ``TypeError``, a guide built for another model a
    ``ValueError`` naming ``guide`` and the sites, from one trace of a copy of it:
    :mod:`zoo.infer.guide_match`), and ``ZOO_NUM_THREADS`` is applied when set (:mod:`zoo.infer.threads`).
    """
    optim = split_optimizer(optimizer, settings)
    cfg = distributed.resolve_nproc(resolve_fit_config(config, settings))
    check_fit_objects(guide, loss)
    if cfg.accelerate is not None and (
        not isinstance(guide, ClosedFormGuide) or getattr(guide, "uses_gradients", True)
    ):
        raise ValueError(
            f"accelerate: {cfg.accelerate!r} accelerates the sweeps of a closed-form guide without gradient "
            f"steps (CAVI); {type(guide).__name__} is not one"
        )
    check_model_data(model, x, y)
    check_guide_dtype(model, guide)
    x, y = conform_tensors(model, x, y)  # no rows, any float dtype, scale warning (zoo.data.tensors)
    spec = fit_spec(model, guide, spec)
    _reseed_fresh_build(model, guide, cfg.seed)
    apply_num_threads()
    dev = resolve_device(cfg.device)
    model.to(dev)
    if isinstance(guide, torch.nn.Module):
        guide.to(dev)
    x = x.to(dev)
    y = None if y is None else y.to(dev)
    check_guide_fits_model(model, guide, x, y, cfg.batch_size)  # one trace, of a copy (zoo.infer.guide_match)
    if optim is None:
        optim = make_optimizer(cfg.optimizer, cfg.lr)
    if cfg.nproc > 1 and distributed.active() is None:  # data parallel: zoo.infer.launch spawns the ranks
        from zoo.infer.launch import launch_fit

        return launch_fit(
            model, guide, x, y, cfg, optimizer=optim, loss=loss, callbacks=callbacks, spec=spec, fit_fn=fit
        )
    pyro.set_rng_seed(cfg.seed)
    result = _new_result(model, guide, (x, y), cfg, optim, loss, spec, dev)
    return run_steps(result, x, y, cfg.steps, progress=cfg.progress, callbacks=callbacks)


def _reseed_fresh_build(model: torch.nn.Module, guide: object, seed: int) -> None:
    """A pair straight from ``zoo.build`` without ``seed=`` gets its initial values drawn under ``seed``
    (:mod:`zoo.core.build_seed`), so ``build`` then ``fit(seed=s)`` is the same fit everywhere."""
    from zoo.core.build_seed import reseed_fresh_build
    from zoo.experiments.registry import build_from_spec

    reseed_fresh_build(model, guide, seed, build_from_spec)


def _new_result(model, guide, data, cfg: FitConfig, optim, loss, spec, dev: torch.device) -> FitResult:
    """A fresh :class:`FitResult` with the effective config (window, optimizer name) and loop state."""
    x, y = data
    pure_cavi = not getattr(guide, "uses_gradients", True)
    cfg = cfg.replace(
        window=cfg.window if cfg.window is not None else (1 if pure_cavi else 50),
        optimizer=optimizer_name(optim) or cfg.optimizer,
    )
    result = FitResult(
        model=model,
        guide=guide,
        seed=cfg.seed,
        config=cfg.record(),
        device=dev,
        optim=optim,
        loss=loss if loss is not None else Trace_ELBO(num_particles=cfg.num_particles),
        loop_state={
            "gen": torch.Generator().manual_seed(cfg.seed),
            "perm": None,
            "pos": 0,
            "epoch": 0,
            "shuffle": cfg.shuffle,
            "data": data_shapes(x, y),
        },
        spec=spec,
        example=(x[:2].detach().cpu(), None if y is None else y[:2].detach().cpu()),
    )
    if cfg.tol is not None:
        result.loop_state["monitor"] = ConvergenceMonitor(cfg.tol, cfg.patience, cfg.window)
    return result


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
    check_model_data(result.model, x, y)
    x, y = conform_tensors(result.model, x, y)
    check_same_data(result, x, y)
    apply_num_threads()
    x = x.to(result.device)
    y = None if y is None else y.to(result.device)
    result.converged = False
    if int(result.config.get("nproc", 1)) > 1 and distributed.active() is None:
        from zoo.infer.launch import launch_resume

        return launch_resume(result, x, y, steps, progress=progress, callbacks=callbacks, resume_fn=resume)
    return run_steps(result, x, y, steps, progress=progress, callbacks=callbacks)


def _step(svi: SVI, result: FitResult, x: Tensor, y: Tensor | None, idx: Tensor | None) -> float:
    """One iteration (gradient step, then closed-form step); returns the ELBO it reports."""
    guide = result.guide
    loss_value = svi.step(x, y, subsample=idx) if getattr(guide, "uses_gradients", True) else None
    elbo = None
    if isinstance(guide, ClosedFormGuide):
        state = result.loop_state
        with torch.no_grad():
            if result.config.get("accelerate") == "squarem" and idx is None and loss_value is None:
                elbo, cycle = squarem_cycle(
                    lambda: guide.closed_form_update(result.model, x, y, subsample=None),
                    lambda: guide.closed_form_elbo(result.model, x, y, subsample=None),
                    (guide, result.model),
                    elbo0=state.get("squarem_elbo"),  # the ELBO the last cycle left (kept on resume)
                )
                state["squarem_elbo"] = elbo
                state["sweeps"] = state.get("sweeps", 0) + cycle["sweeps"]
                state["squarem_accepted"] = state.get("squarem_accepted", 0) + int(cycle["accepted"])
            else:
                guide.closed_form_update(result.model, x, y, subsample=idx)
                elbo = guide.closed_form_elbo(result.model, x, y, subsample=idx)
                state["sweeps"] = state.get("sweeps", 0) + 1
    if elbo is None:
        if loss_value is None:
            with torch.no_grad():
                loss_value = svi.evaluate_loss(x, y, subsample=idx)
        elbo = -float(loss_value)
    return float(elbo)


def _checked_step(svi: SVI, result: FitResult, x: Tensor, y: Tensor | None, idx: Tensor | None) -> float:
    """:func:`_step`, then the divergence checks of :mod:`zoo.infer.divergence` (non-finite ELBO, parameter,
    buffer or distribution parameter; collapsed ELBO): a :class:`DivergenceError` naming the step (at step
    1 with the guide's largest initial value, :func:`~zoo.infer.divergence.initial_values`)."""
    step, store = result.steps + 1, pyro.get_param_store()
    model, guide = result.model, result.guide
    watch = initial_values(svi, guide) if step == 1 else contextlib.nullcontext({})
    with watch as found:
        try:
            elbo = _step(svi, result, x, y, idx)
        except (ValueError, RuntimeError) as e:
            error = step_error(e, step, store.named_parameters(), model, guide, _initial(found))
            if error is None:
                raise
            raise error from e
    initial = _initial(found)
    bad = first_nonfinite(store.named_parameters(), model, guide)
    if bad is not None:
        raise DivergenceError(step, bad, guide, initial=initial)
    if not math.isfinite(elbo):
        raise DivergenceError(step, f"the ELBO is {elbo}", guide, initial=initial)
    collapsed = check_collapse(result.loop_state.setdefault("divergence", {}), elbo, x.shape[0])
    if collapsed is not None:
        raise DivergenceError(step, collapsed, guide, initial=initial)
    return elbo


def _initial(found: dict) -> tuple[str, float] | None:
    return (found["name"], found["value"]) if found else None


def _record(result: FitResult, elbo: float, callbacks: Sequence[Callback]) -> bool:
    """Book-keep one step; True when the fit should stop (a callback or the stopping rule)."""
    result.elbo.append(elbo)
    result.steps += 1
    try:
        for cb in callbacks:
            cb(result.steps, elbo, result)
    except StopIteration:
        return True
    monitor: ConvergenceMonitor | None = result.loop_state.get("monitor")
    if monitor is not None and monitor.update(elbo):
        result.converged = True
        return True
    return False


def run_steps(
    result: FitResult,
    x: Tensor,
    y: Tensor | None,
    steps: int,
    *,
    progress: bool = True,
    callbacks: Sequence[Callback] = (),
) -> FitResult:
    """Run up to ``steps`` iterations of ``result``'s fit (see the module docstring)."""
    if distributed.active() is not None:  # one rank of a data-parallel fit (zoo.infer.distributed)
        from zoo.infer.launch import run_steps_distributed

        return run_steps_distributed(
            result, x, y, steps, progress=progress, callbacks=callbacks,
            next_batch=_next_batch, record=_record,
        )  # fmt: skip
    n = x.shape[0]
    batch_size = result.config.get("batch_size")
    t0 = time.perf_counter()
    with result.activate():
        svi = SVI(result.model, result.guide, result.optim, result.loss)
        if isinstance(result.guide, ClosedFormGuide):
            result.guide.closed_form_begin()
        if "noise_train" in result.loop_state:  # training goes on from its own noise factor (zoo.infer.noise)
            restore_training_noise(result.guide, result.model, result.loop_state.pop("noise_train"))
        bar = tqdm(total=steps, disable=not progress, desc="fit", leave=False)
        try:
            for _ in range(steps):
                idx = _next_batch(result.loop_state, n, batch_size, result.device)
                elbo = _checked_step(svi, result, x, y, idx)
                bar.update(1)
                if result.steps % 50 == 49:
                    bar.set_postfix(elbo=f"{elbo:.4g}")
                if _record(result, elbo, callbacks):
                    break
            if isinstance(result.guide, ClosedFormGuide):
                with torch.no_grad():
                    result.guide.closed_form_finalize(result.model, x, y)
            if result.config.get("noise_refit", True):
                saved = refit_noise(result.guide, result.model, x, y)
                if saved is not None:
                    result.loop_state["noise_train"] = saved
        finally:
            bar.close()
            result.wall_time += time.perf_counter() - t0
    return result
