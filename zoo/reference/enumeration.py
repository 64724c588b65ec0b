"""Exact posterior of a linear-Gaussian spike-and-slab regression by enumerating all ``2^p`` models.

The model is the zoo's LBBNN (Hubin & Storvik 2019, "Variational Inference for Bayesian Neural Networks under
Model and Parameter Uncertainty", arXiv:1903.07594, Eqs. 3.3-3.4) with no hidden layer, i.e.
``build_lbbnn(p, 1, "regression", hidden=())`` (``MLP`` sites ``fc0.weight`` ``(1, p)`` and ``fc0.bias``)::

    y = X (γ ⊙ θ) + b + ε,   γ_j ~ Bernoulli(ψ),  θ_j ~ N(0, σ²_w),  b ~ N(0, s_b²),  ε ~ N(0, σ² I).

**Mapping from the zoo's options** (:meth:`SpikeSlabLinear.from_lbbnn_options`, fields of ``LBBNNOptions``):
``inclusion`` → ψ, ``slab_var`` → σ²_w, ``bias_scale`` → s_b (the bias is always included, as in
``SpikeSlabPrior``); ``hyper="hierarchical"`` → ψ ~ Beta(``a_psi``, ``b_psi``) (the model prior becomes
beta-binomial, ``p(γ) = B(a + k, b + p - k) / B(a, b)`` with ``k = |γ|``) and σ²_w ~ InvGamma(``a_beta``,
``b_beta``); ``noise="inverse_gamma"`` → σ² ~ InvGamma(``noise_concentration``, ``noise_rate``),
``noise="fixed"`` → σ² = 1.  ``hyper="eb-point"`` learns ψ and σ²_w: pass the frozen values (the fitted
prior's ``config()["inclusion"][0]`` and ``["slab_var"][0]``) as ``inclusion`` and ``slab_var``.

**Marginal likelihoods.**  Given ``γ``, ``σ²_w`` and ``σ²``, ``y ~ N(0, σ² I + X̃ V X̃ᵀ)`` with ``X̃ = [X, 1]``
and ``V = diag(γ σ²_w, s_b²)``.  With ``M = V^½ X̃ᵀX̃ V^½ = U diag(λ) Uᵀ`` and ``z = Uᵀ V^½ X̃ᵀ y`` (an
excluded column has ``V^½ = 0``, so every model is a fixed-size ``(p+1) × (p+1)`` problem, batched), the
Woodbury identity and the matrix determinant lemma give, for every ``σ²`` at once after one ``eigh`` per
model::

    log p(y | γ, σ²_w, σ²) = -n/2 log 2πσ² - ½ Σ_i log(1 + λ_i/σ²) - (yᵀy - Σ_i z_i²/(σ² + λ_i)) / (2σ²).

The zoo's prior keeps ``θ`` independent of ``σ²``, so the noise variance is *not* conjugate (the textbook
multivariate-t evidence assumes ``θ | σ² ~ N(0, σ² σ²_w)``, a different model); it is integrated out by the
trapezoid rule in ``log σ²`` (:mod:`zoo.reference.quadrature`), as is σ²_w under its hyperprior, and the
result reports the change of every model's log evidence when every other node is dropped
(``quadrature_error``, a conservative bound).  All sums over models, nodes and mixtures use log-sum-exp in
float64.  The posterior mean of the weights, ``E[γ_j θ_j | y]``, and the predictive mean and variance at
test inputs are model-averaged mixtures of the conjugate Gaussian posteriors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from zoo.core.config import Config
from zoo.core.validation import check_count, check_float_array, check_positive
from zoo.reference.quadrature import (
    VarianceGrid,
    inverse_gamma_grid,
    noise_grid_bounds,
    odd_nodes,
    point_grid,
    prior_mass_range,
)

__all__ = ["MAX_COLUMNS", "SpikeSlabLinear", "EnumerationResult", "enumerate_spike_slab"]

#: the most covariates enumerated (2^14 = 16384 models)
MAX_COLUMNS = 14
_LOG_2PI = math.log(2 * math.pi)
_F64 = torch.float64


def _pair(name: str, value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be None or a pair (a, b) of positive numbers, got {value!r}")
    return (check_positive(f"{name}[0]", value[0]), check_positive(f"{name}[1]", value[1]))


@dataclasses.dataclass(frozen=True)
class SpikeSlabLinear(Config):
    """Prior of the linear spike-and-slab model (module docstring).

    ``inclusion`` is ψ unless ``inclusion_prior = (a, b)`` puts a Beta hyperprior on it; ``slab_var`` is
    σ²_w unless ``slab_prior = (a, b)`` puts an InvGamma(shape a, scale b) on it (integrated on
    ``slab_nodes`` nodes); ``noise`` is ``"inverse_gamma"`` (σ² ~ InvGamma(``noise_concentration``,
    ``noise_rate``)) or ``"fixed"`` (σ² = ``noise_var``).
    """

    inclusion: float = 0.25
    inclusion_prior: tuple[float, float] | None = None
    slab_var: float = 1.0
    slab_prior: tuple[float, float] | None = None
    slab_nodes: int = 81
    bias_scale: float = 1.0
    noise: str = "inverse_gamma"
    noise_var: float = 1.0
    noise_concentration: float = 2.0
    noise_rate: float = 0.5

    def validate(self) -> None:
        if isinstance(self.inclusion, bool) or not 0.0 < float(self.inclusion) < 1.0:
            raise ValueError(f"inclusion must lie in (0, 1), got {self.inclusion!r}")
        _pair("inclusion_prior", self.inclusion_prior)
        _pair("slab_prior", self.slab_prior)
        for name in ("slab_var", "bias_scale", "noise_var", "noise_concentration", "noise_rate"):
            check_positive(name, getattr(self, name))
        if self.noise not in ("inverse_gamma", "fixed"):
            raise ValueError(f"noise must be 'inverse_gamma' or 'fixed', got {self.noise!r}")
        if isinstance(self.slab_nodes, bool) or not isinstance(self.slab_nodes, int) or self.slab_nodes < 3:
            raise ValueError(f"slab_nodes must be an odd int >= 3, got {self.slab_nodes!r}")
        if self.slab_nodes % 2 == 0:
            raise ValueError(
                f"slab_nodes must be odd (the error estimate uses every other node), got {self.slab_nodes}"
            )

    @classmethod
    def from_lbbnn_options(cls, options: Mapping[str, Any] | Any) -> SpikeSlabLinear:
        """The prior of ``build_lbbnn(p, 1, "regression", hidden=(), options=options)`` (module docstring);
        ``options`` is an ``LBBNNOptions`` or its ``to_dict()``."""
        opts = options.to_dict() if hasattr(options, "to_dict") else options
        if not isinstance(opts, Mapping):
            raise TypeError(f"options must be LBBNNOptions or a mapping, got {type(options).__name__}")
        need = ("hyper", "inclusion", "slab_var", "bias_scale", "a_psi", "b_psi", "a_beta", "b_beta", "noise")
        missing = [k for k in need if k not in opts]
        if missing:
            raise ValueError(f"options: missing {missing} (pass LBBNNOptions(...).to_dict())")
        if opts["hyper"] not in ("fixed", "eb-point", "hierarchical"):
            raise ValueError(f"options: unknown hyper {opts['hyper']!r}")
        hier = opts["hyper"] == "hierarchical"
        noise_ig = opts["noise"] == "inverse_gamma"
        return cls(
            inclusion=float(opts["inclusion"]),
            inclusion_prior=(opts["a_psi"], opts["b_psi"]) if hier else None,
            slab_var=float(opts["slab_var"]),
            slab_prior=(opts["a_beta"], opts["b_beta"]) if hier else None,
            bias_scale=float(opts["bias_scale"]),
            noise="inverse_gamma" if noise_ig else "fixed",
            noise_var=1.0,
            noise_concentration=float(opts.get("noise_concentration", 2.0)) if noise_ig else 2.0,
            noise_rate=float(opts.get("noise_rate", 0.5)) if noise_ig else 0.5,
        )

    def log_model_prior(self, k: Tensor, p: int) -> Tensor:
        """``log p(γ)`` of models with ``k`` included columns out of ``p``: Bernoulli(ψ) iid, or the
        beta-binomial ``log B(a + k, b + p - k) - log B(a, b)`` under ψ ~ Beta(a, b)."""
        k = k.to(_F64)
        if self.inclusion_prior is None:
            psi = torch.tensor(float(self.inclusion), dtype=_F64)
            return k * torch.log(psi) + (p - k) * torch.log1p(-psi)
        a, b = (float(v) for v in self.inclusion_prior)
        lbeta = torch.lgamma(a + k) + torch.lgamma(b + p - k) - math.lgamma(a + b + p)
        return lbeta - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))


@dataclasses.dataclass(frozen=True)
class EnumerationResult:
    """The exact posterior (module docstring).  Model ``m`` includes column ``j`` iff bit ``j`` of ``m``
    is set; ``model_probs[m]`` is its posterior probability."""

    pip: np.ndarray
    model_probs: np.ndarray
    top_models: list[tuple[tuple[int, ...], float]]
    log_evidence: float
    weight_mean: np.ndarray
    bias_mean: float
    noise_var_mean: float
    pred_mean: np.ndarray | None
    pred_var_f: np.ndarray | None
    pred_var_y: np.ndarray | None
    quadrature_error: float
    edge_mass: float


def _inputs(x: Any, y: Any, x_test: Any | None) -> tuple[Tensor, Tensor, Tensor | None]:
    xa = check_float_array("x", x, min_ndim=2)
    if xa.ndim != 2:
        raise ValueError(f"`x` must have shape (n, p), got {xa.shape}")
    if xa.shape[1] > MAX_COLUMNS:
        raise ValueError(f"`x` has p = {xa.shape[1]} columns; enumeration supports p <= {MAX_COLUMNS}")
    ya = check_float_array("y", y, min_ndim=1).reshape(-1)
    if ya.shape[0] != xa.shape[0]:
        raise ValueError(f"`y` has {ya.shape[0]} entries but `x` has {xa.shape[0]} rows")
    xt = None
    if x_test is not None:
        xt = check_float_array("x_test", x_test, min_ndim=2)
        if xt.ndim != 2 or xt.shape[1] != xa.shape[1]:
            raise ValueError(f"`x_test` must have shape (T, {xa.shape[1]}), got {xt.shape}")
    ones = np.ones((xa.shape[0], 1))
    t = lambda a: torch.as_tensor(a, dtype=_F64)  # noqa: E731
    return (
        t(np.hstack([xa, ones])),
        t(ya),
        None if xt is None else t(np.hstack([xt, np.ones((xt.shape[0], 1))])),
    )


def _grids(prior: SpikeSlabLinear, xt: Tensor, y: Tensor) -> tuple[VarianceGrid, VarianceGrid]:
    if prior.noise == "fixed":
        noise = point_grid(prior.noise_var)
    else:
        n, cols = xt.shape
        rss = float(((y - xt @ torch.linalg.lstsq(xt, y[:, None]).solution[:, 0]) ** 2).sum())
        lo, hi, h = noise_grid_bounds(n, cols, float(y @ y), rss, prior.noise_concentration, prior.noise_rate)
        noise = inverse_gamma_grid(prior.noise_concentration, prior.noise_rate, lo, hi, odd_nodes(lo, hi, h))
    if prior.slab_prior is None:
        return noise, point_grid(prior.slab_var)
    a, b = prior.slab_prior
    lo, hi = prior_mass_range(a, b)
    return noise, inverse_gamma_grid(a, b, lo, hi, prior.slab_nodes)


def _merge(acc: dict | None, logz: Tensor, vals: dict[str, Tensor]) -> dict:
    """Running log-sum-exp weighted means: ``acc`` holds ``logz`` and means normalized by ``exp(logz)``."""
    if acc is None:
        return {"logz": logz, **vals}
    new = torch.logaddexp(acc["logz"], logz)
    wa, wb = torch.exp(acc["logz"] - new), torch.exp(logz - new)
    out = {"logz": new}
    for k, v in vals.items():
        shape = wa.shape + (1,) * (v.dim() - wa.dim())
        out[k] = acc[k] * wa.reshape(shape) + v * wb.reshape(shape)
    return out


def _given_slab(mask: Tensor, slab: float, prior: SpikeSlabLinear, stats: dict, noise: VarianceGrid) -> tuple:
    """For a batch of models and one slab variance: log evidence over the noise grid (full and subgrid)
    and the conditional moments averaged over ``σ²`` (module docstring's formulas)."""
    p = mask.shape[1]
    sd = torch.cat(
        [torch.full((p,), math.sqrt(slab), dtype=_F64), torch.tensor([prior.bias_scale], dtype=_F64)]
    )
    sv = torch.cat([mask, torch.ones(mask.shape[0], 1, dtype=_F64)], dim=1) * sd  # V^½, (B, P)
    lam, u = torch.linalg.eigh(sv[:, :, None] * stats["gram"] * sv[:, None, :])
    lam = lam.clamp_min(0.0)
    z = torch.einsum("bpi,bp->bi", u, sv * stats["xty"])
    s2 = noise.values  # (Q,)
    den = s2[None, None, :] + lam[:, :, None]  # (B, P, Q)
    quad = stats["yy"] - (z[:, :, None] ** 2 / den).sum(1)
    ll = -0.5 * (
        stats["n"] * (_LOG_2PI + torch.log(s2)) + torch.log1p(lam[:, :, None] / s2).sum(1) + quad / s2
    )
    lj = ll + noise.log_weight
    logz = torch.logsumexp(lj, dim=1)
    logz_half = torch.logsumexp(ll + noise.log_weight_half, dim=1)
    pi = torch.exp(lj - logz[:, None])  # (B, Q)
    r1 = torch.einsum("bq,biq->bi", pi, 1.0 / den)
    vals = {
        "w": sv * torch.einsum("bpi,bi->bp", u, z * r1),
        "s2": pi @ s2,
        "edge": torch.maximum(pi[:, 0], pi[:, -1]) if not noise.exact else torch.zeros_like(logz),
    }
    if stats["xtest"] is not None:
        h = torch.einsum("bpi,bp,tp->bti", u, sv, stats["xtest"])
        a = h * z[:, None, :]
        vals["f"] = (a * r1[:, None, :]).sum(-1)
        r2 = torch.einsum("bq,biq->bi", pi * s2, 1.0 / den)
        rr = torch.einsum("bq,biq,bjq->bij", pi, 1.0 / den, 1.0 / den)
        vals["f2"] = (h**2 * r2[:, None, :]).sum(-1) + (torch.bmm(a, rr) * a).sum(-1)
    return logz, logz_half, vals


def model_masks(codes: Tensor, p: int) -> Tensor:
    """The models of bit codes ``codes`` (any shape) as boolean masks ``codes.shape + (p,)``: bit ``j`` of a
    code says whether covariate ``j`` is in the model (the enumeration's order of the ``2^p`` models)."""
    return ((codes[..., None] >> torch.arange(p)) & 1).bool()


def _batch(codes: Tensor, p: int, prior: SpikeSlabLinear, stats: dict, grids: tuple) -> tuple:
    """Per-model log evidence (full and subgrid rules) and conditional moments of a batch of models."""
    noise, slab = grids
    mask = model_masks(codes, p).to(_F64)
    acc, acc_half = None, None
    for s, lw, lw_half in zip(slab.values.tolist(), slab.log_weight, slab.log_weight_half):
        logz, logz_half, vals = _given_slab(mask, s, prior, stats, noise)
        acc = _merge(acc, logz + lw, vals)
        acc_half = (
            torch.logaddexp(acc_half, logz_half + lw_half) if acc_half is not None else logz_half + lw_half
        )
    return mask, acc, acc_half


def _inclusion_probabilities(log_post: torch.Tensor, p: int) -> np.ndarray:
    """Posterior inclusion probabilities from the log posterior mass of every model (index = bit code,
    bit ``j`` = covariate ``j``): ``P(j in model)`` summed over the models with ``j`` where that is at most
    1/2, else ``1 - P(j not in model)``.  A weighted mean of 0/1 rounds to ``1 +- 2e-16`` for a covariate in
    every likely model; the smaller of the two masses carries no such error, so a certain covariate gets
    exactly 1 and every value lies in [0, 1]."""
    mask = model_masks(torch.arange(log_post.shape[0]), p)
    lp = log_post[:, None].expand(-1, p)
    log_ev = torch.logsumexp(log_post, 0)
    log_in = torch.logsumexp(lp.masked_fill(~mask, -math.inf), 0) - log_ev
    log_out = torch.logsumexp(lp.masked_fill(mask, -math.inf), 0) - log_ev
    pip = torch.where(log_in <= math.log(0.5), log_in.exp(), -torch.expm1(log_out))
    return pip.clamp(0.0, 1.0).numpy()


def enumerate_spike_slab(
    x: Any,
    y: Any,
    prior: SpikeSlabLinear | None = None,
    x_test: Any | None = None,
    top_k: int = 10,
    batch_size: int = 1024,
) -> EnumerationResult:
    """The exact posterior of the linear spike-and-slab model on data ``x`` ``(n, p)``, ``y`` ``(n,)``
    (``p <= 14``), with predictive moments at ``x_test`` ``(T, p)`` if given (module docstring)."""
    prior = SpikeSlabLinear() if prior is None else prior
    if not isinstance(prior, SpikeSlabLinear):
        raise TypeError(f"prior must be a SpikeSlabLinear, got {type(prior).__name__}")
    top_k = check_count("top_k", top_k, minimum=1)
    batch_size = check_count("batch_size", batch_size, minimum=1)
    xt, yt, xtest = _inputs(x, y, x_test)
    p = xt.shape[1] - 1
    stats = {"gram": xt.T @ xt, "xty": xt.T @ yt, "yy": yt @ yt, "n": xt.shape[0], "xtest": xtest}
    grids = _grids(prior, xt, yt)
    log_post, err, edge, total = [], 0.0, 0.0, None
    for start in range(0, 2**p, batch_size):
        codes = torch.arange(start, min(start + batch_size, 2**p))
        mask, acc, logz_half = _batch(codes, p, prior, stats, grids)
        lp = acc["logz"] + prior.log_model_prior(mask.sum(1), p)
        err = max(err, float((acc["logz"] - logz_half).abs().max()))
        edge = max(edge, float(acc["edge"].max()))
        log_post.append(lp)
        wts = torch.softmax(lp, 0)
        moments = {
            k: torch.einsum("b,b...->...", wts, v) for k, v in acc.items() if k not in ("logz", "edge")
        }
        total = _merge(total, torch.logsumexp(lp, 0), moments)
    log_post = torch.cat(log_post)
    log_ev = float(torch.logsumexp(log_post, 0))
    pip = _inclusion_probabilities(log_post, p)
    probs = torch.exp(log_post - log_ev).numpy()
    order = np.argsort(-probs, kind="stable")[:top_k]
    top = [(tuple(j for j in range(p) if (int(m) >> j) & 1), float(probs[m])) for m in order]
    f = total.get("f")
    var_f = None if f is None else (total["f2"] - f**2).clamp_min(0.0)
    return EnumerationResult(
        pip=pip,
        model_probs=probs,
        top_models=top,
        log_evidence=log_ev,
        weight_mean=total["w"][:p].numpy(),
        bias_mean=float(total["w"][p]),
        noise_var_mean=float(total["s2"]),
        pred_mean=None if f is None else f.numpy(),
        pred_var_f=None if f is None else var_f.numpy(),
        pred_var_y=None if f is None else (var_f + total["s2"]).numpy(),
        quadrature_error=err,
        edge_mass=edge,
    )
