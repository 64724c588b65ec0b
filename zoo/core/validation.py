"""Argument checks shared by every public entry point.

Each check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, bad value) with
the offending argument's name first in the message, so users see *which* argument is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "check_tensor",
    "check_positive",
    "check_positive_int",
    "check_probability",
    "check_same_device",
    "check_widths",
    "resolve_device",
]


def check_tensor(
    name: str,
    value: object,
    *,
    ndim: int | Sequence[int] | None = None,
    finite: bool = True,
    dtype_kind: str | None = None,
) -> Tensor:
    """Check that ``value`` is a tensor with the allowed number of dims and finite entries.

    ``dtype_kind`` is ``"float"`` or ``"int"`` (labels) or None (anything).
    """
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if value.dim() not in allowed:
            raise ValueError(
                f"{name} must have {' or '.join(map(str, allowed))} dims, got shape {tuple(value.shape)}"
            )
    if dtype_kind == "float" and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {value.dtype}")
    if dtype_kind == "int" and (value.is_floating_point() or value.is_complex()):
        raise TypeError(f"{name} must be an integer (label) tensor, got {value.dtype}")
    if finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return value


def check_positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A finite real number > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return v


def check_positive_int(name: str, value: object, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    return float(value)


def check_widths(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    out = []
    for v in value:
        out.append(check_positive_int(name, v))
    return tuple(out)


def check_same_device(device: torch.device, **tensors: Tensor | None) -> None:
    """Raise ``ValueError`` naming the first tensor that is not on ``device``."""
    for name, t in tensors.items():
        if t is not None and t.device.type != torch.device(device).type:
            raise ValueError(
                f"{name} is on device {t.device} but the model is on device {device}; move it with .to()"
            )


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Device from the argument, else ``ZOO_DEVICE``, else CPU.  ``"cuda"`` without CUDA is an error."""
    import os

    if device is None:
        device = os.environ.get("ZOO_DEVICE", "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: cannot parse {device!r} ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    return dev
