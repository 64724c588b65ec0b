"""What a ``zoo bench`` record says about the models it benched, so that a resume refits nothing only when
the models are still the same.

A bench signature (:meth:`zoo.experiments.bench.BenchPlan.signature`) names each spec by registry name,
guide and the options given on the command line.  That alone does not pin the model: the same name can
come from another plugin file, or from the same file with other option defaults.  :func:`spec_identity`
therefore adds, per spec,

* ``options``: the builder options as the build uses them, defaults filled in (the entry's
  :class:`~zoo.core.config.Config` options class; without one, the builder's keyword defaults);
* ``guide_options``: the guide options given, over the guide factory's keyword defaults;
* ``plugin``: where a plugin entry comes from (``None`` for the zoo's own models): a file by absolute path
  and the sha256 of its content, a dotted module by name and the sha256 of its file, an installed
  distribution (entry point) by name and version; ``guide_plugin`` the same of a plugin that added the
  benched guide to an entry it does not own.  A plugin's helper modules are not hashed; their
  option defaults still show in the resolved options.

:func:`describe_difference` says, in the style of the journal's refusals (``steps: 100 there, 50 now``),
which of these changed.  Records written before these fields existed (:data:`SIGNATURE_VERSION` 1) are
refused by :func:`check_version`: their rows cannot be shown to come from the same models.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from zoo.experiments import journal

if TYPE_CHECKING:
    from zoo.experiments.registry import ModelEntry


class BenchSpecLike(Protocol):
    """What :func:`spec_identity` reads of a :class:`zoo.experiments.bench.BenchSpec` (named here, not
    imported: ``bench`` imports this module)."""

    label: str
    model: str
    guide: str
    options: Mapping[str, Any]
    guide_options: Mapping[str, Any]


__all__ = [
    "SIGNATURE_VERSION",
    "spec_identity",
    "plugin_identity",
    "describe_difference",
    "check_version",
    "journal_signature",
    "zoo_row_identity",
    "stale_zoo_rows",
]

#: the ``"bench"`` field of a signature; 2: with :func:`spec_identity`'s ``models``
SIGNATURE_VERSION = 2
ENTRY_POINT_PREFIX = "entry-point:"
BUILD_POSITIONAL = 4  # build(in_features, out_features, task, hidden, **options)
GUIDE_POSITIONAL = 1  # factory(model, **guide_options)


def _plain(value: Any) -> Any:
    """JSON-plain form (tuples become lists; what JSON cannot hold, its ``repr``)."""
    return json.loads(json.dumps(value, default=repr))


def _sha256(path: str | Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _keyword_defaults(fn: Callable, skip: int) -> dict[str, Any]:
    """``{name: default}`` of ``fn``'s parameters after the first ``skip`` that have a plain default."""
    try:
        params = list(inspect.signature(fn).parameters.values())[skip:]
    except (TypeError, ValueError):  # a builtin or an object without a signature
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    out = {p.name: p.default for p in params if p.kind in kinds and p.default is not inspect.Parameter.empty}
    return {k: v for k, v in out.items() if isinstance(v, (bool, int, float, str, tuple, list)) or v is None}


def resolved_options(entry: ModelEntry, options: Mapping[str, Any]) -> dict[str, Any]:
    """The builder options of ``entry`` with its defaults filled in, as the build uses them.

    Raises:
        ValueError, TypeError: an unknown option or a bad value (the options class says which).
    """
    if entry.options is not None:
        return _plain(entry.options.from_dict(options, what=f"options of {entry.name}").to_dict())
    return _plain({**_keyword_defaults(entry.build, BUILD_POSITIONAL), **options})


def plugin_identity(origin: str | None, module: str | None = None) -> dict[str, Any] | None:
    """What pins the code of a plugin with ``origin`` (:attr:`ModelEntry.plugin`) and module name ``module``:
    ``None`` for the zoo's own models (``origin`` ``None``); ``{"file", "sha256"}`` for a plugin file,
    ``{"module", "sha256"}`` for a dotted module (its file's hash, ``None`` when it has no file) and
    ``{"distribution", "version"}`` for an installed entry point."""
    if origin is None:
        return None
    if origin.startswith(ENTRY_POINT_PREFIX):
        dist = origin[len(ENTRY_POINT_PREFIX) :]
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = None
        return {"distribution": dist, "version": version}
    if origin.endswith(".py") and Path(origin).is_absolute():
        return {"file": origin, "sha256": _sha256(origin)}
    file = getattr(sys.modules.get(module or origin), "__file__", None)
    return {"module": origin, "sha256": None if file is None else _sha256(file)}


def spec_identity(spec: BenchSpecLike) -> dict[str, Any]:
    """``{"label", "options", "guide_options", "plugin", "guide_plugin"}`` of a bench spec (see the module
    docstring; ``guide_plugin``: the plugin that added the spec's guide to an entry it does not own).

    Raises:
        ValueError, TypeError: the spec's options are not valid for its entry (the message names the spec).
    """
    from zoo.experiments.registry import get_entry

    entry = get_entry(spec.model)
    try:
        options = resolved_options(entry, spec.options)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{spec.label}: {e}") from None
    factory = entry.guides.get(spec.guide)
    guide_defaults = {} if factory is None else _keyword_defaults(factory, GUIDE_POSITIONAL)
    source = getattr(entry, "guide_plugins", {}).get(spec.guide)  # a guide another plugin added
    guide_plugin = None if source is None else plugin_identity(source.origin, source.identity)
    return {
        "label": spec.label,
        "options": options,
        "guide_options": _plain({**guide_defaults, **spec.guide_options}),
        "plugin": plugin_identity(entry.plugin, entry.plugin_module),
        "guide_plugin": guide_plugin,
    }


def zoo_row_identity(label: str) -> dict[str, Any]:
    """The settings behind the committed zoo rows of spec ``label`` (``"model[:guide]"``, default options):
    :func:`spec_identity` plus the entry's ``fit_defaults``, so that rows computed before a model's defaults
    changed can be told apart (:func:`stale_zoo_rows`)."""
    from types import SimpleNamespace

    from zoo.experiments.registry import get_entry

    model, _, guide = label.partition(":")
    entry = get_entry(model)
    spec = SimpleNamespace(
        label=label, model=model, guide=guide or entry.default_guide, options={}, guide_options={}
    )
    fit_defaults = {k: _callable_name(v) for k, v in entry.fit_defaults.items()}
    return {**spec_identity(spec), "fit_defaults": _plain(fit_defaults)}


def _callable_name(value: Any) -> Any:
    """A function as ``module.qualname`` (its repr holds a memory address), anything else as it is."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    return value


def stale_zoo_rows(recorded: Any, labels: Sequence[str]) -> list[str]:
    """One line per spec of ``labels`` whose settings today differ from ``recorded`` (the
    ``spec_identities`` a rows file stores, label -> :func:`zoo_row_identity`): its changed options, guide
    options and fit defaults, or that it is no longer registered; ``["... record no settings"]`` when
    ``recorded`` is missing (rows computed before the zoo recorded them)."""
    if not isinstance(recorded, Mapping):
        return ["the rows record no model settings (computed before the zoo recorded them), so rows made "
                "before a change of a model's defaults cannot be told apart"]  # fmt: skip
    out = []
    for label in labels:
        try:
            now = _plain(zoo_row_identity(label))
        except (TypeError, ValueError) as e:
            out.append(f"{label}: {e}")
            continue
        then = recorded.get(label)
        if not isinstance(then, Mapping):
            out.append(f"{label}: no recorded settings")
            continue
        parts = [
            change
            for field in ("options", "guide_options", "fit_defaults")
            for change in _dict_changes(field.replace("_", " "), then.get(field), now[field])
        ]
        parts += _plugin_changes("plugin", then.get("plugin"), now["plugin"])
        if parts:
            out.append(f"{label}: " + "; ".join(parts))
    return out


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        value = value[:12] + "..."  # a sha256: its first 12 hex digits tell two files apart
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _dict_changes(what: str, found: Any, wanted: Mapping) -> list[str]:
    found = found if isinstance(found, Mapping) else {}
    keys = sorted(set(found) | set(wanted), key=str)
    return [
        f"{what} {k}: {_short(found.get(k))} there, {_short(wanted.get(k))} now"
        for k in keys
        if found.get(k) != wanted.get(k)
    ]


def _model_changes(found: Any, wanted: Sequence[Mapping]) -> list[str]:
    labels = (
        [m.get("label") for m in found]
        if isinstance(found, list) and all(isinstance(m, Mapping) for m in found)
        else None
    )
    if labels != [m["label"] for m in wanted]:
        return [f"models: {_short(labels)} there, {_short([m['label'] for m in wanted])} now"]
    parts: list[str] = []
    for old, new in zip(found, wanted, strict=True):
        for field in ("options", "guide_options"):
            parts += _dict_changes(f"{new['label']} {field.replace('_', ' ')}", old.get(field), new[field])
        for field in ("plugin", "guide_plugin"):
            parts += _plugin_changes(f"{new['label']} {field.replace('_', ' ')}", old.get(field), new[field])
    return parts


def _plugin_changes(what: str, found: Any, wanted: Any) -> list[str]:
    if found == wanted:
        return []
    if isinstance(found, Mapping) and isinstance(wanted, Mapping):
        return _dict_changes(what, found, wanted)
    return [f"{what}: {_short(found)} there, {_short(wanted)} now"]


def describe_difference(found: Any, wanted: Mapping) -> str:
    """How signature ``found`` (from a bench record or journal) differs from ``wanted``: the top-level fields
    as :func:`zoo.experiments.journal.describe_difference` says it, each model's resolved options and
    plugin field by field."""
    if not isinstance(found, Mapping):
        return "its signature is damaged or missing"
    rest = {k: v for k, v in wanted.items() if k != "models"}
    parts = (
        []
        if _plain({k: found.get(k) for k in rest}) == _plain(rest)
        else [journal.describe_difference(dict(found), rest)]
    )
    parts += _model_changes(found.get("models"), _plain(wanted.get("models", [])))
    return "; ".join(parts) or "the signatures differ"


def check_version(found: Any, where: str) -> None:
    """Refuse a record (``where``: what holds it) written by a zoo whose signature lacked the resolved
    options and the plugin identity.

    Raises:
        zoo.experiments.journal.JournalMismatch: ``found`` is a signature of another version.
    """
    version = found.get("bench") if isinstance(found, Mapping) else None
    if isinstance(found, Mapping) and version != SIGNATURE_VERSION:
        raise journal.JournalMismatch(
            f"{where} holds a bench recorded by another zoo version (bench record version {version}, this "
            f"zoo writes {SIGNATURE_VERSION}, which also records each model's resolved options and plugin); "
            "its rows cannot be shown to come from the same models: choose another --out (or remove that "
            "folder to refit)"
        )


def journal_signature(path: Path) -> Any:
    """The signature line of a bench journal (``None`` when there is none or it is damaged)."""
    if not path.exists():
        return None
    with path.open(errors="replace") as f:
        first = f.readline()
    try:
        return json.loads(first)
    except json.JSONDecodeError:
        return None
