"""Shared pieces of the conformance kit: the contract ids, failures, isolation, data and trace helpers."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import NoReturn

import numpy as np
import pyro
import torch
from torch import Tensor

from zoo.infer.guide_match import latent_sites  # one definition, shared with zoo.infer.loop.fit's checks

__all__ = [
    "CONTRACTS",
    "fail",
    "contract",
    "isolated",
    "guarded_store",
    "make_data",
    "latent_sites",
    "reference_tensor",
]

#: contract id -> what it requires (every failure message starts with ``[id]``)
CONTRACTS: dict[str, str] = {
    "runs": "the prior's sample_params runs on the architecture's specs and the composed model runs",
    "param-values": "sample_params returns {spec.name: tensor of spec.shape} for exactly the specs, finite",
    "param-sites": "one sample site per ParamSpec, named by it, with event shape = the spec's shape and the "
    "returned value = the site's value (or a parameter that is a random deterministic function of the "
    "prior's sites, e.g. a non-centred horseshoe weight)",
    "event-dims": "every prior site keeps its structure in event dims: batch shape () outside any plate",
    "particles": 'inside pyro.plate("particles", K, dim=-2) every site has batch shape (K, 1), every '
    "parameter shape (K, 1, *spec.shape), and the model's f shape (K, N, out)",
    "site-names": "extra sites are namespaced by layer ('fc0.tau'; prior-wide ones 'hs.c2', never a bare "
    "name like the likelihood's 'sigma2'), no site is named after another plus a dot ('fc0.weight.s2' next "
    "to 'fc0.weight')",
    "buffers": "hyperparameters are buffers: after .to(float64) (and the device) every sampled value and "
    "parameter is float64 (on the device), and no module holds a plain tensor attribute",
    "conditionals": "a prior with exact scale conditionals (conditional_sites / draw_conditionals) keeps its "
    "own joint prior invariant: Geweke's successive-conditional draws match independent prior draws",
    "param-store": "Pyro's global parameter store holds the same keys before and after building and running",
    "guide-build": "the guide factory builds a callable guide on the model",
    "coverage": "the guide's sample sites (auxiliary ones aside) are exactly the model's latent sites",
    "support": "every site the guide samples lies in the model site's support (a positive site gets a "
    "positive distribution, not a Normal)",
    "fit": "a short fit with zoo.infer.loop.fit runs",
    "elbo-finite": "Trace_ELBO (vectorized particles), the guide's own loss and every ELBO the fit records "
    "are finite",
    "closed-form-elbo": "a guide's closed-form ELBO (or analytic prior + entropy part) equals the Monte "
    "Carlo Trace_ELBO estimate within the tolerance (standard errors of the Monte Carlo mean)",
    "predict-pure": "predict leaves parameters and buffers unchanged; the same seed gives the same "
    "predictions",
    "checkpoint": "save / load round trip gives the same predictions",
    "arviz": "to_inference_data exports the fit with named dims and a finite log-likelihood",
    "guide-dtype": "model and guide moved with .to(float64) fit and sample float64 values",
    "entry": "a registry entry has a summary and references, builds and records its spec, refuses unknown "
    "guides",
}


def fail(contract: str, message: str) -> NoReturn:
    """Raise the kit's ``AssertionError``: ``"[contract] message"``."""
    if contract not in CONTRACTS:  # pragma: no cover - a kit bug
        raise KeyError(contract)
    raise AssertionError(f"[{contract}] {message}")


def _is_kit_error(e: AssertionError) -> bool:
    text = str(e)
    return text.startswith("[") and text[1:].split("]", 1)[0] in CONTRACTS


@contextlib.contextmanager
def contract(cid: str, what: str) -> Iterator[None]:
    """A step of contract ``cid``: any exception it raises (other than a kit failure) becomes
    ``AssertionError("[cid] <what> raised <type>: <message>")``."""
    try:
        yield
    except AssertionError as e:
        if _is_kit_error(e):
            raise
        raise AssertionError(f"[{cid}] {what} failed an assertion: {e}") from e
    except Exception as e:
        raise AssertionError(f"[{cid}] {what} raised {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def isolated(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch / numpy / random with ``seed`` for the block and restore their states afterwards, so a
    check neither depends on nor changes the caller's random streams."""
    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002 - pyro.set_rng_seed seeds the legacy RNG
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            pyro.set_rng_seed(seed)
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002


@contextlib.contextmanager
def guarded_store(what: str) -> Iterator[None]:
    """``[param-store]`` unless Pyro's global parameter store holds the same names after the block as
    before it.  Whatever happens, the store is put back as it was (no debris from a failed check)."""
    store = pyro.get_param_store()
    before = store.get_state()
    names = frozenset(store.keys())
    ok = False
    try:
        yield
        ok = True
    finally:
        after = frozenset(store.keys())
        if after != names:
            store.clear()
            store.set_state(before)
    if ok and after != names:
        added, removed = sorted(after - names), sorted(names - after)
        fail(
            "param-store",
            f"{what} changed Pyro's global parameter store (added {added}, removed {removed}): keep "
            "parameters on the module (PyroParam attributes), used inside a param-store scope as "
            "zoo.infer.loop.fit and FitResult.activate do, never a bare pyro.param outside one",
        )


def reference_tensor(module: torch.nn.Module) -> Tensor:
    """A floating tensor of ``module`` (its dtype and device), or a float32 CPU zero."""
    for t in (*module.buffers(), *module.parameters()):
        if t.is_floating_point():
            return t
    return torch.zeros(())


def make_data(
    in_features: int, task: str, n_classes: int, n: int, seed: int, ref: Tensor
) -> tuple[Tensor, Tensor]:
    """A small data set on ``ref``'s dtype and device: ``x ~ N(0, I)``; regression ``y = sin(2 x_0) + 0.5
    x_1 + noise``, binary ``y = [x_0 > 0]`` and multiclass the arg-max of ``n_classes`` linear scores."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_features, generator=g, dtype=torch.float64)
    lin = x @ torch.linspace(1.0, -0.5, in_features, dtype=torch.float64)
    if task == "regression":
        y = torch.sin(2 * x[:, 0]) + 0.5 * lin + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
        y = y.to(ref.dtype if ref.is_floating_point() else torch.float32)
    elif task == "binary":
        y = (x[:, 0] > 0).long()
    else:
        w = torch.randn(in_features, n_classes, generator=g, dtype=torch.float64)
        y = (x @ w).argmax(-1)
    return x.to(dtype=ref.dtype, device=ref.device), y.to(ref.device)
