"""The registry's table and the running of plugins against it.

:data:`ENTRIES` maps each registered name to its :class:`~zoo.core.registry_entry.ModelEntry`;
:func:`zoo.experiments.registry.register` and :func:`~zoo.experiments.registry.register_guide` write it (the
public API lives there).  This module holds what both the registry and the plugin loaders
(:mod:`zoo.experiments.plugins`) need without importing each other: which plugin is loading
(:func:`loading_plugin`, :func:`current_plugin`), which names a plugin owns (:func:`plugin_names`), and
:func:`run_plugin`, which loads one plugin and removes whatever it registered if it fails, so that no
half-registered plugin is ever left in the table.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.metadata
import traceback
import types
from collections.abc import Callable, Iterator

from zoo.core.registry_entry import ModelEntry, PluginSource

__all__ = [
    "ENTRIES",
    "ENTRY_POINT_GROUP",
    "PluginError",
    "loading_plugin",
    "current_plugin",
    "plugin_names",
    "run_plugin",
    "load_entry_point",
    "dist_name",
]

ENTRY_POINT_GROUP = "pyro_bnn_zoo.models"
"""The entry-point group of model plugins (named for the distribution ``pyro-bnn-zoo``)."""

ENTRIES: dict[str, ModelEntry] = {}
"""The registry's table: name -> entry (write it through ``register`` / ``register_guide`` only)."""

_CURRENT: contextvars.ContextVar[PluginSource | None] = contextvars.ContextVar("zoo_plugin", default=None)


class PluginError(ValueError):
    """A plugin cannot be loaded: missing file or module, import failure, name clash, nothing registered."""


@contextlib.contextmanager
def loading_plugin(source: PluginSource) -> Iterator[None]:
    """Within the block, ``register`` stamps entries with ``source`` (used by the plugin loaders)."""
    token = _CURRENT.set(source)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_plugin() -> PluginSource | None:
    """The plugin loading now (``None`` outside :func:`loading_plugin`)."""
    return _CURRENT.get()


def plugin_names(identity: str) -> list[str]:
    """The registered names owned by the plugin module ``identity``: its models, and ``model:guide`` for
    each guide it added to another plugin's or the zoo's model (``register_guide``)."""
    models = [n for n, e in ENTRIES.items() if e.plugin_module == identity]
    guides = [
        f"{n}:{g}" for n, e in ENTRIES.items() for g, s in e.guide_plugins.items() if s.identity == identity
    ]
    return sorted(models + guides)


def _unregister(name: str) -> None:
    """Remove a model, or the guide of ``model:guide`` (a plugin that failed to load)."""
    model, _, guide = name.partition(":")
    entry = ENTRIES.get(model)
    if entry is None or not guide:
        ENTRIES.pop(model, None)
        return
    ENTRIES[model] = entry.without_guide(guide)


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
        for name in sorted(set(plugin_names(source.identity)) - before, reverse=True):  # guides first
            _unregister(name)  # no half-registered plugin
        if isinstance(e, PluginError):
            raise PluginError(f"{what}: {e}" + (f"; {hint}" if hint else "")) from e
        tb = "".join(traceback.format_exception(e)).rstrip()
        msg = f"{what} failed to load: {type(e).__name__}: {e}\n{tb}"
        raise PluginError(msg + (f"\n{hint}" if hint else "")) from e
    names = plugin_names(source.identity)
    if not names:
        raise PluginError(
            f"{what} registered no model or guide: call zoo.registry.register(ModelEntry(...)) (or "
            "register_guide) at import or define a register() function with no arguments"
            + (f"; {hint}" if hint else "")
        )
    return names


def dist_name(ep: importlib.metadata.EntryPoint) -> str:
    """The name of the distribution declaring ``ep`` (``"<unknown distribution>"`` when it has none)."""
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "<unknown distribution>"


def load_entry_point(ep: importlib.metadata.EntryPoint) -> list[str]:
    """Load one entry point of :data:`ENTRY_POINT_GROUP` (its value a module, imported, or a callable,
    called with no arguments); returns the model names its module owns."""
    dist = dist_name(ep)
    what = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP}) of distribution {dist!r}"
    hint = f"fix or uninstall {dist!r}, or set ZOO_NO_ENTRY_POINTS=1 to skip installed plugins"
    return run_plugin(PluginSource(ep.module, f"entry-point:{dist}"), ep.load, what, hint)
