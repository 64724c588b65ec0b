"""The zoo's one local-reparameterization mechanism (Kingma, Salimans & Welling 2015, arXiv:1506.02557).

Local reparameterization samples a layer's *pre-activations* from their Gaussian under the variational
posterior instead of sampling the weights: for an input ``h`` and a layer whose weights have (conditional)
moments under q, ``a = E[a | h] + sqrt(Var[a | h]) ε`` with one ``ε ~ N(0, 1)`` per datum and unit.  Every
zoo architecture routes each layer's affine map through ``architecture.linear(h, weight, bias, layer)``
(:class:`zoo.core.architectures.MLP`), so the trick needs no second forward pass: while
:class:`LocalReparameterization` is active, that method is shadowed by the guide's sampler and the
model runs unchanged.

Users of this messenger: the LBBNN-LCRT and z-flow guides (Hubin & Storvik / Skaaret-Lund et al. 2023,
arXiv:2305.03395 §4, the LCRT moments with inclusion probabilities) and the horseshoe BNN estimator
(Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388 §4.2, Eqs. 7–8).

The weight-space sample sites still run (their values are not read by the shadowed ``linear``); their
scores are constants in every parameter, so the messenger masks them in both model and guide
(``fn.mask(False)``) and an ELBO run inside it sees only the likelihood and whatever analytic terms the
guide adds with ``pyro.factor``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from pyro.poutine.messenger import Messenger
from torch import Tensor

__all__ = ["LocalReparameterization", "gaussian_preactivation"]

#: floor of the pre-activation variance before its square root (a zero-variance unit, e.g. a layer whose
#: inclusion probabilities are all 0 or 1 on a zero input, would otherwise give an infinite gradient)
VAR_FLOOR = 1e-12


def gaussian_preactivation(mean: Tensor, var: Tensor, floor: float = VAR_FLOOR) -> Tensor:
    """One local-reparameterization draw ``mean + sqrt(max(var, floor)) ε``, ``ε ~ N(0, I)``."""
    return mean + var.clamp_min(floor).sqrt() * torch.randn_like(mean)


class LocalReparameterization(Messenger):
    """While active, ``architecture.linear(h, weight, bias, layer)`` returns ``sample(h, layer)`` and the
    scores of the sample sites named in ``masked_sites`` are masked.

    :param architecture: the model's architecture (any object whose layers call ``self.linear``).
    :param sample: ``sample(h, layer) -> Tensor``, the pre-activation draw of layer ``layer`` at input ``h``
        (typically :func:`gaussian_preactivation` of the guide's moments).
    :param masked_sites: names of weight-space sites whose scores are constants under the trick.
    :param on_enter: called on entering, e.g. to open the guide's per-run cache of moments; ``on_exit``
        is called on leaving (also on an exception).

    Re-entrant and exception-safe: the instance attribute that shadows ``linear`` is restored on exit.
    Usable as a context manager or as a handler, ``LocalReparameterization(...)(fn)``.
    """

    def __init__(
        self,
        architecture: torch.nn.Module,
        sample: Callable[[Tensor, int], Tensor],
        masked_sites: Iterable[str] = (),
        *,
        on_enter: Callable[[], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        if not callable(getattr(architecture, "linear", None)):
            raise TypeError(
                f"architecture must route its layers through linear(h, weight, bias, layer), "
                f"got {type(architecture).__name__}"
            )
        if not callable(sample):
            raise TypeError(f"sample must be callable sample(h, layer), got {type(sample).__name__}")
        self.architecture = architecture
        self.sample = sample
        self.masked_sites = frozenset(masked_sites)
        self._on_enter, self._on_exit = on_enter, on_exit
        self._saved: list = []

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.masked_sites:
            msg["fn"] = msg["fn"].mask(False)

    def _linear(self, h: Tensor, weight: Tensor, bias: Tensor | None, layer: int) -> Tensor:
        return self.sample(h, layer)

    def __enter__(self):
        arch = self.architecture
        self._saved.append(arch.__dict__.get("linear"))
        arch.__dict__["linear"] = self._linear
        if self._on_enter is not None:
            self._on_enter()
        return super().__enter__()

    def __exit__(self, exc_type, exc_value, traceback):
        prev = self._saved.pop()
        if prev is None:
            self.architecture.__dict__.pop("linear", None)
        else:
            self.architecture.__dict__["linear"] = prev
        if self._on_exit is not None:
            self._on_exit()
        return super().__exit__(exc_type, exc_value, traceback)
