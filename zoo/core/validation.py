"""Argument checks shared by every public entry point.

Each check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, bad value) with
the offending argument's name first in the message, so users see *which* argument is wrong.

Two groups:

* scalar and tensor checks of the model-building API (``check_positive``, ``check_tensor``, ...): the
  message starts with the bare name, ``"weight_scale must be > 0 and finite, got -1"``;
* array checks of the evaluation API (``to_numpy``, ``check_float_array``, ``check_labels``, ...), which take
  numpy arrays, torch tensors on any device or array-likes and return float64 / int64 / bool numpy arrays.
  They raise only ``ValueError`` and put the name in backticks, ``"`y` contains NaN or inf values"``
  (a mask of a mapping is named ``masks['fc0.weight']``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "check_tensor",
    "check_bool",
    "check_positive",
    "check_real",
    "check_positive_int",
    "check_probability",
    "check_same_device",
    "check_widths",
    "resolve_device",
    "to_numpy",
    "check_float_array",
    "check_shape",
    "check_broadcastable",
    "check_draws",
    "check_positive_array",
    "check_labels",
    "check_label_range",
    "check_class_probs",
    "check_bool_array",
    "check_level",
    "check_count",
    "check_optional",
    "check_device_name",
    "check_mapping",
    "check_seed",
    "MAX_SEED",
    "DEVICE_TYPES",
]

#: the largest seed every generator the zoo seeds accepts (numpy's legacy seeding takes ``0 .. 2**32 - 1``)
MAX_SEED = 2**32 - 1

#: device types the zoo trains on (``meta``, ``xla``, ... cannot run a fit)
DEVICE_TYPES = ("cpu", "cuda", "mps")


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


def check_bool(name: str, value: object) -> bool:
    """A Python ``bool`` (``0``/``1`` and numpy bools are rejected: an option set to ``1`` is a typo)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def check_seed(name: str, value: object) -> int:
    """A seed: an ``int`` (not ``bool``, not a float such as ``1e20``) in ``0 .. 2**32 - 1``, the range
    that Pyro's ``set_rng_seed`` (torch, numpy and ``random`` together) accepts."""
    check_positive_int(name, value, allow_zero=True)
    if value > MAX_SEED:  # type: ignore[operator]
        raise ValueError(f"{name} must be <= 2**32 - 1 = {MAX_SEED}, got {value}")
    return value  # type: ignore[return-value]


def check_real(name: str, value: object) -> float:
    """A finite real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


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


def check_probability(name: str, value: object, *, allow_one: bool = False) -> float:
    """A real number in ``(0, 1)``, or in ``(0, 1]`` with ``allow_one``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (0.0 < v < 1.0 or (allow_one and v == 1.0)):
        raise ValueError(f"{name} must lie in {'(0, 1]' if allow_one else '(0, 1)'}, got {value!r}")
    return v


def check_widths(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
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


def _parse_device(name: str, device: object) -> torch.device:
    """``device`` parsed by torch, of a type in :data:`DEVICE_TYPES`; else ``ValueError`` naming ``name``."""
    try:
        dev = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"{name}: cannot parse {device!r} ({e}); use 'cpu' or 'cuda[:N]'") from None
    if dev.type not in DEVICE_TYPES:
        raise ValueError(
            f"{name}: {device!r} is not a device a fit can run on; use one of {', '.join(DEVICE_TYPES)} "
            "(e.g. 'cpu' or 'cuda:0')"
        )
    return dev


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Device from the argument, else ``ZOO_DEVICE``, else CPU; it must exist on this machine: ``"cuda"``
    without CUDA, ``"cuda:3"`` with fewer GPUs, ``"mps"`` without MPS or a type such as ``"meta"`` are a
    ``ValueError`` naming ``device``."""
    import os

    name = "device"
    if device is None:
        device = os.environ.get("ZOO_DEVICE", "cpu")
        name = "device (from ZOO_DEVICE)"
    dev = _parse_device(name, device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={device!r} requested but CUDA is not available")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"{name}={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                f"(cuda:0..cuda:{torch.cuda.device_count() - 1})"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={device!r} requested but MPS is not available")
    return dev


# --------------------------------------------------------------------------------------------------
# Array checks of the evaluation API (numpy arrays, torch tensors, array-likes; ValueError, `name`)
# --------------------------------------------------------------------------------------------------


def to_numpy(name: str, value: object) -> np.ndarray:
    """``value`` as a numpy array.  Tensors are detached and copied to the CPU, floating tensors cast to
    float64 (numpy has no bfloat16); other inputs go through :func:`numpy.asarray` (dtype kept)."""
    if value is None:
        raise ValueError(f"`{name}` must not be None")
    if isinstance(value, Tensor):
        t = value.detach().cpu()
        if t.is_complex():
            raise ValueError(f"`{name}` must be real-valued, got dtype {t.dtype}")
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.to(torch.float64)
        return t.numpy()
    try:
        return np.asarray(value)
    except Exception as exc:  # ragged lists etc.
        raise ValueError(f"`{name}` could not be converted to an array: {exc}") from exc


def check_float_array(name: str, value: object, *, min_ndim: int = 0) -> np.ndarray:
    """A finite, non-empty float64 array with at least ``min_ndim`` dimensions (bool/int inputs cast)."""
    arr = to_numpy(name, value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"`{name}` must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim < min_ndim:
        raise ValueError(f"`{name}` must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` contains NaN or inf values")
    return arr


def check_shape(name: str, arr: np.ndarray, shape: Sequence[int], ref: str) -> np.ndarray:
    """``arr`` itself if its shape is ``shape`` (``ref`` says where that shape comes from)."""
    if arr.shape != tuple(shape):
        raise ValueError(f"`{name}` has shape {arr.shape}, expected {tuple(shape)} ({ref})")
    return arr


def check_broadcastable(name: str, arr: np.ndarray, shape: Sequence[int], ref: str) -> np.ndarray:
    """``arr`` broadcast to ``shape``, which it may not enlarge (``(N, 1)`` against ``(N,)`` is an error)."""
    shape = tuple(shape)
    try:
        out_shape = np.broadcast_shapes(arr.shape, shape)
    except ValueError:
        out_shape = None
    if out_shape != shape:
        raise ValueError(f"`{name}` has shape {arr.shape}, which does not broadcast to {shape} ({ref})")
    return np.broadcast_to(arr, shape)


def check_draws(name: str, value: object, shape: Sequence[int], ref: str = "the shape of `y`") -> np.ndarray:
    """A finite float64 array of ``S`` draws, shape ``(S,) + shape``."""
    arr = check_float_array(name, value, min_ndim=1)
    if arr.shape[1:] != tuple(shape):
        raise ValueError(f"`{name}` has shape {arr.shape}, expected (S,) + {tuple(shape)} (S draws of {ref})")
    return arr


def check_positive_array(name: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` itself if every entry is ``> 0``."""
    if np.any(arr <= 0):
        raise ValueError(f"`{name}` must be strictly positive (got min {arr.min():g})")
    return arr


def check_labels(name: str, value: object) -> np.ndarray:
    """Non-empty 1-D int64 class labels; bool inputs and integer-valued floats (BCE targets) are accepted."""
    arr = to_numpy(name, value)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D array of integer labels, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"`{name}` contains NaN or inf values")
        if np.any(arr != np.round(arr)):
            raise ValueError(f"`{name}` must hold integer class labels, got non-integer values")
    elif arr.dtype.kind not in "biu":
        raise ValueError(f"`{name}` must hold integer class labels, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def check_label_range(name: str, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``labels`` itself if every label lies in ``[0, num_classes - 1]``."""
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(
            f"`{name}` labels must lie in [0, {num_classes - 1}] for {num_classes} classes, "
            f"got [{labels.min()}, {labels.max()}]"
        )
    return labels


def check_class_probs(name: str, value: object, n: int) -> np.ndarray:
    """Class probabilities as ``(N, K)`` float64, rows summing to one (to 1e-4); a binary ``(N,)`` array of
    ``P(y = 1)`` becomes ``[1 - p, p]``."""
    p = check_float_array(name, value, min_ndim=1)
    if p.ndim == 1:
        check_shape(name, p, (n,), "binary P(y=1) for each of the N labels in `y`")
    elif p.ndim == 2:
        if p.shape[0] != n:
            raise ValueError(f"`{name}` has shape {p.shape}, expected ({n}, K) (one row per label in `y`)")
    else:
        raise ValueError(f"`{name}` must be (N,) binary or (N, K) class probabilities, got shape {p.shape}")
    if np.any(p < 0.0) or np.any(p > 1.0):
        raise ValueError(f"`{name}` must lie in [0, 1]")
    if p.ndim == 1:
        return np.stack([1.0 - p, p], axis=1)
    deviation = np.abs(p.sum(axis=1) - 1.0).max()
    if deviation > 1e-4:
        raise ValueError(f"`{name}` rows must sum to 1 (max deviation {deviation:.3g})")
    return p


def check_bool_array(name: str, value: object) -> np.ndarray:
    """A boolean array; numeric arrays holding only 0/1 (e.g. sampled Bernoulli gates) are accepted."""
    arr = to_numpy(name, value)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"`{name}` must be boolean, got dtype {arr.dtype}")
    if not np.all(np.isin(arr, (0, 1))):
        raise ValueError(f"`{name}` must be boolean (or only 0/1 values)")
    return arr.astype(bool)


def check_level(name: str, value: object, *, allow_one: bool = False) -> float:
    """A number (Python, numpy or 0-dim array) in ``(0, 1)``, or ``(0, 1]`` with ``allow_one``: a coverage
    level, a confidence threshold."""
    interval = "(0, 1]" if allow_one else "(0, 1)"
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be a number in {interval}, got {value!r}") from exc
    if not (0.0 < v < 1.0 or (allow_one and v == 1.0)):
        raise ValueError(f"`{name}` must lie in {interval}, got {value!r}")
    return v


def check_count(name: str, value: object, *, minimum: int = 0) -> int:
    """An integer (Python or numpy, not bool) ``>= minimum``."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not ok or value < minimum:  # type: ignore[operator]
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise ValueError(f"`{name}` must be {kind}, got {value!r}")
    return int(value)  # type: ignore[arg-type]


def check_optional(name: str, value: object, check: Callable[..., object], **kw: Any) -> None:
    """``check(name, value, **kw)`` unless ``value`` is None."""
    if value is not None:
        check(name, value, **kw)


def check_device_name(name: str, value: object) -> None:
    """A device string torch can parse, of a type in :data:`DEVICE_TYPES` (whether it exists on this
    machine is checked by :func:`resolve_device` when the fit starts)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a device name such as 'cpu' or 'cuda', got {type(value).__name__}")
    _parse_device(name, value)


def check_mapping(name: str, value: object) -> None:
    """``TypeError`` unless ``value`` is a mapping."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping, got {type(value).__name__}")
