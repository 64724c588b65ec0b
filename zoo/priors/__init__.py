"""Priors over network parameters (see :mod:`zoo.priors.base` for the contract)."""

from .base import Prior
from .gaussian import GaussianPrior

__all__ = ["Prior", "GaussianPrior"]
