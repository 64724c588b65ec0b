"""Stable import path: re-exports the public API of :mod:`zoo.experiments.reproduce`."""

from zoo.experiments.reproduce import *  # noqa: F403
from zoo.experiments.reproduce import __all__  # noqa: F401
