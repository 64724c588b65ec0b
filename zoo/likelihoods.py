"""Stable import path: re-exports the public API of :mod:`zoo.core.likelihoods`."""

from zoo.core.likelihoods import *  # noqa: F403
from zoo.core.likelihoods import __all__  # noqa: F401
