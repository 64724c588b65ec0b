"""Stable import path: re-exports the public API of :mod:`zoo.experiments.ensemble`."""

from zoo.experiments.ensemble import *  # noqa: F403
from zoo.experiments.ensemble import __all__  # noqa: F401
