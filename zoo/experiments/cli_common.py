"""Argument helpers shared by the ``zoo`` subcommands (:mod:`zoo.experiments.cli`,
:mod:`zoo.experiments.bench_cli`): split lists, ``KEY=VALUE`` options, progress logging."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence

__all__ = ["parse_splits", "parse_options", "log_progress"]


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


def parse_options(items: Sequence[str]) -> dict:
    """``["k=v", ...]`` as a dict, values parsed as JSON (else kept as strings); an item without ``=`` or
    whose key is not an identifier is a ``ValueError`` holding the item."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(item)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def log_progress() -> None:
    """Show the library's progress messages (``logging``, INFO) on stdout, as a command line should."""
    logging.basicConfig(format="%(message)s", stream=sys.stdout)
    logging.getLogger("zoo").setLevel(logging.INFO)
