"""A Dirichlet-Laplace shrinkage BNN for pyro-bnn-zoo: prior, guide and the registry entry ``dl-bnn``.

An example of a model that lives *outside* the zoo and joins it as a plugin (the entry point
``pyro_bnn_zoo.models: dl-bnn = zoo_dirichlet_laplace:register``, or ``zoo ... --plugin <this file>``).

**The prior** (Bhattacharya, Pati, Pillai & Dunson 2015, "Dirichlet-Laplace priors for optimal shrinkage",
JASA 110(512), 1479-1490, arXiv:1401.5398, §3).  For a vector ``theta`` of ``n`` coefficients the DL_a prior
is ``theta_j | phi, tau ~ DE(phi_j tau)`` (double exponential with scale ``phi_j tau``),
``phi ~ Dir(a, ..., a)``, ``tau ~ Gamma(n a, 1/2)`` (rate 1/2), or, writing the Laplace as a normal scale
mixture, ``theta_j | psi_j, phi_j, tau ~ N(0, psi_j phi_j^2 tau^2)`` with ``psi_j ~ Exp(1/2)``.  Because
``tau ~ Gamma(n a, 1/2)`` and ``phi ~ Dir(a)`` are independent, the products ``phi_j tau`` are independent
``Gamma(a, 1/2)`` (normalized-gamma representation of the Dirichlet), so ``E[psi phi_j^2 tau^2] =
2 * 4 a (a + 1)``.  The paper recommends ``a = 1/2`` (DL_{1/2}) or ``a = 1/n``.

**Adapted to an MLP** (our choices, not the paper's; it treats regression coefficients):

* *one DL prior per layer, node-wise over the layer's input units*: for ``W_l`` of shape ``(K, J)``
  (``J`` = fan-in), ``phi_l ~ Dir(a, ..., a)`` has ``J`` entries and ``tau_l ~ Gamma(J a, 1/2)``; every
  weight ``w_kj`` leaving input unit ``j`` shares the scale ``phi_j tau`` and keeps its own local
  ``psi_kj``.  The Dirichlet stays small (a per-weight Dirichlet over tens of thousands of weights with
  ``a = 1/n`` underflows in float32), and a column whose ``phi_j tau`` collapses switches off input
  feature ``j`` (first layer) or hidden unit ``j`` (its outgoing weights) — group shrinkage, like the zoo's
  node-wise horseshoe, but the group is the *sending* unit;
* *a fixed per-layer scale* ``c_l = weight_scale / sqrt(8 a (a + 1) J)`` multiplies the DL scale, so the
  prior variance of every weight is ``weight_scale^2 / J`` (the fan-in scaling of a standard BNN prior);
  the shrinkage profile (the shape of the marginal) is the DL_a one;
* biases are not shrunk: ``b ~ N(0, bias_scale^2)``;
* ``psi`` is integrated out by default (``sample_psi=False``): the weight site is the exact Laplace
  ``DE(c_l phi_j tau)`` of the paper's first form, which halves the latents a guide must fit; with
  ``sample_psi=True`` the scale-mixture form with the site ``<layer>.psi`` is used.

Sites per layer ``p`` (``"fc0"``): ``p.tau`` (scalar), ``p.phi`` ``(J,)``, [``p.psi`` ``(K, J)``],
``p.weight`` ``(K, J)`` and ``p.bias`` ``(K,)``; hyperparameters are buffers.

**The guide** (:class:`DLGuide`, mean field): ``q(w_kj) = N(mu, s^2)``, ``q(b_k) = N(mu, s^2)``,
``q(tau) = LogNormal``, ``q(psi_kj) = LogNormal``, and a logistic-normal ``q(phi)``: a diagonal Gaussian on
``R^(J-1)`` pushed through the stick-breaking bijection onto the simplex (Aitchison & Shen 1980, "Logistic-
normal distributions", Biometrika 67(2)), which has a density and reparameterized draws and, unlike a
Dirichlet ``q``, no exact zeros in float32.  The likelihood's latents (the noise precision) get a Pyro
``AutoNormal``.  The ELBO is ``Trace_ELBO``'s Monte Carlo estimate; there is no closed form for the
Dirichlet-Laplace KL.  This is the family Pyro's ``AutoNormal`` would build over the same model (its
``biject_to`` maps the simplex by stick-breaking and the positive reals by ``exp``), which is why the entry
also offers ``normal``: :class:`DLGuide` writes it out so the factors are named, started at the prior means
and read back (:meth:`DLGuide.column_scales`).  A richer family comes from the zoo itself: its weight-space
z-flow guide (``flow``, :mod:`guides.flows.weightspace`) serves any prior with one continuous site per
parameter, this one included.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.distributions.transforms import StickBreakingTransform
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroParam
from torch import Tensor

from guides.autoguides import autoguide_factory, init_to_lecun
from guides.flows.weightspace import weight_space_factory
from zoo import MLP, BayesianModel, LikelihoodOptions, ModelEntry, ParamSpec, Prior, options_likelihood
from zoo.architectures import ACTIVATIONS
from zoo.core.config import resolve
from zoo.core.validation import check_positive

__all__ = ["DirichletLaplacePrior", "DLGuide", "DLOptions", "build", "register", "NAME", "REFERENCES"]

NAME = "dl-bnn"
REFERENCES = (
    "Bhattacharya, Pati, Pillai & Dunson 2015, Dirichlet-Laplace priors for optimal shrinkage "
    "(JASA 110(512); arXiv:1401.5398)",
)


def _prefix(spec: ParamSpec) -> str:
    return spec.name.rsplit(".", 1)[0] if "." in spec.name else f"layer{spec.layer}"


class DirichletLaplacePrior(Prior):
    """Node-wise Dirichlet-Laplace prior DL_a on the weights of an MLP (see the module docstring).

    :param a: the Dirichlet concentration ``a`` (``1/2``: the paper's DL_{1/2}).
    :param weight_scale: every weight's prior standard deviation is ``weight_scale / sqrt(fan_in)``.
    :param bias_scale: the Gaussian biases' standard deviation.
    :param sample_psi: emit the local scales ``<layer>.psi`` (scale-mixture form) instead of integrating
        them out (exact Laplace).
    """

    def __init__(
        self, a: float = 0.5, weight_scale: float = 1.0, bias_scale: float = 1.0, sample_psi: bool = False
    ) -> None:
        super().__init__()
        for name, value in (("a", a), ("weight_scale", weight_scale), ("bias_scale", bias_scale)):
            self.register_buffer(name, torch.tensor(check_positive(name, value)))
        if not isinstance(sample_psi, bool):
            raise TypeError(f"sample_psi must be a bool, got {type(sample_psi).__name__}")
        self.sample_psi = sample_psi

    def config(self) -> dict:
        return {
            "a": float(self.a),
            "weight_scale": float(self.weight_scale),
            "bias_scale": float(self.bias_scale),
            "sample_psi": self.sample_psi,
        }

    def layer_scale(self, fan_in: int) -> Tensor:
        """``c_l = weight_scale / sqrt(8 a (a + 1) J)``: makes ``Var(w) = weight_scale^2 / J``."""
        return self.weight_scale / torch.sqrt(8 * self.a * (self.a + 1) * fan_in)

    def weight_variance(self, fan_in: int) -> Tensor:
        """The prior variance of one weight, ``c_l^2 E[psi] E[(phi_j tau)^2] = c_l^2 * 2 * 4 a (a + 1)``."""
        return self.layer_scale(fan_in) ** 2 * 8 * self.a * (self.a + 1)

    def sample_params(self, specs: Sequence[ParamSpec]) -> dict[str, Tensor]:
        params: dict[str, Tensor] = {}
        for s in specs:
            if s.role == "bias":
                loc = torch.zeros_like(self.bias_scale)
                d = dist.Normal(loc, self.bias_scale).expand(s.shape).to_event(len(s.shape))
                params[s.name] = pyro.sample(s.name, d)
            else:
                params[s.name] = self._sample_weight(s)
        return params

    def _check_weight(self, s: ParamSpec) -> tuple[int, int]:
        if len(s.shape) != 2 or s.unit_dim != 0:
            name = type(self).__name__
            raise ValueError(f"specs: {name} needs (out, in) weight matrices; {s.name!r} has shape {s.shape}")
        return s.shape

    def _sample_weight(self, s: ParamSpec) -> Tensor:
        k, j = self._check_weight(s)
        p = _prefix(s)
        half = torch.full_like(self.a, 0.5)
        tau = pyro.sample(f"{p}.tau", dist.Gamma(j * self.a, half))
        phi = pyro.sample(f"{p}.phi", dist.Dirichlet(self.a.expand(j)))
        scale = self.layer_scale(j) * phi[..., None, :] * tau[..., None, None]  # (..., 1, J): DE scale
        scale = scale.expand(*scale.shape[:-2], k, j)
        if self.sample_psi:
            psi = pyro.sample(f"{p}.psi", dist.Exponential(half).expand((k, j)).to_event(2))
            w_dist = dist.Normal(torch.zeros_like(scale), scale * psi.sqrt())
        else:
            w_dist = dist.Laplace(torch.zeros_like(scale), scale)
        return pyro.sample(s.name, w_dist.to_event(2))


@dataclasses.dataclass(frozen=True)
class DLOptions(LikelihoodOptions):
    """Keyword options of :func:`build`: the prior's ``a``, ``weight_scale``, ``bias_scale`` and
    ``sample_psi`` (:class:`DirichletLaplacePrior`) and the hidden ``activation``.  Deriving from
    :class:`zoo.LikelihoodOptions` gives the entry the zoo's regression likelihood options — the noise
    prior (here a Gamma on the precision, ``Gamma(6, 6)`` as in Ghosh, Yao & Doshi-Velez 2019, §6),
    ``heteroscedastic`` and ``student_t_df`` — so ``zoo fit --likelihoods`` can choose among them."""

    a: float = 0.5
    weight_scale: float = 1.0
    bias_scale: float = 1.0
    sample_psi: bool = False
    activation: str = "relu"
    noise_concentration: float = 6.0
    noise_rate: float = 6.0

    def validate(self) -> None:
        super().validate()  # the likelihood options
        for name in ("a", "weight_scale", "bias_scale"):
            check_positive(name, getattr(self, name))
        if not isinstance(self.sample_psi, bool):
            raise ValueError(f"sample_psi must be a bool, got {self.sample_psi!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")


def build(
    in_features: int,
    out_features: int,
    task: str,
    hidden: Sequence[int],
    options: DLOptions | Mapping | None = None,
    **kwargs,
) -> BayesianModel:
    """``MLP(in, hidden, out) x DirichletLaplacePrior x likelihood of task`` (regression: Gaussian or
    Student-t with a Gamma prior on the precision, :func:`zoo.options_likelihood`); ``options``
    (:class:`DLOptions` or a mapping) updated by keywords."""
    opts = resolve(DLOptions, options, kwargs)
    lik = options_likelihood(task, out_features, "gamma", opts)
    arch = MLP(in_features, hidden, lik.network_outputs, activation=opts.activation)
    prior = DirichletLaplacePrior(opts.a, opts.weight_scale, opts.bias_scale, opts.sample_psi)
    return BayesianModel(arch, prior, lik)


def _attr(name: str, what: str) -> str:
    return f"{name.replace('.', '_')}_{what}"


class DLGuide(PyroModule):
    """Mean-field guide of a :class:`DirichletLaplacePrior` model (see the module docstring).

    :param model: a zoo ``BayesianModel`` whose prior is a :class:`DirichletLaplacePrior`.
    :param init_sd: initial standard deviation of every Gaussian factor (weights, biases, ``log tau``,
        ``log psi``, the stick-breaking logits) and of the ``AutoNormal`` part.
    """

    def __init__(self, model: BayesianModel, init_sd: float = 1e-2) -> None:
        super().__init__()
        prior = getattr(model, "prior", None)
        if not isinstance(prior, DirichletLaplacePrior):
            raise ValueError(
                f"model: DLGuide needs a DirichletLaplacePrior, got prior {type(prior).__name__}"
            )
        self.init_sd = check_positive("init_sd", init_sd)
        self.sample_psi = prior.sample_psi
        self._specs = list(model.specs)
        ref = prior.a
        mine = []
        for s in self._specs:
            mine.append(s.name)
            if s.role == "weight":
                k, j = prior._check_weight(s)
                mine += self._init_layer(_prefix(s), k, j, prior, ref)
            loc = torch.randn(s.shape, dtype=ref.dtype, device=ref.device) / math.sqrt(s.fan_in)
            self._gaussian(s.name, loc if s.role == "weight" else torch.zeros_like(loc))
        self.rest = AutoNormal(poutine.block(model, hide=mine), init_loc_fn=init_to_lecun, init_scale=init_sd)

    def _gaussian(self, name: str, loc: Tensor) -> None:
        setattr(self, _attr(name, "loc"), PyroParam(loc))
        setattr(self, _attr(name, "sd"), PyroParam(torch.full_like(loc, self.init_sd), constraints.positive))

    def _init_layer(self, p: str, k: int, j: int, prior: DirichletLaplacePrior, ref: Tensor) -> list[str]:
        """Factors of ``p.tau`` (at the prior mean ``2 J a``), ``p.phi`` (at the simplex centre) and ``p.psi``
        (at the prior mean 2); returns the site names."""
        self._gaussian(f"{p}.tau", torch.log(2 * j * prior.a.detach().clone()))
        self._gaussian(f"{p}.phi", StickBreakingTransform().inv(torch.full((j,), 1.0 / j).to(ref)))
        if not self.sample_psi:
            return [f"{p}.tau", f"{p}.phi"]
        self._gaussian(f"{p}.psi", torch.full((k, j), math.log(2.0)).to(ref))
        return [f"{p}.tau", f"{p}.phi", f"{p}.psi"]

    def loc_sd(self, name: str) -> tuple[Tensor, Tensor]:
        """The ``(loc, sd)`` of the Gaussian factor of site ``name`` (on the log / logit scale for
        ``tau``, ``psi`` and ``phi``)."""
        return getattr(self, _attr(name, "loc")), getattr(self, _attr(name, "sd"))

    def factor(self, name: str) -> dist.Distribution:
        """``q`` of site ``name`` as a Pyro distribution (event dims = the site's)."""
        loc, sd = self.loc_sd(name)
        base = dist.Normal(loc, sd)
        if name.endswith(".phi"):
            return dist.TransformedDistribution(base.to_event(1), [StickBreakingTransform()])
        if name.endswith(".tau") or name.endswith(".psi"):
            base = dist.LogNormal(loc, sd)
        return base.to_event(loc.dim())

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        for s in self._specs:
            if s.role == "weight":
                p = _prefix(s)
                for extra in ("tau", "phi", "psi") if self.sample_psi else ("tau", "phi"):
                    pyro.sample(f"{p}.{extra}", self.factor(f"{p}.{extra}"))
            pyro.sample(s.name, self.factor(s.name))
        self.rest(x, y, subsample)

    @torch.no_grad()
    def column_scales(self, model: BayesianModel) -> dict[str, Tensor]:
        """Per layer, the DL scale ``c_l phi_j tau`` of each input unit ``j`` at the guide's median
        (``exp`` of the log-scale means; ``phi`` at the stick-breaking image of its logit mean): small
        entries are shrunk-away features / units."""
        out = {}
        for s in self._specs:
            if s.role == "weight":
                p = _prefix(s)
                tau = self.loc_sd(f"{p}.tau")[0].exp()
                phi = StickBreakingTransform()(self.loc_sd(f"{p}.phi")[0])
                out[p] = model.prior.layer_scale(s.fan_in) * phi * tau
        return out


def register() -> ModelEntry:
    """Register ``dl-bnn`` in the zoo's registry (the plugin hook: the entry point and ``--plugin`` call
    it); returns the entry."""
    from zoo.registry import register as zoo_register

    return zoo_register(
        ModelEntry(
            name=NAME,
            summary="Dirichlet-Laplace (DL_1/2) node-wise shrinkage BNN, mean-field guide [example plugin]",
            build=build,
            options=DLOptions,
            guides={
                "meanfield": DLGuide,
                "normal": autoguide_factory("normal"),
                "flow": weight_space_factory("flow"),
            },
            fit_defaults={"steps": 5000, "lr": 1e-2, "batch_size": 128, "optimizer": "adam"},
            references=REFERENCES,
        )
    )
