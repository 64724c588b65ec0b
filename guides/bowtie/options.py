"""Options of the bow-tie CAVI guide (Sheinkman & Wade 2025, arXiv 2411.11132, §3, App. C–D) as a config."""

from __future__ import annotations

import dataclasses

from zoo.core.config import Config
from zoo.core.validation import check_positive, check_positive_int

__all__ = ["BowtieGuideOptions"]


@dataclasses.dataclass(frozen=True)
class BowtieGuideOptions(Config):
    """Settings of :class:`guides.bowtie.cavi.BowtieCAVIGuide`.

    Args:
        em: update ``delta_glob`` by the EM step of §3.2 after each sweep (IG global prior only, App. E.2).
        init: ``"laplace"`` or ``"spikeslab"`` hidden-weight means (Algorithm 3, App. D.1).
        init_cov: initial ``B_{l,d}`` (``init_cov * I``; paper 0.01).
        local_init_cov: initial ``S_{n,l}`` (``local_init_cov * I``; paper 0.01).
        predict_tol, predict_max_iters: stopping rule of the test-time local updates (§3.5; the authors'
            code: 1e-4 / 60).
        forgetting_rate, svi_local_iters, svi_local_tol: stochastic VI (§3.3, App. C; the authors' code:
            0.75 / 40 / 1e-4), used when the loop passes a minibatch ``subsample``.
        beta_rule: how SVI blends the ``q(eta^2) = IG(alpha, beta)`` factors. ``"paper"`` (default): the
            harmonic blend ``beta = ((1-l)/beta_old + l/beta_hat)^-1`` of §3.3/App. C and the authors' code;
            ``"textbook"``: the natural-gradient step for the IG natural parameters ``(-alpha-1, -beta)``,
            ``beta = (1-l) beta_old + l beta_hat``.  The default reproduces the published SVBNN; both rules
            share the fixed point (``l = 1`` gives ``beta_hat`` either way), and the harmonic blend is never
            larger than the linear one (AM-HM): it shrinks the noise scale faster.
    """

    em: bool = False
    init: str = "laplace"
    init_cov: float = 0.01
    local_init_cov: float = 0.01
    predict_tol: float = 1e-4
    predict_max_iters: int = 60
    forgetting_rate: float = 0.75
    svi_local_iters: int = 40
    svi_local_tol: float = 1e-4
    beta_rule: str = "paper"

    def validate(self) -> None:
        if self.init not in ("laplace", "spikeslab"):
            raise ValueError(f"init must be 'laplace' or 'spikeslab', got {self.init!r}")
        check_positive("init_cov", self.init_cov)
        check_positive("local_init_cov", self.local_init_cov)
        check_positive("predict_tol", self.predict_tol)
        check_positive_int("predict_max_iters", self.predict_max_iters)
        if not 0.5 < float(self.forgetting_rate) <= 1.0:
            raise ValueError(
                f"forgetting_rate must be in (0.5, 1] (Robbins-Monro, Eq. 21), got {self.forgetting_rate}"
            )
        check_positive_int("svi_local_iters", self.svi_local_iters)
        check_positive("svi_local_tol", self.svi_local_tol)
        if self.beta_rule not in ("paper", "textbook"):
            raise ValueError(f"beta_rule must be 'paper' or 'textbook', got {self.beta_rule!r}")
