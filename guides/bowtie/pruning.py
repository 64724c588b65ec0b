"""Structure inference for the bow-tie BNN (Sheinkman & Wade 2025, arXiv 2411.11132, §3.4, Algorithm 2).

* Bayesian-FDR edge selection: ``Q = max(P(W > 0), P(W < 0))`` under ``q(W)``; keep ``Q >= kappa_hat``, the
  smallest ``Q`` in the descending list with ``FDR_hat(kappa) = sum(1 - Q) 1(Q > kappa) / sum 1(Q > kappa)
  <= alpha`` (:func:`fdr_masks`);
* node pruning: drop all incoming edges of nodes without outgoing edges and all outgoing edges of nodes
  without incoming edges, until stable (:func:`prune_nodes`);
* prediction with the pruned network: each row's ``q(b, W)`` restricted to the surviving weights — the
  pruned coordinates exactly zero, the kept ones keep their joint (marginal) Gaussian (:func:`masked_row`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from guides.bowtie.linalg import F64
from zoo.core.sparsity import SparsityReport

__all__ = ["sign_probabilities", "fdr_masks", "prune_nodes", "sparsity_report", "masked_row"]


def sign_probabilities(m: Tensor, cov: Tensor) -> Tensor:
    """``Q = max(P(W > 0), P(W < 0))`` of every weight of a layer (bias excluded), (D, D_prev)."""
    sd = torch.diagonal(cov, dim1=-2, dim2=-1)[:, 1:].sqrt()
    p_pos = torch.special.ndtr(m[:, 1:] / sd)
    return torch.maximum(p_pos, 1.0 - p_pos)


def fdr_masks(qs: list[Tensor], alpha: float) -> tuple[list[Tensor], float]:
    """Edge masks at Bayesian FDR level ``alpha`` over all layers jointly, and the threshold ``kappa_hat``
    (``inf`` when no edge qualifies)."""
    flat = torch.cat([q.flatten() for q in qs])
    sorted_q = torch.sort(flat, descending=True).values
    fdr = torch.cumsum(1.0 - sorted_q, 0) / torch.arange(
        1, len(sorted_q) + 1, dtype=F64, device=sorted_q.device
    )
    ok = torch.nonzero(fdr <= alpha).flatten()
    kappa = float(sorted_q[ok[-1]]) if len(ok) else math.inf
    return [q >= kappa for q in qs], kappa


def prune_nodes(masks: list[Tensor]) -> list[Tensor]:
    """Iterated node pruning (Algorithm 2): hidden layer ``k`` has incoming ``masks[k]`` rows and outgoing
    ``masks[k+1]`` columns."""
    masks = list(masks)
    changed = True
    while changed:
        changed = False
        for k in range(len(masks) - 1):
            has_out = masks[k + 1].any(0)
            has_in = masks[k].any(1)
            new_in = masks[k] & has_out.unsqueeze(1)
            new_out = masks[k + 1] & has_in.unsqueeze(0)
            if not (torch.equal(new_in, masks[k]) and torch.equal(new_out, masks[k + 1])):
                masks[k], masks[k + 1], changed = new_in, new_out, True
    return masks


def sparsity_report(means: list[Tensor], covs: list[Tensor], alpha: float) -> SparsityReport:
    """FDR edge selection at level ``alpha`` and node pruning of the layers' ``q(b, W) = N(m, B)``."""
    masks, kappa = fdr_masks([sign_probabilities(m, b) for m, b in zip(means, covs)], alpha)
    masks = prune_nodes(masks)
    nl = len(masks)
    return SparsityReport(
        {f"fc{k}.weight": masks[k] for k in range(nl)},
        {
            "kappa": kappa,
            "fdr_level": alpha,
            "nodes_kept": [int(masks[k].any(1).sum()) for k in range(nl - 1)],
            "edges_kept": [int(mk.sum()) for mk in masks],
        },
    )


def masked_row(m: Tensor, cov: Tensor, keep_w: Tensor, key: str) -> tuple[Tensor, Tensor]:
    """``(m, B)`` of the rows restricted to the weights ``keep_w`` (bool (D, D_prev); biases always kept).
    A tiny diagonal on the pruned coordinates keeps the (degenerate) covariance positive definite."""
    keep_w = torch.as_tensor(keep_w, device=m.device).bool()
    if keep_w.shape != m[:, 1:].shape:
        raise ValueError(f"masks[{key!r}]: expected shape {tuple(m[:, 1:].shape)}, got {tuple(keep_w.shape)}")
    keep = torch.cat([torch.ones_like(keep_w[:, :1]), keep_w], 1).to(F64)
    tiny = 1e-12 * torch.diag_embed(1.0 - keep)
    return m * keep, cov * keep.unsqueeze(-1) * keep.unsqueeze(-2) + tiny
