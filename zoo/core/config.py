"""Config objects: typed, validated, serializable option sets (fit, run and each family's builder).

A config is a frozen :func:`dataclasses.dataclass` deriving from :class:`Config`.  Validation lives in
the class's ``validate`` (called on construction), so every entry point (the API, the CLI, protocols,
checkpoints and journals) checks options in one place before any work starts.  ``to_dict`` /
``from_dict`` give the plain-JSON form that checkpoints and journals store; ``from_dict`` names any
unknown key.  Keyword call sites keep working through :func:`resolve`::

    @dataclass(frozen=True)
    class MyOptions(Config):
        scale: float = 1.0

        def validate(self) -> None:
            check_positive("scale", self.scale)

    def build(in_features, out_features, task, hidden, options=None, **kwargs):
        opts = resolve(MyOptions, options, kwargs)   # MyOptions(scale=...) or scale=... both work
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["Config", "resolve"]

ConfigT = TypeVar("ConfigT", bound="Config")


@dataclasses.dataclass(frozen=True)
class Config:
    """Base class of the zoo's config dataclasses (see the module docstring)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError``/``TypeError`` naming the offending field; the default accepts all."""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (tuples become lists) for JSON journals and ``weights_only`` checkpoints."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls: type[ConfigT], data: Mapping[str, Any] | None, *, what: str | None = None) -> ConfigT:
        """Build from a mapping; an unknown key is a ``ValueError`` naming it and the valid keys."""
        data = dict(data or {})
        unknown = sorted(set(data) - set(cls.field_names()))
        if unknown:
            label = what or cls.__name__
            raise ValueError(f"{label}: unknown option(s) {unknown}; valid: {sorted(cls.field_names())}")
        return cls(**data)

    def replace(self: ConfigT, **changes: Any) -> ConfigT:
        """A copy with ``changes`` applied (validated again); unknown names are a ``ValueError``."""
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown option(s) {unknown}")
        return dataclasses.replace(self, **changes)


def resolve(
    cls: type[ConfigT], config: ConfigT | Mapping[str, Any] | None, kwargs: Mapping[str, Any]
) -> ConfigT:
    """The config a call site means: ``config`` (an instance or a mapping), updated by keyword ``kwargs``.

    Lets a function take either ``f(options=Cls(...))`` or the keyword form ``f(a=1, b=2)`` it had before
    configs existed; an unknown keyword is a ``ValueError`` naming it.
    """
    if config is None:
        return cls.from_dict(kwargs)
    if isinstance(config, cls):
        return config.replace(**kwargs) if kwargs else config
    if isinstance(config, Mapping):
        return cls.from_dict({**config, **kwargs})
    raise TypeError(f"options must be a {cls.__name__} or a mapping, got {type(config).__name__}")


def _plain(v: Any) -> Any:
    if isinstance(v, Config):
        return v.to_dict()
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    return v
