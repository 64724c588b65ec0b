"""The reference store: one compressed ``NAME.npz`` per computed instance, written atomically, and the quality
gate a reference must pass to be stored.

A stored reference holds only symmetry-invariant arrays (:mod:`zoo.reference.quantities`), each estimate next
to its Monte Carlo standard error (``<key>_se``), plus a JSON record under the key ``meta`` (the instance's
config, diagnostics, the exact command, package versions, seeds, wall time).  The file is written through
:func:`zoo.io.atomic_write`, so a reader sees the old reference or the new one, never a half-written one;
``index.json`` next to the files is a summary rebuilt from them after every write; ``attempts.json`` keeps the
diagnostics and the error of the last attempt of each instance that failed the gate (never its draws).

**Gate** (the criteria of posteriordb's reference posteriors, Magnusson et al. 2024, "posteriordb: Testing,
Benchmarking and Developing Bayesian Inference Algorithms", arXiv:2407.04967; thresholds of Vehtari, Gelman,
Simpson, Carpenter & Bürkner 2021, arXiv:1903.08008, §4): every stored quantity has rank-normalized split
R-hat below 1.01 and bulk and tail effective sample sizes of at least 400, and the sampler made no divergent
transition.  An exact
(enumerated) reference passes when its quadrature error bound is below :data:`EXACT_TOLERANCE`.
:func:`check_gate` raises :class:`GateError` naming every failed check.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from zoo.io import atomic_write, atomic_write_text

__all__ = [
    "GATE",
    "EXACT_TOLERANCE",
    "GateError",
    "check_gate",
    "default_root",
    "resolve_root",
    "reference_path",
    "save_reference",
    "load_reference",
    "stored_names",
    "record_attempt",
    "load_attempts",
]

#: the posteriordb-style thresholds: R-hat below, bulk / tail ESS at least, divergences at most
GATE = {"rhat_max": 1.01, "ess_bulk_min": 400.0, "ess_tail_min": 400.0, "divergences": 0}
#: largest quadrature error bound (log evidence) and edge mass an exact reference may have
EXACT_TOLERANCE = 1e-3


class GateError(ValueError):
    """A reference failed the quality gate; the message names each failed check."""


def check_gate(diagnostics: Mapping[str, Any]) -> None:
    """Raise :class:`GateError` unless ``diagnostics`` pass the gate (module docstring).

    ``diagnostics``: for NUTS ``{"divergences", "quantities": {group: {"rhat_max", "ess_bulk_min",
    "ess_tail_min"}}}``; for enumeration ``{"method": "enumeration", "quadrature_error", "edge_mass"}``.
    """
    if diagnostics.get("method") == "enumeration":
        bad = [
            f"{k} = {diagnostics[k]:.3g} >= {EXACT_TOLERANCE:g}"
            for k in ("quadrature_error", "edge_mass")
            if not diagnostics[k] < EXACT_TOLERANCE
        ]
    else:
        bad = []
        if diagnostics["divergences"] > GATE["divergences"]:
            bad.append(f"divergences = {diagnostics['divergences']} (must be 0)")
        for group, d in diagnostics["quantities"].items():
            if not d["rhat_max"] < GATE["rhat_max"]:
                bad.append(f"R-hat of {group} = {d['rhat_max']:.4f} (must be < {GATE['rhat_max']})")
            for key, label in (("ess_bulk_min", "bulk ESS"), ("ess_tail_min", "tail ESS")):
                if not d[key] >= GATE[key]:
                    bad.append(f"{label} of {group} = {d[key]:.0f} (must be >= {GATE[key]:.0f})")
    if bad:
        raise GateError("the reference fails the quality gate: " + "; ".join(bad) + "; it was not stored")


def default_root() -> Path:
    """``$ZOO_REFERENCE_DIR``, else ``benchmarks/reference`` of the source checkout the zoo runs from."""
    env = os.environ.get("ZOO_REFERENCE_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "benchmarks" / "reference"


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The reference store ``root`` as an absolute path; ``None``: :func:`default_root` (what ``zoo
    reference`` uses without ``--root``).  A relative ``root`` is relative to the working directory."""
    return Path(default_root() if root is None else root).expanduser().resolve()


def reference_path(root: str | os.PathLike | None, name: str) -> Path:
    return resolve_root(root) / f"{name}.npz"


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _compact(key: str, value: Any) -> np.ndarray:
    """Draw matrices (2-D or more, float) are stored in float32 (ample for scores whose Monte Carlo error
    is ~1/sqrt(S)); means, standard errors and test data keep float64."""
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.ndim >= 2 and key not in ("x_test",):
        return arr.astype(np.float32)
    return arr


def save_reference(
    root: str | os.PathLike, name: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any], force: bool
) -> Path:
    """Atomically write ``root/NAME.npz`` (``arrays`` + ``meta``); refuses to replace an existing reference
    unless ``force``.  Returns the path."""
    root = Path(root)
    path = reference_path(root, name)
    if path.exists() and not force:
        raise FileExistsError(f"reference {name!r} is already stored at {path}; pass force=True (--force)")
    if "meta" in arrays:
        raise ValueError("arrays: the key 'meta' is reserved for the JSON record")
    root.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    payload = {k: _compact(k, v) for k, v in arrays.items()}
    np.savez_compressed(buf, meta=np.array(json.dumps(_jsonable(dict(meta)), sort_keys=True)), **payload)
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))
    _write_index(root)
    return path


def _not_stored(root: Path, name: str) -> str:
    """The message of a reference that is not in ``root``: the absolute folder searched, where it is
    stored instead (the default store), and how to compute it."""
    msg = f"reference {name!r} is not stored in {root} (no {name}.npz there)"
    default = resolve_root(None)
    if root != default and reference_path(default, name).is_file():
        return f"{msg}; it is stored in the default store {default}: pass root=None (or that folder)"
    where = "" if root == default else f" --root {root}"
    return f"{msg}; compute it with `zoo reference compute {name}{where}`"


def load_reference(
    root: str | os.PathLike | None = None, name: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)`` of the stored reference ``name`` in the store ``root`` (``None``: the default
    store, :func:`default_root`, as ``zoo reference`` without ``--root``; a relative path is relative to the
    working directory).  ``FileNotFoundError`` naming the absolute folder searched and saying how to compute
    the reference (or where it is stored instead)."""
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"name: the reference's name is required, got {name!r}: load_reference(root, name), or "
            "load_reference(name=NAME) for the default store"
        )
    folder = resolve_root(root)
    path = reference_path(folder, name)
    if not path.is_file():
        raise FileNotFoundError(_not_stored(folder, name))
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files if k != "meta"}
        meta = json.loads(str(data["meta"]))
    return arrays, meta


def stored_names(root: str | os.PathLike | None = None) -> list[str]:
    """The names of the references stored in ``root`` (``None``: the default store)."""
    root = resolve_root(root)
    return sorted(p.stem for p in root.glob("*.npz")) if root.is_dir() else []


def _summary(meta: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("method", "model", "dataset", "wall_seconds", "diagnostics", "command", "created")
    return {k: meta.get(k) for k in keys}


def _write_index(root: Path) -> None:
    index = {name: _summary(load_reference(root, name)[1]) for name in stored_names(root)}
    atomic_write_text(root / "index.json", json.dumps(_jsonable(index), indent=1, sort_keys=True) + "\n")


def load_attempts(root: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{name: {"error", "diagnostics", "wall_seconds", "command", "created"}}`` of failed attempts in
    ``root`` (``None``: the default store)."""
    path = resolve_root(root) / "attempts.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def record_attempt(
    root: str | os.PathLike, name: str, meta: Mapping[str, Any] | None, error: str | None
) -> None:
    """Record (``error`` given) or clear (``error=None``) the failed attempt of ``name`` (attempts.json)."""
    root = Path(root)
    attempts = load_attempts(root)
    if error is None:
        if name not in attempts:
            return
        attempts.pop(name)
    else:
        keys = ("wall_seconds", "command", "created", "diagnostics")
        attempts[name] = {"error": error, **{k: (meta or {}).get(k) for k in keys}}
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        root / "attempts.json", json.dumps(_jsonable(attempts), indent=1, sort_keys=True) + "\n"
    )
