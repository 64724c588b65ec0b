"""Observation models p(y | f) for the network output ``f`` (shape ``(*sample, N, out)``).

Each likelihood may own latent sites (the Gaussian noise variance) and knows how to turn per-draw
outputs into predictive moments.  ``observe`` is always called inside the model's ``"data"`` plate,
whose subsampling scale makes the minibatch log-likelihood an unbiased estimate of the full-data sum
(the zoo's single ELBO convention: *sum over data, full KL*, see :mod:`zoo.infer.loop`).
"""

from __future__ import annotations

import abc

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule
from torch import Tensor

from zoo.core.meta import PyroModuleABCMeta
from zoo.core.validation import check_positive

__all__ = [
    "Likelihood",
    "GaussianLikelihood",
    "BernoulliLikelihood",
    "CategoricalLikelihood",
    "make_likelihood",
]


class Likelihood(PyroModule, metaclass=PyroModuleABCMeta):
    """Base class of observation models; an ``abc`` abstract class: subclasses implement
    :meth:`distribution` (and override :meth:`sample_latents` / :meth:`latents_from_trace` if they have
    latent sites such as a noise variance)."""

    task: str = ""

    def sample_latents(self) -> dict[str, Tensor]:
        return {}

    def latents_from_trace(self, trace) -> dict[str, Tensor]:
        """Recover :meth:`sample_latents`' dictionary from a model trace (used by prediction)."""
        return {}

    @abc.abstractmethod
    def distribution(self, f: Tensor, latents: dict[str, Tensor]) -> dist.Distribution:
        """The distribution of ``y`` given the network output ``f`` and the likelihood's latents."""

    def observe(self, f: Tensor, y: Tensor | None, latents: dict[str, Tensor]) -> Tensor:
        return pyro.sample("obs", self.distribution(f, latents), obs=y)

    def log_likelihood(self, f: Tensor, y: Tensor, latents: dict[str, Tensor]) -> Tensor:
        """Pointwise ``log p(y_n | f_n, latents)``, shape ``(*sample, N)``."""
        return self.distribution(f, latents).log_prob(y)

    def config(self) -> dict:
        return {}


class GaussianLikelihood(Likelihood):
    """``y ~ N(f, sigma^2)`` with ``noise`` one of

    * ``"inverse_gamma"`` — latent site ``sigma2 ~ InverseGamma(a0, b0)`` (paper 000 §2.4, App. D.2);
    * ``"gamma"`` — latent precision ``precision ~ Gamma(a0, b0)`` (paper 004 uses Gamma(6, 6));
    * ``"fixed"`` — known ``sigma2 = scale**2``.

    With ``out_features > 1`` the outputs are independent given ``f`` and share one noise variance.
    """

    task = "regression"

    def __init__(
        self,
        noise: str = "inverse_gamma",
        concentration: float = 2.0,
        rate: float = 1.0,
        scale: float = 1.0,
        out_features: int = 1,
    ) -> None:
        super().__init__()
        if noise not in ("inverse_gamma", "gamma", "fixed"):
            raise ValueError(f"noise must be 'inverse_gamma', 'gamma' or 'fixed', got {noise!r}")
        self.noise = noise
        self.out_features = int(out_features)
        self.register_buffer("concentration", torch.tensor(check_positive("concentration", concentration)))
        self.register_buffer("rate", torch.tensor(check_positive("rate", rate)))
        self.register_buffer("scale", torch.tensor(check_positive("scale", scale)))

    def config(self) -> dict:
        return {
            "noise": self.noise,
            "concentration": float(self.concentration),
            "rate": float(self.rate),
            "scale": float(self.scale),
            "out_features": self.out_features,
        }

    def noise_prior(self) -> dist.Distribution | None:
        if self.noise == "inverse_gamma":
            return dist.InverseGamma(self.concentration, self.rate)
        if self.noise == "gamma":
            return dist.Gamma(self.concentration, self.rate)
        return None

    def sample_latents(self) -> dict[str, Tensor]:
        if self.noise == "inverse_gamma":
            return {"sigma2": pyro.sample("sigma2", self.noise_prior())}
        if self.noise == "gamma":
            return {"sigma2": 1.0 / pyro.sample("precision", self.noise_prior())}
        return {"sigma2": self.scale**2}

    def latents_from_trace(self, trace) -> dict[str, Tensor]:
        if self.noise == "inverse_gamma":
            return {"sigma2": trace.nodes["sigma2"]["value"]}
        if self.noise == "gamma":
            return {"sigma2": 1.0 / trace.nodes["precision"]["value"]}
        return {"sigma2": self.scale**2}

    def _loc(self, f: Tensor) -> Tensor:
        return f[..., 0] if self.out_features == 1 else f

    def _sigma2(self, latents: dict[str, Tensor]) -> Tensor:
        s2 = latents["sigma2"]
        return s2.unsqueeze(-1) if (self.out_features > 1 and s2.dim() > 0) else s2

    def distribution(self, f: Tensor, latents: dict[str, Tensor]) -> dist.Distribution:
        d = dist.Normal(self._loc(f), self._sigma2(latents).sqrt())
        return d.to_event(1) if self.out_features > 1 else d

    def predictive_moments(self, f: Tensor, latents: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Per-draw predictive mean and variance of ``y`` (noise included)."""
        loc = self._loc(f)
        return loc, self._sigma2(latents) * torch.ones_like(loc)


class BernoulliLikelihood(Likelihood):
    """``y ~ Bernoulli(sigmoid(f))``, ``f`` of shape ``(..., N, 1)``."""

    task = "binary"
    out_features = 1

    def distribution(self, f: Tensor, latents: dict[str, Tensor]) -> dist.Distribution:
        return dist.Bernoulli(logits=f[..., 0])

    def observe(self, f: Tensor, y: Tensor | None, latents: dict[str, Tensor]) -> Tensor:
        return pyro.sample("obs", self.distribution(f, latents), obs=None if y is None else y.to(f.dtype))

    def log_likelihood(self, f: Tensor, y: Tensor, latents: dict[str, Tensor]) -> Tensor:
        return self.distribution(f, latents).log_prob(y.to(f.dtype))

    def probs(self, f: Tensor) -> Tensor:
        """Class probabilities ``(..., N, 2)``."""
        p1 = torch.sigmoid(f[..., 0])
        return torch.stack([1 - p1, p1], dim=-1)


class CategoricalLikelihood(Likelihood):
    """``y ~ Categorical(softmax(f))`` over ``out_features`` classes."""

    task = "multiclass"

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.out_features = int(n_classes)

    def config(self) -> dict:
        return {"n_classes": self.out_features}

    def distribution(self, f: Tensor, latents: dict[str, Tensor]) -> dist.Distribution:
        return dist.Categorical(logits=f)

    def probs(self, f: Tensor) -> Tensor:
        return torch.softmax(f, dim=-1)


def make_likelihood(task: str, out_features: int = 1, **kwargs) -> Likelihood:
    """Default likelihood of a dataset task (``"regression"``, ``"binary"``, ``"multiclass"``)."""
    if task == "regression":
        return GaussianLikelihood(out_features=out_features, **kwargs)
    if task == "binary":
        return BernoulliLikelihood()
    if task == "multiclass":
        return CategoricalLikelihood(out_features)
    raise ValueError(f"task must be 'regression', 'binary' or 'multiclass', got {task!r}")
