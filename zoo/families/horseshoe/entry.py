"""Horseshoe BNNs of paper 004 (Ghosh, Yao & Doshi-Velez, JMLR 2019): registry entries ``hs-bnn`` and
``reg-hs-bnn`` and the protocols ``hs-toys`` and ``hs-uci``.

Model: ``MLP`` x :class:`~zoo.families.horseshoe.prior.HorseshoePrior` (non-centered by default; options
``centered``, ``regularized``, ``b0``, ``bg``, ``b_kappa``, ``c_a``, ``c_b``) x likelihood (regression:
Gaussian with ``precision ~ Gamma(6, 6)``, note §2.6).  Guides (first = default): ``factorized`` (Eq. 4 with
closed-form auxiliaries, Algorithm 1), ``structured`` (Table 1 matrix normal), ``tied``,
``semi-structured`` and the Pyro autoguide ``normal`` (to show the prior runs under any guide).
Fit defaults follow note §2.7: Adam, lr 0.005, batch 128.  ``zoo fit`` trains with ``Trace_ELBO``
(weight-space samples); the paper's local-reparameterization estimator of the same ELBO is
:class:`guides.horseshoe.lrt.HorseshoeLRTELBO` (``fit(..., loss=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from guides.autoguides import make_autoguide
from guides.horseshoe.flow import HorseshoeFlowGuide
from guides.horseshoe.factorized import HorseshoeGuide, SemiStructuredHorseshoeGuide, TiedHorseshoeGuide
from guides.horseshoe.lrt import HorseshoeLRTELBO
from guides.horseshoe.structured import StructuredHorseshoeGuide
from zoo.core.architectures import MLP
from zoo.core.likelihoods import make_likelihood
from zoo.core.model import BayesianModel
from zoo.experiments.registry import ModelEntry, register
from zoo.experiments.reproduce import Protocol, RunSpec, register_protocol
from zoo.families.baselines.entry import UCI8, UCI_FOLDER
from zoo.families.horseshoe.prior import HorseshoePrior

REFERENCES = (
    "Ghosh, Yao & Doshi-Velez 2019, Model Selection in Bayesian Neural Networks via Horseshoe Priors "
    "(JMLR 20)",
    "note shared/papers/004_horseshoe.md",
)


def build_hs(
    in_features: int,
    out_features: int,
    task: str,
    hidden: Sequence[int],
    *,
    regularized: bool = False,
    centered: bool = False,
    b0: float = 1.0,
    bg: float = 1e-5,
    b_kappa: float = 5.0,
    c_a: float = 2.0,
    c_b: float = 6.0,
    noise_concentration: float = 6.0,
    noise_rate: float = 6.0,
    activation: str = "relu",
) -> BayesianModel:
    """``MLP(in, hidden, out) x HorseshoePrior x likelihood`` (regression noise precision Gamma(6, 6))."""
    arch = MLP(in_features, hidden, 1 if task == "binary" else out_features, activation=activation)
    prior = HorseshoePrior(b0, bg, b_kappa, regularized, c_a, c_b, centered)
    # regression: Gaussian with a Gamma prior on the precision; classification ignores the noise options
    lik = make_likelihood(
        task, out_features, noise="gamma", concentration=noise_concentration, rate=noise_rate
    )
    return BayesianModel(arch, prior, lik)


def _build_reg(in_features, out_features, task, hidden, **options) -> BayesianModel:
    if options.pop("regularized", True) is not True:
        raise ValueError("regularized: reg-hs-bnn is always regularized; use hs-bnn for the plain horseshoe")
    return build_hs(in_features, out_features, task, hidden, regularized=True, **options)


GUIDES = {
    "factorized": HorseshoeGuide,
    "structured": StructuredHorseshoeGuide,
    "tied": TiedHorseshoeGuide,
    "semi-structured": SemiStructuredHorseshoeGuide,
    "normal": lambda model: make_autoguide("normal", model),
    "flow": HorseshoeFlowGuide,
}


def default_loss(model, guide):
    """The paper's training path (§4.2, App. A.2): analytic prior/entropy terms + local reparameterization,
    for the zoo's horseshoe guides on a non-centered prior over an MLP; ``Trace_ELBO`` otherwise."""
    if (
        isinstance(guide, HorseshoeGuide)
        and guide.supports_lrt
        and not model.prior.centered
        and isinstance(model.architecture, MLP)
    ):
        return HorseshoeLRTELBO()
    return None


# A unit counts as "active" in the shrinkage profile when ||E[w_kl]||_2 >= ACTIVE_FRACTION x the largest
# ||E[w_kl]||_2 of its layer.  Ours, not the paper's: it summarizes the box-plots of Fig. 7 / the sorted
# norms of Figs. 8, 19 as a number, alongside the paper's absolute rule P(tau v < delta) > p0.
ACTIVE_FRACTION = 0.1


def hs_metrics(run) -> dict:
    """Extra protocol metrics of a horseshoe fit (any zoo horseshoe guide): ``units_kept`` by the paper's
    pruning rule (§4.3, delta = 1e-3, p0 = 0.9) and ``units_active`` by the shrinkage profile, both summed
    over hidden layers."""
    guide, model = run.result.guide, run.result.model
    if not isinstance(guide, HorseshoeGuide):
        return {}
    with run.result.activate():
        report = guide.sparsity_report(model)
    hidden = report.extras["units_kept"]
    norms = report.extras["weight_norms"]
    active = 0
    for prefix in hidden:
        n = torch.tensor(norms[prefix])
        active += int((n >= ACTIVE_FRACTION * n.max()).sum())
    return {"units_kept": sum(hidden.values()), "units_active": active}


FIT_DEFAULTS = {"steps": 5000, "lr": 0.005, "batch_size": 128, "optimizer": "adam", "loss": default_loss}

register(
    ModelEntry(
        name="hs-bnn",
        summary="node-wise horseshoe BNN (non-centered; options regularized, centered), CAVI auxiliaries",
        build=build_hs,
        guides=GUIDES,
        fit_defaults=FIT_DEFAULTS,
        references=REFERENCES,
        extra_metrics=hs_metrics,
    )
)
register(
    ModelEntry(
        name="reg-hs-bnn",
        summary="regularized horseshoe BNN (slab c^2 ~ IG(2, 6), Eq. 2), non-centered",
        build=_build_reg,
        guides=GUIDES,
        fit_defaults=FIT_DEFAULTS,
        references=REFERENCES,
        extra_metrics=hs_metrics,
    )
)


def _toy_runs(splits: Sequence[int] | None) -> list[RunSpec]:
    trials = list(range(5)) if splits is None else list(splits)
    runs = []
    for width in (10, 100, 1000):
        for k in trials:
            h = {"hidden": [width]}
            runs.append(RunSpec(f"gauss-{width}", "mfvi-bnn", "toy-hs", k, h))
            runs.append(RunSpec(f"hs-fact-{width}", "hs-bnn", "toy-hs", k, {**h, "guide": "factorized"}))
            runs.append(RunSpec(f"hs-struct-{width}", "hs-bnn", "toy-hs", k, {**h, "guide": "structured"}))
    for k in trials:
        for centered in (False, True):
            name = "hs221-centered" if centered else "hs221-noncentered"
            runs.append(
                RunSpec(name, "hs-bnn", "toy-hs-221", k, {"hidden": [15], "options": {"centered": centered}})
            )
    return runs


register_protocol(
    Protocol(
        name="hs-toys",
        description=(
            "Paper 004 toys.  Cubic y = x^3 + N(0, 9), 100 train / 400 test (toy-hs, trial = seed): one "
            "hidden "
            "layer of 10/100/1000 ReLU units, Gaussian-prior mfvi-bnn vs hs-bnn factorized vs structured, "
            "5 trials (§6.2.1, Fig. 6/15).  2-2-1 toy (toy-hs-221): 15 hidden units, non-centered vs "
            "centered hs-bnn (factorized), compare the units kept by the pruning rule (`units_kept`) and "
            "by the shrinkage profile (`units_active`: ||E[w_kl]|| >= 0.1 x the layer's largest) "
            "(§6.2.2, Fig. 7: non-centered keeps ~2 units)."
        ),
        runs=_toy_runs,
        metrics=("rmse", "nll", "accuracy", "units_kept", "units_active"),
        paper_source="note 004 §7.2-7.3 (figures only; no numbers in the text)",
    )
)


def _uci_runs(splits: Sequence[int] | None) -> list[RunSpec]:
    splits = list(range(10)) if splits is None else list(splits)
    runs = []
    for d in UCI8:
        for k in splits:
            for model, tag in (("hs-bnn", "hs"), ("reg-hs-bnn", "reghs")):
                for guide, gtag in (("factorized", "fact"), ("structured", "struct")):
                    runs.append(
                        RunSpec(
                            f"{tag}-{gtag}",
                            model,
                            f"uci:{UCI_FOLDER[d]}",
                            k,
                            {"hidden": [50], "guide": guide},
                        )
                    )
    return runs


register_protocol(
    Protocol(
        name="hs-uci",
        description=(
            "Paper 004 UCI regression (§6.3.3-6.5): boston, concrete, energy, yacht, wine, kin8nm, power, "
            "naval; "
            "one hidden layer of 50 ReLU units; standard splits 0-9; HS and reg-HS, factorized and "
            "structured guides; Adam lr 0.005, batch 128, 5000 steps; metrics on the original scale from "
            "100 draws; `density` from the pruning rule P(tau v < 1e-3) > 0.9."
        ),
        runs=_uci_runs,
        metrics=("rmse", "rmse_draws", "nll", "coverage95", "units_kept", "units_active", "density"),
        paper_source="note 004 §7.6-7.8 (relative-improvement figures only; no numbers in the text)",
    )
)
