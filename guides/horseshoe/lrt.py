"""Local-reparameterization ELBO for the horseshoe guides (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388,
§4.2, Eqs. 5-8, App. A.1-A.2).

:class:`HorseshoeLRTELBO` (``fit(..., loss=HorseshoeLRTELBO())``) estimates::

    ELBO = (N / B) sum_{n in batch} ln p(y_n | f_n)  +  E_q[ln p(theta)] + H[q]

* the likelihood by Monte Carlo with the local reparameterization trick: the scales are drawn once per
  particle (in the guide run), the pre-activations of layer ``l`` per datum from their exact Gaussian
  given those scales (Eqs. 7-8; the exact conditional ``q(beta | ln tau^2)`` for the structured family,
  App. A.1, §4.2.1);
* everything else analytically (App. A.2, :mod:`guides.horseshoe.analytic`).

**How it is built.**  :class:`HorseshoeLRTELBO` is Pyro's ``Trace_ELBO`` run inside a handler
(:class:`zoo.infer.elbo.HandledELBO`); the handler is :class:`HorseshoeLRTMessenger`, the zoo's one
local-reparameterization messenger (:class:`zoo.ops.local_reparam.LocalReparameterization`) with

* the sampler :meth:`HorseshoeLRTMixin.lrt_linear`, which shadows the architecture's
  ``linear(h, weight, bias, layer)`` while the model's own forward pass runs;
* every latent site of the model as a masked site (the weights ``beta``, the scales, the auxiliaries,
  the noise precision): their terms are all in the analytic part;
* the guide's per-run cache (LRT mode) opened on entry and closed on exit.

In LRT mode the guide draws all the randomness of the pass, layer by layer in the order of the paper's
forward recipe (§4.2.1): the scales at their usual sites (log-normal, reparameterized), then the standard
normal noise ``eps`` (one per datum and unit) of that layer's pre-activations, all recorded for the
sampler, which forms ``u = mean + sqrt(var + LRT_JITTER) eps`` from the moments given the scales.  (So
the estimator consumes the random stream as the zoo's earlier hand-written LRT estimator did: a fit with
the same seed draws the same numbers.)  The weight sites and the auxiliaries ``lam, theta, rho`` are
masked point values (nothing reads them), and the guide adds
``pyro.factor("hs.analytic", -(E_q[ln p(theta)] + H[q]))`` (a guide factor enters the ELBO with a minus
sign).  Pyro's estimator then computes exactly the sum above: the data plate scales the likelihood by
``N / B``, particles are averaged, and the noise precision reaches the likelihood through the model.

It is an unbiased estimate of the *same* ELBO that ``Trace_ELBO`` estimates on the same guide (tested),
with lower variance.  Outside the messenger nothing changes, so prediction, export, checkpoints (which
resume with ``Trace_ELBO``) and ``Predictive`` see ordinary weight-space draws.  Non-centered priors and
MLP architectures only; a guide with ``supports_lrt = False`` (the z-flow guide) is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import Tensor

from zoo.core.architectures import MLP
from zoo.core.model import BayesianModel
from zoo.families.horseshoe.prior import regularized_variance
from zoo.infer.elbo import HandledELBO
from zoo.ops.local_reparam import LocalReparameterization

__all__ = ["ANALYTIC_SITE", "LRT_JITTER", "HorseshoeLRTMixin", "HorseshoeLRTMessenger", "HorseshoeLRTELBO"]

#: name of the guide factor that carries ``-(E_q[ln p(theta)] + H[q])`` in LRT mode
ANALYTIC_SITE = "hs.analytic"
#: added to every pre-activation variance before its square root (a zero-variance unit would otherwise
#: give an infinite gradient; the value used for the paper's LRT sampler)
LRT_JITTER = 1e-8


class HorseshoeLRTMixin:
    """The guide side of the LRT estimator: moments of the pre-activations given the scales (Eqs. 7-8), the
    sampler that shadows ``architecture.linear`` and the per-run record of the scales and noise.

    The host (:class:`guides.horseshoe.factorized.HorseshoeGuide`) provides ``layers``, ``regularized``,
    ``centered``, ``noise``, ``_beta_moments(i)`` and ``_lrt_hidden(i, a, tau2)`` (the family's mean and
    variance of ``b = beta_k^T a`` given ``tau^2``), and in its ``forward`` calls :meth:`_lrt_begin`,
    :meth:`_lrt_keep` after each scale, :meth:`_lrt_draw_noise` after each layer's sites and emits
    :meth:`_lrt_point_site` values for the sites whose terms are analytic.
    """

    #: whether :class:`HorseshoeLRTELBO` (analytic terms + local reparameterization) can train this guide
    supports_lrt = True
    #: the scales and noise drawn in the current guide run while a :class:`HorseshoeLRTMessenger` is active
    _lrt_run: dict | None = None

    @property
    def lrt_mode(self) -> bool:
        """True while a :class:`HorseshoeLRTMessenger` for this guide is active."""
        return self._lrt_run is not None

    def check_lrt(self, model: BayesianModel) -> None:
        """Raise unless :class:`HorseshoeLRTELBO` can train this guide on ``model``."""
        if not self.supports_lrt:
            raise ValueError(
                f"{type(self).__name__} trains with Trace_ELBO: it has no local reparameterization "
                "(supports_lrt = False)"
            )
        arch = getattr(model, "architecture", None)
        if not isinstance(arch, MLP):
            raise TypeError(f"model: local reparameterization needs an MLP, got {type(arch).__name__}")
        if self.centered:
            raise ValueError("centered: local reparameterization is implemented for the non-centered prior")

    def lrt_sites(self) -> frozenset[str]:
        """The model's latent sites, all of whose terms are in the analytic part (masked in LRT mode)."""
        names = {"hs.c2"} if self.regularized else set()
        for layer in self.layers:
            p = layer.prefix
            scales = ("rho", "kappa2") if layer.output else ("lam", "tau2", "theta", "v2")
            names.update(f"{p}.{s}" for s in (*scales, "beta"))
        if self.noise == "gamma":
            names.add("precision")
        elif self.noise == "inverse_gamma":
            names.add("sigma2")
        return frozenset(names)

    def _lrt_begin(self) -> None:
        """Start a guide run: forget what the previous run (particle) drew."""
        if self._lrt_run is not None:
            self._lrt_run.clear()

    def _lrt_keep(self, key: int | str, value: Tensor | dict[str, Tensor]) -> None:
        """Record what this guide run drew for ``key`` (LRT mode only): ``"c2"``, or a layer index with
        ``{"tau2", "v2"}`` (hidden) or ``{"kappa2"}`` (output)."""
        if self._lrt_run is not None:
            self._lrt_run[key] = value

    def _lrt_point_site(self, name: str, value: Tensor) -> Tensor:
        """A masked point value for site ``name`` whose term is analytic (LRT mode: nothing reads it)."""
        return pyro.sample(name, dist.Delta(value, event_dim=value.dim()).mask(False))

    def _lrt_draw_noise(self, i: int, x: Tensor | None, subsample: Tensor | None) -> None:
        """LRT mode: the standard normal noise of layer ``i``'s pre-activations, ``(B, K)``."""
        if self._lrt_run is None:
            return
        if x is None:
            raise ValueError("x is required: the LRT guide run draws one noise value per datum")
        batch = x.shape[0] if subsample is None else subsample.shape[0]
        like = self._lrt_run[i].get("kappa2", self._lrt_run[i].get("tau2"))
        shape = (batch, self.layers[i].units)
        self._lrt_run[i]["eps"] = torch.randn(shape, dtype=like.dtype, device=like.device)

    def lrt_moments(
        self,
        i: int,
        a: Tensor,
        tau2: Tensor | None,
        v2: Tensor | None,
        c2: Tensor | None,
        kappa2: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Mean and variance of the pre-activations ``u = tau~ v beta^T a`` of layer ``i`` given the
        scales (Eqs. 7-8); for the output layer ``u = kappa beta^T a``."""
        if self.layers[i].output:
            loc, var = self._beta_moments(i)
            return kappa2.sqrt() * (a @ loc.T), kappa2 * ((a * a) @ var.T)
        mb, vb = self._lrt_hidden(i, a, tau2)
        s2 = regularized_variance(tau2, v2, c2)
        return s2.sqrt() * mb, s2 * vb

    def lrt_linear(self, h: Tensor, layer: int) -> Tensor:
        """Layer ``layer``'s pre-activations at input ``h`` from the scales and noise of this guide run:
        ``mean + sqrt(var + LRT_JITTER) eps``, one ``eps`` per datum and unit (Eqs. 7-8)."""
        run = self._lrt_run
        i = next((j for j, lay in enumerate(self.layers) if lay.layer == layer), None)
        if run is None or i not in run:
            raise RuntimeError("lrt_linear: the guide has not run inside a HorseshoeLRTMessenger")
        lay = self.layers[i]
        a = torch.cat([h, torch.ones_like(h[..., :1])], -1) if lay.fan == h.shape[-1] + 1 else h
        s = run[i]
        mean, var = self.lrt_moments(i, a, s.get("tau2"), s.get("v2"), run.get("c2"), s.get("kappa2"))
        return mean + torch.sqrt(var + LRT_JITTER) * s["eps"]

    def lrt_forward(self, model: BayesianModel, x: Tensor) -> tuple[Tensor, dict]:
        """One local-reparameterization draw of the network output ``f`` ``(N, out)`` and the likelihood
        latents, by the estimator's own mechanism: the guide, then the model, inside a
        :class:`HorseshoeLRTMessenger` (no sample sites leak to outer handlers)."""
        with poutine.block(), HorseshoeLRTMessenger(self, model, require_obs=False):
            guide_tr = poutine.trace(self).get_trace(x)
            model_tr = poutine.trace(poutine.replay(model, trace=guide_tr)).get_trace(x)
        return model_tr.nodes["f"]["value"], model.likelihood.latents_from_trace(model_tr)


class HorseshoeLRTMessenger(LocalReparameterization):
    """:class:`~zoo.ops.local_reparam.LocalReparameterization` for a horseshoe guide (module docstring):
    ``linear`` is shadowed by ``guide.lrt_linear``, the model's latent sites (``guide.lrt_sites()``) are
    masked and the guide runs in LRT mode.  With ``require_obs`` an unobserved ``obs`` site (``y=None``) is
    a ``ValueError``.  Re-entrant; usable as a context manager or as a handler."""

    def __init__(self, guide: HorseshoeLRTMixin, model: BayesianModel, *, require_obs: bool = True) -> None:
        guide.check_lrt(model)
        super().__init__(
            model.architecture,
            guide.lrt_linear,
            guide.lrt_sites(),
            on_enter=self._open_run,
            on_exit=self._close_run,
        )
        self.guide = guide
        self.require_obs = require_obs
        self._runs: list = []

    def _open_run(self) -> None:
        self._runs.append(self.guide._lrt_run)
        self.guide._lrt_run = {}

    def _close_run(self) -> None:
        self.guide._lrt_run = self._runs.pop()

    def _pyro_sample(self, msg) -> None:
        super()._pyro_sample(msg)
        if self.require_obs and msg["name"] == "obs" and not msg["is_observed"]:
            raise ValueError("y is required for the ELBO")


class HorseshoeLRTELBO(HandledELBO):
    """ELBO estimator with analytic prior/entropy terms and local reparameterization (module docstring):
    ``Trace_ELBO`` run inside :class:`HorseshoeLRTMessenger`.  Particles are drawn sequentially."""

    def __init__(self, num_particles: int = 1) -> None:
        super().__init__(num_particles=num_particles, max_plate_nesting=1)

    def handler(self, model: Callable, guide: Callable) -> HorseshoeLRTMessenger:
        if not isinstance(guide, HorseshoeLRTMixin):
            raise TypeError(f"guide must be a HorseshoeGuide, got {type(guide).__name__}")
        return HorseshoeLRTMessenger(guide, model)
