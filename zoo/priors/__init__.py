"""Priors over network parameters (see :mod:`zoo.core.prior` for the contract)."""

from zoo.core.gaussian import GaussianPrior
from zoo.core.prior import Prior

__all__ = ["Prior", "GaussianPrior"]
