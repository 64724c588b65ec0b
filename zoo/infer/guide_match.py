"""Does the guide belong to the model?  The checks :func:`zoo.infer.loop.fit` makes before its first step.

* :func:`check_guide_dtype`: the guide's gradient parameters have the model's floating dtype (the data is cast
  to the model's dtype, :mod:`zoo.data.tensors`; a guide in another dtype would fail inside the first step
  with a raw torch error).  The guide is not cast: a guide moved to another dtype than its model is a
  mistake to report, not to paper over (``guide.to(dtype)`` or ``model.to(dtype)`` fixes it).  Buffers may
  legitimately differ (the bowtie CAVI guide keeps its closed-form factors in float64 and samples in the
  data's dtype), so for them what counts is the dtype of the values the guide samples (next item).
  Devices need no check: ``fit`` moves model and guide to the fit's device.
* :func:`check_guide_fits_model`: one trace of the guide on the fit's first batch (a copy of the guide, in a
  throwaway parameter-store scope and random stream, so the fit itself is unchanged) and of the model
  replayed on its draws.  The guide must sample values of the model's dtype, must not sample a site the
  model does not have (auxiliary sites, ``infer={"is_auxiliary": True}``, aside) and must sample every
  *global* latent site of the model.  Local latent sites (inside the model's ``"data"`` plate) may be left
  to the model before the first step: ``q(θ) p(z | θ, x)`` is still a valid variational family, and a
  closed-form guide such as the bowtie CAVI guide emits its per-datum sites only after its first update.
  A guide whose trace raises is not judged here (the first step reports the error as before).

The same site comparison (:func:`coverage_problems`, strict after a fit) is the conformance kit's
``[coverage]`` contract (:mod:`zoo.testing.guide`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator

import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGuide
from pyro.poutine import Trace
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from zoo.data.tensors import model_dtype

__all__ = [
    "GuideMismatchError",
    "latent_sites",
    "coverage_problems",
    "trace_copies",
    "check_guide_dtype",
    "check_guide_fits_model",
]

logger = logging.getLogger(__name__)

#: the model's data plate (:class:`zoo.core.model.BayesianModel`): sites inside it are local (per datum)
DATA_PLATE = "data"


class GuideMismatchError(ValueError):
    """The guide does not fit the model: it samples sites the model does not have or misses global ones."""


def latent_sites(trace: Trace, *, guide: bool = False) -> dict[str, dict]:
    """Unobserved sample sites of ``trace`` (plate subsample sites and, for a ``guide`` trace, auxiliary
    sites left out)."""
    out = {}
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
            continue
        if guide and site["infer"].get("is_auxiliary"):
            continue
        out[name] = site
    return out


def _is_local(site: dict) -> bool:
    return any(frame.name == DATA_PLATE for frame in site["cond_indep_stack"])


def coverage_problems(guide_trace: Trace, model_trace: Trace, *, allow_local: bool = False) -> list[str]:
    """What keeps the guide's sample sites from being the model's latent sites: model sites without a
    factor in the guide (local ones tolerated with ``allow_local``) and guide sites the model lacks."""
    q, p = latent_sites(guide_trace, guide=True), latent_sites(model_trace)
    missing = sorted(n for n in set(p) - set(q) if not (allow_local and _is_local(p[n])))
    extra = sorted(set(q) - set(p))
    out = []
    if missing:
        out.append(f"the model's latent site(s) {missing} have no factor in the guide (the ELBO would draw "
                   "them from the prior)")  # fmt: skip
    if extra:
        out.append(f"guide site(s) {extra} are not latent sites of the model (mark auxiliary variables with "
                   "infer={'is_auxiliary': True})")  # fmt: skip
    return out


def _copy_guide(guide: object) -> object:
    """A deep copy of ``guide``.  Pyro's autoguides hold their model outside the module tree and drop it
    when copied (``AutoGuide.__getstate__``, which also clears it on the original): the original keeps its
    model, and the copy traces the model the autoguide was built on."""
    if not isinstance(guide, torch.nn.Module):
        return guide  # a function guide holds its state in the parameter store (a throwaway scope here)
    autos = [m for m in guide.modules() if isinstance(m, AutoGuide)]
    saved = [(m.__dict__.get("_model"), m.__dict__.get("master")) for m in autos]
    try:
        twin = copy.deepcopy(guide)
    finally:
        for m, (model, master) in zip(autos, saved, strict=True):
            m.__dict__["_model"], m.__dict__["master"] = model, master
    for m, (model, _) in zip([m for m in twin.modules() if isinstance(m, AutoGuide)], saved, strict=True):
        m.__dict__["_model"] = model
    return twin


@contextlib.contextmanager
def _scratch(device: torch.device) -> Iterator[None]:
    """A throwaway parameter-store scope and torch random stream, without gradients."""
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), pyro.get_param_store().scope(), torch.no_grad():
        yield


def _traced(fn, *args, **kwargs) -> Trace | None:
    """``poutine.trace(fn).get_trace(...)``, or ``None`` (logged) when it raises."""
    try:
        return poutine.trace(fn).get_trace(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any failure here is the first step's to report
        logger.debug("tracing %s before the first step raised %s: %s", type(fn).__name__, type(e).__name__, e)
        return None


def trace_copies(
    model: torch.nn.Module, guide: object, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
) -> tuple[Trace | None, Trace | None]:
    """``(guide_trace, model_trace)`` of a copy of ``guide`` on ``(x, y, subsample)`` and of ``model``
    replayed on its draws (when the replay raises, e.g. on a draw outside a site's support, a trace of the
    model's own draws: its sites and distributions), leaving model, guide, Pyro's parameter store and the
    random stream as they were.  A trace is ``None`` when it raised (the model's too when the guide's did):
    the fit's first step then reports the error as it always did."""
    try:
        twin = _copy_guide(guide)
    except Exception as e:  # noqa: BLE001 - a guide that cannot be copied is not judged here
        logger.debug("copying the guide raised %s: %s", type(e).__name__, e)
        return None, None
    with _scratch(x.device):
        g_tr = _traced(twin, x, y, subsample=subsample)
        if g_tr is None:
            return None, None
        m_tr = _traced(poutine.replay(model, trace=g_tr), x, y, subsample=subsample)
        if m_tr is None:
            m_tr = _traced(model, x, y, subsample=subsample)
    return g_tr, m_tr


def check_guide_dtype(model: torch.nn.Module, guide: object) -> None:
    """A ``TypeError`` naming ``guide`` when one of its floating parameters has another dtype than the
    model (module docstring)."""
    if not isinstance(guide, torch.nn.Module):
        return
    dtype = model_dtype(model)
    for name, p in guide.named_parameters():
        if p.is_floating_point() and p.dtype != dtype:
            raise TypeError(_dtype_message(f"its parameter {name!r}", p.dtype, dtype))


def _dtype_message(what: str, got: torch.dtype, want: torch.dtype) -> str:
    return (
        f"guide: {what} is {got} but the model is {want} (fit casts the data to the model's dtype); "
        f"put model and guide in one dtype: guide.to({want}) or model.to({got})"
    )


def _sampled_dtype(guide_trace: Trace, dtype: torch.dtype) -> str | None:
    for name, site in latent_sites(guide_trace, guide=True).items():
        v = site["value"]
        if torch.is_tensor(v) and v.is_floating_point() and v.dtype != dtype:
            return _dtype_message(f"the value it samples at site {name!r}", v.dtype, dtype)
    return None


def check_guide_fits_model(
    model: torch.nn.Module, guide: object, x: Tensor, y: Tensor | None, batch_size: int | None = None
) -> None:
    """Trace a copy of ``guide`` once on the fit's first batch (the first ``batch_size`` rows, or all) and
    replay ``model`` on it: a ``TypeError`` when it samples another dtype than the model's, a
    :class:`GuideMismatchError` (a ``ValueError``) naming ``guide`` and the sites when it is not a guide for
    this model (module docstring)."""
    n = x.shape[0]
    idx = None if batch_size is None or batch_size >= n else torch.arange(batch_size, device=x.device)
    g_tr, m_tr = trace_copies(model, guide, x, y, idx)
    wrong_dtype = None if g_tr is None else _sampled_dtype(g_tr, model_dtype(model))
    if wrong_dtype is not None:
        raise TypeError(wrong_dtype)
    if m_tr is None:
        return
    problems = coverage_problems(g_tr, m_tr, allow_local=True)
    if problems:
        raise GuideMismatchError(
            f"guide: {type(guide).__name__} is not a guide for this model: {'; '.join(problems)}. Was it "
            "built for another model? Build the guide on the model it fits (zoo.build returns both)"
        )
