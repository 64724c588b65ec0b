"""Argument helpers shared by the ``zoo`` subcommands (:mod:`zoo.experiments.cli`,
:mod:`zoo.experiments.bench_cli`, :mod:`zoo.experiments.reference_cli`): split lists, ``KEY=VALUE`` options
parsed by the type of the setting they set, output folders, progress logging.

``KEY=VALUE`` values are parsed by the declared type of ``KEY`` where one is known (a builder's options
dataclass, :class:`~zoo.experiments.config.RunConfig`, a guide factory's annotations): a ``bool`` takes
``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case) and nothing else, an ``int`` an integer literal, a
``float`` a finite number, a ``str`` the text as given, an ``X | None`` also ``none``/``null``.  Other values
parse as JSON (else stay strings).  A non-finite number anywhere (``NaN``, ``inf``) is refused.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import os
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "parse_splits",
    "parse_options",
    "parse_value",
    "check_finite",
    "config_hints",
    "callable_hints",
    "check_out_dir",
    "option_hints",
    "check_overrides",
    "check_protocol_splits",
    "log_progress",
]

_TRUE = frozenset({"true", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "no", "n", "off", "0"})


def parse_splits(text: str | None) -> list[int] | None:
    """``"0-4"``, ``"0,3,5"`` or a mix as a list of split indices (``None`` for ``None``); anything else,
    an empty list or a negative index is a bare ``ValueError`` (the caller names the flag)."""
    if text is None:
        return None
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    if not out or min(out) < 0:
        raise ValueError
    return out


def check_finite(key: str, value: object) -> None:
    """``ValueError`` naming ``key`` when ``value`` holds a non-finite float anywhere (nested lists and
    mappings included)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{key}: must be a finite number, got {value}")
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(f"{key}.{k}", v)
    elif isinstance(value, list | tuple):
        for v in value:
            check_finite(key, v)


def _json(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def parse_value(key: str, raw: str, hint: Any = None) -> Any:
    """``raw`` (command-line text) as a value of type ``hint`` (see the module docstring); a value the type
    does not admit is a ``ValueError`` naming ``key``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    text = raw.strip()
    if hint is not None and len(text) >= 2 and text[0] == text[-1] == '"':  # a JSON string: centered="no"
        quoted = _json(text)
        raw = text = quoted if isinstance(quoted, str) else text
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if text.lower() in ("none", "null"):
            return None
        rest = [t for t in args if t is not type(None)]
        return parse_value(key, raw, rest[0] if len(rest) == 1 else None)
    if hint is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"{key}: expected a boolean (true/false, yes/no, on/off, 1/0), got {raw!r}")
    if hint is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{key}: expected an integer, got {raw!r}") from None
    if hint is float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {raw!r}") from None
        check_finite(key, value)
        return value
    if hint is str:
        return raw
    if origin is typing.Literal:
        if raw not in args:
            raise ValueError(f"{key}: expected one of {list(args)}, got {raw!r}")
        return raw
    value = _json(raw)
    check_finite(key, value)
    return value


def parse_options(items: Sequence[str], hints: Mapping[str, Any] | None = None) -> dict:
    """``["k=v", ...]`` as a dict, each value parsed by :func:`parse_value` with ``hints[k]`` (JSON when
    ``k`` has no hint).  An item without ``=`` or whose key is not an identifier, or a bad value, is a
    ``ValueError`` saying which (the caller names the flag)."""
    hints = hints or {}
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        out[key] = parse_value(key, value, hints.get(key))
    return out


def config_hints(cls: type | None) -> dict[str, Any]:
    """``{field: type}`` of a config dataclass (``{}`` for ``None`` or a class whose hints do not resolve)."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return {}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation naming something the module does not import at run time
        return {}
    return {f.name: hints.get(f.name) for f in dataclasses.fields(cls)}


def callable_hints(fn: object) -> dict[str, Any]:
    """``{parameter: type}`` of a callable's annotated parameters (a guide factory; ``{}`` if unknown)."""
    try:
        target = fn.__init__ if inspect.isclass(fn) else fn  # type: ignore[misc]
        hints = typing.get_type_hints(target)
        names = inspect.signature(fn).parameters  # type: ignore[arg-type]
    except Exception:  # builtins, partials of C functions, unresolvable annotations
        return {}
    return {k: v for k, v in hints.items() if k in names}


def option_hints(model: str, guide: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(builder option types, guide option types)`` of registry entry ``model`` (its ``options``
    dataclass; the annotations of guide ``guide``'s factory, default the entry's default guide); ``({}, {})``
    for a name the registry does not know (the caller reports that)."""
    from zoo.experiments.registry import get_entry

    try:
        entry = get_entry(model)
    except (TypeError, ValueError):
        return {}, {}
    factory = entry.guides.get(guide or entry.default_guide)
    return config_hints(entry.options), callable_hints(factory) if factory is not None else {}


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """The values of ``zoo reproduce --set`` checked as :class:`~zoo.experiments.config.RunConfig`
    fields (plus ``ensemble``/``zeta``) whether or not a protocol run sets them, a ``device`` also against
    this machine; a bad one is a ``ValueError``/``TypeError`` naming it."""
    from zoo.core.validation import check_positive, check_positive_int, resolve_device
    from zoo.experiments.config import RunConfig

    for key, value in overrides.items():
        check_finite(key, value)
    fields = {k: v for k, v in overrides.items() if k in RunConfig.field_names()}
    RunConfig.from_dict(fields, what="--set")
    if "ensemble" in overrides:
        check_positive_int("ensemble", overrides["ensemble"])
    if "zeta" in overrides:
        check_positive("zeta", overrides["zeta"], allow_zero=True)
    if overrides.get("device") is not None:
        resolve_device(overrides["device"])


def check_protocol_splits(name: str, splits: Sequence[int] | None, variants: Sequence[str] | None) -> None:
    """Load every (dataset, split) pair protocol ``name`` would fit, so a split that one of its datasets
    lacks (``--splits 19-20`` where a set has 20 splits) is an error before the first fit, not after the
    others ran.  Raises what :func:`zoo.data.load_dataset` raises."""
    from zoo.data import load_dataset
    from zoo.experiments.reproduce import PROTOCOLS, run_config, select_variants

    seen: set[tuple[str, int]] = set()
    for spec in select_variants(PROTOCOLS[name].runs(splits), variants, PROTOCOLS[name].opt_in):
        if (spec.dataset, spec.split) not in seen:
            seen.add((spec.dataset, spec.split))
            try:
                load_dataset(spec.dataset, spec.split, data_dir=run_config(spec)[2].data_dir)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{spec.dataset} split {spec.split}: {e}") from None


def check_out_dir(out: str) -> None:
    """``ValueError`` unless ``out`` can become a run folder: an existing writable folder, or a new name in
    an existing writable folder (a parent that is missing or a file is refused before any work)."""
    path = os.path.abspath(out)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{out!r} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{out!r} is not writable")
        return
    parent = os.path.dirname(path)
    if not os.path.exists(parent):
        raise ValueError(f"the parent folder {parent!r} of {out!r} does not exist; create it first")
    if not os.path.isdir(parent):
        raise ValueError(f"the parent {parent!r} of {out!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"the parent folder {parent!r} of {out!r} is not writable")


def log_progress() -> None:
    """Show the library's progress messages (``logging``, INFO) on stdout, as a command line should."""
    logging.basicConfig(format="%(message)s", stream=sys.stdout)
    logging.getLogger("zoo").setLevel(logging.INFO)
