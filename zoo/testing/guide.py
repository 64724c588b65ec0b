"""The guide contracts (:func:`check_guide`): support, coverage, finite ELBOs, closed forms, fit -> predict
purity, checkpoint round trip, ArviZ export, dtype, and Pyro's global parameter store.

Before the fit, the unfitted guide is traced once on copies (:func:`zoo.infer.guide_match.trace_copies`, as
:func:`zoo.infer.loop.fit` does) and every site it samples must lie in the model site's support
(``[support]``, :mod:`zoo.testing.support`); :func:`~zoo.infer.loop.fit` itself refuses a guide whose sites
are not the model's (reported as ``[coverage]``).  After the fit both are checked again on the fitted guide,
``[coverage]`` strictly (every local site sampled too).

The checks run the zoo's own machinery on a small synthetic data set: a short :func:`zoo.infer.loop.fit`
(:class:`~zoo.infer.config.FitConfig`), :func:`zoo.infer.predict.predict` twice with one seed,
:func:`zoo.infer.checkpoint.save` / :func:`~zoo.infer.checkpoint.load`, and
:func:`zoo.eval.diagnostics.to_inference_data`.  Every evaluation of the guide happens inside the fit's
parameter-store scope (:meth:`FitResult.activate <zoo.infer.result.FitResult.activate>`), as in the zoo.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from torch import Tensor

from zoo.core.model import BayesianModel
from zoo.eval.diagnostics import to_inference_data
from zoo.infer.checkpoint import load, save
from zoo.infer.config import FitConfig
from zoo.infer.guide_match import GuideMismatchError, coverage_problems, trace_copies
from zoo.infer.loop import fit
from zoo.infer.result import FitResult
from zoo.testing._util import (
    contract,
    fail,
    guarded_store,
    isolated,
    latent_sites,
    make_data,
    reference_tensor,
)
from zoo.testing.config import KitConfig, kit_config
from zoo.testing.elbo import check_closed_form
from zoo.testing.support import check_support

__all__ = ["check_guide", "Subject", "guide_contracts"]

_SUMMARIES = ("mean", "var", "probs")
_PREDICTIONS = (*_SUMMARIES, "loc", "scale", "draw_probs", "samples")


@dataclass(frozen=True)
class Subject:
    """What the guide contracts run on: ``make_model()`` builds a fresh model, ``make_guide(model)`` a guide
    on it; ``spec`` is the registry spec (``None``: a custom model, reloaded with ``model=``/``guide=``);
    ``loss(model, guide)`` gives the training objective (``None`` or a ``None`` result: the guide's
    ``default_loss()``, else ``Trace_ELBO``); ``label`` names the subject in messages."""

    make_model: Callable[[], BayesianModel]
    make_guide: Callable[[BayesianModel], Any]
    spec: dict | None = None
    loss: Callable | None = None
    label: str = "guide"


def check_guide(
    guide_factory: Callable[[BayesianModel], Any],
    model: BayesianModel,
    *,
    loss: Callable | None = None,
    config: KitConfig | Mapping | None = None,
    **settings: Any,
) -> None:
    """Check every guide contract of ``guide_factory(model)`` (a class or function that builds a Pyro guide
    on a zoo :class:`~zoo.core.model.BayesianModel`; a guide already built, an ``nn.Module``, is a
    ``TypeError``: pass its class).

    :param loss: optional ``loss(model, guide) -> pyro.infer.ELBO | None``, the objective the guide trains
        with (default: the guide's ``default_loss()`` if it has one, else ``Trace_ELBO``).
    :param config: a :class:`~zoo.testing.config.KitConfig` (or mapping) of sizes and tolerances, updated by
        keyword ``settings`` (``steps=10``, ``device="cuda"``, ...).

    Returns ``None`` when every contract holds; raises ``AssertionError("[contract-id] ...")`` naming the
    first broken one.  ``model`` is not changed (the checks fit copies of it).
    """
    _check_factory(guide_factory)
    if not isinstance(model, BayesianModel):
        raise TypeError(f"model must be a zoo BayesianModel, got {type(model).__name__}")
    if loss is not None and not callable(loss):
        raise TypeError(f"loss must be a callable (model, guide) -> ELBO, got {type(loss).__name__}")
    cfg = kit_config(config, settings)
    pristine = copy.deepcopy(model)
    func = getattr(guide_factory, "func", guide_factory)  # a functools.partial names its function
    label = getattr(func, "__name__", type(guide_factory).__name__)
    guide_contracts(Subject(lambda: copy.deepcopy(pristine), guide_factory, None, loss, label), cfg)


def _check_factory(guide_factory: object) -> None:
    """A ``TypeError`` naming ``guide_factory`` unless it is a callable that is not itself a guide."""
    if isinstance(guide_factory, torch.nn.Module):  # a PyroModule guide, an autoguide: already built
        name = type(guide_factory).__name__
        raise TypeError(
            f"guide_factory must build a guide from a model (model -> guide); got a guide instance ({name}): "
            f"pass the class or a function, e.g. check_guide({name}, model), or "
            f"functools.partial({name}, option=...) for options"
        )
    if not callable(guide_factory):
        raise TypeError(
            f"guide_factory must be callable (model -> guide), got {type(guide_factory).__name__}"
        )


def guide_contracts(subject: Subject, cfg: KitConfig) -> None:
    """Every guide contract of ``subject`` (see :func:`check_guide`)."""
    dev = cfg.torch_device
    with guarded_store(f"building and fitting {subject.label}"), isolated(cfg.seed, dev):
        with contract("guide-build", f"building the model and {subject.label}(model)"):
            model = subject.make_model().to(dev)
            guide = subject.make_guide(model)
        if not callable(guide):
            fail(
                "guide-build",
                f"{subject.label}(model) returned a {type(guide).__name__}, not a callable guide",
            )
        x, y = _data(model, cfg)
        loss = _loss(subject, model, guide)
        g_tr, m_tr = trace_copies(model, guide, x, y)  # the unfitted guide, on copies (zoo.infer.guide_match)
        if m_tr is not None:
            check_support(g_tr, m_tr)
        res = _fit(model, guide, x, y, loss, subject.spec, cfg, cfg.steps)
        with res.activate(), torch.no_grad():
            _check_coverage(model, guide, x, y)
            _check_finite(model, guide, x, y, loss, cfg)
            check_closed_form(model, guide, x, y, cfg)
        first = _check_predict(res, x, cfg)
        _check_checkpoint(res, first, x, subject, cfg)
        _check_arviz(res, x, y, cfg)
        _check_dtype(subject, cfg)


def _data(model: BayesianModel, cfg: KitConfig, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    ref = torch.zeros((), dtype=dtype or reference_tensor(model).dtype, device=cfg.torch_device)
    k = getattr(model.likelihood, "out_features", 1)
    return make_data(model.architecture.in_features, model.task, k, cfg.n_data, cfg.seed, ref)


def _loss(subject: Subject, model, guide):
    loss = subject.loss(model, guide) if subject.loss is not None else None
    if loss is None and callable(getattr(guide, "default_loss", None)):
        loss = guide.default_loss()
    return loss


def _fit(model, guide, x, y, loss, spec, cfg: KitConfig, steps: int) -> FitResult:
    settings = FitConfig(steps=steps, lr=cfg.lr, seed=cfg.seed, progress=False, device=str(cfg.torch_device))
    try:
        res = fit(model, guide, x, y, settings, loss=loss, spec=spec)
    except GuideMismatchError as e:  # fit's own check before its first step (zoo.infer.guide_match)
        fail("coverage", str(e))
    except FloatingPointError as e:
        fail("elbo-finite", f"the fit stopped on a non-finite ELBO: {e}")
    except Exception as e:
        fail("fit", f"zoo.infer.loop.fit raised {type(e).__name__}: {e}")
    if len(res.elbo) != steps:
        fail("fit", f"a fit of {steps} steps recorded {len(res.elbo)} ELBO values")
    return res


def _check_coverage(model, guide, x: Tensor, y: Tensor) -> None:
    """``[coverage]`` (strict: after the fit every local site is sampled too) and ``[support]`` of the fitted
    guide."""
    with contract("coverage", "tracing the guide and replaying the model on its draws"):
        g_tr = poutine.trace(guide).get_trace(x, y)
        m_tr = poutine.trace(poutine.replay(model, trace=g_tr)).get_trace(x, y)
    problems = coverage_problems(g_tr, m_tr)
    if problems:
        fail("coverage", problems[0])
    check_support(g_tr, m_tr)


def _check_finite(model, guide, x: Tensor, y: Tensor, loss, cfg: KitConfig) -> None:
    k = cfg.particles
    objectives = {
        # a plain single-particle Trace_ELBO with validation on catches local latents sampled outside the
        # model's data plate (wrong log_prob shapes), which the vectorized form can hide
        "Trace_ELBO() (one particle, validation on)": Trace_ELBO(),
        f"Trace_ELBO({k} vectorized particles)": Trace_ELBO(k, vectorize_particles=True, max_plate_nesting=1),
    }
    if loss is not None:
        objectives[f"the guide's own loss {type(loss).__name__}"] = loss
    for what, objective in objectives.items():
        with contract("elbo-finite", what), pyro.validation_enabled(True):
            value = float(objective.loss(model, guide, x, y))
        if not math.isfinite(value):
            fail("elbo-finite", f"{what} of the fitted guide is {value}")


def _predictions(res: FitResult, x: Tensor, cfg: KitConfig) -> dict[str, Tensor]:
    p = res.predict(x, num_samples=cfg.draws, seed=cfg.seed)
    return {k: v for k in _PREDICTIONS if torch.is_tensor(v := getattr(p, k, None))}


def _state(res: FitResult) -> dict[str, Tensor]:
    out = {f"param {k}": v.detach().clone() for k, v in res.param_state["params"].items()}
    for owner, module in (("model", res.model), ("guide", res.guide)):
        if isinstance(module, torch.nn.Module):
            out.update({f"{owner} {k}": v.detach().clone() for k, v in module.state_dict().items()})
    return out


def _check_predict(res: FitResult, x: Tensor, cfg: KitConfig) -> dict[str, Tensor]:
    before = _state(res)
    with contract("predict-pure", "predict on the fit"):
        first, second = _predictions(res, x, cfg), _predictions(res, x, cfg)
    after = _state(res)
    changed = sorted(k for k in set(before) | set(after) if k not in before or k not in after
                     or not torch.equal(before[k], after[k]))  # fmt: skip
    if changed:
        fail("predict-pure", f"predict changed the fit's state: {changed[:5]}")
    if not any(k in first for k in _SUMMARIES):
        fail("predict-pure", "predict returned no mean or class probabilities")
    for k, v in first.items():
        if not torch.equal(v, second[k]):
            fail("predict-pure", f"predict with seed={cfg.seed} twice gives different {k!r}")
        if k in _SUMMARIES and not bool(torch.isfinite(v).all()):
            fail("predict-pure", f"predictions {k!r} are not finite")
    return first


def _check_checkpoint(res: FitResult, first: dict[str, Tensor], x: Tensor, subject: Subject, cfg) -> None:
    with contract("checkpoint", "save / load / predict"), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kit.pt"
        save(res, path)
        if subject.spec is not None:
            back = load(path)
        else:
            model = subject.make_model()
            back = load(path, model=model, guide=subject.make_guide(model))
        again = _predictions(back, x, cfg)
    for k in _SUMMARIES:
        if k in first and not torch.allclose(again.get(k, torch.full_like(first[k], math.nan)), first[k],
                                             rtol=1e-5, atol=1e-6):  # fmt: skip
            fail("checkpoint", f"after save / load, predict gives other {k!r} (same seed)")


def _check_arviz(res: FitResult, x: Tensor, y: Tensor, cfg: KitConfig) -> None:
    with contract("arviz", "zoo.eval.diagnostics.to_inference_data"):
        idata = to_inference_data(
            res, train=(x, y), num_samples=cfg.draws, seed=cfg.seed, include_weights=True
        )
    groups = ("posterior", "posterior_predictive", "observed_data", "log_likelihood")
    missing = [g for g in groups if g not in idata.groups()]
    if missing:
        fail("arviz", f"the export has no group(s) {missing}")
    s, n = cfg.draws, x.shape[0]
    specs = {sp.name: sp for sp in res.model.specs}
    for name, var in idata.posterior.data_vars.items():
        if var.dims[:2] != ("chain", "draw") or var.shape[:2] != (1, s):
            fail(
                "arviz",
                f"posterior {name!r} has dims {var.dims} / shape {var.shape}, not (chain=1, draw={s})",
            )
        if name in specs and (var.shape[2:] != specs[name].shape or any("_dim_" in d for d in var.dims)):
            fail("arviz", f"posterior {name!r} has dims {var.dims} / shape {var.shape}: expected named "
                 f"(layer_out, layer_in) dims of shape {specs[name].shape}")  # fmt: skip
    for name, ll in idata.log_likelihood.data_vars.items():
        if ll.dims != ("chain", "draw", "obs_id") or ll.shape != (1, s, n):
            fail("arviz", f"log_likelihood {name!r} has dims {ll.dims} / shape {ll.shape}, expected "
                 f"(chain, draw, obs_id) = (1, {s}, {n})")  # fmt: skip
        if not math.isfinite(float(ll.sum())):
            fail("arviz", f"the exported pointwise log-likelihood {name!r} is not finite")


def _check_dtype(subject: Subject, cfg: KitConfig) -> None:
    with contract("guide-dtype", f"building {subject.label} and moving model and guide to float64"):
        model = subject.make_model()
        guide = subject.make_guide(model)
        model.to(device=cfg.torch_device, dtype=torch.float64)
        if isinstance(guide, torch.nn.Module):
            guide.to(device=cfg.torch_device, dtype=torch.float64)
    x, y = _data(model, cfg, torch.float64)
    with contract("guide-dtype", f"a one-step fit of {subject.label} in float64"):
        res = fit(model, guide, x, y, FitConfig(steps=1, lr=cfg.lr, seed=cfg.seed, progress=False,
                                                device=str(cfg.torch_device)),
                  loss=_loss(subject, model, guide), spec=subject.spec)  # fmt: skip
        with res.activate(), torch.no_grad():
            trace = poutine.trace(guide).get_trace(x, y)
    bad = {n: site["value"].dtype for n, site in latent_sites(trace, guide=True).items()
           if site["value"].is_floating_point() and site["value"].dtype != torch.float64}  # fmt: skip
    if bad:
        fail("guide-dtype", f"{subject.label} moved to float64 with its model samples {bad}: keep every "
             "tensor of the guide in a parameter or buffer (so .to() moves it) and create lazily built "
             "ones in the model's dtype")  # fmt: skip
