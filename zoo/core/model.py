"""The composed Pyro model: architecture × prior × likelihood.

:class:`BayesianModel` is an ordinary Pyro model (a :class:`~pyro.nn.PyroModule`) with signature
``model(x, y=None, subsample=None)``:

1. the prior emits its sample sites and returns network parameters;
2. the likelihood emits its own latent sites (e.g. the noise variance);
3. inside ``pyro.plate("data", N, subsample=subsample)`` the network output ``f`` is recorded as the
   deterministic site ``"f"`` and the likelihood observes ``"obs"``.

``x`` and ``y`` are always the *full* training arrays; a minibatch is a tensor of row indices passed as
``subsample``.  Pyro's plate then scales the minibatch log-likelihood by ``N / len(subsample)`` — the
zoo's single ELBO convention (sum over data, full KL; :mod:`zoo.infer.loop`).  Per-datapoint local
latents (e.g. the bow-tie's activations) index the same rows.

Works unchanged with ``Trace_ELBO``, ``TraceMeanField_ELBO``, ``Predictive`` (also ``parallel=True``),
every autoguide and ``poutine`` handlers.  ``max_plate_nesting`` is 1: priors put their structure in
event dims, not plates.
"""

from __future__ import annotations

import pyro
from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.architectures import Architecture, ParamSpec
from zoo.core.likelihoods import Likelihood
from zoo.core.prior import Prior, check_site_names

__all__ = ["BayesianModel"]


class BayesianModel(PyroModule):
    max_plate_nesting = 1

    def __init__(self, architecture: Architecture, prior: Prior, likelihood: Likelihood) -> None:
        super().__init__()
        if not isinstance(architecture, Architecture):
            raise TypeError(f"architecture must be a zoo Architecture, got {type(architecture).__name__}")
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a zoo Prior, got {type(prior).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a zoo Likelihood, got {type(likelihood).__name__}")
        self.architecture = architecture
        self.prior = prior
        self.likelihood = likelihood
        self._specs = architecture.param_specs()
        check_site_names(prior, self._specs)  # a clash breaks autoguides deep inside Pyro: refuse it now

    @property
    def specs(self) -> list[ParamSpec]:
        return self._specs

    @property
    def task(self) -> str:
        return self.likelihood.task

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> Tensor:
        params = self.prior.sample_params(self._specs)
        latents = self.likelihood.sample_latents()
        with pyro.plate("data", x.shape[0], subsample=subsample, device=x.device) as idx:
            xb = x if subsample is None else x.index_select(0, idx)
            yb = y if (y is None or subsample is None) else y.index_select(0, idx)
            f = self.architecture(xb, params)
            pyro.deterministic("f", f, event_dim=1)
            self.likelihood.observe(f, yb, latents)
        return f
