"""Plain containers passed between the bow-tie CAVI factor updates (Sheinkman & Wade 2025, arXiv 2411.11132).

* :class:`Globals` — a read-only view of the global variational parameters (the guide's buffers): weight rows
  ``q(b, W) = N(m, B)`` (Eq. 16), the GIG scale parameters ``delta_hat`` of ``q(tau)`` and ``q(psi)``
  (Eqs. 13–14) and the inverse-gamma noise factors ``q(eta^2) = IG(alpha, beta)`` (Eq. 15).
* :class:`Locals` — the per-datapoint factors of the hidden layers: gates ``rho`` (Eq. 18), Pólya–Gamma
  parameters ``A`` (Eq. 17) and the activation conditionals ``(S, t, M)`` (Eq. 19).
* :class:`Hyper` — the model's hyperparameters in float64 (priors Eqs. 5–7 with the App. D.1 scaling, noise
  priors of §2.4, temperature ``T``), read once per update from a
  :class:`~zoo.families.bowtie.model.BowtieModel`.

Layer indices ``k = 0..L`` are the paper's ``l = 1..L+1``; ``k = L`` is the output layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from guides.bowtie.linalg import F64, Memo
from zoo.families.bowtie.model import BowtieModel
from zoo.families.bowtie.prior import GaussianBowtiePrior

__all__ = ["Globals", "Hyper", "Locals", "as_float64"]

GIGParams = tuple[Tensor, Tensor, Tensor]


@dataclass
class Locals:
    """Per-datapoint factors of the hidden layers: ``rho`` (N,D), ``A`` (N,D), ``S`` (N,D,D), ``t`` (N,D),
    ``M`` (N,D,D_prev); updated in place by :mod:`guides.bowtie.activations`."""

    rho: list[Tensor]
    A: list[Tensor]
    S: list[Tensor]
    t: list[Tensor]
    M: list[Tensor]

    FIELDS = ("rho", "A", "S", "t", "M")


@dataclass(frozen=True)
class Globals:
    """The global factors, one entry per layer ``k = 0..L``; ``alpha``/``beta`` hold the hidden layers'
    ``q(eta^2_k)`` followed (last) by the output noise ``q(sigma2)``."""

    m: list[Tensor]
    B: list[Tensor]
    dtau: list[Tensor]
    dpsi: list[Tensor]
    alpha: list[Tensor]
    beta: list[Tensor]

    @property
    def num_hidden(self) -> int:
        return len(self.m) - 1


@dataclass(frozen=True)
class Hyper:
    """Hyperparameters of the bow-tie model in float64 (module docstring).

    ``glob`` is the prior ``(nu, delta, lam)`` of every ``tau_k`` and ``loc[k]`` that of layer ``k``'s local
    scales (``None`` under the Gaussian prior, whose weight variances are ``weight_var``)."""

    widths: tuple[int, ...]
    temp: float
    gaussian: bool
    bias_scale: Tensor
    glob: GIGParams | None
    loc: list[GIGParams] | None
    weight_var: list[Tensor] | None
    hidden_noise: tuple[Tensor, Tensor]
    noise: tuple[Tensor, Tensor]

    @classmethod
    def from_model(cls, model: BowtieModel) -> Hyper:
        widths, nh = tuple(model.widths), model.num_hidden
        prior = model.prior
        gaussian = isinstance(prior, GaussianBowtiePrior)
        glob = loc = wvar = None
        if gaussian:
            wvar = [prior.weight_variance(nh, widths[k]).to(F64) for k in range(nh + 1)]
        else:
            glob = tuple(v.to(F64) for v in prior.glob_params(nh))
            loc = [tuple(v.to(F64) for v in prior.loc_params(widths[k])) for k in range(nh + 1)]
        noise_h = model.hidden_noise
        return cls(
            widths=widths,
            temp=float(model.temperature),
            gaussian=gaussian,
            bias_scale=prior.bias_scale.to(F64),
            glob=glob,
            loc=loc,
            weight_var=wvar,
            hidden_noise=(noise_h.concentration.to(F64), noise_h.rate.to(F64)),
            noise=(model.likelihood.concentration.to(F64), model.likelihood.rate.to(F64)),
        )


_CONVERTED = Memo(4)


def _f64(t: Tensor) -> Tensor:
    """``t`` in float64; a converted copy is cached (:class:`~guides.bowtie.linalg.Memo`), so the same data
    passed at every sweep is the same float64 tensor and the moment caches recognize it."""
    return t if t.dtype == F64 else _CONVERTED([t], lambda: t.to(F64))


def as_float64(x: Tensor, y: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """``x`` and ``y`` (as a column if 1-d) in float64."""
    if y is not None and y.dim() == 1:
        y = y.unsqueeze(-1)
    return _f64(x), (None if y is None else _f64(y))
