"""Multiplicative-normalizing-flow guides (paper 003 §3.2, note ``003_lbbnn_flows.md`` §2.5-2.6):
LBBNN-FLOW (spike-and-slab model) and BNN-FLOW / MNF (Gaussian-prior model, the α ≡ 1 special case); the
same z-flow on the node-wise horseshoe of paper 004 is :class:`guides.horseshoe.flow.HorseshoeFlowGuide`.

**Family** (Eq. 5).  Per weight tensor ``fc{l}.weight`` (``(out, in)``) a latent ``z ∈ R^in``, one entry per
*input* unit, scales the slab means of that unit's outgoing weights::

    q(w | γ, z) = Π_ij γ_ij N(w_ij; z_i μ_ij, σ_ij²) + (1 - γ_ij) δ(w_ij),   q(γ_ij) = Bern(α_ij)

(BNN-FLOW: ``γ ≡ 1``, ``q(w | z) = Π N(z_i μ_ij, σ_ij²)``).  One ``z`` per layer and per guide run, i.e.
shared by the whole minibatch (note §2.5: the paper's choice, not MNF's per-datum ``z``).

**q(z)** (Eqs. 6-8).  ``z_0 ~ N(μ_0, diag(exp(logvar_0)))`` then ``K`` IAF steps with the numerically stable
update of Eq. (7), ``z_k = κ_k ⊙ z_{k-1} + (1 - κ_k) ⊙ m_k``, ``κ_k = sigmoid(s_k)``, ``(m_k, s_k)`` from a
MADE; ``log q(z_K) = log q_0(z_0) - Σ_k Σ_i log κ_k,i`` (Eqs. 6, 8), computed on the forward pass — no
inversion anywhere.  Each step is Pyro's ``AffineAutoregressive(AutoRegressiveNN(...), stable=True)``,
which is exactly Eq. (7) with ``κ = sigmoid(s + sigmoid_bias)``.  Where Pyro does not fit the paper
(note §5.4), documented deviations:

* ``AutoRegressiveNN`` refuses hidden layers narrower than the input, which the paper needs (width 250
  for dim 784/600); :class:`NarrowAutoRegressiveNN` rebuilds its masked layers with Pyro's own
  ``create_mask`` at the requested widths (MADE degrees stay autoregressive for any width; tested);
* Pyro adds ``sigmoid_bias`` (default 2.0, near-identity start; the reference code has none) — exposed;
* the input ordering alternates identity / reversed between steps (the reference code reuses one random
  ordering for every step; note §2.5 [N] recommends varying it); LeakyReLU(0.001) as in the code.

**Auxiliary bound** (Eqs. 9-10).  With a reverse model ``r(z | w, γ)`` the objective is
``E[log p(D | w, γ)] - E_z KL(q(w, γ | z) || p(w, γ)) - E[log q(z)] + E[log r(z | w, γ)]`` (≤ the ELBO of
the marginal ``q(w, γ)`` ≤ ``log p(D)``).  ``r`` (Eq. 11): ``s̄ = mean_j hardtanh(Σ_i e_i w_ij γ_ij)``,
``ν = d_1 s̄``, ``log τ² = d_2 s̄`` (``e, d_1, d_2 ∈ R^in``), ``z_B`` = a second ``K_r``-step IAF applied
forward to ``z_K``, ``log r = log N(z_B; ν, τ²) + Σ log κ^r`` — with the full vector ``z_B`` (the reference
code's ``z_b[-1]`` bug is not copied, note §2.5 quirk 1).  In weight-space mode ``e^T(w ⊙ γ)`` uses the
sampled ``(γ, w)``; in LCRT mode it is drawn from its LCRT Gaussian (note §2.5 [C]).

**Pyro mapping.**  ``z_0`` is an auxiliary guide site ``fc{l}.z0`` (scored ``log q_0(z_0)``; not exported by
:func:`zoo.infer.predict.posterior_samples`); ``pyro.factor("fc{l}.zflow", -Σ log κ - log r)`` completes
``log q(z) - log r``.  The KL given ``z`` is analytic (``spike_slab_kl`` / ``gaussian_kl`` at loc ``zμ``)
via the masked-site + factor convention of :mod:`guides.lbbnn.meanfield`.  Like :class:`guides.lbbnn.lcrt.LCRTLBBNNGuide`,
both guides sample pre-activations under :class:`guides.lbbnn.lcrt.LCRT_ELBO` and genuine weight-space draws
otherwise (plain ``Trace_ELBO``, prediction, ArviZ export, checkpoints).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions.transforms import AffineAutoregressive
from pyro.nn import AutoRegressiveNN, PyroModule, PyroParam
from pyro.nn.auto_reg_nn import MaskedLinear, create_mask
from pyro.nn.module import to_pyro_module_
from torch import Tensor, nn

from guides.lbbnn.lcrt import LCRTLBBNNGuide, LCRTLinearMixin, _point_site, lcrt_moments
from guides.lbbnn.meanfield import LBBNNGuide, _pname
from zoo.core.architectures import MLP, ParamSpec
from zoo.core.gaussian import GaussianPrior
from zoo.core.model import BayesianModel
from zoo.core.validation import check_positive_int
from zoo.families.lbbnn.prior import gaussian_kl, group_prefix

__all__ = [
    "NarrowAutoRegressiveNN",
    "IAF",
    "ZFlowMixin",
    "LBBNNFlowGuide",
    "GaussianFlowGuide",
]


class NarrowAutoRegressiveNN(AutoRegressiveNN):
    """Pyro's ``AutoRegressiveNN`` (MADE, output ``(m, s)``) whose hidden widths may be smaller than the input
    dimension, as in the reference code's MADE (note §5.4 pitfall).  The masks come from Pyro's
    ``create_mask``; only the width check is bypassed."""

    def __init__(
        self,
        input_dim: int,
        hidden_dims: Sequence[int],
        permutation: Tensor,
        nonlinearity: nn.Module,
        param_dims: Sequence[int] = (1, 1),
    ) -> None:
        hidden_dims = [check_positive_int("hidden", h) for h in hidden_dims]
        with warnings.catch_warnings():  # dim = 1: Pyro suggests an affine map; the IAF is still valid
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(
                input_dim,
                [max(h, input_dim) for h in hidden_dims],
                param_dims=list(param_dims),
                permutation=permutation,
                nonlinearity=nonlinearity,
            )
        if hidden_dims == self.hidden_dims:
            return
        self.hidden_dims = hidden_dims
        self.masks, self.mask_skip = create_mask(
            input_dim, 0, hidden_dims, self.permutation, self.output_multiplier
        )
        widths = [input_dim, *hidden_dims]
        layers = [MaskedLinear(widths[i], widths[i + 1], self.masks[i]) for i in range(len(hidden_dims))]
        layers.append(MaskedLinear(hidden_dims[-1], input_dim * self.output_multiplier, self.masks[-1]))
        self.layers = nn.ModuleList(layers)


class IAF(nn.Module):
    """``K`` stable IAF steps (Eq. 7) on vectors of size ``dim``; ``forward(z) -> (z_K, Σ_k Σ_i log κ_k,i)``.

    :param hidden: MADE hidden widths (may be narrower than ``dim``, :class:`NarrowAutoRegressiveNN`).
    :param num_steps: ``K`` (paper: 2).
    :param sigmoid_bias: added to ``s`` before the sigmoid (Pyro's convention; 0 = the paper's Eq. 7 as
        written).
    """

    def __init__(
        self, dim: int, hidden: Sequence[int] = (50, 50), num_steps: int = 2, sigmoid_bias: float = 2.0
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        check_positive_int("num_steps", num_steps)
        steps = []
        for k in range(num_steps):
            perm = torch.arange(dim) if k % 2 == 0 else torch.arange(dim).flip(0)
            arn = NarrowAutoRegressiveNN(dim, hidden, perm, nn.LeakyReLU(0.001))
            steps.append(AffineAutoregressive(arn, stable=True, sigmoid_bias=float(sigmoid_bias)))
        self.steps = nn.ModuleList(steps)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        logdet = z.new_zeros(z.shape[:-1])
        for t in self.steps:
            y = t(z)
            logdet = logdet + t.log_abs_det_jacobian(z, y)
            z = y
        return z, logdet


def _iaf(dim: int, hidden: Sequence[int], num_steps: int, sigmoid_bias: float) -> IAF:
    flow = IAF(dim, hidden, num_steps, sigmoid_bias)
    to_pyro_module_(flow)  # its nn.Parameters become pyro params of the fit's param-store scope
    return flow


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
            setattr(self, _pname(p, "z_loc"), PyroParam(init_z_loc + 0.01 * torch.randn(d_in)))
            setattr(self, _pname(p, "z_logvar"), PyroParam(init_z_logvar + 0.01 * torch.randn(d_in)))
            setattr(self, _pname(p, "zflow"), _iaf(d_in, flow_hidden, num_steps, sigmoid_bias))
            setattr(self, _pname(p, "reverse_flow"), _iaf(d_in, flow_hidden, reverse_steps, sigmoid_bias))
            for what in ("reverse_e", "reverse_d1", "reverse_d2"):
                setattr(self, _pname(p, what), PyroParam(init_reverse_scale * torch.randn(d_in)))

    def _zp(self, spec: ParamSpec, what: str):
        return getattr(self, _pname(group_prefix(spec), what))

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
        """``a = e^T(w ⊙ γ)``: exact from a weight-space draw, else an LCRT draw (LCRT mode, note §2.5)."""
        e = self._zp(spec, "reverse_e")
        if weight is not None:
            return torch.matmul(weight, e)
        c = self._lcrt_cache[spec.layer]
        mean, var = lcrt_moments(e.unsqueeze(0), c["loc"], c["scale"], None, None, c["logits"], c["z"])
        return (mean + var.clamp_min(1e-12).sqrt() * torch.randn_like(mean)).squeeze(-2)

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


class LBBNNFlowGuide(ZFlowMixin, LCRTLBBNNGuide):
    """LBBNN-FLOW (Eqs. 5-11) on the spike-and-slab model; see the module docstring.

    :param flow_hidden: MADE hidden widths of every IAF (paper: (250, 250) images, (100, 100) logistic).
    :param num_steps: IAF steps of ``q(z)`` (paper 2); ``reverse_steps``: of the r-flow (paper 2).
    :param init_z_loc, init_z_logvar: initial ``μ_0`` and ``logvar_0`` (the code: logvar ``-9``, note §2.5;
        ``μ_0 = 1`` starts at the plain LCRT family rather than the code's ``N(0, 1)``).
    :param init_reverse_scale: sd of the initial ``e, d_1, d_2`` (the code: 1 images, 0.001 logistic).
    Other keyword arguments go to :class:`guides.lbbnn.lcrt.LCRTLBBNNGuide`.
    """

    def __init__(
        self,
        model: BayesianModel,
        flow_hidden: Sequence[int] = (50, 50),
        num_steps: int = 2,
        reverse_steps: int = 2,
        sigmoid_bias: float = 2.0,
        init_z_loc: float = 1.0,
        init_z_logvar: float = -9.0,
        init_reverse_scale: float = 1.0,
        **kwargs,
    ) -> None:
        super().__init__(model, **kwargs)
        self._init_zflows(
            self._wspecs,
            flow_hidden,
            num_steps,
            reverse_steps,
            sigmoid_bias,
            init_z_loc,
            init_z_logvar,
            init_reverse_scale,
        )

    def layer_z(self, g: int, spec: ParamSpec) -> Tensor:
        return self.sample_layer_z(g, spec)

    def layer_done(self, g, spec, z, gamma, theta) -> None:
        self.add_zflow_factor(g, spec, z, None if gamma is None else gamma * theta)

    @torch.no_grad()
    def _draw_params(self, num: int, mode: str, threshold: float) -> dict[str, Tensor]:
        """As :meth:`LBBNNGuide._draw_params` with slab means ``z μ`` (a fresh ``z`` per draw; the ``mean``
        modes use the flow image of ``μ_0``)."""
        out = LBBNNGuide._draw_params(self, num, mode, threshold)
        point = mode in ("mean", "mpm-mean")
        for g, s in enumerate(self._wspecs):
            loc, scale = self.slab_params(s)
            z = self.draw_z(s, 1 if point else num, mean=point).to(loc.dtype).unsqueeze(-2)
            if mode == "mean":
                out[s.name] = self.expected_inclusion(g, s) * loc * z
                continue
            if mode == "mpm-mean":
                out[s.name] = (self.expected_inclusion(g, s) > threshold).to(loc.dtype) * loc * z
                continue
            theta = loc * z + scale * torch.randn((num, *s.shape), dtype=loc.dtype, device=loc.device)
            if mode == "mpm":
                gamma = (self.expected_inclusion(g, s) > threshold).to(loc.dtype)
            else:
                gamma = torch.bernoulli(torch.sigmoid(self.draw_inclusion_logits(g, s, num)))
            out[s.name] = gamma * theta
        return out


class GaussianFlowGuide(ZFlowMixin, LCRTLinearMixin, PyroModule):
    """BNN-FLOW / MNF (note §2.6): Eq. (5) with ``α ≡ 1`` on a model with a :class:`GaussianPrior`
    (e.g. ``mfvi-bnn``): sites ``fc{l}.weight ~ N(z μ, σ²)``, ``fc{l}.bias ~ N(μ_b, σ_b²)``, closed-form
    Gaussian KL given ``z``, the same q-flows and reverse models as :class:`LBBNNFlowGuide`.

    A Gaussian/Gamma likelihood noise site gets a LogNormal factor (as the LBBNN guides).
    """

    def __init__(
        self,
        model: BayesianModel,
        flow_hidden: Sequence[int] = (50, 50),
        num_steps: int = 2,
        reverse_steps: int = 2,
        sigmoid_bias: float = 2.0,
        init_z_loc: float = 1.0,
        init_z_logvar: float = -9.0,
        init_reverse_scale: float = 1.0,
        init_scale: float = 0.2,
        init_rho: tuple[float, float] = (-5.0, -4.0),
    ) -> None:
        super().__init__()
        if not isinstance(model, BayesianModel):
            raise TypeError(f"model must be a zoo BayesianModel, got {type(model).__name__}")
        if not isinstance(model.prior, GaussianPrior):
            raise TypeError(f"model.prior must be a GaussianPrior, got {type(model.prior).__name__}")
        if not isinstance(model.architecture, MLP):
            raise TypeError(f"model.architecture must be a zoo MLP, got {type(model.architecture).__name__}")
        self._model = (model,)
        self._specs = list(model.specs)
        self._wspecs = [s for s in self._specs if s.role == "weight"]
        self._lcrt_cache = None
        lo, hi = init_rho
        for s in self._specs:
            setattr(self, _pname(s.name, "loc"), PyroParam((torch.rand(s.shape) * 2 - 1) * init_scale))
            setattr(self, _pname(s.name, "rho"), PyroParam(lo + (hi - lo) * torch.rand(s.shape)))
        self._init_zflows(
            self._wspecs,
            flow_hidden,
            num_steps,
            reverse_steps,
            sigmoid_bias,
            init_z_loc,
            init_z_logvar,
            init_reverse_scale,
        )
        self._noise_site = LBBNNGuide._find_noise_site(model)
        if self._noise_site is not None:
            self.noise_loc = PyroParam(torch.tensor(math.log(0.1 if self._noise_site == "sigma2" else 10.0)))
            self.noise_scale = PyroParam(torch.tensor(0.1), dist.constraints.positive)

    @property
    def model(self) -> BayesianModel:
        return self._model[0]

    def slab_params(self, spec: ParamSpec) -> tuple[Tensor, Tensor]:
        """``(μ, σ)`` of a weight or bias spec (``σ = softplus(ρ)``)."""
        return getattr(self, _pname(spec.name, "loc")), F.softplus(getattr(self, _pname(spec.name, "rho")))

    def _site(self, spec: ParamSpec, loc: Tensor, scale: Tensor) -> Tensor:
        prior = self.model.prior
        n = len(spec.shape)
        kl = gaussian_kl(loc, scale, prior.scale_for(spec) ** 2).sum(tuple(range(-n, 0)))
        if self.lcrt_mode:  # the LCRT messenger masks the model's score of the point value
            v = _point_site(spec.name, spec.shape, loc)
            pyro.factor(f"{spec.name}.kl", kl, has_rsample=True)
        else:
            v = pyro.sample(spec.name, dist.Normal(loc, scale).to_event(n).mask(False))
            pyro.factor(f"{spec.name}.kl", kl + prior.distribution(spec).log_prob(v), has_rsample=True)
        return v

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        for g, s in enumerate(self._wspecs):
            loc, scale = self.slab_params(s)
            z = self.sample_layer_z(g, s)
            w = self._site(s, loc * z.unsqueeze(-2), scale)
            if self.lcrt_mode:
                self._lcrt_cache[s.layer] = {"logits": None, "loc": loc, "scale": scale, "z": z}
            self.add_zflow_factor(g, s, z, None if self.lcrt_mode else w)
        for s in self._specs:
            if s.role == "bias":
                loc, scale = self.slab_params(s)
                self._site(s, loc, scale)
                if self.lcrt_mode:
                    self._lcrt_cache[("bias", s.layer)] = (loc, scale)
        if self._noise_site is not None:
            pyro.sample(self._noise_site, dist.LogNormal(self.noise_loc, self.noise_scale))
