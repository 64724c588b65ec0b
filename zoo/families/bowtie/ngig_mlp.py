"""``ngig-bnn``: the N-GIG shrinkage prior of the bow-tie paper on a plain (deterministic ReLU) MLP.

Sheinkman & Wade 2025 (arXiv 2411.11132) put the normal–generalized-inverse-Gaussian global–local prior
(§2.2, Eqs. 5–7, App. D.1 scaling; :class:`~zoo.families.bowtie.prior.NGIGPrior`) on the weights of a
*bow-tie* network, whose stochastic units make every CAVI update conjugate (the ``bowtie`` entry).  Their
baselines (§4, App. D.2: NUTS/HMC and ADVI in NumPyro) run on the ordinary deterministic ReLU network
``y ~ N(W_{L+1} ReLU(z_L) + b, sigma^2)``.  This entry is that network under the paper's own N-GIG prior —
the model an HMC or black-box VI baseline of the shrinkage prior fits, which separates the effect of
the prior from that of the bow-tie units and of CAVI — with the zoo's default likelihood (regression:
Gaussian with ``sigma^2 ~ IG(1, 0.01)`` on standardized targets, as ``mfvi-bnn``).

Sites: ``fc{l}.tau`` (one global scale per weight matrix), ``fc{l}.psi`` (one local scale per weight),
``fc{l}.weight ~ N(0, tau psi)``, ``fc{l}.bias ~ N(0, s_0^2)``.  No closed-form guide exists for it (the
ReLU network is not conditionally conjugate), so its guides are the continuous-latent ones: the Pyro
autoguides with the zoo's initialization (``normal``, default; ``lowrank``; ``iaf``) and the weight-space
``factorized``, ``tied`` and z-flow ``flow`` families of :mod:`guides.flows.weightspace` (the scales under
an ``AutoNormal``).  Builder options: :class:`~zoo.families.bowtie.options.NGIGOptions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guides.autoguides import autoguide_factory
from guides.flows.weightspace import weight_space_factory
from zoo.core.architectures import MLP
from zoo.core.config import resolve
from zoo.core.likelihood_options import options_likelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import MINIBATCH_SVI_DEFAULTS, ModelEntry, register
from zoo.families.bowtie.options import NGIGOptions
from zoo.families.bowtie.prior import NGIGPrior

__all__ = ["NGIGOptions", "build_ngig", "GUIDES"]

#: the guides of ``ngig-bnn`` (first = default)
GUIDES = {
    **{name: autoguide_factory(name) for name in ("normal", "lowrank", "iaf")},
    **{family: weight_space_factory(family) for family in ("factorized", "tied", "flow")},
}


def build_ngig(
    in_features: int,
    out_features: int,
    task: str,
    hidden: Sequence[int],
    options: NGIGOptions | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BayesianModel:
    """``MLP(in, hidden, out) x NGIGPrior x likelihood of task``; ``options`` (an :class:`NGIGOptions` or a
    mapping) is updated by keyword options (``nu_loc=-2.5``, ``lam_loc=1.0``, ...)."""
    opts = resolve(NGIGOptions, options, kwargs)
    lik = options_likelihood(task, out_features, "inverse_gamma", opts)
    arch = MLP(in_features, hidden, lik.network_outputs, activation=opts.activation)
    prior = NGIGPrior(
        opts.nu_glob,
        opts.delta_glob,
        opts.lam_glob,
        opts.nu_loc,
        opts.delta_loc,
        opts.lam_loc,
        opts.bias_scale,
        opts.scale_with_architecture,
    )
    return BayesianModel(arch, prior, lik)


register(
    ModelEntry(
        name="ngig-bnn",
        summary="N-GIG shrinkage prior (bow-tie paper Eqs. 5-7) on a plain ReLU MLP; autoguide/flow guides",
        build=build_ngig,
        options=NGIGOptions,
        guides=GUIDES,
        fit_defaults=MINIBATCH_SVI_DEFAULTS,
        references=(
            "Sheinkman & Wade 2025, Variational Bayesian Bow tie Neural Networks with Shrinkage "
            "(arXiv:2411.11132), §2.2 Eqs. 5-7 and App. D.1 (prior), App. D.2 (the ReLU-MLP baselines)",
        ),
    )
)
