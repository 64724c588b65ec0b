"""Plugins: models that live outside the package and join the registry without editing it.

A plugin is a Python file or module that registers one or more entries with
:func:`zoo.registry.register`; the keyword form stays the contract::

    from zoo.registry import ModelEntry, register

    register(ModelEntry(name="my-bnn", summary="...", build=build, guides={"normal": my_guide_factory}))

where ``build(in_features, out_features, task, hidden, **options)`` returns a
:class:`~zoo.core.model.BayesianModel` and each guide factory maps the model to a guide.  A plugin may also
(or only) add guides to models registered already, ``zoo.register_guide("mfvi-bnn", "mine", factory)``
(:func:`zoo.experiments.registry.register_guide`); it then owns those guides.

**Two ways to register** (the loader supports both):

* at import: the module calls ``register(...)`` at its top level;
* a hook: the module defines ``register()`` with no arguments and does not register at import; when
  importing the module registered nothing, the loader calls ``register()`` (an entry point may also point at
  the hook directly, ``my_module:register``).  Importing such a module, e.g. in its own tests, has no side
  effect on the registry.

**Three ways to load one**:

* ``zoo ... --plugin path/to/my_plugin.py`` / :func:`load_plugin` with a file path: the file is imported as
  the module ``my_plugin`` (its stem).  Its folder is not put on ``sys.path``: a plugin file is
  self-contained or imports installed packages (or modules on ``PYTHONPATH``), not a sibling file;
* ``--plugin my_package.models`` / :func:`load_plugin` with a dotted module name on ``sys.path``;
* an installed distribution declaring an entry point in the group ``pyro_bnn_zoo.models``
  (:data:`zoo.experiments.registry.ENTRY_POINT_GROUP`), loaded with the zoo's own models by
  :func:`zoo.experiments.registry.load_plugins`::

      [project.entry-points."pyro_bnn_zoo.models"]
      my-bnn = "my_plugin:register"      # a callable, called with no arguments; or "my_plugin", a module

**Identity.** A plugin is identified by its module name (a file's stem, the dotted name, or the module of an
entry point's value).  Registering a name its own module already registered is a no-op (logged at INFO
"already loaded"), so the same plugin can be both installed and given with ``--plugin``, in either order,
and loading a file twice does nothing.  A name registered by the zoo or by another plugin is a clash, and so
is a second, different file with the same name (``a/my_plugin.py`` after ``b/my_plugin.py``): rename one.

**Origin.** Each entry of a plugin records where it came from (:attr:`ModelEntry.plugin`: the file's
absolute path, the module name, or ``entry-point:<distribution>``); :func:`zoo.registry.build` writes it into
the spec that checkpoints store, and rebuilding a spec whose plugin is not loaded raises a ``ValueError``
saying what to import (``load_plugin(P)`` / ``--plugin P``) or which distribution to install; a guide a
plugin added to another model is recorded (``guide_plugin``) and checked the same way.

**Errors** are :class:`PluginError` (a ``ValueError``) naming the file, module or entry point: a path that
does not exist, a plugin that fails to import (the message holds the original traceback), a name clash (the
message names the owner), a second file under a loaded plugin's name, a plugin that registers nothing.
Whatever a failing plugin registered before it failed is removed again.  On the command line they are usage
errors (exit 2) before anything is written.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path

from zoo.experiments import registry
from zoo.experiments.registry import ENTRY_POINT_GROUP, PluginError, PluginSource

__all__ = ["PluginError", "load_plugin", "add_plugin_argument", "load_cli_plugins", "ENTRY_POINT_GROUP"]

logger = logging.getLogger(__name__)

ENTRY_POINT_PREFIX = "entry-point:"


def load_plugin(path_or_module: str | os.PathLike) -> list[str]:
    """Load a plugin and return the (sorted) model names it registered.

    Args:
        path_or_module: a ``.py`` file (anything ending in ``.py``, holding a path separator or naming an
            existing file), a dotted module name importable from ``sys.path``, or ``entry-point:<dist>`` (the
            entry points of an installed distribution, as checkpoints of entry-point plugins record it).

    Raises:
        PluginError: see the module docstring; the message names the file, module or entry point.
        TypeError: ``path_or_module`` is not a string or path.
    """
    if not isinstance(path_or_module, str | os.PathLike):
        raise TypeError(f"path_or_module must be a str or path, got {type(path_or_module).__name__}")
    text = os.fspath(path_or_module).strip()
    if not text:
        raise PluginError("plugin: empty plugin name; give a .py file or a dotted module name")
    registry.load_plugins()  # the zoo's own models and installed plugins first: clashes name them
    if text.startswith(ENTRY_POINT_PREFIX):
        names = _load_distribution(text[len(ENTRY_POINT_PREFIX) :])
    elif text.endswith(".py") or os.sep in text or "/" in text or Path(text).exists():
        names = _load_file(Path(text).expanduser())
    else:
        names = _load_module(text)
    logger.info("plugin %s: %s", text, ", ".join(names))
    return names


def _same_file(module: types.ModuleType, path: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve() == path


def _load_file(path: Path) -> list[str]:
    path = path.resolve()
    if not path.exists():
        raise PluginError(f"plugin: no such file {str(path)!r}")
    if not path.is_file() or path.suffix != ".py":
        raise PluginError(
            f"plugin: {str(path)!r} is not a .py file (give a package by its dotted module name instead)"
        )
    identity = path.stem
    if not identity.isidentifier():
        raise PluginError(f"plugin: file {str(path)!r}: its stem {identity!r} is not a valid module name")
    cached = sys.modules.get(identity)
    if cached is not None and _same_file(cached, path) and registry.plugin_names(identity):
        return registry.plugin_names(identity)  # this file is loaded already: a no-op
    others = sorted(_loaded_files(identity) - {str(path)})
    if others:
        raise PluginError(
            f"plugin: file {str(path)!r} has the module name {identity!r} of the plugin already loaded from "
            f"{others[0]!r}; a plugin is identified by its file name without .py: rename one of the files"
        )
    return registry.run_plugin(
        PluginSource(identity, str(path)), lambda: _exec_file(identity, path), f"plugin file {str(path)!r}"
    )


def _loaded_files(identity: str) -> set[str]:
    """The files (absolute paths) the entries and guides of plugin module ``identity`` were loaded from."""
    origins = set()
    for name in registry.plugin_names(identity):
        model, _, guide = name.partition(":")
        entry = registry.get_entry(model)
        origins.add(entry.guide_plugins[guide].origin if guide else entry.plugin)
    return {o for o in origins if o is not None and os.path.isabs(o)}


def _exec_file(identity: str, path: Path) -> types.ModuleType:
    """Import ``path`` as module ``identity``; a module of that name imported from elsewhere (the same plugin,
    installed) stays in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(identity, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise PluginError(f"plugin: cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(identity)
    sys.modules[identity] = module  # dataclasses and pickling look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _restore(identity, previous)
        raise
    if previous is not None:
        _restore(identity, previous)
    return module


def _restore(identity: str, previous: types.ModuleType | None) -> None:
    if previous is None:
        sys.modules.pop(identity, None)
    else:
        sys.modules[identity] = previous


_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _load_module(name: str) -> list[str]:
    if not _DOTTED.match(name):
        raise PluginError(f"plugin: {name!r} is neither a .py file nor a dotted module name")
    owned = registry.plugin_names(name)
    if name in sys.modules and owned:
        return owned  # loaded already: a no-op

    def load() -> types.ModuleType:
        cached = sys.modules.get(name)
        if cached is not None and not callable(getattr(cached, "register", None)):
            return importlib.reload(cached)  # imported before it was a plugin: register at import again
        return importlib.import_module(name)

    return registry.run_plugin(PluginSource(name, name), load, f"plugin module {name!r}")


def _normalize(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _load_distribution(dist: str) -> list[str]:
    eps = [
        ep
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if getattr(ep, "dist", None) is not None and _normalize(ep.dist.name) == _normalize(dist)
    ]
    if not eps:
        raise PluginError(
            f"plugin: no installed distribution {dist!r} declares entry points in the group "
            f"{ENTRY_POINT_GROUP!r}; install it (pip install ...) first"
        )
    return sorted({n for ep in eps for n in registry.load_entry_point(ep)})


def add_plugin_argument(parser: argparse.ArgumentParser, dest: str = "plugin") -> None:
    """Add the repeatable ``--plugin PATH_OR_MODULE`` option to a (sub)command's parser."""
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        dest=dest,
        metavar="PATH_OR_MODULE",
        help="load models from a plugin first: a .py file or a dotted module name that calls "
        "zoo.registry.register (repeatable)",
    )


def load_cli_plugins(parser: argparse.ArgumentParser, paths: Sequence[str] | None) -> list[str]:
    """Load the installed plugins and each of ``paths`` (:func:`load_plugin`); any failure is
    ``parser.error`` (exit 2) naming ``--plugin``, before anything is written.  Returns the names loaded."""
    try:
        registry.load_plugins()
    except PluginError as e:
        parser.error(f"installed plugin: {e}")
    names: list[str] = []
    for path in paths or ():
        try:
            names.extend(load_plugin(path))
        except (PluginError, TypeError) as e:
            parser.error(f"argument --plugin: {e}")
    return names
