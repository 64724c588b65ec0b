"""pyro-bnn-zoo: sparse and shrinkage Bayesian neural networks on Pyro.

The short public API, importable from the top level (``from zoo import Prior, BayesianModel, MLP, fit,
build``).  Names are resolved on first use (PEP 562), so ``import zoo.data`` stays light and importing
``zoo`` never imports the model families or :mod:`guides`.

Where things live (each paper family in one folder per package):

* :mod:`zoo.core` — architectures, :class:`BayesianModel`, likelihoods, the prior and closed-form guide
  interfaces, sparsity reports, validators, config objects;
* :mod:`zoo.distributions` — the GIG, N-GIG and Pólya-Gamma distributions;
* :mod:`zoo.ops` — shared closed-form math and the local-reparameterization messenger;
* :mod:`zoo.infer` — the training loop, ELBOs, prediction, checkpoints;
* :mod:`zoo.eval` — metrics and ArviZ diagnostics;
* :mod:`zoo.data` — datasets;
* :mod:`zoo.families` — one package per paper family (prior, model, registry entry, protocols);
* :mod:`zoo.experiments` — the registry, runs on datasets, protocols, ensembles and the CLI;
* the :mod:`guides` package mirrors the families: ``guides.<family>`` holds that family's guides.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

# ``import pyro`` imports ``tqdm.auto`` (pyro's MCMC progress bars), which in a Jupyter kernel without
# ipywidgets warns "IProgress not found" at import time.  The zoo's own progress bars are plain text, so the
# warning is noise to every notebook user; silence exactly that message, from tqdm only.  It must be in place
# before pyro is first imported: a notebook imports ``zoo`` first (``import zoo`` is light, PEP 562 below).
warnings.filterwarnings("ignore", message="IProgress not found", module=r"tqdm\.")

__version__ = "0.1.0"

#: public name -> module that defines it
_API: dict[str, str] = {
    "Architecture": "zoo.core.architectures",
    "MLP": "zoo.core.architectures",
    "ParamSpec": "zoo.core.architectures",
    "BayesianModel": "zoo.core.model",
    "Prior": "zoo.core.prior",
    "GaussianPrior": "zoo.core.gaussian",
    "Likelihood": "zoo.core.likelihoods",
    "GaussianLikelihood": "zoo.core.likelihoods",
    "StudentTLikelihood": "zoo.core.student_t",
    "BernoulliLikelihood": "zoo.core.likelihoods",
    "CategoricalLikelihood": "zoo.core.likelihoods",
    "make_likelihood": "zoo.core.likelihoods",
    "LikelihoodOptions": "zoo.core.likelihood_options",
    "options_likelihood": "zoo.core.likelihood_options",
    "ClosedFormGuide": "zoo.core.guide",
    "SparsityReport": "zoo.core.sparsity",
    "Config": "zoo.core.config",
    "LocalReparameterization": "zoo.ops.local_reparam",
    "FitConfig": "zoo.infer.config",
    "RunConfig": "zoo.experiments.config",
    "fit": "zoo.infer.loop",
    "resume": "zoo.infer.loop",
    "FitResult": "zoo.infer.result",
    "predict": "zoo.infer.predict",
    "Predictions": "zoo.infer.predict",
    "save": "zoo.infer.checkpoint",
    "load": "zoo.infer.checkpoint",
    "to_inference_data": "zoo.eval.diagnostics",
    "vi_summary": "zoo.eval.diagnostics",
    "load_dataset": "zoo.data",
    "from_arrays": "zoo.data",
    "load_table": "zoo.data",
    "TableOptions": "zoo.data",
    "ModelEntry": "zoo.experiments.registry",
    "register": "zoo.experiments.registry",
    "register_guide": "zoo.experiments.registry",
    "build": "zoo.experiments.registry",
    "get_entry": "zoo.experiments.registry",
    "available": "zoo.experiments.registry",
    "load_plugin": "zoo.experiments.plugins",
    "fit_on_dataset": "zoo.experiments.runs",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
