"""Stable import path: re-exports the public API of :mod:`zoo.experiments.registry`."""

from zoo.experiments.registry import *  # noqa: F403
from zoo.experiments.registry import __all__  # noqa: F401
