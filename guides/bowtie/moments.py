"""Closed-form moments of the bow-tie CAVI updates (Sheinkman & Wade 2025, arXiv 2411.11132, §3.1, App. A).

* weight rows ``q(W~_{l,d}) = N(m, B)`` with ``W~ = (b, W)``: ``E[W~ W~^T] = B + m m^T`` and
  ``E[W^2_{l,d,d'}] = (m^W_{d'})^2 + B^{WW}_{d'd'}``;
* activations, by the forward recursion of the Gaussian Markov chain ``q(a_n)`` (Eq. 19): ``E[a~]`` and
  ``E[a~ a~^T]`` of the augmented input ``a~ = (1, a)`` of every layer, and the cross moments
  ``E[a_{l,d} a~_{l-1}] = E[a~_{l-1} a~_{l-1}^T] (t_{l,d}, M_{l,d,:})^T`` — under the structured ``q(a)``
  these are *not* ``E[a_{l,d}] E[a~_{l-1}]``;
* pre-activations ``z = W~ a~``: ``E[z] = m^T E[a~]``, ``E[z^2] = Tr(E[W~ W~^T] E[a~ a~^T])``.

A CAVI sweep and the ELBO that follows it ask for the same moments several times: the forward pass depends
on ``(S, t, M)`` only, which the gate, weight and scale updates leave unchanged, and layer ``k``'s
pre-activation moments change only when its weight row or the forward pass does.
:func:`forward_moments` and :func:`layer_pre_moments` therefore keep their last results
(:class:`~guides.bowtie.linalg.Memo`), keyed by the *identity and version* of the tensors they read, so a
repeated call with unchanged inputs costs a few comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from guides.bowtie.linalg import Memo, sym
from guides.bowtie.state import Globals, Locals

__all__ = [
    "Moments",
    "augment",
    "forward_moments",
    "layer_pre_moments",
    "pre_moments",
    "row_second_moment",
    "weight_squares",
]


_FORWARD = Memo(2)
_PRE = Memo(8)


def row_second_moment(m: Tensor, cov: Tensor) -> Tensor:
    """``E[W~ W~^T] = B + m m^T`` of every row, shape (D, D_prev+1, D_prev+1)."""
    return cov + m.unsqueeze(-1) * m.unsqueeze(-2)


def weight_squares(m: Tensor, cov: Tensor) -> Tensor:
    """``E[W^2_{l,d,d'}] = (m^W)^2 + B^WW_{d'd'}`` (bias excluded), shape (D, D_prev)."""
    return m[:, 1:] ** 2 + torch.diagonal(cov, dim1=-2, dim2=-1)[:, 1:]


def augment(mu: Tensor, second: Tensor) -> tuple[Tensor, Tensor]:
    """``E[a~]`` and ``E[a~ a~^T]`` with ``a~ = (1, a)``."""
    amean = _augment_mean(mu)
    aa = mu.new_empty(*mu.shape[:-1], mu.shape[-1] + 1, mu.shape[-1] + 1)
    aa[..., 0, :] = amean
    aa[..., 1:, 0] = mu
    aa[..., 1:, 1:] = second
    return amean, aa


def _is_shared(s: Tensor) -> bool:
    """True when a batch of matrices is an expanded view of one matrix (the last hidden layer's ``S``)."""
    return s.dim() == 3 and s.stride(0) == 0


@dataclass
class Moments:
    """Forward recursion over ``q(a)`` (k = 0..L indexes the *input* of layer ``k``):

    * ``amean[k]`` is ``E[a~]`` (N, D_{k-1}+1);
    * ``shared[k]``, where not ``None``, is one matrix ``C`` with ``E[a~ a~^T] = C + E[a~] E[a~]^T`` for every
      ``n``: the data (``C = 0``, k = 0) and, in a one-hidden-layer network, the hidden layer, whose
      conditional covariance ``S`` does not depend on ``n`` (App. A) and whose input is data;
    * :meth:`aa` ``= E[a~ a~^T]``, :meth:`second` ``= E[a_k a_k^T]``, :meth:`cross` ``= E[a_{k,d} a~_{k-1}]``
      (N, D_k, D_{k-1}+1) are built on first use: the CAVI updates use the rank-one and shared forms
      (:meth:`cross_dot`, :meth:`cross_sum`, :meth:`second_diag`, :func:`pre_moments`) and never build the
      (N, D, D) arrays that those forms make unnecessary."""

    amean: list[Tensor]
    shared: list[Tensor | None]
    _aa: list[Tensor | None]
    _second: list[Tensor | None]
    _cross: list[Tensor | None]

    def low_rank(self, k: int) -> bool:
        """True when layer ``k``'s input is a hidden layer kept as ``shared[k]`` plus an outer product (its
        ``E[a~ a~^T]`` not built); the data input (k = 0) is built once, for one matrix product per use."""
        return k > 0 and self._aa[k] is None

    def aa(self, k: int) -> Tensor:
        """``E[a~ a~^T]`` of the input of layer ``k`` (N, P, P)."""
        if self._aa[k] is None:
            m = self.amean[k]
            self._aa[k] = self.shared[k] + m.unsqueeze(-1) * m.unsqueeze(-2)
        return self._aa[k]

    def second(self, k: int) -> Tensor:
        """``E[a_k a_k^T]`` of hidden layer ``k`` (N, D_k, D_k)."""
        if self._second[k] is None:
            self._second[k] = self.aa(k + 1)[..., 1:, 1:]
        return self._second[k]

    def second_diag(self, k: int) -> Tensor:
        """``E[a_k^2]`` of hidden layer ``k`` (N, D_k)."""
        if self._second[k] is None and self.shared[k + 1] is not None:
            return torch.diagonal(self.shared[k + 1], 0)[1:] + self.amean[k + 1][..., 1:] ** 2
        return self.second(k).diagonal(dim1=-2, dim2=-1)

    def cross(self, k: int) -> Tensor:
        """``E[a_{k,d} a~_{k-1}]`` of hidden layer ``k`` (N, D_k, D_{k-1}+1)."""
        if self._cross[k] is None:  # only the first layer's is left unbuilt: a rank-one outer product
            self._cross[k] = self.amean[k + 1][..., 1:].unsqueeze(-1) * self.amean[k].unsqueeze(-2)
        return self._cross[k]

    def cross_dot(self, k: int, m: Tensor, ez: Tensor) -> Tensor:
        """``E[a_{k,d} m_d^T a~_{k-1}]`` (N, D_k) for the weight means ``m`` (D_k, P) of layer ``k``, whose
        ``E[z] = E[a~_{k-1}] m^T`` is ``ez``: ``E[a_{k,d}] E[z_d]`` for the first layer (input: data)."""
        if self._cross[k] is None and k == 0:
            return self.amean[1][..., 1:] * ez
        return (self.cross(k) * m).sum(-1)

    def cross_sum(self, k: int, w: Tensor) -> Tensor:
        """``sum_n w_{n,d} E[a_{k,d} a~_{k-1}]`` (D_k, P) for weights ``w`` (N, D_k)."""
        if self._cross[k] is None and k == 0:
            return (w * self.amean[1][..., 1:]).T @ self.amean[0]
        return torch.einsum("nd,ndi->di", w, self.cross(k))


def forward_moments(x: Tensor, loc: Locals) -> Moments:
    """The forward recursion (:func:`_forward_moments`), cached on ``x`` and ``(S, t, M)`` (module
    docstring); the result is shared between callers and must not be modified in place."""
    return _FORWARD([x, *loc.S, *loc.t, *loc.M], lambda: _forward_moments(x, loc))


def _forward_moments(x: Tensor, loc: Locals) -> Moments:
    """``mu_l = t_l + M_l mu_{l-1}``, ``P_l = S_l + G_l E[a~a~^T]_{l-1} G_l^T`` with ``G = [t, M]`` (App. A;
    the symmetrized form of the paper's ``2 M E[a] t^T`` term).  The first layer's input ``x`` is data, so
    its ``E[a~ a~^T] = x~ x~^T`` has rank one and ``G x~ x~^T = mu x~^T``, ``G x~ x~^T G^T = mu mu^T``: kept
    in that form (:class:`Moments`) rather than as batched matrix products (the same numbers, a fraction of
    the cost); if the first layer's ``S`` is one matrix for all ``n``, so is the shared part of its
    ``E[a~ a~^T]``."""
    amean = _augment_mean(x)
    out = Moments([amean], [x.new_zeros(())], [None], [], [])
    for k, (t, m, s) in enumerate(zip(loc.t, loc.M, loc.S)):
        g = torch.cat([t.unsqueeze(-1), m], -1)
        mu = (g * amean.unsqueeze(-2)).sum(-1)
        if k == 0:
            cross, second = None, None
            shared = _pad(sym(s[0])) if _is_shared(s) else None
            if shared is None:
                second = sym(s) + mu.unsqueeze(-1) * mu.unsqueeze(-2)
        else:
            cross = g @ out.aa(k)
            second = sym(s + cross @ g.transpose(-1, -2))
            shared = None
        amean, aa = (_augment_mean(mu), None) if second is None else augment(mu, second)
        out.amean.append(amean)
        out.shared.append(shared)
        out._aa.append(aa)
        out._second.append(second)
        out._cross.append(cross)
    return out


def _augment_mean(mu: Tensor) -> Tensor:
    """``E[a~] = (1, E[a])``."""
    return torch.cat([mu.new_ones(*mu.shape[:-1], 1), mu], -1)


def _pad(c: Tensor) -> Tensor:
    """``[[0, 0], [0, C]]``: the shared part of ``E[a~ a~^T]`` given that of ``E[a a^T]``."""
    return torch.nn.functional.pad(c, (1, 0, 1, 0))


def pre_moments(
    m: Tensor, eww: Tensor, amean: Tensor, aa: Tensor | None, shared: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``E[z_{n,d}] = m_d^T E[a~_n]`` and ``E[z^2] = Tr((B + m m^T) E[a~ a~^T])``; with ``aa = None``,
    ``E[a~ a~^T] = shared + E[a~] E[a~]^T``, so ``E[z^2] = Tr(E[W~W~^T] C) + E[a~]^T E[W~W~^T] E[a~]``."""
    d = eww.shape[0]
    if aa is not None:  # Tr(E[W~W~^T] E[a~a~^T]) as one matrix product (E[W~W~^T] symmetric)
        return amean @ m.T, aa.reshape(aa.shape[0], -1) @ eww.reshape(d, -1).T
    n, p = amean.shape
    quad = ((amean @ eww.transpose(0, 1).reshape(p, d * p)).reshape(n, d, p) * amean.unsqueeze(-2)).sum(-1)
    return amean @ m.T, quad + eww.reshape(d, -1) @ shared.reshape(-1)


def layer_pre_moments(g: Globals, mom: Moments, k: int) -> tuple[Tensor, Tensor]:
    """:func:`pre_moments` of layer ``k`` under the current ``q(b, W)`` and ``q(a)``."""
    m, b, amean = g.m[k], g.B[k], mom.amean[k]
    if mom.low_rank(k):
        shared = mom.shared[k]
        return _PRE(
            [m, b, amean, shared], lambda: pre_moments(m, row_second_moment(m, b), amean, None, shared)
        )
    aa = mom.aa(k)
    return _PRE([m, b, amean, aa], lambda: pre_moments(m, row_second_moment(m, b), amean, aa))
