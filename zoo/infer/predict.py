"""Posterior predictive summaries, chunked over posterior draws and over data rows.

Draws are taken from the guide once per *sample chunk* (vectorized under a particle plate at dim -2,
the model's ``max_plate_nesting`` being 1) and the model is *replayed* on each data chunk with those
same draws, so draw ``s`` uses the same weights for every data point (needed for joint samples and the
pointwise log-likelihood matrix) while memory stays ``O(sample_chunk x data_chunk)``.  A 10k x 784 test
set with 100 draws therefore never materializes more than one chunk of activations.

**One seeding scheme.**  :func:`posterior_samples`, :func:`log_likelihood`, :func:`predictive_samples`
and the generic path of :func:`predict` draw the guide in chunks of ``sample_chunk`` draws (default
:data:`SAMPLE_CHUNK`), chunk ``j`` from its own seed :func:`draw_chunk_seeds` takes from torch's generator
right after ``seed`` is set: with the same ``seed``, ``num_samples`` and ``sample_chunk``, draw ``s`` is the
same parameter draw in all of them, however the rows are chunked.

A guide with its own predictive (e.g. test-time local updates) can define
``predictive(model, x, num_samples=..., ...)`` returning :class:`Predictions`; :func:`predict` defers
to it (:func:`predictive_samples` does not).  A model whose observations depend on per-row local latents
can define ``marginal_log_likelihood(guide_trace, num_particles, x, y, seed)`` returning ``log p(y_n |
theta_s)`` ``(c, n)`` on its own target scale with the locals integrated out; :func:`log_likelihood`
defers to it (e.g. :class:`zoo.families.bowtie.model.BowtieModel`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from zoo.core.validation import check_positive_int, check_same_device, check_seed, check_tensor

__all__ = [
    "SAMPLE_CHUNK",
    "Predictions",
    "draw_chunk_seeds",
    "predict",
    "iter_draws",
    "log_likelihood",
    "posterior_samples",
    "predictive_samples",
]

#: draws per vectorized guide call; part of the seeding scheme (module docstring)
SAMPLE_CHUNK = 50


@dataclass
class Predictions:
    """Posterior predictive summary.

    Regression: ``mean`` and ``var`` of ``y`` (shape ``(N,)`` or ``(N, k)``; noise included), per-draw
    ``loc``/``scale`` ``(S, N)`` when ``keep_draws``, and joint ``samples`` ``(S, N)`` of ``y``.  Each draw's
    predictive is ``N(loc, scale^2)``, or the Student-t with ``df`` degrees of freedom, location ``loc`` and
    scale ``scale`` when ``df`` is set (:class:`~zoo.core.student_t.StudentTLikelihood`).
    Classification: ``probs`` ``(N, K)`` (model-averaged), per-draw ``draw_probs`` ``(S, N, K)``.
    All on the original target scale when the fit recorded a target standardization.
    """

    task: str
    mean: Tensor | None = None
    var: Tensor | None = None
    probs: Tensor | None = None
    loc: Tensor | None = None
    scale: Tensor | None = None
    draw_probs: Tensor | None = None
    samples: Tensor | None = None
    extras: dict = field(default_factory=dict)
    df: float | None = None

    @property
    def std(self) -> Tensor:
        return self.var.sqrt()


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _guide_trace(guide, c: int, x: Tensor, seed: int | None = None):
    """Vectorized guide draws; with ``seed`` they depend only on it, not on the global RNG's history."""
    ctx = (
        contextlib.nullcontext()
        if seed is None
        else torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else [])
    )
    with ctx:
        if seed is not None:
            torch.manual_seed(seed)
        with pyro.plate("_num_draws", c, dim=-2):
            return poutine.trace(guide).get_trace(x, None)


def draw_chunk_seeds(num_samples: int, sample_chunk: int = SAMPLE_CHUNK) -> list[int]:
    """One seed per chunk of ``sample_chunk`` draws, taken from torch's global generator (set by a
    function's ``seed`` just before): the seeding scheme every draw of this module shares (module
    docstring).  Fixed up front, so the draws do not depend on how the rows are chunked."""
    return torch.randint(0, 2**62, (len(range(0, num_samples, sample_chunk)),)).tolist()


def _draw_traces(
    result: Any, x: Tensor, num_samples: int, sample_chunk: int
) -> Iterator[tuple[slice, int, Any]]:
    """``(draw_slice, chunk_seed, guide_trace)`` per chunk of draws (:func:`draw_chunk_seeds`); the guide
    runs at ``x[:2]``.  Call under ``torch.no_grad()`` and ``result.activate()``."""
    probe = x[: min(len(x), 2)]
    for s, chunk_seed in zip(_chunks(num_samples, sample_chunk), draw_chunk_seeds(num_samples, sample_chunk)):
        yield s, chunk_seed, _guide_trace(result.guide, s.stop - s.start, probe, chunk_seed)


def iter_draws(
    result: Any, x: Tensor, num_samples: int, sample_chunk: int = SAMPLE_CHUNK, data_chunk: int = 4096
) -> Iterator[tuple[slice, slice, Tensor, dict, Any]]:
    """Yield ``(draw_slice, row_slice, f, latents, guide_trace)`` over chunks of draws and rows.

    ``f`` has shape ``(c, n, out)``; ``latents`` is the likelihood's dict (e.g. ``sigma2`` ``(c, 1)``).
    """
    model = result.model
    with torch.no_grad(), result.activate():
        for s, _, gtr in _draw_traces(result, x, num_samples, sample_chunk):
            c = s.stop - s.start
            for r in _chunks(x.shape[0], data_chunk):
                with pyro.plate("_num_draws", c, dim=-2):
                    mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x[r], None)
                f = mtr.nodes["f"]["value"]
                if f.dim() == 2:  # a guide/model without particle broadcasting: add the draw dim
                    f = f.expand(c, *f.shape)
                latents = model.likelihood.latents_from_trace(mtr)
                yield s, r, f, latents, gtr


@contextlib.contextmanager
def _seeded(seed: int | None):
    if seed is not None:
        check_seed("seed", seed)
    if seed is None:
        yield
        return
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        pyro.set_rng_seed(seed)
        yield


def _check_x(result, x: Tensor) -> Tensor:
    """``x`` checked against the fit (2-D, finite, its feature count and device), cast to the model's
    floating dtype (float16/bfloat16/float64 inputs all work)."""
    if isinstance(x, Tensor):
        check_same_device(result.device, x=x)
    check_tensor("x", x, ndim=2, dtype_kind="float")
    arch = result.model.architecture
    if x.shape[1] != arch.in_features:
        raise ValueError(f"x has {x.shape[1]} features but the model expects {arch.in_features}")
    if x.shape[0] == 0:
        raise ValueError("x has no rows: nothing to predict")
    from zoo.data.tensors import model_dtype

    dtype = model_dtype(result.model)
    return x if x.dtype == dtype else x.to(dtype)


def _ready(result) -> None:
    """Set up a guide that a zero-step fit never ran: an autoguide builds its parameters from a trace of
    the model on the training example (as the first step would), so ``fit(steps=0)`` then :func:`predict`
    predicts from the initial guide.  A closed-form-only guide has no posterior before its first update:
    that is a ``ValueError`` naming ``result``."""
    from zoo.core.guide import ClosedFormGuide

    guide = result.guide
    if getattr(result, "steps", 1) != 0:
        return
    if not getattr(guide, "uses_gradients", True):  # a CAVI guide, or posterior draws (nothing to set up)
        if not isinstance(guide, ClosedFormGuide):
            return
        raise ValueError(
            "result: the fit ran 0 steps and its closed-form guide has no posterior before its first "
            "update; fit (or resume) at least one step before predicting"
        )
    example = getattr(result, "example", None)
    if example is None:
        return
    x, y = (None if t is None else t.to(result.device) for t in example)
    with torch.no_grad(), result.activate():
        poutine.trace(guide).get_trace(x, y)  # under a handler, as inference runs it


def _target_scale(result) -> tuple[float, float]:
    return float(result.config.get("y_mean", 0.0)), float(result.config.get("y_std", 1.0))


def _rescaled(p: Predictions, mu: float, sd: float) -> Predictions:
    """Map a regression :class:`Predictions` from the standardized to the original target scale."""
    if p.task != "regression" or (mu == 0.0 and sd == 1.0):
        return p
    shift = {k: getattr(p, k) * sd + mu for k in ("mean", "loc", "samples") if getattr(p, k) is not None}
    scale = {k: getattr(p, k) * sd for k in ("scale",) if getattr(p, k) is not None}
    var = {"var": p.var * sd**2} if p.var is not None else {}
    return dataclasses.replace(p, **shift, **scale, **var)


def predict(
    result: Any,
    x: Tensor,
    *,
    num_samples: int = 100,
    sample_chunk: int = SAMPLE_CHUNK,
    data_chunk: int = 4096,
    keep_draws: bool = True,
    return_samples: bool = False,
    seed: int | None = None,
    **predictive_kwargs,
) -> Predictions:
    """Posterior predictive of a fit at inputs ``x`` (on the fit's device).

    Regression: mean, variance (law of total variance over draws: ``E[sigma^2] + Var[f]``), per-draw
    locations/scales and optional joint samples.  Classification: model-averaged class probabilities.
    ``predictive_kwargs`` (e.g. ``mode="mpm"``) go to a guide's own ``predictive`` method; results of
    such a method are mapped to the original target scale here, like the generic path's.
    """
    x = _check_x(result, x)
    num_samples = check_positive_int("num_samples", num_samples)
    sample_chunk = check_positive_int("sample_chunk", sample_chunk)
    data_chunk = check_positive_int("data_chunk", data_chunk)
    if seed is not None:
        check_seed("seed", seed)
    _ready(result)
    guide = result.guide
    mu, sd = _target_scale(result)
    if hasattr(guide, "predictive"):
        with _seeded(seed), result.activate():
            out = guide.predictive(result.model, x, num_samples=num_samples, **predictive_kwargs)
        return _rescaled(out, mu, sd)
    if predictive_kwargs:
        raise TypeError(f"predict() got unexpected arguments {sorted(predictive_kwargs)} for this guide")
    draws = (num_samples, sample_chunk, data_chunk)
    with _seeded(seed):
        if result.model.likelihood.task == "regression":
            return _predict_regression(result, x, draws, keep_draws, return_samples, mu, sd)
        return _predict_classes(result, x, draws, keep_draws, return_samples)


def _predict_regression(
    result,
    x: Tensor,
    draws: tuple[int, int, int],
    keep_draws: bool,
    return_samples: bool,
    mu: float,
    sd: float,
) -> Predictions:
    """Moments over draws (law of total variance), per-draw locations/scales, joint samples.  The moments are
    accumulated on the standardized scale in float64 and mapped back at the end: ``E[sigma^2 + f^2] - E[f]^2``
    on the original scale cancels catastrophically where the target's mean is large against its spread
    (naval: mean 0.99, predictive sd 1e-3 — in float32 the variance came out 0)."""
    lik = result.model.likelihood
    num_samples, n = draws[0], x.shape[0]
    out_shape = (n,) if lik.out_features == 1 else (n, lik.out_features)
    s1 = torch.zeros(out_shape, dtype=torch.float64, device=x.device)
    s2 = torch.zeros_like(s1)
    locs = torch.empty((num_samples, *out_shape), dtype=x.dtype, device=x.device) if keep_draws else None
    scales = torch.empty_like(locs) if keep_draws else None
    samples = (
        torch.empty((num_samples, *out_shape), dtype=x.dtype, device=x.device) if return_samples else None
    )
    df = lik.predictive_df
    # a draw's scale: its standard deviation (Gaussian) or the Student-t's scale, sd sqrt((df - 2) / df)
    to_scale = 1.0 if df is None else math.sqrt((df - 2.0) / df)
    for s, r, f, latents, _ in iter_draws(result, x, *draws):
        loc, var = lik.predictive_moments(f, latents)
        s1[r] += loc.double().sum(0)
        s2[r] += (var.double() + loc.double() ** 2).sum(0)
        loc = loc * sd + mu
        scale = var.sqrt() * (sd * to_scale)
        if keep_draws:
            locs[s, r] = loc
            scales[s, r] = scale
        if return_samples:
            noise = torch.randn_like(loc) if df is None else _student_t_noise(df, loc)
            samples[s, r] = loc + scale * noise
    mean = s1 / num_samples
    var = (s2 / num_samples - mean**2).clamp_min(0)
    mean, var = (mean * sd + mu).to(x.dtype), (var * sd**2).to(x.dtype)
    return Predictions(lik.task, mean=mean, var=var, loc=locs, scale=scales, samples=samples, df=df)


def _student_t_noise(df: float, like: Tensor) -> Tensor:
    """Standard Student-t draws of ``like``'s shape, dtype and device (torch's global generator)."""
    nu = torch.tensor(df, dtype=like.dtype, device=like.device)
    return torch.distributions.StudentT(nu).sample(like.shape)


def _predict_classes(
    result, x: Tensor, draws: tuple[int, int, int], keep_draws: bool, return_samples: bool
) -> Predictions:
    """Model-averaged class probabilities, per-draw probabilities, sampled labels."""
    lik = result.model.likelihood
    num_samples, n = draws[0], x.shape[0]
    k = 2 if lik.task == "binary" else lik.out_features
    acc = torch.zeros((n, k), dtype=x.dtype, device=x.device)
    per_draw = torch.empty((num_samples, n, k), dtype=x.dtype, device=x.device) if keep_draws else None
    samples = torch.empty((num_samples, n), dtype=torch.long, device=x.device) if return_samples else None
    for s, r, f, _, _ in iter_draws(result, x, *draws):
        p = lik.probs(f)
        acc[r] += p.sum(0)
        if keep_draws:
            per_draw[s, r] = p
        if return_samples:
            samples[s, r] = torch.distributions.Categorical(probs=p).sample()
    return Predictions(lik.task, probs=acc / num_samples, draw_probs=per_draw, samples=samples)


def log_likelihood(
    result: Any,
    x: Tensor,
    y: Tensor,
    *,
    num_samples: int = 100,
    sample_chunk: int = SAMPLE_CHUNK,
    data_chunk: int = 4096,
    seed: int | None = None,
) -> Tensor:
    """Pointwise ``log p(y_n | θ_s)`` of shape ``(S, N)`` (original target scale for regression).

    ``θ_s`` is draw ``s`` of :func:`posterior_samples` with the same ``seed``, ``num_samples`` and
    ``sample_chunk``.  A model with per-row local latents that defines ``marginal_log_likelihood`` (module
    docstring) has them integrated out, so the value of a row does not depend on the other rows."""
    x = _check_x(result, x)
    check_tensor("y", y, ndim=(1, 2))
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"y has {y.shape[0]} rows but x has {x.shape[0]}")
    check_same_device(result.device, y=y)
    num_samples = check_positive_int("num_samples", num_samples)
    sample_chunk = check_positive_int("sample_chunk", sample_chunk)
    data_chunk = check_positive_int("data_chunk", data_chunk)
    if y.is_floating_point() and y.dtype != x.dtype:
        y = y.to(x.dtype)
    _ready(result)
    lik = result.model.likelihood
    mu, sd = _target_scale(result)
    regression = lik.task == "regression"
    y_model = (y - mu) / sd if regression else y
    jacobian = lik.out_features * math.log(sd) if regression else 0.0
    out = torch.empty((num_samples, x.shape[0]), dtype=x.dtype, device=x.device)
    marginal = getattr(result.model, "marginal_log_likelihood", None)
    with _seeded(seed):
        if marginal is not None:
            with torch.no_grad(), result.activate():
                for s, chunk_seed, gtr in _draw_traces(result, x, num_samples, sample_chunk):
                    for r in _chunks(x.shape[0], data_chunk):
                        ll = marginal(gtr, s.stop - s.start, x[r], y_model[r], chunk_seed)
                        out[s, r] = ll.to(out.dtype) - jacobian
            return out
        for s, r, f, latents, _ in iter_draws(result, x, num_samples, sample_chunk, data_chunk):
            out[s, r] = lik.log_likelihood(f, y_model[r], latents) - jacobian
    return out


def predictive_samples(
    result: Any,
    x: Tensor,
    *,
    num_samples: int = 100,
    sample_chunk: int = SAMPLE_CHUNK,
    data_chunk: int = 4096,
    seed: int | None = None,
) -> Tensor:
    """Joint draws of ``y`` at ``x``, ``(S, N)`` (``(S, N, k)`` for ``k`` regression outputs; class labels
    for classification; the original target scale): draw ``s`` comes from the model under the parameter
    draw ``s`` of :func:`posterior_samples` and :func:`log_likelihood` with the same ``seed``,
    ``num_samples`` and ``sample_chunk``.  A guide's own ``predictive`` is not used (it may make its own
    draws); per-row local latents, if the model has any, are drawn from the model given the draw."""
    x = _check_x(result, x)
    num_samples = check_positive_int("num_samples", num_samples)
    draws = (num_samples, check_positive_int("sample_chunk", sample_chunk))
    draws += (check_positive_int("data_chunk", data_chunk),)
    if seed is not None:
        check_seed("seed", seed)
    _ready(result)
    with _seeded(seed):
        if result.model.likelihood.task == "regression":
            pred = _predict_regression(result, x, draws, False, True, *_target_scale(result))
        else:
            pred = _predict_classes(result, x, draws, False, True)
    return pred.samples


def _latent_sites(gtr, c: int) -> Iterator[tuple[str, Tensor]]:
    """``(site, (c, *site_shape))`` for every latent site of a guide trace of ``c`` vectorized draws."""
    for name, site in gtr.nodes.items():
        if (
            site["type"] != "sample"
            or site["is_observed"]
            or name.startswith("_")
            or site["infer"].get("is_auxiliary")
            or site_is_subsample(site)  # a plate's subsample indices
        ):
            continue
        v = site["value"]
        event_dim = site["fn"].event_dim
        yield (
            name,
            (v.reshape(c, *v.shape[v.dim() - event_dim :]) if v.dim() > event_dim else v.expand(c, *v.shape)),
        )


def posterior_samples(
    result: Any,
    num_samples: int = 100,
    *,
    sample_chunk: int = SAMPLE_CHUNK,
    seed: int | None = None,
    x: Tensor | None = None,
) -> dict[str, Tensor]:
    """Draws of every latent site of the guide: ``{site: (S, *site_shape)}`` (particle dims squeezed).

    Draw ``s`` is the parameter draw behind draw ``s`` of :func:`log_likelihood`, :func:`predictive_samples`
    and the generic path of :func:`predict` with the same ``seed``, ``num_samples`` and ``sample_chunk``
    (module docstring).  ``x``: inputs to run the guide at (its first two rows; default zeros)."""
    num_samples = check_positive_int("num_samples", num_samples)
    sample_chunk = check_positive_int("sample_chunk", sample_chunk)
    if seed is not None:
        check_seed("seed", seed)
    _ready(result)
    xs = x if x is not None else torch.zeros(2, result.model.architecture.in_features, device=result.device)
    out: dict[str, list[Tensor]] = {}
    with _seeded(seed), torch.no_grad(), result.activate():
        for s, _, gtr in _draw_traces(result, xs, num_samples, sample_chunk):
            for name, v in _latent_sites(gtr, s.stop - s.start):
                out.setdefault(name, []).append(v)
    return {k: torch.cat(v, 0) for k, v in out.items()}
