"""The z-flow of Skaaret-Lund, Storvik & Hubin (2023), "Sparsifying Bayesian neural networks with latent
binary variables and normalizing flows", arXiv:2305.03395, §3.1-3.2 (Eqs. 5-11): a multiplicative latent
``z`` per weight tensor with a normalizing-flow ``q(z)`` and a reverse model ``r(z | w, γ)``.

**Family** (Eq. 5).  Per weight tensor ``fc{l}.weight`` (``(out, in)``) a latent ``z ∈ R^in``, one entry per
*input* unit, scales the slab means of that unit's outgoing weights::

    q(w | γ, z) = Π_ij γ_ij N(w_ij; z_i μ_ij, σ_ij²) + (1 - γ_ij) δ(w_ij),   q(γ_ij) = Bern(α_ij)

(BNN-FLOW: ``γ ≡ 1``, ``q(w | z) = Π N(z_i μ_ij, σ_ij²)``).  One ``z`` per layer and per guide run, i.e.
shared by the whole minibatch (the paper's choice, §4; not MNF's per-datum ``z``).

**q(z)** (Eqs. 6-8).  ``z_0 ~ N(μ_0, diag(exp(logvar_0)))`` then ``K`` stable IAF steps
(:class:`guides.flows.iaf.IAF`); ``log q(z_K) = log q_0(z_0) - Σ_k Σ_i log κ_k,i``.

**Auxiliary bound** (Eqs. 9-10).  With a reverse model ``r(z | w, γ)`` the objective is
``E[log p(D | w, γ)] - E_z KL(q(w, γ | z) || p(w, γ)) - E[log q(z)] + E[log r(z | w, γ)]`` (≤ the ELBO of
the marginal ``q(w, γ)`` ≤ ``log p(D)``).  ``r`` (Eq. 11): ``s̄ = mean_j hardtanh(Σ_i e_i w_ij γ_ij)``,
``ν = d_1 s̄``, ``log τ² = d_2 s̄`` (``e, d_1, d_2 ∈ R^in``), ``z_B`` = a second ``K_r``-step IAF applied
forward to ``z_K``, ``log r = log N(z_B; ν, τ²) + Σ log κ^r`` — with the full vector ``z_B`` (the reference
code scores only its last entry, which we do not copy).  In weight-space mode ``e^T(w ⊙ γ)`` uses the
sampled ``(γ, w)``; in LCRT mode it is drawn from its LCRT Gaussian (as the reference code does).

**Pyro mapping.**  ``z_0`` is an auxiliary guide site ``fc{l}.z0`` (scored ``log q_0(z_0)``; not exported by
:func:`zoo.infer.predict.posterior_samples`); ``pyro.factor("fc{l}.zflow", -Σ log κ - log r)`` completes
``log q(z) - log r``.  The guides: :class:`guides.flows.lbbnn.LBBNNFlowGuide` (LBBNN-FLOW),
:class:`guides.flows.gaussian.GaussianFlowGuide` (BNN-FLOW / MNF) and, on the node-wise horseshoe,
:class:`guides.horseshoe.flow.HorseshoeFlowGuide`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.nn import PyroParam
from torch import Tensor

from guides.flows.iaf import IAF, make_iaf
from guides.lbbnn.base import param_attr
from guides.lbbnn.lcrt import lcrt_moments
from zoo.core.architectures import ParamSpec
from zoo.families.lbbnn.prior import group_prefix
from zoo.ops.local_reparam import gaussian_preactivation

__all__ = ["ZFLOW_DEFAULTS", "ZFlowMixin", "IAF"]


#: the z-flow options and defaults of :meth:`ZFlowMixin._init_zflows` (as in :class:`LBBNNFlowGuide`),
#: taken by name from ``guide_options`` by :class:`HorseshoeFlowGuide`
ZFLOW_DEFAULTS = {
    "flow_hidden": (50, 50),
    "num_steps": 2,
    "reverse_steps": 2,
    "sigmoid_bias": 2.0,
    "init_z_loc": 1.0,
    "init_z_logvar": -9.0,
    "init_reverse_scale": 1.0,
}


class ZFlowMixin:
    """q(z) flows and reverse models ``r(z | w, γ)`` per weight tensor (module docstring, Eqs. 6-11).

    Host classes call :meth:`_init_zflows` in ``__init__``, :meth:`sample_layer_z` before a layer's weight
    sites and :meth:`add_zflow_factor` after them.  Transient per-run state lives in ``_zrun`` only.
    """

    def _init_zflows(
        self,
        wspecs: Sequence[ParamSpec],
        flow_hidden: Sequence[int],
        num_steps: int,
        reverse_steps: int,
        sigmoid_bias: float,
        init_z_loc: float,
        init_z_logvar: float,
        init_reverse_scale: float,
    ) -> None:
        self._zrun: dict[int, Tensor] = {}
        for s in wspecs:
            if len(s.shape) != 2:
                raise ValueError(f"specs: {s.name} is not a (out, in) weight matrix")
            d_in = s.shape[1]
            p = group_prefix(s)
            setattr(self, param_attr(p, "z_loc"), PyroParam(init_z_loc + 0.01 * torch.randn(d_in)))
            setattr(self, param_attr(p, "z_logvar"), PyroParam(init_z_logvar + 0.01 * torch.randn(d_in)))
            setattr(self, param_attr(p, "zflow"), make_iaf(d_in, flow_hidden, num_steps, sigmoid_bias))
            setattr(
                self, param_attr(p, "reverse_flow"), make_iaf(d_in, flow_hidden, reverse_steps, sigmoid_bias)
            )
            for what in ("reverse_e", "reverse_d1", "reverse_d2"):
                setattr(self, param_attr(p, what), PyroParam(init_reverse_scale * torch.randn(d_in)))

    def _zp(self, spec: ParamSpec, what: str):
        return getattr(self, param_attr(group_prefix(spec), what))

    def z_base(self, spec: ParamSpec) -> dist.Distribution:
        """``q_0(z_0) = N(μ_0, exp(logvar_0))`` of weight tensor ``spec`` (event dim 1)."""
        return dist.Normal(self._zp(spec, "z_loc"), (0.5 * self._zp(spec, "z_logvar")).exp()).to_event(1)

    def sample_layer_z(self, g: int, spec: ParamSpec) -> Tensor:
        """Sample ``z_0`` (auxiliary site ``fc{l}.z0``), push it through the q-flow and return ``z_K``."""
        z0 = pyro.sample(f"{group_prefix(spec)}.z0", self.z_base(spec), infer={"is_auxiliary": True})
        zk, logdet = self._zp(spec, "zflow")(z0)
        self._zrun[g] = logdet
        return zk

    def log_reverse(self, spec: ParamSpec, z: Tensor, a: Tensor) -> Tensor:
        """``log r(z | w, γ)`` (Eq. 11) given ``a = e^T(w ⊙ γ)`` (shape ``(..., out)``)."""
        s_bar = F.hardtanh(a).mean(-1, keepdim=True)
        nu = self._zp(spec, "reverse_d1") * s_bar
        log_tau2 = self._zp(spec, "reverse_d2") * s_bar
        zb, logdet = self._zp(spec, "reverse_flow")(z)
        lp = -0.5 * (math.log(2 * math.pi) + log_tau2 + (zb - nu) ** 2 * torch.exp(-log_tau2))
        return lp.sum(-1) + logdet

    def reverse_projection(self, spec: ParamSpec, weight: Tensor | None) -> Tensor:
        """``a = e^T(w ⊙ γ)``: exact from a weight-space draw, else (LCRT mode) drawn from its Gaussian with
        the LCRT moments of arXiv:2305.03395 §4, as the paper's reference code does."""
        e = self._zp(spec, "reverse_e")
        if weight is not None:
            return torch.matmul(weight, e)
        c = self._lcrt_cache[spec.layer]
        mean, var = lcrt_moments(e.unsqueeze(0), c["loc"], c["scale"], None, None, c["logits"], c["z"])
        return gaussian_preactivation(mean, var).squeeze(-2)

    def add_zflow_factor(self, g: int, spec: ParamSpec, z: Tensor, weight: Tensor | None) -> None:
        """``pyro.factor(-Σ log κ - log r)``; with the ``z0`` site's ``log q_0``: ``log q(z) - log r``."""
        log_r = self.log_reverse(spec, z, self.reverse_projection(spec, weight))
        pyro.factor(f"{group_prefix(spec)}.zflow", -self._zrun.pop(g) - log_r, has_rsample=True)

    @torch.no_grad()
    def draw_z(self, spec: ParamSpec, num: int, mean: bool = False) -> Tensor:
        """``num`` draws of ``z_K`` (shape ``(num, in)``), no Pyro sites; ``mean``: the flow at ``μ_0``."""
        base = self.z_base(spec)
        z0 = base.mean.expand(num, -1) if mean else base.sample((num,))
        return self._zp(spec, "zflow")(z0)[0]
