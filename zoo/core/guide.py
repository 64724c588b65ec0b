"""The closed-form (CAVI-style) update contract.

A guide takes part in closed-form updates by subclassing :class:`ClosedFormGuide`:

* its closed-form variational parameters are **registered buffers**, not ``pyro.param``/``PyroParam``,
  so the gradient optimizer never sees them, ``.to(device)`` moves them and ``state_dict()`` saves them;
* :meth:`ClosedFormGuide.closed_form_update` sets them to their optimum given everything else
  (called by :func:`zoo.infer.loop.fit` under ``torch.no_grad()`` after the gradient step of the same
  iteration, with the same minibatch);
* :meth:`ClosedFormGuide.closed_form_finalize` may make a last exact update after the final step (undone
  by :meth:`ClosedFormGuide.closed_form_begin` when training resumes);
* :meth:`ClosedFormGuide.closed_form_elbo` may return the exact ELBO, which the loop then records
  instead of the Monte Carlo estimate;
* ``uses_gradients = False`` declares a pure-CAVI guide: the loop then runs no SVI gradient step at all
  (full-batch CAVI is the special case of the one training loop).

Hybrid guides (gradient steps for some factors, closed form for others, e.g. the horseshoe's
inverse-gamma auxiliaries, Ghosh et al. (2019) Algorithm 1) keep ``uses_gradients = True``.
"""

from __future__ import annotations

import abc

from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.meta import PyroModuleABCMeta
from zoo.core.model import BayesianModel

__all__ = ["ClosedFormGuide"]


class ClosedFormGuide(PyroModule, metaclass=PyroModuleABCMeta):
    """Base class of guides with closed-form factors (module docstring); an ``abc`` abstract class."""

    uses_gradients: bool = True

    @abc.abstractmethod
    def closed_form_update(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """Set the closed-form factors to their optimum given everything else (under ``no_grad``)."""

    def closed_form_begin(self) -> None:
        """Called by :func:`zoo.infer.loop.run_steps` before its first step: undo what
        :meth:`closed_form_finalize` set for prediction, so that a resumed fit trains exactly as an
        uninterrupted one.  Default: nothing."""

    def closed_form_finalize(self, model: BayesianModel, x: Tensor, y: Tensor | None) -> None:
        """Called once by :func:`zoo.infer.loop.run_steps` after its last step, under ``no_grad``, with all
        rows (not in a data-parallel fit, whose ranks hold shards): a last exact update, for prediction, of
        the factors whose per-step update is stochastic.  It must leave the training state (and the random
        stream) as it found them.  Default: nothing."""

    def closed_form_elbo(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> float | None:
        """The exact ELBO at the current variational parameters, or ``None`` if not available."""
        return None
