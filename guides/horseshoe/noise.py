"""The noise factor of the horseshoe guides: ``q(gamma) = Gamma(a, b)`` for a Gaussian likelihood with
precision ``gamma ~ Gamma(a0, b0)`` (Ghosh, Yao & Doshi-Velez 2019, "Model selection in Bayesian neural
networks via horseshoe priors", arXiv:1705.10388, §6 and App. C.1: ``Gamma(6, 6)``).

The paper learns ``(a, b)`` by gradient, like every other factor.  Because ``gamma`` is conditionally
conjugate, the ELBO's optimum over ``q(gamma)`` with ``q(W)`` fixed is available in closed form (the
standard coordinate-ascent update, e.g. Bishop 2006, §10.1.3; Blei, Kucukelbir & McAuliffe 2017, Eq. 18)::

    a* = a0 + N O / 2,        b* = b0 + E_q(W)[ sum_n ||y_n - f(W, x_n)||^2 ] / 2,

with ``N`` training rows and ``O`` outputs sharing one precision. Under a Student-t likelihood
(:class:`zoo.core.student_t.StudentTLikelihood`, a scale mixture of normals) each squared error carries the
weight ``(df + 1) / (df + E[gamma] z_n)`` of its mixing variable (Tipping & Lawrence 2005, Neurocomputing 69),
so ``b*`` depends on ``E[gamma] = a / b``: the steps use the current ``q(gamma)``, the final update solves the
fixed point (:func:`zoo.infer.noise.weighted_noise_rate`). ``noise_update="natural"`` (the default) applies it
as the stochastic natural-gradient step of Hoffman, Blei, Wang & Paisley (2013, "Stochastic variational
inference", JMLR 14, Eq. 25) after every gradient step: the natural parameters ``(a - 1, -b)`` move a fraction
``rho_t = t^-kappa`` (``kappa`` = :data:`NOISE_STEP_POWER`, Robbins-Monro for ``0.5 < kappa <= 1``) towards
the closed form, whose expected squared error is estimated without bias from one weight-space draw on the
minibatch, scaled by ``N / B``. The first step (``rho_1 = 1``) sets ``a = a0 + N O / 2`` exactly; ``b`` then
averages the estimates with a memory that shortens as ``t`` grows.

Why not the gradient: through the softplus-parameterized ``(a, b)`` Adam moves ``a`` by roughly the learning
rate per step, so at the paper's 5000 steps and lr 0.005 ``a`` ends an order of magnitude short of
``a0 + N/2`` on the UCI sets (yacht: 12 against 144), and the predictive intervals come out too wide.
``noise_update="gradient"`` keeps the paper's procedure.

After the last step, :meth:`HorseshoeNoiseMixin.closed_form_finalize` computes ``b`` once more from
:data:`NOISE_FINAL_DRAWS` draws on all rows and predictions use it, so that ``q(gamma)`` is the coordinate
optimum for the weights the fit returns (the running average stays the training state, and the draws come from
a forked random stream, so a resumed fit trains exactly as an uninterrupted one): the running average
describes the last few hundred steps, and the last Adam iterate's fit can differ from them (naval, split 0:
training E[SSE]/N .0107 to .0183 between checkpoints 500 steps apart).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import constraints
from pyro.nn import PyroParam
from torch import Tensor

from zoo.core.model import BayesianModel
from zoo.infer.noise import expected_squared_error, final_noise_sse
from zoo.ops.transforms import inv_softplus

__all__ = [
    "NOISE_UPDATES",
    "NOISE_STEP_POWER",
    "NOISE_FINAL_DRAWS",
    "HorseshoeNoiseMixin",
    "expected_squared_error",
]

#: how ``q(gamma)`` is learned: the conjugate natural-gradient step, or the paper's gradient
NOISE_UPDATES = ("natural", "gradient")
#: ``kappa`` of the step size ``rho_t = t^-kappa`` of the natural-gradient noise update
NOISE_STEP_POWER = 0.6
#: weight-space draws of the exact update of ``q(gamma)`` on the final iterate (after the last step)
NOISE_FINAL_DRAWS = 32


class HorseshoeNoiseMixin:
    """``q(gamma)`` (``noise == "gamma"``) or the log-normal ``q(sigma^2)`` (``"inverse_gamma"``) of the host
    guide, which provides ``noise``, ``_noise_prior``, ``noise_update``, ``_t``, ``_lognormal_params`` and
    ``_lognormal``."""

    def _init_noise(self) -> None:
        if self.noise == "gamma":
            a0, b0 = self._noise_prior
            if self.noise_update == "natural":
                self.register_buffer("noise_conc", self._t(a0))
                self.register_buffer("noise_rate", self._t(b0))
                self.register_buffer("noise_steps", self._t(0.0))
                self.register_buffer("noise_rate_final", self._t(b0))
                self.register_buffer("noise_final", self._t(0.0))  # 1: predict with the final update
            else:
                self.noise_conc_raw = PyroParam(inv_softplus(self._t(a0)), constraints.real)
                self.noise_rate_raw = PyroParam(inv_softplus(self._t(b0)), constraints.real)
        elif self.noise == "inverse_gamma":
            self._lognormal_params("noise", self._t(-2.302585092994046))  # ln 0.1

    def _noise_params(self) -> tuple[Tensor, Tensor]:
        """``(a, b)`` of ``q(gamma) = Gamma(a, b)``."""
        if self.noise_update == "natural":
            # a tensor select, not a Python branch: no device sync in every guide call of the training loop
            return self.noise_conc, torch.where(self.noise_final > 0, self.noise_rate_final, self.noise_rate)
        return F.softplus(self.noise_conc_raw), F.softplus(self.noise_rate_raw)

    def _sample_noise(self) -> None:
        if self.noise == "gamma":
            pyro.sample("precision", dist.Gamma(*self._noise_params()))
        elif self.noise == "inverse_gamma":
            mu, var = self._lognormal("noise")
            pyro.sample("sigma2", dist.LogNormal(mu, var.sqrt()))

    def noise_step(self) -> float:
        """``rho_t`` of the next natural-gradient noise update (1 for the first)."""
        return float((self.noise_steps + 1.0) ** -NOISE_STEP_POWER)

    def closed_form_finalize(self, model: BayesianModel, x: Tensor, y: Tensor | None) -> None:
        """The exact coordinate update of ``q(gamma)`` at the final weights (module docstring); a no-op
        unless the natural-gradient update is in use and ``y`` is given."""
        if self.noise != "gamma" or self.noise_update != "natural" or y is None:
            return
        _, b0 = self._noise_prior
        # a Student-t's S is the weighted sum at the fixed point in E[gamma], iterated from the running rate
        a, b = float(self.noise_conc), float(self.noise_rate)
        sse = final_noise_sse(self, model, x, y, NOISE_FINAL_DRAWS, a, b0, b_start=b)
        self.noise_rate_final.fill_(b0 + 0.5 * sse)
        self.noise_final.fill_(1.0)

    def closed_form_begin(self) -> None:
        """Training (re)starts from the running average, not from the final update."""
        if self.noise == "gamma" and self.noise_update == "natural":
            self.noise_final.fill_(0.0)

    def update_noise(
        self, model: BayesianModel, x: Tensor, y: Tensor | None, subsample: Tensor | None = None
    ) -> None:
        """The natural-gradient step on ``q(gamma)`` (module docstring); a no-op unless the noise is a
        ``"gamma"`` precision with ``noise_update == "natural"`` and ``y`` is given."""
        if self.noise != "gamma" or self.noise_update != "natural" or y is None:
            return
        a0, b0 = self._noise_prior
        outputs = 1 if y.dim() == 1 else y.shape[-1]
        rho = self.noise_step()
        a_hat = a0 + 0.5 * x.shape[0] * outputs
        # a Student-t likelihood weighs each squared error by (df + 1) / (df + E[gamma] z) at the current q
        precision = self.noise_conc / self.noise_rate
        b_hat = b0 + 0.5 * expected_squared_error(self, model, x, y, subsample, precision)
        self.noise_conc.mul_(1.0 - rho).add_(rho * a_hat)
        self.noise_rate.mul_(1.0 - rho).add_(rho * b_hat.to(self.noise_rate.dtype))
        self.noise_steps.add_(1.0)
        self.noise_final.fill_(0.0)  # training goes on from the running average (closed_form_begin)
