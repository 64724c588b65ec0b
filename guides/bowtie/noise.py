"""Noise-variance factors of the bow-tie CAVI (Sheinkman & Wade 2025, arXiv 2411.11132, Eq. 15, §3.3).

``q(eta^2_{l,d}) = IG(alpha, beta)`` per hidden unit and one ``IG`` for the output noise ``sigma2`` (shared by
the outputs, site ``sigma2``):

* hidden: ``alpha = alpha_0^h + N/2``, ``beta = beta_0^h + 1/2 sum_n E[(a_{n,l,d} - gamma W~ a~_{n,l-1})^2]``;
* output: ``alpha = alpha_0 + N D_out / 2``, ``beta = beta_0 + 1/2 sum_{n,d} E[(y_{n,d} - W~_d a~_{n,L})^2]``.

The expected squares are exact: the hidden one keeps the ``-2 rho m^T Cov(a~_{l-1}, a_{l,d})`` term that the
paper's printed Eq. (15) drops (non-zero under the structured ``q(a)``).  SVI (§3.3, App. C) blends ``beta``
harmonically (the paper's rule) or linearly in the natural parameter (:func:`blend_beta`).
"""

from __future__ import annotations

from torch import Tensor

from guides.bowtie.moments import Moments, layer_pre_moments
from guides.bowtie.state import Globals, Hyper, Locals
from zoo.infer.distributed import data_sum
from zoo.ops.expectations import inverse_gamma_moments

__all__ = ["noise_precision", "noise_log_moments", "expected_squares", "noise_factors", "blend_beta"]


def noise_precision(g: Globals, k: int) -> Tensor:
    """``E[eta^-2]`` of hidden layer ``k`` (D,), or of the output noise (D_out,) for ``k = L``."""
    if k == g.num_hidden:
        return (g.alpha[k] / g.beta[k]).expand(g.m[k].shape[0])
    return g.alpha[k] / g.beta[k]


def noise_log_moments(g: Globals, k: int) -> tuple[Tensor, Tensor]:
    """``(E[1/x], E[log x])`` of layer ``k``'s noise factor ``IG(alpha, beta)`` (output: ``k = L``)."""
    _, e_recip, e_log = inverse_gamma_moments(g.alpha[k], g.beta[k])
    return e_recip, e_log


def expected_squares(g: Globals, loc: Locals, mom: Moments, y: Tensor | None, k: int) -> Tensor:
    """Exact expected squares (N, D): hidden ``E[(a - gamma z)^2]``, output ``E[(y - z)^2]`` (``k = L``)."""
    ez, ez2 = layer_pre_moments(g, mom, k)
    if k == g.num_hidden:
        return y * y - 2.0 * y * ez + ez2
    rho = loc.rho[k]
    return mom.second_diag(k) - 2.0 * rho * mom.cross_dot(k, g.m[k], ez) + rho * ez2


def noise_factors(
    hyp: Hyper, g: Globals, loc: Locals, mom: Moments, y: Tensor, n_total: int, scale: float = 1.0
) -> tuple[list[Tensor], list[Tensor]]:
    """Eq. (15): ``(alpha, beta)`` of every hidden layer and (last) of the output noise; data sums multiplied
    by ``scale`` (SVI: ``N/|S|``) and completed over the ranks of a data-parallel fit
    (:func:`zoo.infer.distributed.data_sum`; ``n_total`` is then the global ``N``)."""
    a0h, b0h = hyp.hidden_noise
    alphas, betas = [], []
    for k in range(g.num_hidden):
        alphas.append((a0h + 0.5 * n_total).expand(hyp.widths[k + 1]).clone())
        betas.append(b0h + 0.5 * scale * data_sum(expected_squares(g, loc, mom, y, k).sum(0)))
    a0, b0 = hyp.noise
    alphas.append(a0 + 0.5 * n_total * hyp.widths[-1])
    betas.append(b0 + 0.5 * scale * data_sum(expected_squares(g, loc, mom, y, g.num_hidden).sum()))
    return alphas, betas


def blend_beta(old: list[Tensor], new: list[Tensor], step: float, rule: str) -> list[Tensor]:
    """SVI step for ``beta`` (§3.3, App. C): ``"paper"`` — the harmonic blend
    ``((1-l)/beta_old + l/beta_hat)^-1`` of the paper and its code; ``"textbook"`` — the natural parameter of
    ``IG(alpha, beta)`` is ``(-alpha - 1, -beta)``, so ``beta`` is blended linearly."""
    if rule == "paper":
        return [1.0 / ((1 - step) / bo + step / bh) for bo, bh in zip(old, new)]
    return [(1 - step) * bo + step * bh for bo, bh in zip(old, new)]
