"""Projection-predictive unit pruning of a fitted Bayesian MLP (regression).

Piironen & Vehtari 2017 ("Comparison of Bayesian predictive methods for model selection", Statistics and
Computing 27, §3.2-3.3) select a submodel by projecting the full (reference) model's posterior onto it: each
posterior draw ``theta_s`` is replaced by the submodel parameters closest to it in predictive KL, and the
smallest submodel whose projected predictive is as good as the reference's (within one standard error of its
expected log predictive density, ELPD) is kept.  Here the submodels are networks with some **hidden units of
the last hidden layer removed** (the unit-wise sparsity that the node-wise horseshoe of Ghosh, Yao &
Doshi-Velez 2019, arXiv:1705.10388, is meant to reveal):

* **projection** of draw ``s`` onto a unit set ``K``: the last layer's weights are refitted to the reference
  output ``f_s`` on the training inputs, with the kept units' activations ``H_s[:, K]`` of that draw
  fixed — for a Gaussian likelihood the KL projection is this least-squares fit (Piironen & Vehtari 2017,
  Eq. 11 with a Gaussian ``p(y | theta)``), and the projected noise variance is
  ``sigma_perp^2 = sigma_s^2 + mean_n (f_s - f_perp_s)^2``, so the per-draw KL is
  ``(1/2) log(sigma_perp^2 / sigma_s^2)`` per training point;
* **search**: greedy backward elimination — at each size, remove the unit whose removal increases the mean
  projection KL least (the forward search of §3.3 run backwards, which needs no refit of the hidden layers).
  Every candidate is scored without a refit: dropping column ``j`` from a least-squares fit raises its
  residual sum of squares by ``beta_j^2 / [G^{-1}]_jj`` (``G`` the Gram matrix; Seber & Lee 2003, *Linear
  Regression Analysis*, §12.2), and the inverse and the coefficients of the smaller fit follow by the
  same downdate, so one step costs ``O(S K^2)`` instead of ``O(S N K^3)``; the inverse is refactorized
  every ``refresh`` steps against rounding drift, and the values stored on the path are recomputed from
  the refitted coefficients;
* **stop**: the pruned network's training ELPD (the log of the mixture over the projected draws) against the
  reference's.  The kept set is the smallest on the search path that meets the rule (``rule``):

  - ``"nll"`` (default): ``delta_elpd / N >= -nll_tol`` — the pruned predictive loses at most ``nll_tol``
    nats of log density per training point (0.01 by default) against the full model;
  - ``"se"``: ``delta_elpd >= -z * se`` with ``se`` the standard error of the pointwise differences
    (projpred's rule, Piironen & Vehtari 2017 §3.3), less a slack of 1e-6 nats per training point: a
    projection that loses nothing differs from the reference only by rounding and the 1e-8 ridge, and then
    ``delta_elpd`` and ``se`` are both noise of that size, compared at random.  In-sample the rule is
    strict: every removal costs a little on every point, so ``se`` is small and the rule keeps units whose
    loss is a few hundredths of a nat in all;
  - ``"kl"``: mean projection KL per training point at most ``kl_tol``.

Works for every family whose guide draws the network's weights through the model's prior sites (Gaussian BNN,
horseshoe, regularized horseshoe, collapsed, LBBNN; the weights are replayed per draw), with a Gaussian
likelihood.  Hidden units of earlier layers are not pruned (their removal would need the hidden layers
refitted, a non-convex projection).  The bow-tie's CAVI guide has no per-draw weights to replay and is refused
with a ``ValueError``; its own pruning rule (``sparsity_report``) is the baseline there.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any

import pyro
import torch
from pyro import poutine
from torch import Tensor

from zoo.core.config import Config
from zoo.core.validation import check_positive, check_positive_int

__all__ = ["ProjpredConfig", "ProjpredResult", "projpred_units"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ProjpredConfig(Config):
    """Settings of :func:`projpred_units`: ``num_draws`` posterior draws projected; ``rule`` (``"nll"``,
    ``"se"`` or ``"kl"``) with its threshold ``nll_tol`` (nats per training point), ``z`` (standard errors)
    or ``kl_tol`` (nats per point); ``ridge``: a tiny ridge on the refitted last layer (numerical only);
    ``seed``: the draws' seed; ``refresh``: search steps between refactorizations of the downdated Gram
    inverse (module docstring)."""

    num_draws: int = 100
    rule: str = "nll"
    nll_tol: float = 0.01
    z: float = 1.0
    kl_tol: float = 0.01
    ridge: float = 1e-8
    seed: int = 0
    refresh: int = 32

    def validate(self) -> None:
        check_positive_int("num_draws", self.num_draws)
        if self.rule not in ("nll", "se", "kl"):
            raise ValueError(f"rule must be 'nll', 'se' or 'kl', got {self.rule!r}")
        check_positive("nll_tol", self.nll_tol)
        check_positive("z", self.z)
        check_positive("kl_tol", self.kl_tol)
        check_positive("ridge", self.ridge)
        check_positive_int("seed", self.seed, allow_zero=True)
        check_positive_int("refresh", self.refresh)


@dataclasses.dataclass
class ProjpredResult:
    """``kept``: the kept units of the last hidden layer (indices); ``path``: per size, from all units down to
    one, the removed unit and the mean KL, ``delta_elpd`` and ``se`` of the submodel; ``layer``: the pruned
    layer's name; ``seconds``: search time.  :meth:`predict` gives the pruned network's projected predictive
    (means ``(S, N)`` and noise sds ``(S,)``) at new inputs."""

    kept: list[int]
    path: list[dict]
    layer: str
    units: int
    seconds: float
    _draws: dict = dataclasses.field(repr=False, default_factory=dict)

    def predict(self, x: Tensor, pruned: bool = True) -> tuple[Tensor, Tensor]:
        """Per-draw means ``(S, N)`` and noise sds ``(S,)`` at ``x`` (the fit's input scale; targets on the
        fit's scale) of the pruned network, or (``pruned=False``) of the full one from the same draws."""
        d = self._draws
        h = _last_hidden(d["arch"], d["params"], x.to(d["dtype"]))
        if not pruned:
            return _output(d["arch"], d["params"], h), d["sigma2"].sqrt()
        design = _design(h, self.kept)
        return (design @ d["beta"].unsqueeze(-1)).squeeze(-1), d["sigma_perp"].sqrt()


# --------------------------------------------------------------------------------------------- the draws


def _draws(result: Any, num_draws: int, seed: int) -> tuple[dict[str, Tensor], Tensor]:
    """Per-draw network parameters ``{name: (S, *shape)}`` and noise variances ``(S,)``: the guide's draws
    replayed through the model's prior and likelihood sites (one guide trace, so they belong together)."""
    from zoo.infer.predict import _guide_trace

    model = result.model
    if not hasattr(model, "prior") or not hasattr(model, "specs"):
        raise ValueError("result: projpred pruning needs a zoo BayesianModel (prior sites replayed per draw)")
    if callable(getattr(result.guide, "predictive", None)):  # e.g. the bow-tie's CAVI: no weight draws
        raise ValueError(
            f"result: the {type(result.guide).__name__} guide predicts in closed form and has no per-draw "
            "network weights to project; use its own sparsity report"
        )
    x0 = torch.zeros(2, model.architecture.in_features, device=result.device)
    with torch.no_grad(), result.activate():
        gtr = _guide_trace(result.guide, num_draws, x0, seed)
        with pyro.plate("_num_draws", num_draws, dim=-2):
            params = poutine.replay(model.prior.sample_params, trace=gtr)(model.specs)
            mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(x0, None)
    out = {}
    for spec in model.specs:
        w = params[spec.name].reshape(-1, *spec.shape)
        out[spec.name] = (w.expand(num_draws, *spec.shape) if w.shape[0] == 1 else w).detach().double()
    sigma2 = torch.as_tensor(model.likelihood.latents_from_trace(mtr)["sigma2"]).detach().double().reshape(-1)
    return out, sigma2.expand(num_draws).clone() if sigma2.numel() == 1 else sigma2


def _last_hidden(arch: Any, params: dict[str, Tensor], x: Tensor) -> Tensor:
    """Activations ``(S, N, K)`` of the last hidden layer of an :class:`~zoo.core.architectures.MLP`."""
    from zoo.core.architectures import ACTIVATIONS

    act, h = ACTIVATIONS[arch.activation], x
    for l in range(arch.num_layers - 1):
        h = act(arch.linear(h, params[f"fc{l}.weight"], params.get(f"fc{l}.bias"), l))
    return h


def _output(arch: Any, params: dict[str, Tensor], h: Tensor) -> Tensor:
    """The network output ``(S, N)`` from the last hidden layer's activations ``h``."""
    out_l = arch.num_layers - 1
    f = (h @ params[f"fc{out_l}.weight"][..., 0, :].unsqueeze(-1)).squeeze(-1)
    if f"fc{out_l}.bias" in params:
        f = f + params[f"fc{out_l}.bias"][..., :1]
    return f


def _design(h: Tensor, units: list[int]) -> Tensor:
    """``[1, H[:, units]]`` per draw: ``(S, N, 1 + |units|)``."""
    ones = torch.ones(*h.shape[:-1], 1, dtype=h.dtype, device=h.device)
    return torch.cat([ones, h[..., units]], -1)


def _gram_inverse(a: Tensor, ridge: float) -> Tensor:
    """``(A'A + ridge N I)^{-1}`` per draw, ``A`` the ``(S, N, P)`` design."""
    gram = a.transpose(-1, -2) @ a
    gram = gram + ridge * a.shape[-2] * torch.eye(gram.shape[-1], dtype=a.dtype, device=a.device)
    return torch.cholesky_inverse(torch.linalg.cholesky(gram))


def _project(h: Tensor, f: Tensor, sigma2: Tensor, units: list[int], ridge: float) -> tuple[Tensor, Tensor]:
    """Least-squares last layer on ``units`` per draw: coefficients ``(S, 1 + |units|)`` and projected noise
    variances ``(S,)``."""
    a = _design(h, units)
    beta = (_gram_inverse(a, ridge) @ (a.transpose(-1, -2) @ f.unsqueeze(-1))).squeeze(-1)
    return beta, _perp(a, beta, f, sigma2)


def _perp(a: Tensor, beta: Tensor, f: Tensor, sigma2: Tensor) -> Tensor:
    """Projected noise variances ``sigma_s^2 + mean_n (f_s - A_s beta_s)^2``."""
    resid = f - (a @ beta.unsqueeze(-1)).squeeze(-1)
    return sigma2 + resid.pow(2).mean(-1)


def _drop(ginv: Tensor, beta: Tensor, j: int) -> tuple[Tensor, Tensor]:
    """The inverse Gram matrix and coefficients of the fit without column ``j`` (rank-one downdate)."""
    keep = [i for i in range(beta.shape[-1]) if i != j]
    col = ginv[:, keep, j]
    pivot = ginv[:, j, j].unsqueeze(-1)
    new_ginv = ginv[:, keep][:, :, keep] - col.unsqueeze(-1) * col.unsqueeze(-2) / pivot.unsqueeze(-1)
    return new_ginv, beta[:, keep] - col * beta[:, j : j + 1] / pivot


def _elpd_points(mean: Tensor, sigma2: Tensor, y: Tensor) -> Tensor:
    """Pointwise log of the mixture over draws of ``N(y | mean_s, sigma2_s)``: ``(N,)``."""
    s2 = sigma2.unsqueeze(-1)
    lp = -0.5 * (math.log(2 * math.pi) + s2.log() + (y - mean).pow(2) / s2)
    return torch.logsumexp(lp, 0) - math.log(mean.shape[0])


# --------------------------------------------------------------------------------------------- the search


def _check(result: Any, x: Tensor, y: Tensor) -> Any:
    from zoo.core.architectures import MLP
    from zoo.core.likelihoods import GaussianLikelihood

    model = getattr(result, "model", None)
    arch = getattr(model, "architecture", None)
    if not isinstance(arch, MLP) or not arch.hidden or arch.out_features != 1:
        raise ValueError(
            "result: projpred unit pruning needs an MLP with a hidden layer and one output (a "
            "heteroscedastic likelihood's noise output counts)"
        )
    lik = getattr(model, "likelihood", None)
    if not isinstance(lik, GaussianLikelihood) or lik.predictive_df is not None:
        raise ValueError(
            "result: projpred unit pruning is implemented for Gaussian (regression) likelihoods, "
            f"got {type(lik).__name__}"
        )
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != arch.in_features:
        raise ValueError(f"x: expected a (N, {arch.in_features}) tensor of training inputs")
    if not isinstance(y, Tensor) or y.shape[0] != x.shape[0] or y.dim() != 1:
        raise ValueError("y: expected (N,) training targets matching x")
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise ValueError("x, y: must be finite")
    return arch


def projpred_units(result: Any, x: Tensor, y: Tensor, config: ProjpredConfig | None = None) -> ProjpredResult:
    """Prune the last hidden layer of ``result``'s network by projection (module docstring).  ``x``, ``y``:
    the training data on the scale the model was fitted on (standardized targets where the fit standardized
    them)."""
    cfg = config if config is not None else ProjpredConfig()
    if not isinstance(cfg, ProjpredConfig):
        raise TypeError(f"config must be a ProjpredConfig, got {type(cfg).__name__}")
    arch = _check(result, x, y)
    t0 = time.perf_counter()
    params, sigma2 = _draws(result, cfg.num_draws, cfg.seed)
    x64, y64 = x.detach().double().to(sigma2.device), y.detach().double().to(sigma2.device)
    h = _last_hidden(arch, params, x64)
    f = _output(arch, params, h)
    ref = _elpd_points(f, sigma2, y64)
    n = x64.shape[0]

    def score(units: list[int], beta: Tensor) -> dict:
        a = _design(h, units)
        s2 = _perp(a, beta, f, sigma2)
        diff = _elpd_points((a @ beta.unsqueeze(-1)).squeeze(-1), s2, y64) - ref
        return {
            "kl": float(0.5 * (s2 / sigma2).log().mean()),
            "delta_elpd": float(diff.sum()),
            "se": float(diff.std(unbiased=True) * math.sqrt(n)) if n > 1 else 0.0,
            "n": n,
            "beta": beta,
            "sigma_perp": s2,
        }

    path = _search(h, f, sigma2, cfg, score)
    kept = _select(path, cfg)
    final = score(kept, _project(h, f, sigma2, kept, cfg.ridge)[0])
    layer = f"fc{arch.num_layers - 2}"
    logger.info("projpred: kept %d of %d units of %s", len(kept), h.shape[-1], layer)
    return ProjpredResult(
        kept=kept,
        path=path,
        layer=layer,
        units=h.shape[-1],
        seconds=time.perf_counter() - t0,
        _draws={"arch": arch, "params": params, "beta": final["beta"], "sigma_perp": final["sigma_perp"],
                "sigma2": sigma2, "dtype": torch.float64},
    )  # fmt: skip


def _search(h: Tensor, f: Tensor, sigma2: Tensor, cfg: ProjpredConfig, score: Any) -> list[dict]:
    """Greedy backward elimination from all units down to one (module docstring): at each size the unit
    whose removal raises the mean projection KL least, scored by the downdate ``beta_j^2 / [G^{-1}]_jj``."""
    units = list(range(h.shape[-1]))
    a = _design(h, units)
    ginv = _gram_inverse(a, cfg.ridge)
    beta = (ginv @ (a.transpose(-1, -2) @ f.unsqueeze(-1))).squeeze(-1)
    path = [{"size": len(units), "removed": None, **_public(score(units, beta))}]
    rss = _perp(a, beta, f, sigma2) - sigma2  # mean squared residual per draw
    n = h.shape[-2]
    step = 0
    while len(units) > 1:
        diag = ginv.diagonal(dim1=-2, dim2=-1)[:, 1:]  # column 0 is the intercept, never dropped
        trial = sigma2.unsqueeze(-1) + rss.unsqueeze(-1) + beta[:, 1:].pow(2) / diag / n
        kl = 0.5 * (trial / sigma2.unsqueeze(-1)).log().mean(0)
        j = int(kl.argmin())
        removed = units.pop(j)
        step += 1
        if step % cfg.refresh == 0:
            a = _design(h, units)
            ginv = _gram_inverse(a, cfg.ridge)
            beta = (ginv @ (a.transpose(-1, -2) @ f.unsqueeze(-1))).squeeze(-1)
        else:
            ginv, beta = _drop(ginv, beta, j + 1)
        s = score(units, beta)
        rss = s["sigma_perp"] - sigma2
        path.append({"size": len(units), "removed": removed, **_public(s)})
    return path


def _public(s: dict) -> dict:
    return {k: s[k] for k in ("kl", "delta_elpd", "se", "n")}


def _select(path: list[dict], cfg: ProjpredConfig) -> list[int]:
    """The kept units: the smallest submodel on the path meeting the rule (the full set if none smaller)."""
    removed = [p["removed"] for p in path[1:]]
    all_units = list(range(path[0]["size"]))
    n = path[0]["n"]
    best = 0
    for i, p in enumerate(path):
        if cfg.rule == "kl":
            ok = p["kl"] <= cfg.kl_tol
        elif cfg.rule == "se":  # losses under 1e-6 nats per point are the refit's rounding and 1e-8 ridge
            ok = p["delta_elpd"] >= -cfg.z * p["se"] - 1e-6 * n
        else:
            ok = p["delta_elpd"] / n >= -cfg.nll_tol
        if ok:
            best = i
    gone = set(removed[:best])
    return [u for u in all_units if u not in gone]
