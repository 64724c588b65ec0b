"""What a seed means for a registry build: the random initial values of model and guide.

Many guides draw their initial values when they are constructed (the horseshoe's He rows, the LBBNN's
inclusion logits and slab means), not lazily inside the fit.  Two rules make every seed mean the same
thing:

* ``build(..., seed=s)`` draws the initialization under ``s`` (as ``pyro.set_rng_seed(s)`` then ``build``
  would) inside :func:`seeded_rng`, which restores every global generator afterwards;
* ``build(...)`` without a seed marks the pair *fresh* (:func:`mark_fresh`); the first
  :func:`zoo.infer.loop.fit` of a fresh pair redraws its initial values under the fit's seed
  (:func:`reseed_fresh_build`) — so the documented pattern ``build(...)`` then ``fit(..., seed=s)`` is the
  same fit in every process, and the same as ``zoo fit --seed s`` and ``fit_on_dataset(seed=s)``.  A pair
  that was changed in place after ``build`` (any parameter or buffer written, replaced or added) is not
  fresh and is left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pyro
import pyro.util
import torch

__all__ = ["check_build_seed", "seeded_rng", "mark_fresh", "reseed_fresh_build"]

_MAX_SEED = 2**32  # numpy's generator (seeded by pyro.set_rng_seed) takes seeds below 2**32
_MARK = "_zoo_fresh_build"


def check_build_seed(seed: object) -> int:
    """``seed`` as an int in ``[0, 2**32)``; ``TypeError``/``ValueError`` naming ``seed`` otherwise."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= seed < _MAX_SEED:
        raise ValueError(f"seed must lie in [0, 2**32), got {seed}")
    return seed


@contextlib.contextmanager
def seeded_rng(seed: int | None) -> Iterator[None]:
    """Within the block every global generator (torch, numpy, random) is seeded with ``seed``; afterwards
    their previous states are back.  ``seed=None``: nothing changes."""
    if seed is None:
        yield
        return
    state = pyro.util.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        pyro.set_rng_seed(seed)
        yield
    finally:
        pyro.util.set_rng_state(state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _fingerprint(model: torch.nn.Module, guide: object) -> tuple:
    """Identity and in-place version of every parameter and buffer: any write changes it."""
    out = []
    for owner in (model, guide):
        if isinstance(owner, torch.nn.Module):
            for name, t in owner.state_dict(keep_vars=True).items():
                out.append((name, id(t), t._version if torch.is_tensor(t) else None))
    return tuple(out)


def mark_fresh(model: torch.nn.Module, guide: object) -> None:
    """Record that ``(model, guide)`` come straight from an unseeded ``build``."""
    model.__dict__[_MARK] = {"guide": id(guide), "fingerprint": _fingerprint(model, guide)}


def reseed_fresh_build(
    model: torch.nn.Module, guide: object, seed: int, rebuild: Callable[[dict], tuple]
) -> bool:
    """If ``(model, guide)`` are a fresh unseeded build (module docstring), copy into them the initial
    values of ``rebuild(spec with seed)`` — the same build under ``seed`` — and return True.  The mark is
    consumed either way, so only the first fit of a pair reseeds it."""
    mark = model.__dict__.pop(_MARK, None)
    spec = getattr(model, "_zoo_spec", None)
    if mark is None or spec is None or mark["guide"] != id(guide):
        return False
    if mark["fingerprint"] != _fingerprint(model, guide):
        return False
    m2, g2 = rebuild({**spec, "seed": seed})
    with torch.no_grad():
        for old, new in ((model, m2), (guide, g2)):
            if isinstance(old, torch.nn.Module):
                target = old.state_dict(keep_vars=True)
                for name, value in new.state_dict().items():
                    target[name].copy_(value)
    return True
