"""What :func:`zoo.infer.loop.fit` and :func:`zoo.infer.loop.resume` check before the first step.

* the arguments: a callable guide, a Pyro ``ELBO`` as ``loss``, an optimizer given as a ``PyroOptim`` object
  or a name (:func:`split_optimizer`);
* the data against the model (:func:`check_model_data`): ``x`` a finite float matrix with as many columns as
  the architecture's ``in_features``, ``y`` as many rows and in the likelihood's support
  (:meth:`zoo.core.likelihoods.Likelihood.validate_targets`, plain torch checks that run with Pyro's
  validation off too) — every failure a ``ValueError``/``TypeError`` naming ``x`` or ``y``;
* the registry spec the fit records for its checkpoints (:func:`fit_spec`);
* that the guide belongs to the model (:mod:`zoo.infer.guide_match`): its parameters and the values it
  samples in the model's dtype (:func:`check_guide_dtype`, a ``TypeError``), and, from one trace of a copy of
  the guide on the first batch, no site the model lacks and every global latent site of the model covered
  (:func:`check_guide_fits_model`, a ``ValueError`` naming ``guide`` and the sites);
* on resume, that the data has the shapes the fit was trained on (:func:`check_same_data`): other shapes
  would change the minibatch stream, the ELBO's ``N`` and the closed-form factors sized by the training set.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import pyro.optim
import torch
from pyro.infer.elbo import ELBO
from torch import Tensor

from zoo.core.likelihoods import Likelihood
from zoo.core.validation import check_tensor
from zoo.infer.guide_match import check_guide_dtype, check_guide_fits_model
from zoo.infer.result import FitResult, guide_class_path

__all__ = [
    "check_data",
    "check_model_data",
    "fit_spec",
    "split_optimizer",
    "check_fit_objects",
    "data_shapes",
    "check_same_data",
    "check_guide_dtype",
    "check_guide_fits_model",
]


def check_data(x: object, y: object, task: str | None = None) -> None:
    """Validate a training pair: ``x`` (N, d) float and finite; ``y`` (N,) or (N, k) finite."""
    x = check_tensor("x", x, ndim=2, dtype_kind="float")
    if y is None:
        return
    y = check_tensor("y", y, ndim=(1, 2))
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"y has {y.shape[0]} rows but x has {x.shape[0]}")
    if task == "multiclass" and y.is_floating_point():
        raise TypeError("y must hold integer class labels (torch.long) for a classification model")
    if task == "regression" and not y.is_floating_point():
        raise TypeError("y must be a floating-point tensor for a regression model")
    if x.device != y.device:
        raise ValueError(f"y is on {y.device} but x is on {x.device}")


def check_model_data(model: torch.nn.Module, x: object, y: object) -> None:
    """:func:`check_data`, then what the model itself requires: ``x`` with as many columns as its
    architecture's ``in_features`` and ``y`` in its likelihood's support
    (:meth:`~zoo.core.likelihoods.Likelihood.validate_targets`, plain torch checks that run with Pyro's
    validation off too).  Models that are not zoo models get :func:`check_data` only."""
    check_data(x, y, getattr(model, "task", None))
    expected = getattr(getattr(model, "architecture", None), "in_features", None)
    if isinstance(expected, int) and x.shape[1] != expected:
        raise ValueError(
            f"x has {x.shape[1]} features (columns) but the model expects {expected} (its in_features); "
            "build the model for this data or select the matching columns"
        )
    likelihood = getattr(model, "likelihood", None)
    if y is not None and isinstance(likelihood, Likelihood):
        likelihood.validate_targets(y)


def fit_spec(model: torch.nn.Module, guide: object, spec: Mapping | None) -> dict | None:
    """The registry spec a fit records: ``spec`` if given, else the one
    :func:`zoo.experiments.registry.build` left on the model (``model._zoo_spec``), else ``None`` (a custom
    model: :func:`zoo.infer.checkpoint.load` then needs ``model=``/``guide=``).  A copy, with the guide's
    class path (``guide_class``), so loading can tell when the spec would rebuild another guide."""
    if spec is None:
        spec = getattr(model, "_zoo_spec", None)
        if spec is None:
            return None
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a registry spec (a dict from zoo.build), not {type(spec).__name__}")
    out = copy.deepcopy(dict(spec))
    out["guide_class"] = guide_class_path(guide)
    return out


def split_optimizer(optimizer: object, settings: dict) -> pyro.optim.PyroOptim | None:
    """An optimizer instance is an object argument; a name is a config setting."""
    if optimizer is None or isinstance(optimizer, pyro.optim.PyroOptim):
        return optimizer
    if isinstance(optimizer, str):
        settings["optimizer"] = optimizer
        return None
    raise TypeError(f"optimizer must be a pyro.optim.PyroOptim or a name, got {type(optimizer).__name__}")


def check_fit_objects(guide: object, loss: object) -> None:
    """A callable guide and, if given, a Pyro ``ELBO`` as the loss (a ``TypeError`` otherwise)."""
    if not callable(guide):
        raise TypeError(f"guide must be callable (a Pyro guide), got {type(guide).__name__}")
    if loss is not None and not isinstance(loss, ELBO):
        raise TypeError(f"loss must be a pyro.infer ELBO, got {type(loss).__name__}")


def data_shapes(x: Tensor, y: Tensor | None) -> dict:
    """The training data's shapes as plain data (kept in the loop state and checkpoints)."""
    return {"x": list(x.shape), "y": None if y is None else list(y.shape)}


def check_same_data(result: FitResult, x: Tensor, y: Tensor | None) -> None:
    """A fit continues on the data it was trained on: other shapes or sizes change the minibatch stream,
    the ELBO's ``N`` and the closed-form factors sized by the training set."""
    fitted = result.loop_state.get("data")
    if fitted is None:  # a fit recorded before the shapes were
        return
    now = data_shapes(x, y)
    for name in ("x", "y"):
        if fitted[name] != now[name]:
            raise ValueError(
                f"{name}: this fit was trained on {name} of shape {tuple(fitted[name] or ())} but resume got "
                f"{tuple(now[name] or ())}; resume on the same training data (or start a new fit)"
            )
