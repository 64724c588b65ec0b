"""Batched Gaussian linear algebra of the bow-tie CAVI updates (Sheinkman & Wade 2025, arXiv 2411.11132).

Every Gaussian factor of the structured mean field — the weight rows ``q(b, W)`` (Eq. 16) and the activation
conditionals ``q(a_l | a_{l-1})`` (Eq. 19) — is computed from its natural parameters ``(P, h)`` by one batched
Cholesky factorization, in float64, symmetrizing and adding jitter only where the plain factorization fails
(§3.1, App. A).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["F64", "Memo", "sym", "chol", "gauss_from_precision", "natural_from_moments", "logdet"]

F64 = torch.float64


def sym(a: Tensor) -> Tensor:
    """``(A + A^T) / 2`` over the last two dimensions; a batch that is an expanded view of one matrix stays
    one (symmetrized once)."""
    if a.dim() == 3 and a.shape[0] > 1 and a.stride(0) == 0:
        return sym(a[0]).expand(a.shape)
    return 0.5 * (a + a.transpose(-1, -2))


def chol(prec: Tensor, jitter: float = 1e-10) -> Tensor:
    """Batched Cholesky of a (symmetrized) precision, adding diagonal jitter only if the plain one fails."""
    prec = sym(prec)
    factor, info = torch.linalg.cholesky_ex(prec)
    eps = jitter
    while bool((info > 0).any()):
        scale = torch.diagonal(prec, dim1=-2, dim2=-1).abs().mean(-1, keepdim=True).clamp_min(1.0)
        eye = torch.eye(prec.shape[-1], dtype=prec.dtype, device=prec.device)
        factor, info = torch.linalg.cholesky_ex(prec + eps * scale.unsqueeze(-1) * eye)
        eps *= 10.0
        if eps > 1e-2:
            raise FloatingPointError("bow-tie CAVI: a precision matrix is not positive definite")
    return factor


def gauss_from_precision(prec: Tensor, lin: Tensor) -> tuple[Tensor, Tensor]:
    """``(cov, mean) = (P^{-1}, P^{-1} h)`` by one batched Cholesky (Eqs. 16 and 19)."""
    factor = chol(prec)
    cov = sym(torch.cholesky_inverse(factor))
    mean = torch.cholesky_solve(lin.unsqueeze(-1), factor).squeeze(-1)
    return cov, mean


def natural_from_moments(cov: Tensor, mean: Tensor) -> tuple[Tensor, Tensor]:
    """``(P, h) = (B^{-1}, B^{-1} m)``: the inverse of :func:`gauss_from_precision` (SVI blends, §3.3)."""
    prec = sym(torch.cholesky_inverse(chol(cov)))
    return prec, (prec @ mean.unsqueeze(-1)).squeeze(-1)


def logdet(cov: Tensor) -> Tensor:
    """Batched log-determinant; a batch that is an expanded view of one matrix (stride 0, e.g. the last
    hidden layer's ``S``) is factored once."""
    if cov.dim() == 3 and cov.shape[0] > 1 and cov.stride(0) == 0:
        return logdet(cov[0]).expand(cov.shape[0])
    return 2.0 * torch.log(torch.diagonal(chol(cov), dim1=-2, dim2=-1)).sum(-1)


class Memo:
    """A small cache of a pure function of tensors, keyed by the tensors' identity: ``(data_ptr, version,
    shape, stride, dtype, device)`` of every input.  An entry holds its input tensors, so their memory cannot
    be reused by another tensor while the entry lives (a matching ``data_ptr`` is the same storage), and any
    in-place change bumps the shared version counter; a tensor rebound to a new value is a new key.  Bypassed
    under autograd (a cached value carries no graph).  ``size`` entries, the oldest evicted first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: list[tuple[tuple, tuple[Tensor, ...], Any]] = []

    @staticmethod
    def _key(tensors: Sequence[Tensor]) -> tuple:
        return tuple(
            (t.data_ptr(), t._version, tuple(t.shape), t.stride(), t.dtype, t.device) for t in tensors
        )

    def __call__(self, tensors: Sequence[Tensor], fn: Callable[[], Any]) -> Any:
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return fn()
        key = self._key(tensors)
        for i, (k, _, value) in enumerate(self.entries):
            if k == key:
                self.entries.append(self.entries.pop(i))
                return value
        value = fn()
        self.entries.append((key, tuple(tensors), value))
        if len(self.entries) > self.size:
            self.entries.pop(0)
        return value

    def clear(self) -> None:
        self.entries.clear()
