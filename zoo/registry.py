"""Registry of named models: each entry = model builder + guides (first is the default) + default fit
settings + references.  ``zoo list`` prints it.

An entry's ``build(in_features, out_features, task, hidden, **options)`` returns a
:class:`~zoo.model.BayesianModel`; each guide factory maps the model to a guide.  A *spec* — a plain
dict ``{"model", "guide", "in_features", "out_features", "task", "hidden", "options"}`` — is what
checkpoints store to rebuild a fit (:func:`build_from_spec`).

Adding a model is one call to :func:`register` in the module that defines it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from guides.autoguides import make_autoguide
from guides.conjugate import LinearRegressionCAVIGuide

from .architectures import MLP
from .likelihoods import GaussianLikelihood, make_likelihood
from .model import BayesianModel
from .priors.gaussian import GaussianPrior

__all__ = ["ModelEntry", "register", "get_entry", "available", "build", "build_from_spec", "format_table"]


@dataclass(frozen=True)
class ModelEntry:
    name: str
    summary: str
    build: Callable[..., BayesianModel]
    guides: Mapping[str, Callable]
    fit_defaults: Mapping[str, object] = field(default_factory=dict)
    references: Sequence[str] = ()
    tasks: Sequence[str] = ("regression", "binary", "multiclass")
    default_hidden: Sequence[int] = (50,)

    @property
    def default_guide(self) -> str:
        return next(iter(self.guides))


_REGISTRY: dict[str, ModelEntry] = {}


def register(entry: ModelEntry) -> ModelEntry:
    if entry.name in _REGISTRY:
        raise ValueError(f"name: a model called {entry.name!r} is already registered")
    if not entry.guides:
        raise ValueError("guides: an entry needs at least one guide")
    _REGISTRY[entry.name] = entry
    return entry


def available() -> list[str]:
    return sorted(_REGISTRY)


def get_entry(name: str) -> ModelEntry:
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    if name not in _REGISTRY:
        raise ValueError(f"model: unknown model {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def build(
    name: str,
    in_features: int,
    out_features: int,
    task: str,
    *,
    hidden: Sequence[int] | None = None,
    guide: str | None = None,
    **options,
):
    """Build ``(model, guide, spec)`` for registry entry ``name``."""
    entry = get_entry(name)
    if task not in entry.tasks:
        raise ValueError(f"task: {name} supports {list(entry.tasks)}, not {task!r}")
    guide_name = guide or entry.default_guide
    if guide_name not in entry.guides:
        raise ValueError(f"guide: {name} offers guides {list(entry.guides)}, not {guide_name!r}")
    hidden = tuple(entry.default_hidden if hidden is None else hidden)
    model = entry.build(in_features, out_features, task, hidden, **options)
    g = entry.guides[guide_name](model)
    spec = {
        "model": name,
        "guide": guide_name,
        "in_features": in_features,
        "out_features": out_features,
        "task": task,
        "hidden": list(hidden),
        "options": dict(options),
    }
    return model, g, spec


def build_from_spec(spec: dict):
    model, guide, _ = build(
        spec["model"],
        spec["in_features"],
        spec["out_features"],
        spec["task"],
        hidden=spec["hidden"],
        guide=spec["guide"],
        **spec.get("options", {}),
    )
    return model, guide


def format_table() -> str:
    rows = []
    for name in available():
        e = _REGISTRY[name]
        rows.append(f"{name:<14} {e.summary}")
        rows.append(
            f"{'':<14} guides: {', '.join(e.guides)} (default {e.default_guide}); tasks: {', '.join(e.tasks)}"
        )
        for ref in e.references:
            rows.append(f"{'':<14} ref: {ref}")
    return "\n".join(rows)


# --- built-in entries -------------------------------------------------------------------------------


def _mfvi_build(
    in_features,
    out_features,
    task,
    hidden,
    weight_scale=1.0,
    bias_scale=1.0,
    fan_in_scaling=False,
    noise_concentration=2.0,
    noise_rate=0.5,
):
    arch = MLP(in_features, hidden, 1 if task == "binary" else out_features)
    prior = GaussianPrior(weight_scale, bias_scale, fan_in_scaling)
    if task == "regression":
        lik = GaussianLikelihood("inverse_gamma", noise_concentration, noise_rate, out_features=out_features)
    else:
        lik = make_likelihood(task, out_features)
    return BayesianModel(arch, prior, lik)


def _autoguide(name: str) -> Callable:
    return lambda model: make_autoguide(name, model)


register(
    ModelEntry(
        name="mfvi-bnn",
        summary="Gaussian-prior MLP BNN, mean-field Gaussian guide (the mfVI / Bayes-by-backprop baseline)",
        build=_mfvi_build,
        guides={g: _autoguide(g) for g in ("normal", "lowrank", "diagonal", "mvn", "delta")},
        fit_defaults={"steps": 5000, "lr": 1e-2, "batch_size": 512, "optimizer": "adam"},
        references=(
            "Blundell et al. 2015, Weight Uncertainty in Neural Networks (ICML)",
            "paper 000 App. D.2 'mfVI' baseline; paper 002 'MF-VI'",
        ),
    )
)


def _blr_build(
    in_features, out_features, task, hidden, weight_scale=1.0, noise_concentration=2.0, noise_rate=1.0
):
    if hidden:
        raise ValueError("hidden: blr-cavi is a linear model; use hidden=()")
    if out_features != 1:
        raise ValueError("out_features: blr-cavi has a single output")
    return BayesianModel(
        MLP(in_features, (), 1, bias=False),
        GaussianPrior(weight_scale),
        GaussianLikelihood("inverse_gamma", noise_concentration, noise_rate),
    )


register(
    ModelEntry(
        name="blr-cavi",
        summary="Bayesian linear regression, Normal weights, inverse-gamma noise, full-batch mean-field CAVI",
        build=_blr_build,
        guides={"cavi": LinearRegressionCAVIGuide, "normal": _autoguide("normal")},
        fit_defaults={"steps": 200, "tol": 1e-10, "batch_size": None},
        references=("Bishop 2006 §10.1.3; Ormerod & Wand 2010, Explaining Variational Approximations",),
        tasks=("regression",),
        default_hidden=(),
    )
)
