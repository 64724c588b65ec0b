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

import dataclasses
import math
from collections.abc import Mapping, Sequence

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
from zoo.core.config import Config, resolve
from zoo.core.validation import check_positive, check_positive_int, check_real, check_widths
from zoo.families.lbbnn.prior import group_prefix
from zoo.ops.local_reparam import gaussian_preactivation

__all__ = ["ZFLOW_DEFAULTS", "ZFlowConfig", "ZFlowMixin", "IAF"]


@dataclasses.dataclass(frozen=True)
class ZFlowConfig(Config):
    """Options of the z-flow (Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §3.1-3.2, Eqs. 5-11).

    Every z-flow guide takes them either as ``zflow=ZFlowConfig(...)`` (or a mapping) or by keyword
    (``flow_hidden=[100, 100]``), which is how a registry entry's ``guide_options`` reach them.

    Args:
        flow_hidden: MADE hidden widths of every IAF (paper: (250, 250) for images, (100, 100) for the
            logistic simulation, §5.1).
        num_steps: ``K``, the IAF steps of ``q(z)`` (Eq. 6; paper 2).
        reverse_steps: ``K_r``, the IAF steps of the reverse model's flow (Eq. 11; paper 2).
        sigmoid_bias: added before the IAF's sigmoid (Eq. 7; Pyro's near-identity start 2.0, the reference
            code 0).
        init_z_loc, init_z_logvar: the initial ``μ_0`` and ``logvar_0`` of ``q_0(z_0)`` (the reference code:
            logvar ``-9``; ``μ_0 = 1`` starts at the plain LCRT family rather than the code's ``N(0, 1)``).
        init_reverse_scale: sd of the initial ``e, d_1, d_2`` of ``r`` (the reference code: 1 for images,
            0.001 for the logistic simulation); 0 starts ``r`` at ``N(0, 1)`` exactly.
    """

    flow_hidden: tuple[int, ...] = (50, 50)
    num_steps: int = 2
    reverse_steps: int = 2
    sigmoid_bias: float = 2.0
    init_z_loc: float = 1.0
    init_z_logvar: float = -9.0
    init_reverse_scale: float = 1.0

    def validate(self) -> None:
        object.__setattr__(self, "flow_hidden", check_widths("flow_hidden", self.flow_hidden))
        if not self.flow_hidden:
            raise ValueError("flow_hidden must name at least one MADE hidden width")
        check_positive_int("num_steps", self.num_steps)
        check_positive_int("reverse_steps", self.reverse_steps)
        for name in ("sigmoid_bias", "init_z_loc", "init_z_logvar"):
            check_real(name, getattr(self, name))
        check_positive("init_reverse_scale", self.init_reverse_scale, allow_zero=True)

    @classmethod
    def take(cls, zflow: ZFlowConfig | Mapping | None, options: dict) -> ZFlowConfig:
        """The config a guide's call means: ``zflow`` updated by the z-flow keywords, which are *removed*
        from ``options`` (the guide's other keyword arguments stay there for its base class)."""
        if zflow is not None and not isinstance(zflow, (cls, Mapping)):
            raise TypeError(f"zflow must be a ZFlowConfig or a mapping, got {type(zflow).__name__}")
        keys = {k: options.pop(k) for k in cls.field_names() if k in options}
        return resolve(cls, zflow, keys)


#: the z-flow options and their defaults (the fields of :class:`ZFlowConfig`)
ZFLOW_DEFAULTS = ZFlowConfig().to_dict()


class ZFlowMixin:
    """q(z) flows and reverse models ``r(z | w, γ)`` per weight tensor (module docstring, Eqs. 6-11).

    Host classes call :meth:`_init_zflows` in ``__init__``, :meth:`sample_layer_z` before a layer's weight
    sites and :meth:`add_zflow_factor` after them.  Transient per-run state lives in ``_zrun`` only.
    """

    def _init_zflows(self, wspecs: Sequence[ParamSpec], cfg: ZFlowConfig) -> None:
        """Create ``q_0``, the q-flow, the reverse flow and ``e, d_1, d_2`` of every weight tensor."""
        self.zflow = cfg
        self._zrun: dict[int, Tensor] = {}
        for s in wspecs:
            if len(s.shape) != 2:
                raise ValueError(f"specs: {s.name} is not a (out, in) weight matrix")
            d_in = s.shape[1]
            p = group_prefix(s)
            setattr(self, param_attr(p, "z_loc"), PyroParam(cfg.init_z_loc + 0.01 * torch.randn(d_in)))
            setattr(self, param_attr(p, "z_logvar"), PyroParam(cfg.init_z_logvar + 0.01 * torch.randn(d_in)))
            setattr(
                self, param_attr(p, "zflow"), make_iaf(d_in, cfg.flow_hidden, cfg.num_steps, cfg.sigmoid_bias)
            )
            setattr(
                self,
                param_attr(p, "reverse_flow"),
                make_iaf(d_in, cfg.flow_hidden, cfg.reverse_steps, cfg.sigmoid_bias),
            )
            for what in ("reverse_e", "reverse_d1", "reverse_d2"):
                setattr(self, param_attr(p, what), PyroParam(cfg.init_reverse_scale * torch.randn(d_in)))

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
