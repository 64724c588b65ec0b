"""Prediction modes of the LBBNN guides (Hubin & Storvik 2019, arXiv:1903.07594, §4.3).

``"bma"``: full Bayesian model averaging (Eq. 4.15), ``γ ~ Bern(α)`` and the slab drawn per network;
``"mean"``: the posterior-mean network ``E[α] κ``; ``"mpm"``: the median probability model
``γ = I(E α > 0.5)`` with the slab drawn (the paper's "MED SIM"); ``"mpm-mean"``: the median probability
model at the slab means ("MED MEA").
"""

from __future__ import annotations

import pyro
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.core.validation import check_positive_int
from zoo.infer.predict import Predictions

__all__ = ["PREDICTIVE_MODES", "LBBNNPredictionMixin"]

PREDICTIVE_MODES = ("bma", "mean", "mpm", "mpm-mean")
POINT_MODES = ("mean", "mpm-mean")


def check_mode(mode: str) -> str:
    if mode not in PREDICTIVE_MODES:
        raise ValueError(f"mode must be one of {PREDICTIVE_MODES}, got {mode!r}")
    return mode


class LBBNNPredictionMixin:
    """Weight-space network draws and model-averaged class probabilities of an LBBNN guide.

    The host provides ``model``, ``_specs``, ``_wspecs``, ``slab_params(spec)``,
    ``expected_inclusion(g, spec)`` and ``draw_inclusion_logits(g, spec, num)``.
    """

    def __getattr__(self, name: str):
        # ``predictive`` exists for classification only: regression falls back to zoo.infer.predict's
        # generic path, which knows the fit's target standardization (hard γ draws come from the ST sampler).
        if name == "predictive":
            if self.model.likelihood.task == "regression":
                raise AttributeError("predictive")
            return self._predictive
        return super().__getattr__(name)

    def draw_networks(self, num: int, mode: str = "bma", threshold: float = 0.5) -> dict[str, Tensor]:
        """``num`` weight-space networks ``{param name: (num, *shape)}`` under prediction ``mode``
        (:data:`PREDICTIVE_MODES`): ``"bma"`` draws ``γ ~ Bern(α)`` and the slab (full model averaging,
        Eq. 4.15), ``"mpm"`` keeps ``γ = I(E α > threshold)`` and draws the slab; ``"mean"``/``"mpm-mean"``
        return one deterministic network (leading dim 1)."""
        check_mode(mode)
        return self._draw_params(check_positive_int("num", num), mode, float(threshold))

    def _draw_weight(self, g: int, s: ParamSpec, num: int, mode: str, threshold: float) -> Tensor:
        loc, scale = self.slab_params(s)
        if mode in POINT_MODES:
            a = self.expected_inclusion(g, s)
            w = (a * loc) if mode == "mean" else (a > threshold).to(loc.dtype) * loc
            return w.unsqueeze(0)
        theta = loc + scale * torch.randn((num, *s.shape), dtype=loc.dtype, device=loc.device)
        if mode == "mpm":
            gamma = (self.expected_inclusion(g, s) > threshold).to(loc.dtype)
        else:
            gamma = torch.bernoulli(torch.sigmoid(self.draw_inclusion_logits(g, s, num)))
        return gamma * theta

    def _draw_bias(self, s: ParamSpec, num: int, mode: str) -> Tensor:
        loc, scale = self.slab_params(s)
        if mode in POINT_MODES:
            return loc.unsqueeze(0)
        return loc + scale * torch.randn((num, *s.shape), dtype=loc.dtype, device=loc.device)

    @torch.no_grad()
    def _draw_params(self, num: int, mode: str, threshold: float) -> dict[str, Tensor]:
        out = {s.name: self._draw_weight(g, s, num, mode, threshold) for g, s in enumerate(self._wspecs)}
        for s in self._specs:
            if s.role == "bias":
                out[s.name] = self._draw_bias(s, num, mode)
        return out

    @torch.no_grad()
    def _predictive(
        self,
        model,
        x: Tensor,
        num_samples: int = 10,
        mode: str = "bma",
        threshold: float = 0.5,
        sample_chunk: int = 10,
    ) -> Predictions:
        """Model-averaged class probabilities (Eq. 4.15) under prediction ``mode`` (module docstring).

        ``"mean"``/``"mpm-mean"`` are single deterministic networks (``num_samples`` ignored).  Draws are
        shared across all rows of ``x`` (one network per draw).  ``extras`` holds the prediction mode.
        """
        check_mode(mode)
        num_samples = check_positive_int("num_samples", num_samples)
        if mode in POINT_MODES:
            num_samples = 1
        lik = model.likelihood
        draws = []
        with pyro.get_param_store().scope():
            for start in range(0, num_samples, sample_chunk):
                c = min(sample_chunk, num_samples - start)
                params = {k: v.to(x.dtype) for k, v in self._draw_params(c, mode, threshold).items()}
                draws.append(self._class_probs(model, x, params))
        draw_probs = torch.cat(draws, 0)
        samples = torch.distributions.Categorical(probs=draw_probs).sample()
        return Predictions(
            lik.task, probs=draw_probs.mean(0), draw_probs=draw_probs, samples=samples, extras={"mode": mode}
        )

    @staticmethod
    def _class_probs(model, x: Tensor, params: dict[str, Tensor]) -> Tensor:
        f = model.architecture(x, params)
        if f.dim() == 2:  # a single network: align_particles dropped the draw dim
            f = f.unsqueeze(0)
        p = model.likelihood.probs(f)
        if model.likelihood.task == "binary":
            p = torch.stack([1 - p, p], -1) if p.shape[-1] != 2 else p
        return p
