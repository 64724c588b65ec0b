"""Registry of named models: each entry = model builder + guides (first is the default) + default fit
settings + references.  ``zoo list`` prints it.

An entry's ``build(in_features, out_features, task, hidden, **options)`` returns a
:class:`~zoo.core.model.BayesianModel`; each guide factory maps the model to a guide.  A *spec* — a plain
dict ``{"model", "guide", "in_features", "out_features", "task", "hidden", "options"}`` — is what
checkpoints store to rebuild a fit (:func:`build_from_spec`).

Adding a model family: put a package in :mod:`zoo.families` whose modules call :func:`register` (and, for
paper protocols, :func:`zoo.experiments.reproduce.register_protocol`); every module of every family package
is imported on first use, no central list to edit.

Models from outside the package (plugins, :mod:`zoo.experiments.plugins`): :func:`load_plugins` also loads
every entry point of the group :data:`ENTRY_POINT_GROUP` (``pyro_bnn_zoo.models``) of the installed
distributions (set ``ZOO_NO_ENTRY_POINTS=1`` to skip them), and ``zoo --plugin FILE_OR_MODULE`` /
:func:`zoo.experiments.plugins.load_plugin` loads one by hand.  While a plugin loads, :func:`register` stamps
its entries with the plugin's origin (:attr:`ModelEntry.plugin`, recorded in every spec so a checkpoint
says what to import) and its identity (the plugin's module name): a name registered again by the same
identity is a no-op, by anyone else a clash naming both owners.  :func:`register_guide` adds a guide to a
registered entry (a plugin calling it owns that guide).  Names follow :data:`NAME_RULE`; the entry type
lives in :mod:`zoo.core.registry_entry`, the table and the running of plugins in
:mod:`zoo.core.registry_store`.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
from collections.abc import Callable, Sequence
from typing import Any

from zoo.core.build_seed import check_build_seed, mark_fresh, seeded_rng
from zoo.core.model import BayesianModel
from zoo.core.registry_entry import (
    FIXED_5000_STEPS,
    MINIBATCH_SVI_DEFAULTS,
    NAME_RULE,
    ModelEntry,
    PluginSource,
    check_name,
    same_ignoring_case,
)
from zoo.core.registry_store import (
    ENTRIES,
    ENTRY_POINT_GROUP,
    PluginError,
    current_plugin,
    dist_name,
    load_entry_point,
    loading_plugin,
    plugin_names,
    run_plugin,
)
from zoo.core.validation import check_widths

__all__ = [
    "ModelEntry",
    "register",
    "register_guide",
    "check_name",
    "NAME_RULE",
    "get_entry",
    "available",
    "build",
    "build_from_spec",
    "format_table",
    "load_plugins",
    "load_entry_point",
    "PluginError",
    "PluginSource",
    "ENTRY_POINT_GROUP",
    "MINIBATCH_SVI_DEFAULTS",
    "FIXED_5000_STEPS",
    "loading_plugin",
    "run_plugin",
    "plugin_names",
]

logger = logging.getLogger(__name__)

FAMILIES_PACKAGE = "zoo.families"
_REGISTRY = ENTRIES  # the one table (zoo.core.registry_store)
_LOADED = False
_LOADING = False  # the family modules are being imported
_EP_LOADED: set[str] = set()  # entry points already loaded ("<dist>:<name>=<value>")


def load_plugins() -> None:
    """Import every module of every family package under :mod:`zoo.families` (each registry entry and
    protocol registers itself on import, no central list to edit), then load the entry points of
    :data:`ENTRY_POINT_GROUP` not loaded yet.

    Raises:
        PluginError: an installed entry point fails; the message names it and its distribution (it is
            tried again on the next call, so a broken plugin never disappears silently).
    """
    global _LOADED, _LOADING
    if not _LOADED:
        _LOADED = _LOADING = True
        try:
            for name in sorted(_family_modules()):
                importlib.import_module(name)
        finally:
            _LOADING = False
    if _LOADING or os.environ.get("ZOO_NO_ENTRY_POINTS", "").strip() not in ("", "0"):
        return  # a family looking a model up while the families load: the entry points come after them
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = f"{dist_name(ep)}:{ep.name}={ep.value}"
        if key in _EP_LOADED:
            continue
        _EP_LOADED.add(key)  # first: a plugin that looks a model up while it loads does not load itself again
        try:
            load_entry_point(ep)
        except BaseException:
            _EP_LOADED.discard(key)  # tried again next time
            raise


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
    """Add ``entry`` to the registry and return it (as stored: while a plugin loads, stamped with its
    :attr:`~ModelEntry.plugin` origin and module).

    Raises:
        ValueError: the name breaks :data:`NAME_RULE` or is already registered by someone else, also in
            another case (the message names the owner); the entry has no guide or a guide name breaks the
            rule.  The same plugin module registering its name again is a no-op.
        TypeError: ``entry`` is not a :class:`ModelEntry`.
    """
    if not isinstance(entry, ModelEntry):
        raise TypeError(f"entry: expected a ModelEntry, got {type(entry).__name__}")
    check_name("name", entry.name)
    if not entry.guides:
        raise ValueError("guides: an entry needs at least one guide")
    for guide in entry.guides:
        check_name(f"guides of {entry.name}", guide)
    source = current_plugin()
    if source is not None and entry.plugin is None:
        entry = dataclasses.replace(entry, plugin=source.origin, plugin_module=source.identity)
    old = _REGISTRY.get(entry.name)
    if old is not None and source is not None and old.plugin_module == source.identity:
        logger.info("model %r of plugin %s: already loaded", entry.name, source.identity)
        return old
    other = entry.name if old is not None else same_ignoring_case(entry.name, _REGISTRY)
    if other is not None:
        by = f"plugin {source.origin} (module {source.identity})" if source is not None else entry.owner
        what = (
            f"a model called {other!r}" if other == entry.name else f"{other!r} ({entry.name!r} but for case)"
        )
        raise (PluginError if source is not None else ValueError)(
            f"name: {what} is already registered by {_REGISTRY[other].owner}; {by} cannot register it "
            "again (names are compared ignoring case; rename one of them)"
        )
    _REGISTRY[entry.name] = entry
    return entry


def register_guide(model_name: str, guide_name: str, factory: Callable[..., Callable]) -> ModelEntry:
    """Offer one more guide, ``factory(model, **guide_options) -> guide``, for the registered model
    ``model_name``; returns the updated entry.

    :func:`build` (``guide=guide_name``) and the command line (``--guide``, ``MODEL:GUIDE``) then offer it;
    the default guide stays the entry's first.  Entries are immutable: the registry stores a copy whose
    ``guides`` hold the new one.  Called while a plugin loads, the plugin owns the guide
    (:attr:`ModelEntry.guide_plugins`, recorded in the spec of every build with it) and calling it again from
    the same plugin is a no-op.

    Raises:
        ValueError: ``model_name`` is unknown (the message lists the known models); ``guide_name`` breaks
            :data:`NAME_RULE` or the model already offers a guide of that name (also in another case).
        TypeError: ``factory`` is not callable, or a name is not a string.
    """
    check_name("guide_name", guide_name)
    if not callable(factory):
        raise TypeError(f"factory: a guide factory must be callable, got {type(factory).__name__}")
    if not isinstance(model_name, str):
        raise TypeError(f"model_name: a model name must be a string, got {type(model_name).__name__}")
    load_plugins()
    source, entry = current_plugin(), _REGISTRY.get(model_name)
    if entry is None:
        raise ValueError(_unknown_model("model_name", model_name))
    owner = entry.guide_plugins.get(guide_name)
    if source is not None and guide_name in entry.guides:
        if source.identity in (getattr(owner, "identity", None), entry.plugin_module):
            logger.info("guide %s:%s of plugin %s: already loaded", model_name, guide_name, source.identity)
            return entry
    other = guide_name if guide_name in entry.guides else same_ignoring_case(guide_name, entry.guides)
    if other is not None:
        by = f"plugin {owner.origin}" if owner is not None else entry.owner
        raise (PluginError if source is not None else ValueError)(
            f"guide_name: {model_name} already offers a guide {other!r} (from {by}); choose another name"
        )
    owned = source is not None and source.identity != entry.plugin_module  # not a guide of its own model
    _REGISTRY[model_name] = entry.with_guide(guide_name, factory, source if owned else None)
    return _REGISTRY[model_name]


def _unknown_model(argument: str, name: str) -> str:
    return (
        f"{argument}: unknown model {name!r}; available: {', '.join(sorted(_REGISTRY))}; a plugin's model? "
        "pass --plugin PATH (zoo.load_plugin(PATH) in Python) or install it"
    )


def available() -> list[str]:
    load_plugins()
    return sorted(_REGISTRY)


def get_entry(name: str) -> ModelEntry:
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    load_plugins()
    if name not in _REGISTRY:
        raise ValueError(_unknown_model("model", name))
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
    seed: int | None = None,
    **options: Any,
) -> tuple[BayesianModel, Callable, dict]:
    """Build ``(model, guide, spec)`` for registry entry ``name``: ``options`` go to the model builder,
    ``guide_options`` to the guide factory (e.g. ``{"beta_rule": "textbook"}`` for the bow-tie CAVI guide,
    ``{"init_rho": -6.0}`` for an LBBNN guide); both are recorded in ``spec`` for checkpoints.

    ``seed``: the random initial values are drawn under it (the global generators are left as they were)
    and it is recorded in ``spec``.  Without it the pair is marked fresh and the first
    :func:`zoo.infer.loop.fit` draws them under the fit's seed, so ``build`` then ``fit(seed=s)`` is
    reproducible across processes (:mod:`zoo.core.build_seed`)."""
    if seed is not None:
        seed = check_build_seed(seed)
    entry = get_entry(name)
    if task not in entry.tasks:
        raise ValueError(f"task: {name} supports {list(entry.tasks)}, not {task!r}")
    if task == "multiclass" and (isinstance(out_features, bool) or not isinstance(out_features, int)):
        raise TypeError(f"out_features: the number of classes must be an int, got {out_features!r}")
    if task == "multiclass" and out_features < 2:
        raise ValueError(
            f"out_features: a multiclass model needs at least 2 classes (one output per class), got "
            f"{out_features}; for two classes use task='binary' with out_features=1"
        )
    guide_name = entry.default_guide if guide is None else guide  # "" is not a guide
    if guide_name not in entry.guides:
        raise ValueError(f"guide: {name} offers guides {list(entry.guides)}, not {guide_name!r}")
    hidden = tuple(entry.default_hidden) if hidden is None else check_widths("hidden", hidden)
    if entry.options is not None:
        entry.options.from_dict(options, what=f"options of {name}")
    guide_options = dict(guide_options or {})
    with seeded_rng(seed):
        model = entry.build(in_features, out_features, task, hidden, **options)
        if not isinstance(model, BayesianModel):
            raise TypeError(
                f"model: the builder of {name} must return a zoo BayesianModel, got {type(model).__name__}"
            )
        try:
            g = entry.guides[guide_name](model, **guide_options)
        except TypeError as e:
            if not guide_options:
                raise
            msg = f"guide_options: guide {guide_name!r} of {name} rejected {guide_options}: {e}"
            raise TypeError(msg) from e
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
    if entry.plugin is not None:
        spec["plugin"] = entry.plugin
    if guide_name in entry.guide_plugins:
        spec["guide_plugin"] = entry.guide_plugins[guide_name].origin
    if seed is not None:
        spec["seed"] = seed
    # the spec rides on the model, so a fit made through the API can be saved and reloaded without spec=
    model._zoo_spec = copy.deepcopy(spec)
    if seed is None:
        mark_fresh(model, g)
    return model, g, spec


def build_from_spec(spec: dict) -> tuple[BayesianModel, Callable]:
    """Rebuild ``(model, guide)`` from a spec; a model or guide from a plugin that is not loaded is a
    ``ValueError`` saying what to import."""
    load_plugins()
    plugin, guide_plugin = spec.get("plugin"), spec.get("guide_plugin")
    if spec.get("model") not in _REGISTRY and plugin is not None:
        raise ValueError(f"model: model {spec['model']!r} comes from plugin {plugin}: {_todo(plugin)}")
    if guide_plugin is not None and spec.get("guide") not in _REGISTRY[spec["model"]].guides:
        what = f"guide {spec['guide']!r} of {spec['model']}"
        raise ValueError(f"guide: {what} comes from plugin {guide_plugin}: {_todo(guide_plugin)}")
    model, guide, _ = build(
        spec["model"],
        spec["in_features"],
        spec["out_features"],
        spec["task"],
        hidden=spec["hidden"],
        guide=spec["guide"],
        guide_options=spec.get("guide_options"),
        seed=spec.get("seed"),
        **spec.get("options", {}),
    )
    return model, guide


def _todo(plugin: str) -> str:
    if str(plugin).startswith("entry-point:"):
        dist = str(plugin).split(":", 1)[1]
        return f"install the distribution {dist!r} (it registers through an entry point)"
    return f"import it first (zoo.experiments.plugins.load_plugin({plugin!r}) / --plugin {plugin})"


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
        if e.plugin is not None:
            rows.append(f"{'':<14} plugin: {e.plugin}")
    return "\n".join(rows)
