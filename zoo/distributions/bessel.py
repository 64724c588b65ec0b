r"""Log-space modified Bessel function :math:`K_\nu` for torch, stable at any real order (Sheinkman & Wade
(2025) App. E.1).

Sheinkman & Wade 2025 (arXiv 2411.11132): the GIG moments of Eqs. (13)-(14) are ratios and order-derivatives
of :math:`K_\nu` at orders like :math:`\hat\nu \approx -1250`.  These front ends evaluate the float64
numpy kernels of :mod:`zoo.distributions.bessel_np` on the CPU and return tensors of the inputs' device and
dtype; :func:`log_bessel_k` and :func:`bessel_k_ratio` are differentiable (first order) in both arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from zoo.distributions.bessel_np import dlogk_np, log_ratio_np, logk_np

__all__ = ["bessel_k_ratio", "log_bessel_k", "log_bessel_k_dnu", "log_bessel_k_ratio", "np64"]


def _as_tensors(*args) -> tuple[list[torch.Tensor], torch.dtype, torch.device]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    dtypes = [a.dtype for a in tensors if a.dtype.is_floating_point]
    dtype = dtypes[0] if dtypes else torch.get_default_dtype()
    for d in dtypes[1:]:
        dtype = torch.promote_types(dtype, d)
    out = [
        a.to(dtype) if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=dtype, device=device)
        for a in args
    ]
    return out, dtype, device


def np64(t: torch.Tensor) -> np.ndarray:
    """A detached float64 numpy copy of ``t`` (on the CPU)."""
    return t.detach().to("cpu", torch.float64).numpy()


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if grad.shape == shape:
        return grad
    lead = grad.dim() - len(shape)
    grad = grad.sum(dim=tuple(range(lead))) if lead > 0 else grad
    dims = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


class _LogBesselK(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, nu: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        shape = torch.broadcast_shapes(nu.shape, x.shape)
        nu_b, x_b = np.broadcast_arrays(np64(nu), np64(x))
        out = torch.as_tensor(logk_np(nu_b, x_b), dtype=x.dtype, device=x.device).reshape(shape)
        ctx.save_for_backward(nu, x)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        nu, x = ctx.saved_tensors
        nu_b, x_b = np.broadcast_arrays(np64(nu), np64(x))
        g_nu = g_x = None
        if ctx.needs_input_grad[0]:
            d = torch.as_tensor(dlogk_np(nu_b, x_b), dtype=grad.dtype, device=grad.device)
            g_nu = _sum_to(grad * d, nu.shape)
        if ctx.needs_input_grad[1]:
            # d/dx log K_nu(x) = nu / x - K_{nu+1}(x) / K_nu(x)
            r = np.exp(log_ratio_np(nu_b, x_b))
            d = torch.as_tensor(nu_b / x_b - r, dtype=grad.dtype, device=grad.device)
            g_x = _sum_to(grad * d, x.shape)
        return g_nu, g_x


class _BesselKRatio(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, nu: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        shape = torch.broadcast_shapes(nu.shape, x.shape)
        nu_b, x_b = np.broadcast_arrays(np64(nu), np64(x))
        r = np.exp(log_ratio_np(nu_b, x_b))
        ctx.save_for_backward(nu, x)
        ctx.ratio = r
        return torch.as_tensor(r, dtype=x.dtype, device=x.device).reshape(shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        nu, x = ctx.saved_tensors
        nu_b, x_b = np.broadcast_arrays(np64(nu), np64(x))
        r = ctx.ratio
        g_nu = g_x = None
        if ctx.needs_input_grad[0]:
            d = r * (dlogk_np(nu_b + 1.0, x_b) - dlogk_np(nu_b, x_b))
            g_nu = _sum_to(grad * torch.as_tensor(d, dtype=grad.dtype, device=grad.device), nu.shape)
        if ctx.needs_input_grad[1]:
            # dR/dx = R^2 - (2 nu + 1) R / x - 1  (from K' recurrences)
            d = r * r - (2.0 * nu_b + 1.0) * r / x_b - 1.0
            g_x = _sum_to(grad * torch.as_tensor(d, dtype=grad.dtype, device=grad.device), x.shape)
        return g_nu, g_x


def log_bessel_k(nu: float | torch.Tensor, x: float | torch.Tensor) -> torch.Tensor:
    r""":math:`\log K_\nu(x)`, the log modified Bessel function of the second kind, stable for any real order.

    Float64 on the CPU internally (``scipy.special.kve`` for :math:`|\nu| < 20`, with a saddle-point trapezoid
    fallback where it overflows; uniform Debye expansion DLMF 10.41.4 for :math:`|\nu| \ge 20`, e.g. the
    :math:`\hat\nu \approx -1250` of Eq. (13)).  Returns a tensor of the broadcast shape on the inputs' device
    and dtype.  Differentiable in both arguments (first order): :math:`\partial_x \log K_\nu = \nu/x -
    K_{\nu+1}/K_\nu`, :math:`\partial_\nu \log K_\nu` from :func:`log_bessel_k_dnu`.  ``x = 0`` gives
    ``+inf``.
    """
    (nu_t, x_t), _, _ = _as_tensors(nu, x)
    return _LogBesselK.apply(nu_t, x_t)


def bessel_k_ratio(nu: float | torch.Tensor, x: float | torch.Tensor) -> torch.Tensor:
    r""":math:`K_{\nu+1}(x) / K_\nu(x)`, finite and accurate for any real order (e.g. :math:`\nu = -1250`).

    The Bessel ratio behind every GIG moment in Sheinkman & Wade (2025) App. E.1 (and the Gamma-prior EM
    step, App. E.2).
    Computed as ``exp(log_bessel_k_ratio(nu, x))``; differentiable (first order) in both arguments.
    """
    (nu_t, x_t), _, _ = _as_tensors(nu, x)
    return _BesselKRatio.apply(nu_t, x_t)


def log_bessel_k_ratio(nu: float | torch.Tensor, x: float | torch.Tensor) -> torch.Tensor:
    r""":math:`\log K_{\nu+1}(x) - \log K_\nu(x)`, without cancellation at large :math:`|\nu|` (not
    differentiable)."""
    (nu_t, x_t), dtype, device = _as_tensors(nu, x)
    nu_b, x_b = np.broadcast_arrays(np64(nu_t), np64(x_t))
    return torch.as_tensor(log_ratio_np(nu_b, x_b), dtype=dtype, device=device)


def log_bessel_k_dnu(nu: float | torch.Tensor, x: float | torch.Tensor) -> torch.Tensor:
    r""":math:`\partial_\nu \log K_\nu(x)`, needed for :math:`E[\log x]` under a GIG (not differentiable).

    Analytic derivative of the Debye expansion for :math:`|\nu| \ge 20`; for smaller orders the exact identity
    :math:`\partial_\nu \log K_\nu(x) = E_w[t]`, :math:`w(t) \propto e^{\nu t - x\cosh t}`, by trapezoid
    quadrature.
    """
    (nu_t, x_t), dtype, device = _as_tensors(nu, x)
    nu_b, x_b = np.broadcast_arrays(np64(nu_t), np64(x_t))
    return torch.as_tensor(dlogk_np(nu_b, x_b), dtype=dtype, device=device)
