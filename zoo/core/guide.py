"""The closed-form (CAVI-style) update contract.

A guide takes part in closed-form updates by subclassing :class:`ClosedFormGuide`:

* its closed-form variational parameters are **registered buffers**, not ``pyro.param``/``PyroParam``,
  so the gradient optimizer never sees them, ``.to(device)`` moves them and ``state_dict()`` saves them;
* :meth:`ClosedFormGuide.closed_form_update` sets them to their optimum given everything else
  (called by :func:`zoo.infer.loop.fit` under ``torch.no_grad()`` after the gradient step of the same
  iteration, with the same minibatch);
* :meth:`ClosedFormGuide.closed_form_elbo` may return the exact ELBO, which the loop then records
  instead of the Monte Carlo estimate;
* ``uses_gradients = False`` declares a pure-CAVI guide: the loop then runs no SVI gradient step at all
  (full-batch CAVI is the special case of the one training loop).

Hybrid guides (gradient steps for some factors, closed form for others, e.g. the horseshoe's
inverse-gamma auxiliaries, paper 004 Algorithm 1) keep ``uses_gradients = True``.
"""

from __future__ import annotations

from pyro.nn import PyroModule
from torch import Tensor

__all__ = ["ClosedFormGuide"]


class ClosedFormGuide(PyroModule):
    uses_gradients: bool = True

    def closed_form_update(
        self, model, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(
            f"{type(self).__name__} must implement closed_form_update() (abstract interface)"
        )

    def closed_form_elbo(
        self, model, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> float | None:
        """The exact ELBO at the current variational parameters, or ``None`` if not available."""
        return None
