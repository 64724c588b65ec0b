"""Registry of named models: each entry = model builder + guides (first is the default) + default fit
settings + references.  ``zoo list`` prints it.

An entry's ``build(in_features, out_features, task, hidden, **options)`` returns a
:class:`~zoo.core.model.BayesianModel`; each guide factory maps the model to a guide.  A *spec* — a plain
dict ``{"model", "guide", "in_features", "out_features", "task", "hidden", "options"}`` — is what
checkpoints store to rebuild a fit (:func:`build_from_spec`).

Adding a model family: put a package in :mod:`zoo.families` whose modules call :func:`register` (and, for
paper protocols, :func:`zoo.experiments.reproduce.register_protocol`); every module of every family package
is imported on first use, no central list to edit.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from zoo.core.config import Config
from zoo.core.model import BayesianModel

__all__ = [
    "ModelEntry",
    "register",
    "get_entry",
    "available",
    "build",
    "build_from_spec",
    "format_table",
    "load_plugins",
]


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
    # Optional hooks: a fit function with :func:`zoo.infer.loop.fit`'s signature (multi-stage schedules,
    # per-group learning rates), and extra metrics computed from a finished
    # :class:`zoo.experiments.runs.RunOutput`.
    fit_fn: Callable | None = None
    extra_metrics: Callable | None = None
    # The builder's options as a :class:`zoo.core.config.Config` dataclass: :func:`build` validates the
    # ``**options`` against it (unknown keys and bad values are ``ValueError`` before anything is built).
    options: type[Config] | None = None

    @property
    def default_guide(self) -> str:
        return next(iter(self.guides))


FAMILIES_PACKAGE = "zoo.families"
_REGISTRY: dict[str, ModelEntry] = {}
_LOADED = False


def load_plugins() -> None:
    """Import every module of every family package under :mod:`zoo.families`; each registry entry and
    protocol registers itself on import (no central list to edit)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for name in sorted(_family_modules()):
        importlib.import_module(name)


def _family_modules() -> list[str]:
    root = importlib.util.find_spec(FAMILIES_PACKAGE)
    if root is None or root.submodule_search_locations is None:  # pragma: no cover - broken install
        raise ImportError(f"the families package {FAMILIES_PACKAGE!r} cannot be found")
    return [
        m.name
        for m in pkgutil.walk_packages(root.submodule_search_locations, prefix=FAMILIES_PACKAGE + ".")
        if not m.ispkg
    ]


def register(entry: ModelEntry) -> ModelEntry:
    if entry.name in _REGISTRY:
        raise ValueError(f"name: a model called {entry.name!r} is already registered")
    if not entry.guides:
        raise ValueError("guides: an entry needs at least one guide")
    _REGISTRY[entry.name] = entry
    return entry


def available() -> list[str]:
    load_plugins()
    return sorted(_REGISTRY)


def get_entry(name: str) -> ModelEntry:
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    load_plugins()
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
    guide_options: dict | None = None,
    **options,
):
    """Build ``(model, guide, spec)`` for registry entry ``name``: ``options`` go to the model builder,
    ``guide_options`` to the guide factory (e.g. ``{"beta_rule": "textbook"}`` for the bow-tie CAVI guide,
    ``{"init_rho": -6.0}`` for an LBBNN guide); both are recorded in ``spec`` for checkpoints."""
    entry = get_entry(name)
    if task not in entry.tasks:
        raise ValueError(f"task: {name} supports {list(entry.tasks)}, not {task!r}")
    guide_name = guide or entry.default_guide
    if guide_name not in entry.guides:
        raise ValueError(f"guide: {name} offers guides {list(entry.guides)}, not {guide_name!r}")
    hidden = tuple(entry.default_hidden if hidden is None else hidden)
    if entry.options is not None:
        entry.options.from_dict(options, what=f"options of {name}")
    model = entry.build(in_features, out_features, task, hidden, **options)
    guide_options = dict(guide_options or {})
    try:
        g = entry.guides[guide_name](model, **guide_options)
    except TypeError as e:
        if not guide_options:
            raise
        raise TypeError(f"guide_options: guide {guide_name!r} of {name} rejected {guide_options}: {e}") from e
    spec = {
        "model": name,
        "guide": guide_name,
        "in_features": in_features,
        "out_features": out_features,
        "task": task,
        "hidden": list(hidden),
        "options": dict(options),
        "guide_options": guide_options,
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
        guide_options=spec.get("guide_options"),
        **spec.get("options", {}),
    )
    return model, guide


def format_table() -> str:
    load_plugins()
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
