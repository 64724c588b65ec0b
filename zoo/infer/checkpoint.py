"""Save / load / resume a fit, atomically.

A checkpoint holds everything needed to continue a fit bit-for-bit on CPU (the format:
:mod:`zoo.infer.snapshot`).  It contains plain data only, so ``torch.load(path, weights_only=True)``
reads it and loading a shared checkpoint never unpickles objects.  Files are written through
:mod:`zoo.io`: a temporary file in the target folder, flushed, fsynced and renamed over the destination,
so a crash (even ``kill -9``) never leaves a half-written checkpoint.

A checkpoint of a NUTS fit (:func:`zoo.infer.mcmc.fit_nuts`, ``zoo fit --inference nuts``; its config says
``inference: "nuts"``) holds the posterior draws and the sampler statistics as the buffers of its guide;
:func:`load` and :func:`load_nuts` return it as a :class:`~zoo.infer.mcmc_result.NUTSResult`.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import pyro
import pyro.optim
import torch
from pyro.infer.elbo import ELBO
from pyro.nn import PyroModule
from pyro.nn.module import _make_name
from pyro.params.param_store import param_with_module_name

from zoo.core.validation import resolve_device
from zoo.experiments.registry import build_from_spec
from zoo.infer.accelerate import repeated_slice
from zoo.infer.codec import decode_constraint, decode_loss, set_rng_state
from zoo.infer.mcmc_result import NUTSResult, PosteriorDrawsGuide, restore_sampled_form
from zoo.infer.optim import make_optimizer, optimizer_name
from zoo.infer.result import ConvergenceMonitor, FitResult, guide_class_path
from zoo.infer.snapshot import read_checkpoint, write_checkpoint
from zoo.io import atomic_torch_save, atomic_write_bytes

__all__ = ["save", "load", "load_nuts", "is_nuts_checkpoint", "atomic_write_bytes", "atomic_torch_save"]


def save(result: FitResult, path: str | os.PathLike) -> None:
    """Write ``result`` to ``path`` atomically (``torch.save`` format, loadable with ``weights_only``)."""
    if not isinstance(result, FitResult):
        raise TypeError(f"result must be a FitResult, got {type(result).__name__}")
    write_checkpoint(result, path)


def _rebuild_optim(spec: dict | None, config: dict) -> pyro.optim.PyroOptim | None:
    if spec is None:
        return None
    name = optimizer_name(spec.get("constructor") or "Adam")
    if name is None or spec.get("args") is None:
        raise ValueError("optimizer: this checkpoint's optimizer cannot be rebuilt by name; pass optimizer=")
    args = dict(spec["args"])
    lr = args.pop("lr", config.get("lr", 1e-2))
    optim = make_optimizer(name, lr, **args)
    optim.set_state(spec["state"])
    return optim


def _is_factory(guide: Any) -> bool:
    """A guide class, or a function whose first parameter is ``model`` (a registry guide factory such as
    ``lambda model: AutoNormal(model)`` is not recognized: pass its result)."""
    if isinstance(guide, type):
        return True
    if not callable(guide) or isinstance(guide, torch.nn.Module):
        return False
    try:
        params = list(inspect.signature(guide).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "model"


def _as_guide(guide: Any, model: torch.nn.Module) -> Any:
    """``guide`` as the guide object to load the fit into: a guide class or a factory ``f(model)`` is called
    with ``model``; an instance is used as given."""
    if not _is_factory(guide):
        return guide
    try:
        return guide(model)
    except Exception as e:
        name = getattr(guide, "__qualname__", repr(guide))
        raise TypeError(
            f"guide: calling {name}(model) to build the guide failed ({type(e).__name__}: {e}); pass "
            "guide=<your guide class or instance>"
        ) from e


def _model_and_guide(ckpt: dict, model, guide) -> tuple[torch.nn.Module, Any]:
    """Model and guide: the ones given, else rebuilt from the checkpoint's registry spec; a spec whose guide
    is not the one that was fitted (``guide_class``, recorded by :func:`zoo.infer.loop.fit`) needs
    ``guide=`` (an instance, or a class / factory called with the model)."""
    if model is None or guide is None:
        spec = ckpt["spec"]
        if spec is None:
            raise ValueError(
                "model/guide: this checkpoint has no registry spec (the model was not built by zoo.build); "
                "pass model= and guide="
            )
        m2, g2 = build_from_spec(spec)
        fitted = spec.get("guide_class")
        if guide is None and fitted is not None and guide_class_path(g2) != fitted:
            raise ValueError(
                f"guide: this checkpoint was fitted with guide {fitted}, but its spec rebuilds "
                f"{guide_class_path(g2)} (guide {spec.get('guide')!r} of {spec.get('model')!r}); pass "
                f"guide=<your guide class or instance>, e.g. load(path, guide={fitted.rsplit('.', 1)[-1]}) "
                f"with {fitted.rsplit('.', 1)[0]} imported"
            )
        dtype = _converted_dtype(ckpt["model_state"], m2.state_dict())
        if dtype is not None:  # a fit of a model converted after build (model.double())
            m2.to(dtype)
            if isinstance(g2, torch.nn.Module):
                g2.to(dtype)
        model = model if model is not None else m2
        guide = guide if guide is not None else g2
    return model, _as_guide(guide, model)


def _converted_dtype(saved: dict, built: dict) -> torch.dtype | None:
    """The dtype the fitted model was converted to after ``build`` (``model.double()``): every floating
    entry of its saved state has that one dtype and every one the spec rebuilds has another one dtype.
    ``None`` otherwise (nothing to convert; models that mix dtypes on purpose stay as built)."""
    pairs = [
        (saved[k].dtype, v.dtype)
        for k, v in built.items()
        if k in saved and torch.is_tensor(saved[k]) and saved[k].is_floating_point() and v.is_floating_point()
    ]
    saved_dtypes, built_dtypes = {a for a, _ in pairs}, {b for _, b in pairs}
    if len(saved_dtypes) == 1 and len(built_dtypes) == 1 and saved_dtypes != built_dtypes:
        return saved_dtypes.pop()
    return None


def _example_batch(result: FitResult, ckpt: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    dev = result.device
    ex = ckpt.get("example")
    x0 = ex[0].to(dev) if ex else torch.zeros(2, result.model.architecture.in_features, device=dev)
    y0 = ex[1].to(dev) if ex and ex[1] is not None else None
    return x0, y0


def _module_params(root: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{param-store name: tensor}`` of every parameter a :class:`~pyro.nn.PyroModule` tree registers in the
    param store: its ``nn.Parameter`` s and :class:`~pyro.nn.PyroParam` s (unconstrained tensors) by their
    full Pyro names, and the parameters of plain ``nn.Module`` children by ``pyro.module``'s
    ``"<module>$$$<param>"`` names."""
    out: dict[str, torch.Tensor] = {}
    for mod in root.modules():
        # the names Pyro gives (PyroModule._pyro_get_fullname, without its check that the module ran once);
        # a submodule not yet named by its parent is skipped rather than guessed
        prefix = mod.__dict__.get("_pyro_name") if isinstance(mod, PyroModule) else None
        if prefix is None or (not prefix and mod is not root):
            continue
        pyro_params = mod.__dict__.get("_pyro_params", {})
        for name, p in mod._parameters.items():
            if p is None:
                continue
            base = name[: -len("_unconstrained")]
            out.setdefault(_make_name(prefix, base if base in pyro_params else name), p)
        for cname, child in mod._modules.items():
            if child is None or isinstance(child, PyroModule):
                continue
            child_name = _make_name(prefix, cname)
            for pname, p in child.named_parameters():
                out.setdefault(param_with_module_name(child_name, pname), p)
    return out


def _check_same(name: str, saved: torch.Tensor, built: torch.Tensor) -> None:
    if saved.shape != built.shape or saved.dtype != built.dtype:
        raise ValueError(
            f"checkpoint: parameter {name!r} has shape {tuple(saved.shape)} ({saved.dtype}) in the "
            f"checkpoint but {tuple(built.shape)} ({built.dtype}) in the model/guide it is loaded into; "
            "build it with the checkpoint's settings (hidden widths, options, guide, dtype) or let load() "
            "rebuild it"
        )


def _restore_params(result: FitResult, ckpt: dict) -> None:
    """Fill the fit's param-store scope so that every name maps to *the module's own tensor*.

    The guide is first materialized (lazily created parameters of autoguides) in an empty scope, so each
    parameter is registered with the tensor its module computes with; the checkpoint's values are then
    copied into those tensors (shape and dtype checked: ``ValueError`` naming the parameter), names no
    module holds are added as stored, and the model's and guide's module parameters are adopted.  Loading
    the values into a pre-filled store instead leaves ``nn.Parameter`` s of Pyro modules (IAF/MADE layers)
    and ``pyro.module`` children pointing at other tensors than the store: the optimizer would step
    tensors the loss never reads (frozen flows), and reads outside a module's Pyro context (closed-form
    KLs of the LBBNN empirical-Bayes hyperparameters) would see another tensor than the model."""
    saved = ckpt["param_store"]
    guide, dev = result.guide, result.device
    with torch.no_grad(), result.activate(), pyro.poutine.block():
        store = pyro.get_param_store()
        if isinstance(guide, torch.nn.Module):
            guide.to(dev)
            guide(*_example_batch(result, ckpt))
        owned = {**_module_params(result.guide), **_module_params(result.model)}
        for name, value in saved["params"].items():
            value = value.to(dev)
            current = store._params.get(name)  # the fit's own scope (pyro.nn.module reads _params too)
            built = owned.get(name, current)
            if built is not None:
                _check_same(name, value, built)
                built.copy_(value)
                value = built
                if current is not None and current is not built:
                    store._param_to_name.pop(current, None)
            constraint = store._constraints.get(name) or decode_constraint(saved["constraints"][name])
            store.set_state({"params": {name: value}, "constraints": {name: constraint}})


def _load_state(module: object, state: dict | None, what: str) -> None:
    """``module.load_state_dict(state)`` with a size mismatch as a ``ValueError`` naming the entry, and the
    saved buffers' memory layout (strides) kept: a buffer a guide stores transposed (bow-tie ``B``)
    must not come back contiguous, or later products round differently and resume is no longer exact."""
    if state is None or not isinstance(module, torch.nn.Module):
        return
    try:
        module.load_state_dict(state)
    except RuntimeError as e:  # torch lists every mismatch, one per line after a header
        lines = [line.strip() for line in str(e).splitlines()[1:] if line.strip()] or [str(e)]
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        raise ValueError(f"checkpoint: the {what} does not match the checkpoint: {lines[0]}{more}") from None
    for full, buf in list(module.named_buffers()):
        saved = state.get(full)
        if saved is None or saved.stride() == buf.stride() or saved.shape != buf.shape:
            continue
        owner_name, _, leaf = full.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        owner._buffers[leaf] = _copy_with_layout(saved.to(buf.device, buf.dtype))


def _copy_with_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its strides; an expanded view (stride 0, e.g. the bow-tie's one covariance matrix
    shared by every row) comes back as an expanded view of a copy of the slice it repeats."""
    base = repeated_slice(t)
    if base.shape != t.shape:
        return base.clone().expand(t.shape)
    return t.clone(memory_format=torch.preserve_format)


def _loop_state(saved: dict) -> dict:
    loop = dict(saved)
    gen = torch.Generator()
    gen_state = loop.pop("gen_state")
    if gen_state is not None:
        gen.set_state(gen_state)
    monitor = loop.pop("monitor")
    state = {**loop, "gen": gen}
    if monitor is not None:
        state["monitor"] = ConvergenceMonitor.from_dict(monitor)
    return state


def _load(
    ckpt: dict,
    model: torch.nn.Module | None,
    guide: Any,
    optimizer: pyro.optim.PyroOptim | None,
    loss: ELBO | None,
    device: str | torch.device | None,
    result_type: type[FitResult] = FitResult,
) -> FitResult:
    """The fit of the checkpoint ``ckpt`` (read by :func:`zoo.infer.snapshot.read_checkpoint`), as a
    ``result_type`` (:func:`load`)."""
    dev = resolve_device(device if device is not None else ckpt["device"])
    model, guide = _model_and_guide(ckpt, model, guide)
    model.to(dev)
    result = result_type(
        model=model,
        guide=guide,
        seed=ckpt["seed"],
        config=dict(ckpt["config"]),
        device=dev,
        spec=ckpt["spec"],
        example=ckpt.get("example"),
    )
    _restore_params(result, ckpt)
    _load_state(guide, ckpt["guide_state"], "guide")
    _load_state(model, ckpt["model_state"], "model")
    if optimizer is not None:
        if ckpt["optim"] is not None:
            optimizer.set_state(ckpt["optim"]["state"])
        result.optim = optimizer
    else:
        result.optim = _rebuild_optim(ckpt["optim"], ckpt["config"])
    result.loss = loss if loss is not None else (decode_loss(ckpt["loss"]) if ckpt["loss"] else None)
    result.loop_state = _loop_state(ckpt["loop"])
    result.elbo = list(ckpt["elbo"])
    result.steps = ckpt["steps"]
    result.wall_time = ckpt["wall_time"]
    result.converged = ckpt["converged"]
    set_rng_state(ckpt["rng"])
    return result


def is_nuts_checkpoint(ckpt: dict) -> bool:
    """Whether the checkpoint ``ckpt`` (as read by :func:`zoo.infer.snapshot.read_checkpoint`) holds a NUTS
    fit: its config records ``inference: "nuts"`` (:meth:`zoo.infer.mcmc.NUTSConfig.record`)."""
    return (ckpt.get("config") or {}).get("inference") == "nuts"


def _load_nuts(ckpt: dict, model: torch.nn.Module | None, device: str | torch.device | None) -> NUTSResult:
    result = _load(ckpt, model, PosteriorDrawsGuide(), None, None, device, result_type=NUTSResult)
    restore_sampled_form(result)
    return result


def _check_nuts_arguments(guide: Any, optimizer: Any, loss: Any) -> None:
    """``ValueError`` naming the argument of :func:`load` that a NUTS checkpoint has no use for."""
    if guide is not None and not (
        isinstance(guide, PosteriorDrawsGuide)
        or (isinstance(guide, type) and issubclass(guide, PosteriorDrawsGuide))
    ):
        raise ValueError(
            f"guide: this is a checkpoint of a NUTS fit, whose posterior draws are replayed by "
            f"PosteriorDrawsGuide; got {type(guide).__name__} (leave guide=None)"
        )
    for name, value in (("optimizer", optimizer), ("loss", loss)):
        if value is not None:
            raise ValueError(f"{name}: a NUTS fit has no {name} to restore (leave {name}=None)")


def load_nuts(
    path: str | os.PathLike, *, model: torch.nn.Module | None = None, device: str | torch.device | None = None
) -> NUTSResult:
    """Load the checkpoint of a NUTS fit (written by ``result.save(path)`` after
    :func:`zoo.infer.mcmc.fit_nuts`, or ``checkpoint.pt`` of ``zoo fit MODEL --inference nuts --out DIR``)
    as a :class:`~zoo.infer.mcmc_result.NUTSResult`: every posterior draw per chain (``result.samples``,
    ``{site: (chain, draw, *shape)}``), the per-draw sampler statistics (``result.guide.stats``), the
    convergence diagnostics (``result.diagnostics``) and the per-chain facts (``result.chain_stats``).
    :func:`load` does the same for a NUTS checkpoint.

    The model is rebuilt from the checkpoint's registry spec (pass ``model=`` for a model not built by
    ``zoo.build``), with its prior in the form its draws were sampled in (hierarchical / marginal, centered /
    non-centered).  ``device``: where to put the draws (default: the fit's, the CPU).  A checkpoint of
    another fit is a ``ValueError`` naming ``path``.

    Usage::

        result = load_nuts("run/checkpoint.pt")          # or zoo.load("run/checkpoint.pt")
        result.samples["sigma2"].shape                    # (chains, draws)
        result.predict(x_test, num_samples=result.num_draws).mean   # every draw once
        idata = result.to_inference_data(x_test, y_test, train=(x, y))  # ArviZ, (chain, draw) dims
    """
    ckpt = read_checkpoint(path)
    if not is_nuts_checkpoint(ckpt):
        raise ValueError(
            f"path: {os.fspath(path)!r} is not a checkpoint of a NUTS fit (load it with zoo.load)"
        )
    return _load_nuts(ckpt, model, device)


def load(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module | None = None,
    guide: Any = None,
    optimizer: pyro.optim.PyroOptim | None = None,
    loss: ELBO | None = None,
    device: str | torch.device | None = None,
) -> FitResult:
    """Load a checkpoint written by :func:`save`.

    Model and guide are rebuilt from the checkpoint's registry ``spec`` unless given (a fit of a model
    made by :func:`zoo.experiments.registry.build` records it without ``spec=``; custom models must be
    passed, as must a guide other than the spec's: an instance, or its class or a factory ``f(model)``,
    called with the model), as are the optimizer and the ELBO
    (``optimizer=``/``loss=`` replace them).  RNG states are restored last, so
    :func:`zoo.infer.loop.resume` continues the exact random stream of the original run.  A file that is
    not a checkpoint of this format version is a ``ValueError`` naming it.

    A checkpoint of a NUTS fit (``zoo fit --inference nuts``, :func:`zoo.infer.mcmc.fit_nuts`) is returned as
    a :class:`~zoo.infer.mcmc_result.NUTSResult`, as :func:`load_nuts` does; ``guide``, ``optimizer`` and
    ``loss`` must then be left unset (a ``ValueError`` names the one that is not).
    """
    ckpt = read_checkpoint(path)
    if is_nuts_checkpoint(ckpt):
        _check_nuts_arguments(guide, optimizer, loss)
        return _load_nuts(ckpt, model, device)
    return _load(ckpt, model, guide, optimizer, loss, device)
