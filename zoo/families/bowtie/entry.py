"""Bow-tie BNN with N-GIG shrinkage and closed-form CAVI (Sheinkman & Wade 2025, arXiv 2411.11132): registry
entry ``bowtie`` and the protocols ``bowtie-diabetes`` and ``bowtie-uci`` (registered, not run here).

Model: :class:`zoo.families.bowtie.model.BowtieModel` (stochastic-ReLU "bow tie" units with Pólya–Gamma
augmentation, Eqs. 1–9; N-GIG priors Eqs. 5–7 with App. D.1 scaling; IG noise variances), built from a
:class:`~zoo.families.bowtie.options.BowtieOptions`.  Guides (first = default): ``cavi`` (structured
mean-field CAVI, Eqs. 13–19, Algorithm 1), ``cavi-em`` (the same plus the EM step for ``delta_glob``,
§3.2) and ``cavi-textbook-svi`` (the linear ``beta`` blend in SVI, §3.3).  Fit defaults follow the paper: raw
(unstandardized) targets, full batch, stop when three consecutive relative ELBO changes are below 1e-5 (§4,
App. D.1), at most 200 sweeps (the authors' code).  Hyperparameters left ``None`` are the data-dependent
defaults of the authors' code, resolved from an OLS fit at initialization.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from guides.bowtie.cavi import BowtieCAVIGuide
from zoo.core.config import resolve
from zoo.experiments.registry import ModelEntry, register
from zoo.experiments.reproduce import Protocol, RunSpec, register_protocol
from zoo.families.baselines.entry import UCI_FOLDER
from zoo.families.bowtie.model import BowtieModel
from zoo.families.bowtie.options import BowtieOptions
from zoo.families.bowtie.prior import BowtieNoisePrior, GaussianBowtiePrior, NGIGPrior

REFERENCES = (
    "Sheinkman & Wade 2025, Variational Bayesian Bow tie Neural Networks with Shrinkage (arXiv:2411.11132)",
    "Sheinkman & Wade 2025 (arXiv:2411.11132): §3.1 and Algorithm 1 (CAVI), §3.3 (SVI), App. B (ELBO), "
    "App. D.1 (hyper-parameters)",
)


def _weight_prior(opts: BowtieOptions) -> NGIGPrior | GaussianBowtiePrior:
    """The weight prior of ``opts``; ``None`` (data-dependent) values start at 1 until initialization."""
    delta_glob = 1.0 if opts.delta_glob is None else opts.delta_glob
    bias_scale = 1.0 if opts.bias_scale is None else opts.bias_scale
    if opts.gaussian_prior:
        return GaussianBowtiePrior(delta_glob, opts.delta_loc, bias_scale, opts.scale_with_architecture)
    return NGIGPrior(
        opts.nu_glob,
        delta_glob,
        opts.lam_glob,
        opts.nu_loc,
        opts.delta_loc,
        opts.lam_loc,
        bias_scale,
        opts.scale_with_architecture,
    )


def build_bowtie(
    in_features: int,
    out_features: int,
    task: str,
    hidden: Sequence[int],
    options: BowtieOptions | Mapping | None = None,
    **kwargs,
) -> BowtieModel:
    """Build the bow-tie model from ``options`` (a :class:`~zoo.families.bowtie.options.BowtieOptions` or a
    mapping) updated by keyword options (``temperature=0.5``, ``gaussian_prior=True``, ...).  ``None``
    hyperparameters are resolved from the data (OLS) at initialization; ``gaussian_prior=True`` is the GVBNN
    ablation (:class:`~zoo.families.bowtie.prior.GaussianBowtiePrior`)."""
    if task != "regression":
        raise ValueError(f"task: the bow-tie BNN is regression only (Sheinkman & Wade (2025)), got {task!r}")
    opts = resolve(BowtieOptions, options, kwargs)
    return BowtieModel(
        in_features,
        hidden,
        out_features,
        temperature=opts.temperature,
        prior=_weight_prior(opts),
        hidden_noise=BowtieNoisePrior(opts.hidden_noise_concentration, opts.hidden_noise_rate),
        noise_concentration=opts.noise_concentration,
        noise_rate=opts.noise_rate,
        auto_bias_scale=opts.bias_scale is None,
        auto_delta_glob=opts.delta_glob is None,
    )


register(
    ModelEntry(
        name="bowtie",
        summary="Bow-tie BNN (stochastic ReLU + Polya-Gamma), N-GIG shrinkage, closed-form structured CAVI",
        build=build_bowtie,
        options=BowtieOptions,
        guides={
            "cavi": BowtieCAVIGuide,
            "cavi-em": lambda model: BowtieCAVIGuide(model, em=True),
            "cavi-textbook-svi": lambda model: BowtieCAVIGuide(model, beta_rule="textbook"),
        },
        fit_defaults={"steps": 200, "tol": 1e-5, "batch_size": None, "standardize_y": False, "lr": 1e-2},
        references=REFERENCES,
        tasks=("regression",),
        default_hidden=(20,),
    )
)


#: CAVI to convergence (issue 17): SQUAREM cycles (three sweeps each, zoo.infer.accelerate) until the paper's
#: rule fires, capped at 3000 cycles; every row records ``converged`` and ``sweeps``.
CONVERGED_CAVI = {"steps": 3000, "fit_options": {"accelerate": "squarem"}}


def _diabetes_runs(splits: Sequence[int] | None) -> list[RunSpec]:
    splits = list(range(10)) if splits is None else list(splits)
    runs = [RunSpec("VBNN", "bowtie", "diabetes", k, {"hidden": [20], **CONVERGED_CAVI}) for k in splits]
    # the authors' code: plain sweeps, stopped at 200 whether or not the rule fired
    return runs + [RunSpec("VBNN-200", "bowtie", "diabetes", k, {"hidden": [20]}) for k in splits]


register_protocol(
    Protocol(
        name="bowtie-diabetes",
        description=(
            "bowtie (VBNN): L = 1 hidden layer of 20 bow-tie units, IG (Student-t 3 dof) N-GIG priors, "
            "T = 0.1, data-dependent OLS defaults, full-batch CAVI until three relative ELBO changes < 1e-5 "
            "(SQUAREM-accelerated sweeps, at most 3000 cycles; every row records converged and sweeps); "
            "VBNN-200: plain sweeps capped at 200 as in the authors' code; "
            "inputs standardized on train, raw targets; 10 random 90/10 splits (paper §4.2, App. D.3)."
        ),
        runs=_diabetes_runs,
        metrics=("rmse", "nll", "coverage95"),
        paper={("VBNN", "diabetes"): {"rmse": 54.5, "nll": 5.4, "coverage": 0.96}},
        paper_source="Sheinkman & Wade 2025 (arXiv:2411.11132), Table 3 (VBNN row)",
    )
)

_UCI_SETS = ("yacht", "boston", "energy", "concrete")


# SVBNN: the SVI defaults of the authors' code: minibatch 100, forgetting rate 0.75, with the windowed
# relative-ELBO stopping rule on the noisy ELBO.  Its budget is the entry's 200 steps, and a step of the SVI
# guide is one minibatch iteration: 200 iterations of 100 rows are 22 (concrete) to 72 (yacht) epochs, where
# the authors' code caps SVI at 200 epochs -- a deviation, stated in the protocol's description.
SVI_BATCH = 100
UCI_VARIANTS: dict[str, dict] = {
    "VBNN": dict(CONVERGED_CAVI),
    "VBNN-200": {},
    "GVBNN": {"options": {"gaussian_prior": True}},
    "SVBNN": {"batch_size": SVI_BATCH},
    "4VBNN": {"ensemble": 4, "zeta": 0.1},
}


def _uci_runs(splits: Sequence[int] | None) -> list[RunSpec]:
    splits = list(range(10)) if splits is None else list(splits)
    return [
        RunSpec(v, "bowtie", f"uci:{UCI_FOLDER[d]}", k, {"hidden": [50], **kw})
        for v, kw in UCI_VARIANTS.items()
        for d in _UCI_SETS
        for k in splits
    ]


_TABLE4 = {  # paper Table 4: (rmse, nll, coverage) per dataset, 10 random 90/10 splits
    "VBNN": {"yacht": (2.47, 2.25, 0.96), "boston": (3.47, 2.69, 0.95), "energy": (1.37, 1.75, 0.98),
             "concrete": (7.67, 3.5, 0.94)},
    "4VBNN": {"yacht": (1.23, 1.97, 0.99), "boston": (3.21, 2.57, 0.97), "energy": (1.1, 1.63, 0.99),
              "concrete": (6.71, 3.33, 0.97)},
    "SVBNN": {"yacht": (5.57, 3.13, 0.93), "boston": (3.76, 2.78, 0.94), "energy": (2.41, 2.31, 0.91),
              "concrete": (8.43, 3.56, 0.93)},
    "GVBNN": {"yacht": (4.88, 2.86, 0.95), "boston": (4.02, 2.82, 0.96), "energy": (2.5, 2.35, 0.93),
              "concrete": (7.84, 3.48, 0.95)},
}  # fmt: skip

register_protocol(
    Protocol(
        name="bowtie-uci",
        description=(
            "bowtie, L = 1 hidden layer of 50 units, defaults as bowtie-diabetes, raw targets; UCI "
            "yacht/boston/energy/concrete on the HL&A standard split files (the paper used 10 random 90/10 "
            "splits; slump is not in the zoo's data). VBNN: CAVI to the paper's rule (SQUAREM, at most 3000 "
            "cycles; 1-10 CPU minutes per fit); VBNN-200: plain sweeps capped at 200 (the authors' code); "
            "GVBNN: CAVI under "
            "the Gaussian weight prior with the N-GIG prior's mean variance; SVBNN: stochastic VI, minibatch "
            "100, forgetting rate 0.75, the paper's beta rule, 200 steps (minibatch iterations: 22-72 "
            "epochs, where the authors' code caps SVI at 200 epochs); 4VBNN: 4 CAVI fits (seeds split + "
            "10007 i), weights exp(0.1 ELBO); GVBNN and 4VBNN: at most 200 sweeps."
        ),
        runs=_uci_runs,
        metrics=("rmse", "nll", "coverage95", "uniform_rmse", "uniform_nll", "uniform_coverage95"),
        paper={
            (v, f"uci:{UCI_FOLDER[d]}"): {"rmse": r, "nll": n, "coverage": c}
            for v, rows in _TABLE4.items()
            for d, (r, n, c) in rows.items()
        },
        paper_source=(
            "Sheinkman & Wade 2025 (arXiv:2411.11132), Table 4 (10 random 90/10 splits, not the standard "
            "splits)"
        ),
    )
)
