"""Structured mean-field CAVI for the bow-tie BNN of paper 000 (§3.1, App. A; note §2).

Family (Eq. 12 and the induced factorization, note §2.1), all parameters registered buffers in float64:

* ``q(tau_l) = GIG(nu_glob - D_l D_{l-1}/2, dtau_l, lam_glob)`` (Eq. 13), ``q(psi) = GIG(nu_loc - 1/2, dpsi,
lam_loc)``
  per weight (Eq. 14);
* ``q(eta^2_{l,d}) = IG(alpha, beta)`` per hidden unit, one ``IG`` for the output noise ``sigma2`` (Eq. 15);
* ``q(b_{l,d}, W_{l,d}) = N(m_{l,d}, B_{l,d})`` per row, full covariance (Eq. 16), bias first;
* ``q(omega_{n,l,d}) = PG(1, A_{n,l,d})`` (Eq. 17), ``q(gamma_{n,l,d}) = Bern(rho_{n,l,d})`` (Eq. 18);
* ``q(a_n) = prod_l N(a_{n,l} | t_{n,l} + M_{n,l} a_{n,l-1}, S_{n,l})`` jointly Gaussian across layers (Eq.
19).

One sweep (Algorithm 1 order, note §2.4 and Appendix pseudo-code), every update vectorized over data points
and
units with batched Cholesky factorizations: ``tau``, ``psi`` (13–14); ``eta`` (15, **exact** expected
squares incl.
``Cov(a_{l,d}, a~_{l-1})`` — erratum 3); ``omega`` (17); ``q(a)`` by the backward recursion (19) in the
message-passing form ``S_l^{-1} = Lambda_l - K_{l+1}^T S_{l+1} K_{l+1}``, ``t_l = S_l (h_l + K_{l+1}^T
t_{l+1})``,
``M_l = S_l K_l`` with ``K_l = diag(E[eta^-2_l] rho_l) m^W_l`` (note §2.3 "where the terms come from"); then
per
hidden layer the weights (16) and gates (18); the output weights (16); optionally the EM step for
``delta_glob``
(§3.2, App. E.2, IG case).  The ELBO is the clean assembly of note §2.5 written *without* relying on
post-update
cancellations (only the structural ``E[log tau]``/``E[log psi]`` cancellation, which holds for any
``delta-hat``),
so it is exact at every point and non-decreasing after every single factor update.

Prediction (§3.5, Eqs. 22–26): test-point locals ``q(a_*), q(gamma_*), q(omega_*)`` are fitted with globals
fixed
(no ``y`` term; erratum 4: ``S_{*,l}`` uses ``rho_{*,l+1}``) until the prediction ELBO (App. B.2) changes by
less
than ``predict_tol`` (1e-4, at most ``predict_max_iters`` = 60 sweeps); the closed-form mean (Eq. 26) and the
cleaned variance of note §3.4 are returned, plus per-draw locations/scales from the Monte Carlo scheme (Eq.
25).
:meth:`BowtieCAVIGuide.sparsity_report` implements Bayesian-FDR edge selection and node pruning (§3.4).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import Tensor

from zoo.core.guide import ClosedFormGuide
from zoo.core.sparsity import SparsityReport
from zoo.core.validation import check_positive, check_positive_int, check_probability
from zoo.experiments.ensemble import combine_predictions
from zoo.families.bowtie.model import BowtieModel, PolyaGamma1, log_cosh_half, pg_mean
from zoo.families.bowtie.prior import (
    GaussianBowtiePrior,
    gig_distribution,
    gig_log_normalizer,
    gig_mean_reciprocal,
)
from zoo.infer.predict import Predictions
from zoo.ops.expectations import LOG_2PI, expected_log_inverse_gamma, inverse_gamma_entropy

__all__ = ["BowtieCAVIGuide", "ensemble_predictions"]

F64 = torch.float64
LOG2 = math.log(2.0)


# ----------------------------------------------------------------------------------------------- shared math
def _sym(a: Tensor) -> Tensor:
    return 0.5 * (a + a.transpose(-1, -2))


def _chol(prec: Tensor, jitter: float = 1e-10) -> Tensor:
    """Batched Cholesky of a (symmetrized) precision, adding diagonal jitter only if the plain one fails."""
    prec = _sym(prec)
    chol, info = torch.linalg.cholesky_ex(prec)
    eps = jitter
    while bool((info > 0).any()):
        scale = torch.diagonal(prec, dim1=-2, dim2=-1).abs().mean(-1, keepdim=True).clamp_min(1.0)
        eye = torch.eye(prec.shape[-1], dtype=prec.dtype, device=prec.device)
        chol, info = torch.linalg.cholesky_ex(prec + eps * scale.unsqueeze(-1) * eye)
        eps *= 10.0
        if eps > 1e-2:
            raise FloatingPointError("bow-tie CAVI: a precision matrix is not positive definite")
    return chol


def _gauss_from_precision(prec: Tensor, lin: Tensor) -> tuple[Tensor, Tensor]:
    """``(cov, mean) = (P^{-1}, P^{-1} h)`` by one batched Cholesky (Eqs. 16 and 19)."""
    chol = _chol(prec)
    cov = _sym(torch.cholesky_inverse(chol))
    mean = torch.cholesky_solve(lin.unsqueeze(-1), chol).squeeze(-1)
    return cov, mean


def _logdet(cov: Tensor) -> Tensor:
    """Batched log-determinant; a batch that is an expanded view of one matrix (stride 0, e.g. the last
    hidden layer's ``S``) is factored once."""
    if cov.dim() == 3 and cov.shape[0] > 1 and cov.stride(0) == 0:
        return _logdet(cov[0]).expand(cov.shape[0])
    return 2.0 * torch.log(torch.diagonal(_chol(cov), dim1=-2, dim2=-1)).sum(-1)


def _augment(mu: Tensor, second: Tensor) -> tuple[Tensor, Tensor]:
    """``E[a~]`` and ``E[a~ a~^T]`` with ``a~ = (1, a)`` (note §2.2)."""
    one = torch.ones_like(mu[..., :1])
    amean = torch.cat([one, mu], -1)
    top = torch.cat([one, mu], -1).unsqueeze(-2)
    bottom = torch.cat([mu.unsqueeze(-1), second], -1)
    return amean, torch.cat([top, bottom], -2)


@dataclass
class _Locals:
    """Per-datapoint factors of the hidden layers: ``rho`` (N,D), ``A`` (N,D), ``S`` (N,D,D), ``t`` (N,D),
    ``M`` (N,D,D_prev)."""

    rho: list[Tensor]
    A: list[Tensor]
    S: list[Tensor]
    t: list[Tensor]
    M: list[Tensor]


@dataclass
class _Moments:
    """Forward recursion of note §2.2: ``amean[k]``/``AA[k]`` are ``E[a~]``/``E[a~ a~^T]`` of the *input* of
    layer
    ``k`` (k = 0..L), ``cross[k] = E[a_{k,d} a~_{k-1}]`` (N, D_k, D_{k-1}+1), ``second[k] = E[a_k a_k^T]``."""

    amean: list[Tensor]
    AA: list[Tensor]
    cross: list[Tensor]
    second: list[Tensor]


def _forward_moments(x: Tensor, loc: _Locals) -> _Moments:
    """``mu_l = t_l + M_l mu_{l-1}``, ``P_l = S_l + G_l E[a~a~^T]_{l-1} G_l^T`` with ``G = [t, M]`` (note
    §2.2; the
    symmetrized form of the paper's ``2 M E[a] t^T`` — erratum 4)."""
    amean, aa = _augment(x, x.unsqueeze(-1) * x.unsqueeze(-2))
    out = _Moments([amean], [aa], [], [])
    for t, m, s in zip(loc.t, loc.M, loc.S):
        g = torch.cat([t.unsqueeze(-1), m], -1)
        cross = g @ aa
        second = _sym(s + cross @ g.transpose(-1, -2))
        mu = (g @ amean.unsqueeze(-1)).squeeze(-1)
        amean, aa = _augment(mu, second)
        out.cross.append(cross)
        out.second.append(second)
        out.amean.append(amean)
        out.AA.append(aa)
    return out


def _pre_moments(m: Tensor, eww: Tensor, amean: Tensor, aa: Tensor) -> tuple[Tensor, Tensor]:
    """``E[z_{n,d}] = m_d^T E[a~_n]`` and ``E[z^2] = Tr((B + m m^T) E[a~ a~^T])`` (note §2.2)."""
    return amean @ m.T, torch.einsum("dij,nji->nd", eww, aa)


# ----------------------------------------------------------------------------------------------- the guide
class BowtieCAVIGuide(ClosedFormGuide):
    """Closed-form structured mean-field CAVI guide of paper 000 (module docstring).

    Args:
        model: a :class:`zoo.families.bowtie.model.BowtieModel`.
        em: update ``delta_glob`` by the EM step of §3.2 after each sweep (IG global prior only, App. E.2).
        init: ``"laplace"`` or ``"spikeslab"`` hidden-weight means (Algorithm 3, App. D.1).
        init_cov: initial ``B_{l,d}`` (``init_cov * I``; paper 0.01).
        local_init_cov: initial ``S_{n,l}`` (``local_init_cov * I``; paper 0.01).
        predict_tol, predict_max_iters: stopping rule of the test-time local updates (§3.5, [code] 1e-4 / 60).
        forgetting_rate, svi_local_iters, svi_local_tol: stochastic VI (§3.3, App. C; [code] 0.75 / 40 /
            1e-4), used when the loop passes a minibatch ``subsample``.
        beta_rule: how SVI blends the ``q(eta^2) = IG(alpha, beta)`` factors. ``"paper"`` (default): the
            harmonic blend ``beta = ((1-l)/beta_old + l/beta_hat)^-1`` of §3.3/App. C and the authors' code;
            ``"textbook"``: the natural-gradient step for the IG natural parameters ``(-alpha-1, -beta)``,
            ``beta = (1-l) beta_old + l beta_hat`` (note 000 §3.2 caveat).  The default reproduces the
            published SVBNN; both rules share the fixed point (``l = 1`` gives ``beta_hat`` either way), and
            the harmonic blend is never larger than the linear one (AM-HM): it shrinks the noise scale
            faster.
    """

    uses_gradients = False

    def __init__(
        self,
        model: BowtieModel,
        *,
        em: bool = False,
        init: str = "laplace",
        init_cov: float = 0.01,
        local_init_cov: float = 0.01,
        predict_tol: float = 1e-4,
        predict_max_iters: int = 60,
        forgetting_rate: float = 0.75,
        svi_local_iters: int = 40,
        svi_local_tol: float = 1e-4,
        beta_rule: str = "paper",
    ) -> None:
        super().__init__()
        if not isinstance(model, BowtieModel):
            raise TypeError(
                f"model must be a zoo.families.bowtie.model.BowtieModel, got {type(model).__name__}"
            )
        if init not in ("laplace", "spikeslab"):
            raise ValueError(f"init must be 'laplace' or 'spikeslab', got {init!r}")
        self.gaussian = isinstance(model.prior, GaussianBowtiePrior)
        if em and (self.gaussian or float(model.prior.lam_glob) != 0.0):
            raise ValueError(
                "em: the closed-form EM step (App. E.2) is implemented for the N-GIG prior with an IG "
                "global scale (lam_glob = 0) only"
            )
        self.em = bool(em)
        self.init = init
        self.init_cov = check_positive("init_cov", init_cov)
        self.local_init_cov = check_positive("local_init_cov", local_init_cov)
        self.predict_tol = check_positive("predict_tol", predict_tol)
        self.predict_max_iters = check_positive_int("predict_max_iters", predict_max_iters)
        if not 0.5 < float(forgetting_rate) <= 1.0:
            raise ValueError(
                f"forgetting_rate must be in (0.5, 1] (Robbins-Monro, Eq. 21), got {forgetting_rate}"
            )
        self.forgetting_rate = float(forgetting_rate)
        self.svi_local_iters = check_positive_int("svi_local_iters", svi_local_iters)
        self.svi_local_tol = check_positive("svi_local_tol", svi_local_tol)
        if beta_rule not in ("paper", "textbook"):
            raise ValueError(f"beta_rule must be 'paper' or 'textbook', got {beta_rule!r}")
        self.beta_rule = beta_rule
        self.widths = tuple(model.widths)
        self.num_hidden = model.num_hidden
        w = self.widths
        for k in range(self.num_hidden + 1):
            d, dp = w[k + 1], w[k]
            self.register_buffer(f"m{k}", torch.zeros(d, dp + 1, dtype=F64))
            self.register_buffer(
                f"B{k}", self.init_cov * torch.eye(dp + 1, dtype=F64).expand(d, -1, -1).clone()
            )
            self.register_buffer(f"dtau{k}", torch.ones((), dtype=F64))
            self.register_buffer(f"dpsi{k}", torch.ones(d, dp, dtype=F64))
        for k in range(self.num_hidden):
            d = w[k + 1]
            self.register_buffer(f"alpha{k}", torch.ones(d, dtype=F64))
            self.register_buffer(f"beta{k}", torch.ones(d, dtype=F64))
            for name in ("rho", "A", "t"):
                self.register_buffer(f"{name}{k}", torch.zeros(0, d, dtype=F64))
            self.register_buffer(f"S{k}", torch.zeros(0, d, d, dtype=F64))
            self.register_buffer(f"M{k}", torch.zeros(0, d, w[k], dtype=F64))
        self.register_buffer("alpha_out", torch.ones((), dtype=F64))
        self.register_buffer("beta_out", torch.ones((), dtype=F64))
        self.register_buffer("initialized", torch.tensor(False))
        self.register_buffer("svi_step", torch.tensor(0))
        self._svi_elbo: float | None = None
        self._train_x: Tensor | None = None
        object.__setattr__(self, "_model", model)  # a plain reference, not a submodule (no duplicated state)

    # ------------------------------------------------------------------ buffers
    def _b(self, name: str, k: int) -> Tensor:
        return getattr(self, f"{name}{k}")

    def _set(self, name: str, value: Tensor) -> None:
        self._buffers[name] = value.detach().to(F64)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The per-datapoint buffers are sized by the training set: resize them before loading (checkpoints).
        for k in range(self.num_hidden):
            for name in ("rho", "A", "t", "S", "M"):
                key = f"{prefix}{name}{k}"
                if key in state_dict:
                    self._buffers[f"{name}{k}"] = torch.empty_like(state_dict[key], dtype=F64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def train_locals(self) -> _Locals:
        r = range(self.num_hidden)
        return _Locals(*([self._b(n, k) for k in r] for n in ("rho", "A", "S", "t", "M")))

    def _store_locals(self, loc: _Locals) -> None:
        for k in range(self.num_hidden):
            for name in ("rho", "A", "S", "t", "M"):
                self._set(f"{name}{k}", getattr(loc, name)[k])

    # ------------------------------------------------------------------ global moments
    def _tau_params(
        self, model: BowtieModel, k: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Prior ``(nu, delta, lam)`` and variational ``(nu_hat, delta_hat, lam)`` of ``tau_k`` (Eq. 13)."""
        nu, delta, lam = (v.to(F64) for v in model.prior.glob_params(self.num_hidden))
        nu_hat = nu - 0.5 * self.widths[k + 1] * self.widths[k]
        return nu, delta, lam, nu_hat, self._b("dtau", k), lam

    def _psi_params(
        self, model: BowtieModel, k: int
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Prior and variational GIG parameters of the local scales of layer ``k`` (Eq. 14)."""
        nu, delta, lam = (v.to(F64) for v in model.prior.loc_params(self.widths[k]))
        return nu, delta, lam, nu - 0.5, self._b("dpsi", k), lam

    def _inv_tau(self, model, k: int) -> Tensor:
        _, _, _, nh, dh, lam = self._tau_params(model, k)
        return gig_mean_reciprocal(nh, dh, lam)

    def _inv_psi(self, model, k: int) -> Tensor:
        _, _, _, nh, dh, lam = self._psi_params(model, k)
        return gig_mean_reciprocal(nh, dh, lam)

    def _w_prec(self, model, k: int) -> Tensor:
        """``E[1/(tau_l psi_{l,d,d'})] = E[1/tau] E[1/psi]``, shape (D, D_prev); ``1/v_l`` under the
        Gaussian prior."""
        if self.gaussian:
            v = model.prior.weight_variance(self.num_hidden, self.widths[k]).to(F64)
            return (1.0 / v).expand(self.widths[k + 1], self.widths[k])
        return self._inv_tau(model, k) * self._inv_psi(model, k)

    def _eww(self, k: int) -> Tensor:
        m = self._b("m", k)
        return self._b("B", k) + m.unsqueeze(-1) * m.unsqueeze(-2)

    def _ew2(self, k: int) -> Tensor:
        """``E[W^2_{l,d,d'}] = (m^W)^2 + B^WW_{d'd'}`` (note §2.2)."""
        return self._b("m", k)[:, 1:] ** 2 + torch.diagonal(self._b("B", k), dim1=-2, dim2=-1)[:, 1:]

    def _prior_prec(self, model, k: int) -> Tensor:
        """Diagonal of ``D_{l,d}^{-1} = diag(s_0^-2, E[1/tau] E[1/psi_{d,:}])`` (Eq. 16), shape (D,
        D_prev+1)."""
        s0 = model.prior.bias_scale.to(F64)
        wprec = self._w_prec(model, k)
        return torch.cat([torch.full_like(wprec[:, :1], 1.0) / s0**2, wprec], 1)

    def _e_prec(self, k: int) -> Tensor:
        """``E[eta^-2]`` of hidden layer ``k`` (D,), or of the output noise (D_out,) for ``k = L``."""
        if k == self.num_hidden:
            return (self.alpha_out / self.beta_out).expand(self.widths[-1])
        return self._b("alpha", k) / self._b("beta", k)

    @staticmethod
    def _temp(model) -> float:
        return float(model.temperature)

    # ------------------------------------------------------------------ local updates (shared by fit &
    # predict)
    def _update_omega(self, model, loc: _Locals, mom: _Moments) -> None:
        """Eq. (17): ``A = sqrt(E[z^2]) / T``."""
        temp = self._temp(model)
        for k in range(self.num_hidden):
            _, ez2 = _pre_moments(self._b("m", k), self._eww(k), mom.amean[k], mom.AA[k])
            loc.A[k] = ez2.clamp_min(0).sqrt() / temp

    def _update_rho(self, model, loc: _Locals, mom: _Moments, k: int) -> None:
        """Eq. (18): ``logit rho = E[z]/T + E[eta^-2] (E[a z] - E[z^2]/2)``."""
        m = self._b("m", k)
        ez, ez2 = _pre_moments(m, self._eww(k), mom.amean[k], mom.AA[k])
        eaz = (mom.cross[k] * m).sum(-1)
        loc.rho[k] = torch.sigmoid(ez / self._temp(model) + self._e_prec(k) * (eaz - 0.5 * ez2))

    def _update_activations(self, model, loc: _Locals, y: Tensor | None) -> None:
        """Eq. (19) by the backward recursion ``l = L..1`` (batched over data points); ``y = None`` gives the
        test-time version of §3.5 (no output term)."""
        temp = self._temp(model)
        nh = self.num_hidden
        k_next = t_next = s_next = None
        for k in range(nh - 1, -1, -1):
            e = self._e_prec(k)
            mk = self._b("m", k)
            rho = loc.rho[k]
            n = rho.shape[0]
            h = e * rho * mk[:, 0]
            m_next, eww_next = self._b("m", k + 1), self._eww(k + 1)
            if k + 1 == nh:
                # The last hidden layer's precision does not depend on n (note §2.3): one (D, D) Cholesky
                # instead of N; S_L is stored as an expanded (N, D, D) view of one matrix.
                lam1 = torch.diag(e)
                if y is not None:
                    c = self._e_prec(nh)
                    lam1 = lam1 + torch.einsum("d,dij->ij", c, eww_next[:, 1:, 1:])
                    h = h + (c * y) @ m_next[:, 1:] - c @ eww_next[:, 1:, 0]
                s1, _ = _gauss_from_precision(lam1, torch.zeros_like(e))
                s, t = s1.expand(n, -1, -1), h @ s1
                kk = (e * rho).unsqueeze(-1) * mk[:, 1:]
                loc.S[k], loc.t[k], loc.M[k] = s, t, s1 @ kk
                k_next, t_next, s_next = kk, t, s
                continue
            else:
                e_next, rho_next = self._e_prec(k + 1), loc.rho[k + 1]
                c = e_next * rho_next + pg_mean(loc.A[k + 1]) / temp**2
                lam = torch.diag_embed(e.expand(n, -1)) + torch.einsum("nd,dij->nij", c, eww_next[:, 1:, 1:])
                h = h + ((rho_next - 0.5) / temp) @ m_next[:, 1:] - c @ eww_next[:, 1:, 0]
                lam = lam - k_next.transpose(-1, -2) @ s_next @ k_next
                h = h + (k_next.transpose(-1, -2) @ t_next.unsqueeze(-1)).squeeze(-1)
            s, t = _gauss_from_precision(lam, h)
            kk = (e * rho).unsqueeze(-1) * mk[:, 1:]
            loc.S[k], loc.t[k], loc.M[k] = s, t, s @ kk
            k_next, t_next, s_next = kk, t, s

    def _local_sweep(self, model, x: Tensor, y: Tensor | None, loc: _Locals) -> _Moments:
        """``omega``, ``q(a)``, ``gamma`` with the globals fixed (the local part of Algorithm 1; §3.5)."""
        self._update_omega(model, loc, _forward_moments(x, loc))
        self._update_activations(model, loc, y)
        mom = _forward_moments(x, loc)
        for k in range(self.num_hidden):
            self._update_rho(model, loc, mom, k)
        return mom

    # ------------------------------------------------------------------ global updates
    def _update_tau(self, model) -> None:
        """Eq. (13): ``delta_hat^2 = delta_glob^2 + sum E[1/psi] E[W^2]`` (no-op under the Gaussian prior)."""
        if self.gaussian:
            return
        for k in range(self.num_hidden + 1):
            _, delta, *_ = self._tau_params(model, k)
            self._set(f"dtau{k}", (delta**2 + (self._inv_psi(model, k) * self._ew2(k)).sum()).sqrt())

    def _update_psi(self, model) -> None:
        """Eq. (14): ``delta_hat^2 = E[1/tau] E[W^2] + delta_loc^2`` (no-op under the Gaussian prior)."""
        if self.gaussian:
            return
        for k in range(self.num_hidden + 1):
            _, delta, *_ = self._psi_params(model, k)
            self._set(f"dpsi{k}", (self._inv_tau(model, k) * self._ew2(k) + delta**2).sqrt())

    def _sq_terms(self, loc: _Locals, mom: _Moments, y: Tensor | None, k: int) -> Tensor:
        """Exact expected squares of note §2.3 (erratum 3), (N, D): hidden ``E[(a - gamma z)^2]``, output
        ``E[(y - z)^2]``."""
        m = self._b("m", k)
        ez, ez2 = _pre_moments(m, self._eww(k), mom.amean[k], mom.AA[k])
        if k == self.num_hidden:
            return y * y - 2.0 * y * ez + ez2
        rho = loc.rho[k]
        ea2 = torch.diagonal(mom.second[k], dim1=-2, dim2=-1)
        return ea2 - 2.0 * rho * (mom.cross[k] * m).sum(-1) + rho * ez2

    def _eta_params(
        self, model, loc: _Locals, mom: _Moments, y: Tensor, n_total: int, scale: float = 1.0
    ) -> tuple[list[Tensor], list[Tensor]]:
        """Eq. (15) with exact expectations: ``(alpha, beta)`` of every hidden layer and (last) of the
        output noise
        (one IG shared by the outputs, site ``sigma2``); data sums multiplied by ``scale`` (SVI:
        ``N/|S|``)."""
        a0h, b0h = (v.to(F64) for v in (model.hidden_noise.concentration, model.hidden_noise.rate))
        alphas, betas = [], []
        for k in range(self.num_hidden):
            alphas.append((a0h + 0.5 * n_total).expand(self.widths[k + 1]).clone())
            betas.append(b0h + 0.5 * scale * self._sq_terms(loc, mom, y, k).sum(0))
        a0, b0 = (v.to(F64) for v in (model.likelihood.concentration, model.likelihood.rate))
        alphas.append(a0 + 0.5 * n_total * self.widths[-1])
        betas.append(b0 + 0.5 * scale * self._sq_terms(loc, mom, y, self.num_hidden).sum())
        return alphas, betas

    def _set_eta(self, alphas: list[Tensor], betas: list[Tensor]) -> None:
        for k in range(self.num_hidden):
            self._set(f"alpha{k}", alphas[k])
            self._set(f"beta{k}", betas[k])
        self._set("alpha_out", alphas[-1])
        self._set("beta_out", betas[-1])

    def _weight_natural(
        self, model, loc: _Locals, mom: _Moments, y: Tensor | None, k: int, scale: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        """Eq. (16) natural parameters ``(B^{-1}, B^{-1} m)`` of every unit of layer ``k`` (one Bayesian
        linear
        regression per unit, batched over units); data sums multiplied by ``scale`` (SVI: ``N/|S|``)."""
        temp = self._temp(model)
        e = self._e_prec(k)
        amean, aa = mom.amean[k], mom.AA[k]
        if k == self.num_hidden:
            c = e.expand(amean.shape[0], -1)
            rhs = (c * y).T @ amean
        else:
            rho = loc.rho[k]
            c = e * rho + pg_mean(loc.A[k]) / temp**2
            rhs = torch.einsum("nd,ndi->di", e * rho, mom.cross[k]) + ((rho - 0.5) / temp).T @ amean
        prec = scale * torch.einsum("nd,nij->dij", c, aa) + torch.diag_embed(self._prior_prec(model, k))
        return prec, scale * rhs

    def _update_weights(self, model, loc: _Locals, mom: _Moments, y: Tensor | None, k: int) -> None:
        """Eq. (16), full batch."""
        cov, mean = _gauss_from_precision(*self._weight_natural(model, loc, mom, y, k))
        self._set(f"B{k}", cov)
        self._set(f"m{k}", mean)

    def _em_step(self, model) -> None:
        """§3.2 / App. E.2 (IG): ``delta_glob^2 = 2 alpha (L+1) / sum_l E[1/tau_l]`` with ``alpha =
        -nu_glob``."""
        inv = sum(self._inv_tau(model, k) for k in range(self.num_hidden + 1))
        nu = model.prior.nu_glob.to(F64)
        delta = (-2.0 * nu * (self.num_hidden + 1) / inv).sqrt()
        model.prior.set_glob_delta(delta.to(model.prior.delta_glob.dtype), self.num_hidden)

    def sweep(self, model, x: Tensor, y: Tensor, callback=None) -> None:
        """One CAVI sweep in the order of Algorithm 1; ``callback(name)`` runs after every factor update."""
        cb = callback if callback is not None else (lambda name: None)
        x, y = self._as64(x, y)
        loc = self.train_locals
        self._update_tau(model)
        cb("tau")
        self._update_psi(model)
        cb("psi")
        mom = _forward_moments(
            x, loc
        )  # the eta update leaves the locals unchanged: one forward pass for both
        self._set_eta(*self._eta_params(model, loc, mom, y, x.shape[0]))
        cb("eta")
        self._update_omega(model, loc, mom)
        self._store_locals(loc)
        cb("omega")
        self._update_activations(model, loc, y)
        self._store_locals(loc)
        cb("a")
        mom = _forward_moments(x, loc)
        for k in range(self.num_hidden):
            self._update_weights(model, loc, mom, y, k)
            cb(f"W{k}")
            self._update_rho(model, loc, mom, k)
            self._store_locals(loc)
            cb(f"rho{k}")
        self._update_weights(model, loc, mom, y, self.num_hidden)
        cb(f"W{self.num_hidden}")
        if self.em:
            self._em_step(model)
            cb("em")

    # ------------------------------------------------------------------ ELBO (note §2.5)
    def _local_elbo(self, model, loc: _Locals, mom: _Moments, y: Tensor | None) -> Tensor:
        """Per-datapoint ELBO terms (N,): hidden units, activation entropies and (with ``y``) the output
        term."""
        temp = self._temp(model)
        total = 0.0
        for k in range(self.num_hidden):
            m = self._b("m", k)
            ez, ez2 = _pre_moments(m, self._eww(k), mom.amean[k], mom.AA[k])
            rho, a = loc.rho[k], loc.A[k]
            e_log = torch.log(self._b("beta", k)) - torch.digamma(self._b("alpha", k))
            sq = self._sq_terms(loc, mom, None, k)
            eom = pg_mean(a)
            ent_g = -(torch.special.xlogy(rho, rho) + torch.special.xlogy(1 - rho, 1 - rho))
            unit = (
                -0.5 * (LOG_2PI + e_log)
                - 0.5 * self._e_prec(k) * sq
                - LOG2
                + (rho - 0.5) * ez / temp
                - eom * ez2 / (2 * temp**2)
                + 0.5 * a * a * eom
                - log_cosh_half(a)
                + ent_g
            )
            d = self.widths[k + 1]
            total = total + unit.sum(-1) + 0.5 * _logdet(loc.S[k]) + 0.5 * d * (1 + LOG_2PI)
        if y is not None:
            k = self.num_hidden
            e_log = torch.log(self.beta_out) - torch.digamma(self.alpha_out)
            sq = self._sq_terms(loc, mom, y, k)
            total = total + (-0.5 * (LOG_2PI + e_log) - 0.5 * self._e_prec(k) * sq).sum(-1)
        return total

    def _global_elbo(self, model) -> Tensor:
        total = torch.zeros((), dtype=F64)
        s0sq = model.prior.bias_scale.to(F64) ** 2
        for k in range(self.num_hidden + 1):
            scales = (
                ()
                if self.gaussian
                else (
                    (self._tau_params(model, k), self._inv_tau(model, k)),
                    (self._psi_params(model, k), self._inv_psi(model, k)),
                )
            )
            if self.gaussian:  # E[log N(W | 0, v)] keeps its -0.5 log v; the GIG terms carry it otherwise
                v = model.prior.weight_variance(self.num_hidden, self.widths[k]).to(F64)
                total = total - 0.5 * torch.log(v) * self.widths[k + 1] * self.widths[k]
            for params, inv in scales:
                nu, delta, lam, nh, dh, _ = params
                total = (
                    total
                    + (
                        gig_log_normalizer(nh, dh, lam)
                        - gig_log_normalizer(nu, delta, lam)
                        + 0.5 * (dh**2 - delta**2) * inv
                    ).sum()
                )
            m, b = self._b("m", k), self._b("B", k)
            eb2 = m[:, 0] ** 2 + b[:, 0, 0]
            wq = (self._w_prec(model, k) * self._ew2(k)).sum(-1)
            total = (
                total
                + (
                    0.5 * _logdet(b) + 0.5 * b.shape[-1] - 0.5 * torch.log(s0sq) - 0.5 * eb2 / s0sq - 0.5 * wq
                ).sum()
            )
        a0h, b0h = (v.to(F64) for v in (model.hidden_noise.concentration, model.hidden_noise.rate))
        for k in range(self.num_hidden):
            a, bb = self._b("alpha", k), self._b("beta", k)
            e_log = torch.log(bb) - torch.digamma(a)
            total = (
                total
                + (expected_log_inverse_gamma(a0h, b0h, e_log, a / bb) + inverse_gamma_entropy(a, bb)).sum()
            )
        a, bb = self.alpha_out, self.beta_out
        a0, b0 = (v.to(F64) for v in (model.likelihood.concentration, model.likelihood.rate))
        e_log = torch.log(bb) - torch.digamma(a)
        return total + expected_log_inverse_gamma(a0, b0, e_log, a / bb) + inverse_gamma_entropy(a, bb)

    def elbo(self, model, x: Tensor, y: Tensor) -> float:
        """The exact ELBO (note §2.5) at the current parameters, in nats (sum over data, full KL)."""
        x, y = self._as64(x, y)
        loc = self.train_locals
        return float(
            self._global_elbo(model) + self._local_elbo(model, loc, _forward_moments(x, loc), y).sum()
        )

    # ------------------------------------------------------------------ initialization (App. D.1, Algorithm
    # 3)
    def initialize(self, model, x: Tensor, y: Tensor) -> None:
        """Data-driven random initialization: hyperplanes through random points of the data's bounding box
        (Algorithm 3), deterministic forward pass for ``rho, M, t``, ridge output layer (GCV-chosen penalty,
        in
        place of [code] RidgeCV), ``B = init_cov I``, ``S = local_init_cov I``, ``eta`` factors at their
        priors,
        ``delta_hat`` drawn as in D.1 step 3 (IG case).  Randomness from torch's RNG (``fit(seed=...)``)."""
        model.resolve_data_priors(x, y)
        x, y = self._as64(x, y)
        temp = self._temp(model)
        n = x.shape[0]
        w = self.widths
        z = x
        rho, a_par, s, t, mm = [], [], [], [], []
        for k in range(self.num_hidden):
            d, dp = w[k + 1], w[k]
            lo, hi = z.min(0).values, z.max(0).values
            pad = 0.05 * (hi - lo)
            if self.init == "laplace":
                mw = dist.Laplace(torch.zeros(d, dp, dtype=F64), math.sqrt(2.0 / dp)).sample()
            else:
                keep = torch.rand(d, dp, dtype=F64) < 1.0 / (1.0 + math.sqrt(dp))
                mw = keep * torch.randn(d, dp, dtype=F64) * math.sqrt(2.0 / math.sqrt(dp))
            point = lo - pad + (hi - lo + 2 * pad) * torch.rand(d, dp, dtype=F64)
            mb = -(mw * point).sum(1)
            pre = z @ mw.T + mb
            r = torch.sigmoid(pre / temp)
            rho.append(r)
            a_par.append(pre.abs() / temp)
            mm.append(r.unsqueeze(-1) * mw)
            t.append(mb * r)
            s.append(self.local_init_cov * torch.eye(d, dtype=F64).expand(n, d, d).clone())
            z = r * pre
            self._set(f"m{k}", torch.cat([mb.unsqueeze(-1), mw], 1))
            a0h, b0h = (v.to(F64) for v in (model.hidden_noise.concentration, model.hidden_noise.rate))
            self._set(f"alpha{k}", a0h.expand(d).clone())
            self._set(f"beta{k}", b0h.expand(d).clone())
        self._set(f"m{self.num_hidden}", _ridge_gcv(z, y))
        for k in range(self.num_hidden + 1):
            d, dp = w[k + 1], w[k]
            self._set(f"B{k}", self.init_cov * torch.eye(dp + 1, dtype=F64).expand(d, -1, -1).clone())
            if self.gaussian:
                continue
            for name, params in (("dtau", self._tau_params(model, k)), ("dpsi", self._psi_params(model, k))):
                nu, delta, lam = params[:3]
                shape = () if name == "dtau" else (d, dp)
                if float(lam) == 0.0 and float(nu) < -1.0:
                    draw = dist.InverseGamma(-nu, 0.5 * delta**2).sample(shape)
                    self._set(f"{name}{k}", (2.0 * (-nu - 1.0) * draw).sqrt())
                else:
                    self._set(f"{name}{k}", delta.expand(shape).clone())
        self._set("alpha_out", model.likelihood.concentration.to(F64))
        self._set("beta_out", model.likelihood.rate.to(F64))
        self._store_locals(_Locals(rho, a_par, s, t, mm))
        self.initialized.fill_(True)
        self._train_x = x

    # ------------------------------------------------------------------ ClosedFormGuide API
    @staticmethod
    def _as64(x: Tensor, y: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if y is not None and y.dim() == 1:
            y = y.unsqueeze(-1)
        return x.to(F64), (None if y is None else y.to(F64))

    def closed_form_update(self, model, x: Tensor, y: Tensor | None, subsample: Tensor | None = None) -> None:
        """One CAVI sweep (full batch), or one SVI iteration of §3.3 on the minibatch ``subsample``."""
        if y is None:
            raise ValueError("y is required for a closed-form update")
        if not bool(self.initialized) or self._b("rho", 0).shape[0] != x.shape[0]:
            self.initialize(model, x, y)
        if subsample is not None:
            self.svi_update(model, x, y, subsample)
            return
        self.sweep(model, x, y)
        self._train_x = x.to(F64)

    def svi_update(self, model, x: Tensor, y: Tensor, subsample: Tensor) -> float:
        """One stochastic-VI iteration (§3.3, App. C): forward-pass re-initialization of the minibatch locals,
        exact ``tau``/``psi`` updates, local CAVI on the minibatch until its ELBO converges, intermediate
        globals
        from Eqs. (15)–(16) with sums scaled by ``N/|S|``, blended with step ``l_t = (2 + t)^{-k}`` ([code],
        t from
        0; Eq. 21): natural parameters of ``q(b, W)`` linearly, ``beta`` by ``beta_rule`` (harmonically by
        default, the paper's rule; linearly with ``"textbook"``).  Returns the noisy ELBO estimate (global
        part +
        ``N/|S|`` x minibatch local part), also reported by :meth:`closed_form_elbo`."""
        if subsample.dim() != 1 or len(subsample) == 0:
            raise ValueError("subsample must be a non-empty 1-d tensor of row indices")
        x, y = self._as64(x, y)
        n = x.shape[0]
        xb, yb = x.index_select(0, subsample), y.index_select(0, subsample)
        scale = n / len(subsample)
        step = (2.0 + float(self.svi_step)) ** (-self.forgetting_rate)
        loc = self._forward_init_locals(model, xb)
        self._update_tau(model)
        self._update_psi(model)
        self._fit_local_loop(model, xb, yb, loc, self.svi_local_tol, self.svi_local_iters)
        mom = _forward_moments(xb, loc)
        alphas, betas = self._eta_params(model, loc, mom, yb, n, scale)
        naturals = [self._weight_natural(model, loc, mom, yb, k, scale) for k in range(self.num_hidden + 1)]
        for k, (prec_hat, lin_hat) in enumerate(naturals):
            prec_old = _sym(torch.cholesky_inverse(_chol(self._b("B", k))))
            lin_old = (prec_old @ self._b("m", k).unsqueeze(-1)).squeeze(-1)
            cov, mean = _gauss_from_precision(
                (1 - step) * prec_old + step * prec_hat, (1 - step) * lin_old + step * lin_hat
            )
            self._set(f"B{k}", cov)
            self._set(f"m{k}", mean)
        old_betas = [self._b("beta", k) for k in range(self.num_hidden)] + [self.beta_out]
        if self.beta_rule == "paper":  # harmonic blend of beta (paper §3.3 / App. C, [code])
            betas = [1.0 / ((1 - step) / bo + step / bh) for bo, bh in zip(old_betas, betas)]
        else:  # natural parameter of IG(alpha, beta) is (-alpha - 1, -beta): blend beta linearly
            betas = [(1 - step) * bo + step * bh for bo, bh in zip(old_betas, betas)]
        self._set_eta(alphas, betas)
        self.svi_step += 1
        if self.em:
            self._em_step(model)
        mom = _forward_moments(xb, loc)
        self._svi_elbo = float(self._global_elbo(model) + scale * self._local_elbo(model, loc, mom, yb).sum())
        return self._svi_elbo

    def refresh_locals(self, model, x: Tensor, y: Tensor) -> float:
        """Refit and store the training locals with the globals fixed (local CAVI with the ``y`` term, from
        the
        forward-pass initialization) — after SVI, whose locals live only per minibatch.  Returns the exact
        ELBO."""
        x, y = self._as64(x, y)
        loc = self._forward_init_locals(model, x)
        self._fit_local_loop(model, x, y, loc, self.svi_local_tol, self.svi_local_iters)
        self._store_locals(loc)
        self._train_x = x
        return self.elbo(model, x, y)

    def closed_form_elbo(self, model, x: Tensor, y: Tensor | None, subsample: Tensor | None = None) -> float:
        if subsample is not None and self._svi_elbo is not None:
            return self._svi_elbo
        return self.elbo(model, x, y)

    # ------------------------------------------------------------------ test-time locals (§3.5)
    def _forward_init_locals(self, model, x: Tensor) -> _Locals:
        """Deterministic forward pass with the current weight means (§3.3 step 2, [code] prediction init):
        ``rho = sigmoid(z/T)``, ``M = diag(rho) m^W``, ``t = rho m^b``, ``S = local_init_cov I``."""
        temp = self._temp(model)
        n = x.shape[0]
        rho, a_par, s, t, mm = [], [], [], [], []
        z = x
        for k in range(self.num_hidden):
            m = self._b("m", k)
            pre = z @ m[:, 1:].T + m[:, 0]
            r = torch.sigmoid(pre / temp)
            d = m.shape[0]
            rho.append(r)
            a_par.append(pre.abs() / temp)
            mm.append(r.unsqueeze(-1) * m[:, 1:])
            t.append(m[:, 0] * r)
            s.append(self.local_init_cov * torch.eye(d, dtype=F64).expand(n, d, d).clone())
            z = r * pre
        return _Locals(rho, a_par, s, t, mm)

    def _fit_local_loop(self, model, x: Tensor, y: Tensor | None, loc: _Locals, tol: float, max_iters: int):
        """Iterate the local updates until the local ELBO changes by less than ``tol`` relatively."""
        prev, cur, it = None, math.nan, 0
        for it in range(1, max_iters + 1):  # noqa: B007
            mom = self._local_sweep(model, x, y, loc)
            cur = float(self._local_elbo(model, loc, mom, y).sum())
            if prev is not None and abs(cur - prev) / max(1.0, abs(cur)) < tol:
                break
            prev = cur
        return it, cur

    def fit_locals(self, model, x: Tensor) -> tuple[_Locals, _Moments, dict]:
        """Test-point ``q(a_*), q(gamma_*), q(omega_*)`` with the globals fixed (Eqs. 23–24 and the (E19)
        recursion without the ``y`` term), initialized by the deterministic forward pass ([code], ``S = 0.01
        I``),
        iterated until the prediction ELBO (App. B.2) changes by less than ``predict_tol`` relatively."""
        if not bool(self.initialized):
            raise RuntimeError("the guide has not been fitted yet (no closed_form_update was run)")
        x = x.to(F64)
        loc = self._forward_init_locals(model, x)
        it, cur = self._fit_local_loop(model, x, None, loc, self.predict_tol, self.predict_max_iters)
        return loc, _forward_moments(x, loc), {"predict_iters": it, "predict_elbo": cur}

    @contextlib.contextmanager
    def pruned(self, masks: dict[str, Tensor]):
        """Within the block, ``q(b, W)`` of every row is restricted to the surviving weights (§3.4): the
        pruned coordinates are set to exactly zero and the kept ones keep their joint (marginal) Gaussian,
        i.e. the sub-vector of ``m`` and the sub-block of ``B``.  ``masks``: ``{"fc{k}.weight": bool (D,
        D_prev)}`` as in :meth:`sparsity_report`; biases are always kept."""
        saved = {}
        try:
            for k in range(self.num_hidden + 1):
                key = f"fc{k}.weight"
                if key not in masks:
                    continue
                keep_w = torch.as_tensor(masks[key], device=self._b("m", k).device).bool()
                if keep_w.shape != self._b("m", k)[:, 1:].shape:
                    raise ValueError(
                        f"masks[{key!r}]: expected shape {tuple(self._b('m', k)[:, 1:].shape)}, "
                        f"got {tuple(keep_w.shape)}"
                    )
                keep = torch.cat([torch.ones_like(keep_w[:, :1]), keep_w], 1).to(F64)
                m, b = self._b("m", k), self._b("B", k)
                saved[k] = (m, b)
                tiny = 1e-12 * torch.diag_embed(1.0 - keep)  # keeps the (degenerate) covariance PD
                self._set(f"m{k}", m * keep)
                self._set(f"B{k}", b * keep.unsqueeze(-1) * keep.unsqueeze(-2) + tiny)
            yield self
        finally:
            for k, (m, b) in saved.items():
                self._set(f"m{k}", m)
                self._set(f"B{k}", b)

    def predictive(
        self, model, x: Tensor, num_samples: int = 100, mask: dict[str, Tensor] | None = None
    ) -> Predictions:
        """Closed-form predictive mean (Eq. 26) and variance (note §3.4, cleaned), plus ``num_samples``
        draws of the per-draw location/scale and joint samples of ``y`` by the Monte Carlo scheme of
        Eq. (25).  ``mask`` (e.g. ``sparsity_report(model).masks``): predict with the pruned network
        (:meth:`pruned`), test-time local updates included."""
        num_samples = check_positive_int("num_samples", num_samples)
        if mask is not None:
            with self.pruned(mask):
                return self.predictive(model, x, num_samples)
        with torch.no_grad():
            loc, mom, info = self.fit_locals(model, x)
            k = self.num_hidden
            m = self._b("m", k)
            ez, ez2 = _pre_moments(m, self._eww(k), mom.amean[k], mom.AA[k])
            e_s2 = self.beta_out / (self.alpha_out - 1.0)
            mean, var = ez, (ez2 - ez**2).clamp_min(0) + e_s2
            # Eq. (25): a_l^(j) ~ q(a_l | a_{l-1}^(j)), (W, b)_{L+1}^(j) ~ q, sigma2^(j) ~ q.
            h = x.to(F64).expand(num_samples, -1, -1)
            for j in range(k):
                noise = (
                    torch.linalg.cholesky(loc.S[j]) @ torch.randn(num_samples, *loc.t[j].shape, 1, dtype=F64)
                ).squeeze(-1)
                h = loc.t[j] + (loc.M[j] @ h.unsqueeze(-1)).squeeze(-1) + noise
            rows = dist.MultivariateNormal(m, covariance_matrix=self._b("B", k)).sample((num_samples,))
            locs = rows[:, None, :, 0] + (h.unsqueeze(-2) * rows[:, None, :, 1:]).sum(-1)
            s2 = dist.InverseGamma(self.alpha_out, self.beta_out).sample((num_samples,))
            scales = s2.sqrt()[:, None, None].expand_as(locs)
            samples = locs + scales * torch.randn_like(locs)
        dt = x.dtype

        def out(v):
            if v is None:
                return None
            v = v[..., 0] if self.widths[-1] == 1 else v
            return v.to(dt)

        return Predictions(
            "regression",
            mean=out(mean),
            var=out(var),
            loc=out(locs),
            scale=out(scales),
            samples=out(samples),
            extras=info,
        )

    # ------------------------------------------------------------------ Pyro guide (for Trace_ELBO /
    # Predictive)
    def _locals_for(self, x: Tensor) -> _Locals | None:
        """The fitted locals when ``x`` are the training inputs, else ``None``."""
        tx = self._train_x
        if tx is not None:
            same = tx.shape == x.shape and torch.equal(tx, x.to(F64))
        else:  # restored from a checkpoint: the training inputs are not stored, trust the row count
            same = bool(self.initialized) and self._b("rho", 0).shape[0] == x.shape[0]
        return self.train_locals if same else None

    def forward(self, x: Tensor, y: Tensor | None = None, subsample: Tensor | None = None) -> None:
        """Samples every latent site of :class:`zoo.families.bowtie.model.BowtieModel` from ``q``; per-row ``q(b, W)`` is
        factorized exactly as ``q(b) q(W | b)`` so each site has its own density.  The local sites (``gamma``,
        ``omega``, ``a``) are emitted only at the training inputs; at any other ``x`` (``Predictive``, the
        zoo's
        generic ``log_likelihood``) the guide gives the globals and the model draws the test-point locals from
        its own conditional ``p(a_*, gamma_*, omega_* | theta, x_*)``, i.e. the exact predictive under
        ``q(theta)``.
        (:meth:`predictive` instead implements the paper's test-time local CAVI, §3.5.)"""
        model = self._model_ref
        dt = x.dtype
        nh = self.num_hidden
        for k in range(nh + 1):
            scales = (
                ()
                if self.gaussian
                else (("tau", self._tau_params(model, k)), ("psi", self._psi_params(model, k)))
            )
            for site, params in scales:
                _, _, _, nu_h, d_h, lam = params
                q = gig_distribution(*(v.to(dt) for v in (nu_h, d_h, lam)))
                pyro.sample(f"fc{k}.{site}", q if site == "tau" else q.to_event(2))
            m, b = self._b("m", k).to(dt), self._b("B", k).to(dt)
            bias = pyro.sample(f"fc{k}.bias", dist.Normal(m[:, 0], b[:, 0, 0].sqrt()).to_event(1))
            gain = b[:, 1:, 0] / b[:, :1, 0]
            cond_mean = m[:, 1:] + gain * (bias - m[:, 0]).unsqueeze(-1)
            cond_cov = _sym(b[:, 1:, 1:] - gain.unsqueeze(-1) * b[:, :1, 1:])
            pyro.sample(f"fc{k}.weight", dist.MultivariateNormal(cond_mean, cond_cov).to_event(1))
        for k in range(nh):
            pyro.sample(
                f"fc{k}.eta2",
                dist.InverseGamma(self._b("alpha", k).to(dt), self._b("beta", k).to(dt)).to_event(1),
            )
        pyro.sample("sigma2", dist.InverseGamma(self.alpha_out.to(dt), self.beta_out.to(dt)))
        loc = self._locals_for(x)
        if loc is None:
            return
        # No plate in the guide: zoo.infer.predict.posterior_samples cannot export a plate's subsample site.  The
        # locals carry the data dimension as their (only) batch dimension, and a minibatch is scaled by N/B by
        # hand, exactly as the model's plate("data", N, subsample) scales the model's sites.
        n = x.shape[0]
        idx = torch.arange(n, device=x.device) if subsample is None else subsample
        with poutine.scale(scale=1.0 if subsample is None else n / len(idx)):
            h = x if subsample is None else x.index_select(0, idx)
            for k in range(nh):
                sel = [v[k].index_select(0, idx).to(dt) for v in (loc.rho, loc.A, loc.S, loc.t, loc.M)]
                rho, a_par, s, t, mm = sel
                pyro.sample(f"fc{k}.gamma", dist.Bernoulli(probs=rho).to_event(1))
                pyro.sample(f"fc{k}.omega", PolyaGamma1(a_par).to_event(1))
                mean = t + (mm @ h.unsqueeze(-1)).squeeze(-1)
                h = pyro.sample(
                    f"fc{k}.a", dist.MultivariateNormal(mean, scale_tril=torch.linalg.cholesky(s))
                )

    # ------------------------------------------------------------------ pruning (§3.4, Algorithm 2)
    def sparsity_report(self, model, alpha: float = 0.01) -> SparsityReport:
        """Bayesian-FDR edge selection at level ``alpha`` (0.01 in the paper) and iterated node pruning
        (§3.4):
        ``Q = max(P(W > 0), P(W < 0))``; keep ``Q >= kappa_hat``, the smallest ``Q`` in the descending list
        with
        ``FDR_hat(kappa) = sum(1 - Q) 1(Q > kappa) / sum 1(Q > kappa) <= alpha``; then drop all incoming
        edges of
        nodes without outgoing edges and all outgoing edges of nodes without incoming edges, until stable."""
        alpha = check_probability("alpha", alpha)
        nl = self.num_hidden + 1
        qs = []
        for k in range(nl):
            mw = self._b("m", k)[:, 1:]
            sd = torch.diagonal(self._b("B", k), dim1=-2, dim2=-1)[:, 1:].sqrt()
            p_pos = torch.special.ndtr(mw / sd)
            qs.append(torch.maximum(p_pos, 1.0 - p_pos))
        flat = torch.cat([q.flatten() for q in qs])
        sorted_q = torch.sort(flat, descending=True).values
        fdr = torch.cumsum(1.0 - sorted_q, 0) / torch.arange(1, len(sorted_q) + 1, dtype=F64)
        ok = torch.nonzero(fdr <= alpha).flatten()
        kappa = float(sorted_q[ok[-1]]) if len(ok) else math.inf
        masks = [q >= kappa for q in qs]
        changed = True
        while changed:
            changed = False
            for k in range(nl - 1):  # hidden layer k: incoming masks[k] rows, outgoing masks[k+1] columns
                has_out = masks[k + 1].any(0)
                has_in = masks[k].any(1)
                new_in = masks[k] & has_out.unsqueeze(1)
                new_out = masks[k + 1] & has_in.unsqueeze(0)
                if not (torch.equal(new_in, masks[k]) and torch.equal(new_out, masks[k + 1])):
                    masks[k], masks[k + 1], changed = new_in, new_out, True
        nodes = [int(masks[k].any(1).sum()) for k in range(nl - 1)]
        return SparsityReport(
            {f"fc{k}.weight": masks[k] for k in range(nl)},
            {
                "kappa": kappa,
                "fdr_level": alpha,
                "nodes_kept": nodes,
                "edges_kept": [int(mk.sum()) for mk in masks],
            },
        )

    @property
    def _model_ref(self) -> BowtieModel:
        model = getattr(self, "_model", None)
        if model is None:
            raise RuntimeError("BowtieCAVIGuide lost its model reference")
        return model


def _ridge_gcv(z: Tensor, y: Tensor) -> Tensor:
    """Ridge regression of each output on ``(1, z)`` (unpenalized intercept), penalty by generalized
    cross-validation over a log grid — the output-layer initialization of App. D.1 step 5.  Returns (D_out,
    D+1)."""
    zm, ym = z.mean(0), y.mean(0)
    zc, yc = z - zm, y - ym
    u, sv, vh = torch.linalg.svd(zc, full_matrices=False)
    uty = u.T @ yc
    n = z.shape[0]
    best, coef = math.inf, None
    for lam in torch.logspace(-4, 4, 17, dtype=F64):
        f = sv**2 / (sv**2 + lam)
        fit = u @ (f.unsqueeze(-1) * uty)
        gcv = ((yc - fit) ** 2).sum() / (n * (1 - f.sum() / n) ** 2)
        if gcv < best:
            best = float(gcv)
            coef = vh.T @ ((sv / (sv**2 + lam)).unsqueeze(-1) * uty)
    intercept = ym - zm @ coef
    return torch.cat([intercept.unsqueeze(-1), coef.T], 1)


def ensemble_predictions(members: list[Predictions], elbos: list[float], zeta: float = 0.1) -> Predictions:
    """ELBO-weighted ensemble of K variational approximations (§3.5): :func:`zoo.experiments.ensemble.combine_predictions`
    (kept here under the paper's name)."""
    return combine_predictions(members, elbos, zeta)
