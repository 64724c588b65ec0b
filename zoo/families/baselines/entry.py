"""Baselines: ``mfvi-bnn`` (Gaussian prior, mean-field guide) and ``blr-cavi`` (conjugate CAVI), and the
``mfvi-uci`` protocol.  Builder options: :class:`~zoo.families.baselines.options.MFVIOptions` and
:class:`~zoo.families.baselines.options.BLROptions`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from guides.autoguides import autoguide_factory
from guides.baselines.conjugate import LinearRegressionCAVIGuide
from guides.flows.weightspace import weight_space_factory
from zoo.core.architectures import MLP
from zoo.core.config import resolve
from zoo.core.gaussian import GaussianPrior
from zoo.core.likelihood_options import options_likelihood
from zoo.core.likelihoods import IG2_NOISE_OPTIONS, GaussianLikelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import FIXED_5000_STEPS, MINIBATCH_SVI_DEFAULTS, ModelEntry, register
from zoo.experiments.reproduce import Protocol, RunSpec, register_protocol
from zoo.families.baselines.hierarchical import HierarchicalGaussianPrior
from zoo.families.baselines.options import MFVI_UNSCALED, BLROptions, MFVIOptions
from zoo.infer.noise import NO_NOISE_REFIT

__all__ = ["BLROptions", "MFVIOptions", "UCI8", "UCI_FOLDER"]


def _mfvi_build(
    in_features: int,
    out_features: int,
    task: str,
    hidden: Sequence[int],
    options: MFVIOptions | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BayesianModel:
    """``MLP x GaussianPrior x likelihood of task``; ``options`` (an :class:`MFVIOptions` or a mapping) is
    updated by keyword options (``weight_scale=0.5``, ``fan_in_scaling=True``, ...)."""
    opts = resolve(MFVIOptions, options, kwargs)
    # regression: Gaussian, inverse-gamma prior on the variance; classification ignores the noise options
    lik = options_likelihood(task, out_features, "inverse_gamma", opts)
    arch = MLP(in_features, hidden, lik.network_outputs, activation=opts.activation)
    prior = (
        HierarchicalGaussianPrior(opts.weight_scale, opts.bias_scale)
        if opts.hierarchical_scale
        else GaussianPrior(opts.weight_scale, opts.bias_scale, opts.scaled)
    )
    return BayesianModel(arch, prior, lik)


def _autoguide(name: str) -> Callable:
    return autoguide_factory(name)


#: ``mfvi-bnn``'s guides (first = default): the Pyro autoguides with the zoo's initialization, and the
#: weight-space ``factorized`` / ``tied`` families of :mod:`guides.flows.weightspace` (Ghosh et al. 2019,
#: Table 1, on the weights); :mod:`zoo.families.lbbnn.flows` adds BNN-FLOW as ``flow``.
MFVI_GUIDES = {
    **{g: _autoguide(g) for g in ("normal", "lowrank", "diagonal", "mvn", "delta", "iaf")},
    **{f: weight_space_factory(f) for f in ("factorized", "tied")},
}


register(
    ModelEntry(
        name="mfvi-bnn",
        summary="Gaussian-prior MLP BNN, mean-field Gaussian guide (the mfVI / Bayes-by-backprop baseline)",
        build=_mfvi_build,
        options=MFVIOptions,
        guides=MFVI_GUIDES,
        fit_defaults=MINIBATCH_SVI_DEFAULTS,
        references=(
            "Blundell, Cornebise, Kavukcuoglu & Wierstra 2015, Weight Uncertainty in Neural Networks "
            "(ICML; arXiv:1505.05424)",
            "Sheinkman & Wade 2025 (arXiv:2411.11132), App. D.2 'mfVI' baseline; "
            "Tomczak, Swaroop, Foong & Turner 2021 (NeurIPS) 'MF-VI'",
        ),
        extra_metrics=lambda run: _ood_if_images(run),
    )
)


def _ood_if_images(run: Any) -> dict:
    """Out-of-domain entropy (:func:`zoo.experiments.runs.ood_metrics`) for a fit on mnist10k/kmnist10k: the
    dense baseline of the LBBNN image protocols."""
    from zoo.experiments.runs import OOD_PARTNER, ood_metrics

    return ood_metrics(run) if run.dataset.name in OOD_PARTNER else {}


def _blr_build(
    in_features: int,
    out_features: int,
    task: str,
    hidden: Sequence[int],
    options: BLROptions | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> BayesianModel:
    """Bayesian linear regression ``MLP(d, (), 1, bias=False) x GaussianPrior x GaussianLikelihood`` with an
    inverse-gamma noise variance; ``options``: a :class:`BLROptions` or a mapping, updated by keywords."""
    opts = resolve(BLROptions, options, kwargs)
    if hidden:
        raise ValueError("hidden: blr-cavi is a linear model; use hidden=()")
    if out_features != 1:
        raise ValueError("out_features: blr-cavi has a single output")
    return BayesianModel(
        MLP(in_features, (), 1, bias=False),
        GaussianPrior(opts.weight_scale),
        GaussianLikelihood("inverse_gamma", opts.noise_concentration, opts.noise_rate),
    )


register(
    ModelEntry(
        name="blr-cavi",
        summary="Bayesian linear regression, Normal weights, inverse-gamma noise, full-batch mean-field CAVI",
        build=_blr_build,
        options=BLROptions,
        guides={"cavi": LinearRegressionCAVIGuide, "normal": _autoguide("normal")},
        fit_defaults={"steps": 200, "tol": 1e-10, "batch_size": None},
        references=(
            "Bishop 2006, Pattern Recognition and Machine Learning, §10.1.3; Ormerod & Wand 2010, "
            "Explaining Variational Approximations (The American Statistician 64), Algorithm 1",
        ),
        tasks=("regression",),
        default_hidden=(),
    )
)


UCI8 = ("boston", "concrete", "energy", "yacht", "wine", "kin8nm", "power", "naval")
UCI_FOLDER = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "yacht": "yacht",
    "wine": "wine-quality-red",
    "kin8nm": "kin8nm",
    "power": "power-plant",
    "naval": "naval-propulsion-plant",
}


def _mfvi_uci_runs(splits: Sequence[int] | None) -> list[RunSpec]:
    # NUTS on Sheinkman & Wade's (2025) HMC model (App. D.2)
    from zoo.experiments.nuts_runs import nuts_run_specs

    hmc = {"hierarchical_scale": True, **IG2_NOISE_OPTIONS}
    nuts = nuts_run_specs("mfvi-bnn", splits, {"options": hmc})
    splits = list(range(10)) if splits is None else list(splits)
    return [
        RunSpec(
            "mfvi-bnn",
            "mfvi-bnn",
            f"uci:{UCI_FOLDER[d]}",
            k,
            {"hidden": [50], "options": MFVI_UNSCALED, "fit_options": NO_NOISE_REFIT, **FIXED_5000_STEPS},
        )
        for d in UCI8
        for k in splits
    ] + nuts


register_protocol(
    Protocol(
        name="mfvi-uci",
        description=(
            "mfvi-bnn (Gaussian N(0,1) prior, AutoNormal mean-field guide), one hidden layer of 50 ReLU "
            "units, "
            "UCI standard splits (Hernández-Lobato & Adams 2015), inputs and targets standardized on train, "
            "metrics on the original scale from 100 posterior draws; 5000 Adam steps (lr 1e-2), batch 512.  "
            "Variant nuts (yacht, boston, splits 0-4; only with `--variants nuts`): NUTS on the HMC "
            "model of Sheinkman & Wade 2025, W ~ N(0, gamma / sqrt(fan_in)), b ~ N(0, gamma), "
            "gamma ~ IG(2, 1) (App. D.2), 4 chains x "
            "500 warm-up + 500 draws, tree depth <= 8, metrics from every draw."
        ),
        runs=_mfvi_uci_runs,
        metrics=("rmse", "nll", "coverage95"),
        opt_in=("nuts",),
        paper={
            ("mfvi-bnn", "uci:yacht"): {"rmse": 1.61, "nll": 1.96, "coverage": 0.96},
            ("mfvi-bnn", "uci:bostonHousing"): {"rmse": 3.29, "nll": 2.61, "coverage": 0.96},
            ("mfvi-bnn", "uci:energy"): {"rmse": 2.27, "nll": 2.28, "coverage": 0.95},
            ("mfvi-bnn", "uci:concrete"): {"rmse": 6.11, "nll": 3.57, "coverage": 0.8},
            ("nuts", "uci:yacht"): {"rmse": 0.56, "nll": 0.87, "coverage": 0.98},
            ("nuts", "uci:bostonHousing"): {"rmse": 2.42, "nll": 2.28, "coverage": 0.96},
        },
        paper_source=(
            "Sheinkman & Wade 2025 (arXiv:2411.11132), Table 4, mfVI and HMC rows (10 random 90/10 splits, "
            "NumPyro ADVI / NUTS; not the standard splits)"
        ),
    )
)
