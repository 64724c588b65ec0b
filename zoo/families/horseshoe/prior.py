"""Node-wise (group) horseshoe prior and its regularized variant (Ghosh, Yao & Doshi-Velez 2019, "Model
selection in Bayesian neural networks via horseshoe priors", arXiv:1705.10388, §3, Eqs. 1-3).

Every *unit* ``k`` of a hidden layer ``l`` owns one local scale ``tau_kl``, shared by all its incoming
weights **and its bias** (the group that gets shrunk), and every hidden layer owns one global scale
``v_l`` (Eq. 1)::

    w_kl | tau_kl, v_l ~ N(0, tau_kl^2 v_l^2 I),   tau_kl ~ C+(0, b0),   v_l ~ C+(0, bg).

Half-Cauchy scales are written as inverse-gamma scale mixtures with auxiliaries (§3.3, Wand et
al. 2011): ``a ~ C+(0, b)  <=>  a^2 | lam ~ IG(1/2, 1/lam), lam ~ IG(1/2, 1/b^2)``.  Sites per hidden
layer ``p`` (e.g. ``p = "fc0"``)::

    p.lam ~ IG(1/2, 1/b0^2)  [K]      p.tau2 ~ IG(1/2, 1/p.lam)  [K]
    p.theta ~ IG(1/2, 1/bg^2)         p.v2 ~ IG(1/2, 1/p.theta)

The output layer has no sparsity prior: ``p.rho ~ IG(1/2, 1/b_kappa^2)``, ``p.kappa2 ~ IG(1/2, 1/p.rho)``,
``w = kappa beta`` (§3.3; the output layer is non-centered too, as the ELBO of App. A.2 shows).  The
**regularized** horseshoe (Eq. 2) adds one global slab ``hs.c2 ~ IG(c_a, c_b)`` and replaces ``tau^2`` by
``tau~^2 = c^2 tau^2 / (c^2 + tau^2 v^2)`` (so the total variance ``tau~^2 v^2`` tends to ``tau^2 v^2`` for
small scales and to ``c^2`` for large ones).

**Marginal form** (``prior.hierarchical = False``; a runtime switch, not a builder option): the scales are
sampled directly from their half-Cauchy laws, under the same site names (``p.tau2`` is the square of a
``C+(0, b0)`` draw, and so on) and without the auxiliaries.  It is the same prior on weights and scales —
the auxiliaries integrate out exactly — and the form NUTS samples (:func:`zoo.infer.mcmc.fit_nuts` with
``hierarchical=False``): the inverse-gamma pairs couple ``log lam`` and ``log tau^2`` in a funnel that
forces step sizes near 3e-3 and trajectories at the depth limit, while the log of a half-Cauchy scale has
exponential tails on both sides.  The variational guides need the auxiliaries (their closed-form updates
are the reason for them, §3.3), so the hierarchical form is the default.

**Non-centered** (default, Eq. 3): ``p.beta ~ N(0, I)`` of shape ``(K, F)`` (``F`` = per-unit incoming
entries, bias last) and ``w_kl = tau~_kl v_l beta_kl``.  **Centered** (``centered=True``): the site is
``p.w ~ N(0, tau~^2 v^2 I)`` directly; the paper shows it fails to prune (§6.2.2, Fig. 7) and it is
kept for that comparison.

The prior works on any architecture whose :class:`~zoo.core.architectures.ParamSpec` list names a receiving
unit dimension (``unit_dim``): specs of the same ``layer`` are grouped, their per-unit entries are
concatenated into one row per unit (:class:`HSLayer`), and the sampled rows are split back into the
spec shapes.  Defaults: ``b0 = 1`` (unstated in the paper; the authors' code), ``bg = 1e-5`` (§6.5),
``b_kappa = 5``, ``c_a = 2, c_b = 6`` (§6.4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.prior import ExactScaleConditionals, Prior
from zoo.core.validation import check_positive

__all__ = ["HSLayer", "group_layers", "HorseshoePrior", "regularized_variance"]


@dataclass(frozen=True)
class HSLayer:
    """The parameter specs of one layer grouped by receiving unit.

    ``prefix`` names the layer's extra sites (``"fc0"``), ``units`` is ``K``, ``sizes[i]`` the per-unit
    number of entries of ``specs[i]``; a unit's row has ``fan = sum(sizes)`` entries in spec order (for
    an :class:`~zoo.core.architectures.MLP`: the ``in`` weights, then the bias).
    """

    prefix: str
    layer: int
    specs: tuple[ParamSpec, ...]
    units: int
    sizes: tuple[int, ...]
    output: bool

    @property
    def fan(self) -> int:
        return sum(self.sizes)

    def split(self, rows: Tensor) -> dict[str, Tensor]:
        """``(..., K, F)`` unit rows -> ``{spec.name: (..., *spec.shape)}``."""
        out, start = {}, 0
        for s, n in zip(self.specs, self.sizes):
            part = rows[..., start : start + n]
            start += n
            rest = s.shape[: s.unit_dim] + s.shape[s.unit_dim + 1 :]
            part = part.reshape(*part.shape[:-1], *rest)
            lead = part.dim() - len(s.shape)
            out[s.name] = part.movedim(lead, lead + s.unit_dim)
        return out

    def join(self, params: Mapping[str, Tensor]) -> Tensor:
        """Inverse of :meth:`split`: ``{spec.name: (..., *shape)}`` -> ``(..., K, F)``."""
        parts = []
        for s in self.specs:
            t = params[s.name]
            lead = t.dim() - len(s.shape)
            t = t.movedim(lead + s.unit_dim, lead)
            parts.append(t.reshape(*t.shape[: lead + 1], -1))
        return torch.cat(parts, -1)


def group_layers(specs: Sequence[ParamSpec]) -> list[HSLayer]:
    """Group ``specs`` by ``layer``; the largest layer index is the (un-shrunk) output layer."""
    if not specs:
        raise ValueError("specs: the architecture declares no parameters")
    by_layer: dict[int, list[ParamSpec]] = {}
    for s in specs:
        by_layer.setdefault(s.layer, []).append(s)
    last = max(by_layer)
    layers = []
    for l in sorted(by_layer):
        group = by_layer[l]
        units = {s.shape[s.unit_dim] for s in group}
        if len(units) != 1:
            raise ValueError(f"specs: layer {l} has inconsistent unit counts {sorted(units)}")
        k = units.pop()
        sizes = tuple(s.numel // k for s in group)
        prefix = group[0].name.rsplit(".", 1)[0] if "." in group[0].name else f"layer{l}"
        layers.append(HSLayer(prefix, l, tuple(group), k, sizes, l == last))
    return layers


def regularized_variance(tau2: Tensor, v2: Tensor, c2: Tensor | None) -> Tensor:
    """Total weight variance ``tau~^2 v^2``: ``tau^2 v^2`` (plain HS) or ``c^2 s / (c^2 + s)`` with
    ``s = tau^2 v^2`` (regularized HS, Eq. 2; the formula of Eq. 8 is for the *squared* scale ``tau~^2``)."""
    s = tau2 * v2
    if c2 is None:
        return s
    return c2 * s / (c2 + s)


class HorseshoePrior(ExactScaleConditionals, Prior):
    """Node-wise horseshoe / regularized horseshoe prior (see the module docstring)."""

    conditionals_module = "zoo.families.horseshoe.gibbs"

    def __init__(
        self,
        b0: float = 1.0,
        bg: float = 1e-5,
        b_kappa: float = 5.0,
        regularized: bool = False,
        c_a: float = 2.0,
        c_b: float = 6.0,
        centered: bool = False,
    ) -> None:
        super().__init__()
        for name, val in (("b0", b0), ("bg", bg), ("b_kappa", b_kappa), ("c_a", c_a), ("c_b", c_b)):
            self.register_buffer(name, torch.tensor(check_positive(name, val)))
        self.regularized = bool(regularized)
        self.centered = bool(centered)
        #: sample the half-Cauchy scales through their inverse-gamma auxiliaries (True, the paper's form)
        #: or directly (False, the marginal form; module docstring)
        self.hierarchical = True

    def config(self) -> dict:
        return {
            "b0": float(self.b0),
            "bg": float(self.bg),
            "b_kappa": float(self.b_kappa),
            "regularized": self.regularized,
            "c_a": float(self.c_a),
            "c_b": float(self.c_b),
            "centered": self.centered,
        }

    def _half(self) -> Tensor:
        return torch.full_like(self.b0, 0.5)

    def _squared_scale(self, name: str, aux: str, b: Tensor, shape: tuple[int, ...] = ()) -> Tensor:
        """A squared half-Cauchy scale ``a^2``, ``a ~ C+(0, b)``: through the auxiliary
        ``lam ~ IG(1/2, 1/b^2)``, ``a^2 | lam ~ IG(1/2, 1/lam)`` (sites ``aux``, ``name``; hierarchical form),
        or as the law of ``a^2`` itself (site ``name``; marginal form)."""
        if not self.hierarchical:
            law = dist.TransformedDistribution(dist.HalfCauchy(b), [dist.transforms.PowerTransform(2.0)])
            return pyro.sample(name, law.expand(shape).to_event(len(shape)) if shape else law)
        half = self._half()
        ig = dist.InverseGamma(half, b**-2)
        lam = pyro.sample(aux, ig.expand(shape).to_event(len(shape)) if shape else ig)
        cond = dist.InverseGamma(half.expand(shape) if shape else half, 1.0 / lam)
        return pyro.sample(name, cond.to_event(len(shape)) if shape else cond)

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        c2 = pyro.sample("hs.c2", dist.InverseGamma(self.c_a, self.c_b)) if self.regularized else None
        params: dict[str, Tensor] = {}
        for layer in group_layers(specs):
            p, k = layer.prefix, layer.units
            if layer.output:
                kappa2 = self._squared_scale(f"{p}.kappa2", f"{p}.rho", self.b_kappa)
                scale = kappa2.sqrt()[..., None, None]
            else:
                tau2 = self._squared_scale(f"{p}.tau2", f"{p}.lam", self.b0, (k,))
                v2 = self._squared_scale(f"{p}.v2", f"{p}.theta", self.bg)
                var = regularized_variance(tau2, v2[..., None], None if c2 is None else c2[..., None])
                scale = var.sqrt()[..., None]
            if self.centered:
                zeros = torch.zeros(k, layer.fan, dtype=self.b0.dtype, device=self.b0.device)
                rows = pyro.sample(f"{p}.w", dist.Normal(zeros, scale).to_event(2))
            else:
                zero = torch.zeros_like(self.b0)  # expanded, not filled: N(0, 1) per entry
                std_normal = dist.Normal(zero, torch.ones_like(zero)).expand((k, layer.fan))
                beta = pyro.sample(f"{p}.beta", std_normal.to_event(2))
                rows = scale * beta
            params.update(layer.split(rows))
        return params
