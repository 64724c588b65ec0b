"""Stable import path: re-exports the public API of :mod:`zoo.experiments.runs`."""

from zoo.experiments.runs import *  # noqa: F403
from zoo.experiments.runs import __all__  # noqa: F401
