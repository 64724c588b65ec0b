"""The LBBNN's closed-form-KL estimator: Pyro's ``Trace_ELBO`` run inside a handler (no private hooks).

With the closed-form KL (Hubin & Storvik 2019, arXiv:1903.07594, §4.2: the ELBO ``E log p(D | β) - KL`` of
Eq. 4.4 with the analytic KL of the mean-field family, Eqs. 4.5-4.7) an LBBNN guide masks its own
weight-space sites and adds a factor ``KL + log p(γ, θ)`` that cancels the model's score of the sampled
weights, so plain ``Trace_ELBO`` gives the right objective.  :class:`ClosedFormKL_ELBO` skips the work that
cancels: it masks the model's scores of those sites and asks the guide to add the KL alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from pyro.poutine.messenger import Messenger

from zoo.infer.elbo import HandledELBO

__all__ = ["ClosedFormKL_ELBO", "MaskSites"]


class MaskSites(Messenger):
    """Skips the scores of the named sample sites (their distributions become ``.mask(False)``)."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__()
        self.names = frozenset(names)

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.names:
            msg["fn"] = msg["fn"].mask(False)


@contextlib.contextmanager
def _closed_form_kl(guide, names: frozenset[str]) -> Iterator[None]:
    with MaskSites(names), guide.prior_scores_masked():
        yield


class ClosedFormKL_ELBO(HandledELBO):
    """``Trace_ELBO`` for an LBBNN guide with the closed-form KL that skips work which cancels.

    Under plain ``Trace_ELBO`` the guide's factor is ``KL + log p(γ, θ)`` so that it cancels the model's
    score ``log p(γ, θ)`` of the sampled weights (the model is never changed by a guide).  Here the model's
    scores of the guide's ``closed_form_sites()`` are masked and the guide adds the KL alone (inside its
    ``prior_scores_masked()`` context): the same estimate and gradient, without computing two weight-sized
    log-densities and their backward passes per step.  Guides without ``closed_form_sites`` run as under
    ``Trace_ELBO``.  ``max_plate_nesting`` defaults to ``Trace_ELBO``'s (unbounded).
    """

    def __init__(self, num_particles: int = 1, **kwargs: Any) -> None:
        kwargs.setdefault("max_plate_nesting", float("inf"))
        super().__init__(num_particles=num_particles, **kwargs)

    def handler(self, model: Callable, guide: Callable) -> contextlib.AbstractContextManager:
        sites = getattr(guide, "closed_form_sites", None)
        names = sites() if callable(sites) else frozenset()
        if not names:
            return contextlib.nullcontext()
        return _closed_form_kl(guide, names)
