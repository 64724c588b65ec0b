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
identity is a no-op, by anyone else a clash naming both owners.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import pkgutil
import traceback
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zoo.core.build_seed import check_build_seed, mark_fresh, seeded_rng
from zoo.core.config import Config
from zoo.core.model import BayesianModel
from zoo.core.validation import check_widths

__all__ = [
    "ModelEntry",
    "register",
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
    "loading_plugin",
    "run_plugin",
    "plugin_names",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pyro_bnn_zoo.models"
"""The entry-point group of model plugins (named for the distribution ``pyro-bnn-zoo``)."""


class PluginError(ValueError):
    """A plugin cannot be loaded: missing file or module, import failure, name clash, nothing registered."""


@dataclass(frozen=True)
class PluginSource:
    """The plugin being loaded: ``identity`` (its module name) and ``origin`` (what a spec records and a user
    imports again: the file path, the module name, or ``entry-point:<distribution>``)."""

    identity: str
    origin: str


#: Fit defaults of the minibatch SVI entries (``mfvi-bnn``, ``cm-``/``cv-``/``cmv-bnn``, ``ngig-bnn``): Adam
#: at lr 1e-2 on minibatches of 512, 5000 steps but at least 700 epochs (``min_epochs``, see
#: :func:`zoo.experiments.runs.default_steps`) -- the step count of the horseshoe's 175 epochs at batch 128,
#: ``1.37 n`` steps for ``n`` training rows.  5000 steps left naval under-fitted: with the longer default the
#: collapsed priors' test NLL there improves by over a nat and their RMSE falls about threefold (Tomczak et
#: al. 2021's entries, splits 0-9; benchmarks/RESULTS.md).  Only sets larger than about 3600 training rows
#: train longer (kin8nm, power, naval); on a set smaller than the batch a step is an epoch.
MINIBATCH_SVI_DEFAULTS: Mapping[str, object] = {
    "steps": 5000,
    "min_epochs": 700,
    "lr": 1e-2,
    "batch_size": 512,
    "optimizer": "adam",
}
#: 5000 steps whatever the size of the data: what the UCI protocols of Sheinkman & Wade (2025) and Tomczak
#: et al. (2021) ran, pinned by ``mfvi-uci`` and ``collapsed-uci`` so their committed rows stay reproducible.
FIXED_5000_STEPS: Mapping[str, object] = {"steps": 5000}


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
    # Set by the plugin loader (leave them None): where the entry comes from (a file path, a module name or
    # ``entry-point:<distribution>``; :func:`build` records it in the spec) and the plugin's module name.
    plugin: str | None = None
    plugin_module: str | None = None

    @property
    def default_guide(self) -> str:
        return next(iter(self.guides))


FAMILIES_PACKAGE = "zoo.families"
_REGISTRY: dict[str, ModelEntry] = {}
_LOADED = False
_EP_LOADED: set[str] = set()  # entry points already loaded ("<dist>:<name>=<value>")
_CURRENT: contextvars.ContextVar[PluginSource | None] = contextvars.ContextVar("zoo_plugin", default=None)


def load_plugins() -> None:
    """Import every module of every family package under :mod:`zoo.families` (each registry entry and
    protocol registers itself on import, no central list to edit), then load the entry points of
    :data:`ENTRY_POINT_GROUP` not loaded yet.

    Raises:
        PluginError: an installed entry point fails; the message names it and its distribution (it is
            tried again on the next call, so a broken plugin never disappears silently).
    """
    global _LOADED
    if not _LOADED:
        _LOADED = True
        for name in sorted(_family_modules()):
            importlib.import_module(name)
    if os.environ.get("ZOO_NO_ENTRY_POINTS", "").strip() not in ("", "0"):
        return
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = f"{_dist_name(ep)}:{ep.name}={ep.value}"
        if key not in _EP_LOADED:
            load_entry_point(ep)
            _EP_LOADED.add(key)


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "<unknown distribution>"


def load_entry_point(ep: importlib.metadata.EntryPoint) -> list[str]:
    """Load one entry point of :data:`ENTRY_POINT_GROUP` (its value a module, imported, or a callable,
    called with no arguments); returns the model names its module owns."""
    dist = _dist_name(ep)
    what = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP}) of distribution {dist!r}"
    hint = f"fix or uninstall {dist!r}, or set ZOO_NO_ENTRY_POINTS=1 to skip installed plugins"
    return run_plugin(PluginSource(ep.module, f"entry-point:{dist}"), ep.load, what, hint)


@contextlib.contextmanager
def loading_plugin(source: PluginSource) -> Iterator[None]:
    """Within the block, :func:`register` stamps entries with ``source`` (used by the plugin loaders)."""
    token = _CURRENT.set(source)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def plugin_names(identity: str) -> list[str]:
    """The registered names owned by the plugin module ``identity``."""
    return sorted(n for n, e in _REGISTRY.items() if e.plugin_module == identity)


def run_plugin(source: PluginSource, load: Callable[[], object], what: str, hint: str = "") -> list[str]:
    """Run a plugin under ``source``: ``load()`` returns a module (whose ``register()``, if any, is called
    when importing it registered nothing) or a callable (called with no arguments).  Returns the names the
    plugin's module owns; a failure, a clash or no names at all is a :class:`PluginError` naming ``what``
    (and whatever the failed plugin registered is removed again)."""
    before = set(plugin_names(source.identity))
    try:
        with loading_plugin(source):
            obj = load()
            if isinstance(obj, types.ModuleType):
                hook = getattr(obj, "register", None)
                if set(plugin_names(source.identity)) == before and not before and callable(hook):
                    hook()
            elif callable(obj):
                obj()
            else:
                raise TypeError(f"the value is a {type(obj).__name__}, not a module or a callable")
    except Exception as e:
        for name in set(plugin_names(source.identity)) - before:  # no half-registered plugin
            del _REGISTRY[name]
        if isinstance(e, PluginError):
            raise PluginError(f"{what}: {e}" + (f"; {hint}" if hint else "")) from e
        tb = "".join(traceback.format_exception(e)).rstrip()
        msg = f"{what} failed to load: {type(e).__name__}: {e}\n{tb}"
        raise PluginError(msg + (f"\n{hint}" if hint else "")) from e
    names = plugin_names(source.identity)
    if not names:
        raise PluginError(
            f"{what} registered no model: call zoo.registry.register(ModelEntry(...)) at import or define a "
            "register() function with no arguments" + (f"; {hint}" if hint else "")
        )
    return names


def _family_modules() -> list[str]:
    root = importlib.util.find_spec(FAMILIES_PACKAGE)
    if root is None or root.submodule_search_locations is None:  # pragma: no cover - broken install
        raise ImportError(f"the families package {FAMILIES_PACKAGE!r} cannot be found")
    return [
        m.name
        for m in pkgutil.walk_packages(root.submodule_search_locations, prefix=FAMILIES_PACKAGE + ".")
        if not m.ispkg
    ]


def _owner(entry: ModelEntry) -> str:
    if entry.plugin is not None:
        return f"plugin {entry.plugin} (module {entry.plugin_module})"
    module = getattr(entry.build, "__module__", None) or "?"
    return f"the zoo ({module})" if module.startswith("zoo.") else f"module {module}"


def register(entry: ModelEntry) -> ModelEntry:
    """Add ``entry`` to the registry and return it (as stored: while a plugin loads, stamped with its
    :attr:`~ModelEntry.plugin` origin and module).

    Raises:
        ValueError: the name is already registered by someone else (the message names the owner), or the
            entry has no guide.  The same plugin module registering its name again is a no-op.
    """
    if not entry.guides:
        raise ValueError("guides: an entry needs at least one guide")
    source = _CURRENT.get()
    if source is not None and entry.plugin is None:
        entry = dataclasses.replace(entry, plugin=source.origin, plugin_module=source.identity)
    old = _REGISTRY.get(entry.name)
    if old is not None:
        if source is not None and old.plugin_module == source.identity:
            logger.info("model %r of plugin %s: already loaded", entry.name, source.identity)
            return old
        by = f"plugin {source.origin} (module {source.identity})" if source is not None else _owner(entry)
        error = PluginError if source is not None else ValueError
        raise error(
            f"name: a model called {entry.name!r} is already registered by {_owner(old)}; "
            f"{by} cannot register it again (rename one of them)"
        )
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
    guide_name = entry.default_guide if guide is None else guide  # "" is not a guide
    if guide_name not in entry.guides:
        raise ValueError(f"guide: {name} offers guides {list(entry.guides)}, not {guide_name!r}")
    hidden = tuple(entry.default_hidden) if hidden is None else check_widths("hidden", hidden)
    if entry.options is not None:
        entry.options.from_dict(options, what=f"options of {name}")
    guide_options = dict(guide_options or {})
    with seeded_rng(seed):
        model = entry.build(in_features, out_features, task, hidden, **options)
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
    if seed is not None:
        spec["seed"] = seed
    # the spec rides on the model, so a fit made through the API can be saved and reloaded without spec=
    model._zoo_spec = copy.deepcopy(spec)
    if seed is None:
        mark_fresh(model, g)
    return model, g, spec


def build_from_spec(spec: dict) -> tuple[BayesianModel, Callable]:
    """Rebuild ``(model, guide)`` from a spec; a model from a plugin that is not loaded is a ``ValueError``
    saying what to import."""
    load_plugins()
    plugin = spec.get("plugin")
    if spec.get("model") not in _REGISTRY and plugin is not None:
        if str(plugin).startswith("entry-point:"):
            dist = str(plugin).split(":", 1)[1]
            todo = f"install the distribution {dist!r} (it registers through an entry point)"
        else:
            todo = f"import it first (zoo.experiments.plugins.load_plugin({plugin!r}) / --plugin {plugin})"
        raise ValueError(f"model: model {spec['model']!r} comes from plugin {plugin}: {todo}")
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
