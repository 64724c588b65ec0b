"""ELBOs that run Pyro's own estimators inside a handler, through Pyro's public ELBO interface only.

:class:`HandledELBO` is ``Trace_ELBO`` whose ``loss``, ``loss_and_grads`` and ``differentiable_loss``
run inside ``self.handler(model, guide)`` — a Pyro messenger or any context manager — that is entered
once per call, around both the guide and the model runs of every particle.  The zoo's estimators with
analytic terms (LBBNN's closed-form KL, local reparameterization for LCRT and the horseshoe) are such
handlers; the estimator itself (plates, subsample scaling, particles, likelihood latents) stays Pyro's.
Nothing overrides Pyro's private ``_get_trace``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from pyro.infer import Trace_ELBO
from torch import Tensor

__all__ = ["HandledELBO"]


class HandledELBO(Trace_ELBO):
    """``Trace_ELBO`` evaluated inside ``handler(model, guide)`` (override :meth:`handler`).

    Particles are drawn sequentially (``vectorize_particles`` is not supported: a handler that shadows an
    architecture's layers draws per pass).
    """

    def __init__(self, num_particles: int = 1, **kwargs: Any) -> None:
        kwargs.setdefault("max_plate_nesting", 1)
        if kwargs.get("vectorize_particles"):
            raise ValueError("vectorize_particles: not supported by a handled ELBO (one draw per pass)")
        super().__init__(num_particles=num_particles, **kwargs)

    def handler(self, model: Callable, guide: Callable) -> contextlib.AbstractContextManager:
        """The context both model and guide run in; the default changes nothing."""
        return contextlib.nullcontext()

    def loss(self, model: Callable, guide: Callable, *args: Any, **kwargs: Any) -> float:
        with self.handler(model, guide):
            return super().loss(model, guide, *args, **kwargs)

    def loss_and_grads(self, model: Callable, guide: Callable, *args: Any, **kwargs: Any) -> float:
        with self.handler(model, guide):
            return super().loss_and_grads(model, guide, *args, **kwargs)

    def differentiable_loss(self, model: Callable, guide: Callable, *args: Any, **kwargs: Any) -> Tensor:
        with self.handler(model, guide):
            return super().differentiable_loss(model, guide, *args, **kwargs)
