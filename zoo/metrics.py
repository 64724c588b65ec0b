"""Stable import path: re-exports the public API of :mod:`zoo.eval.metrics`."""

from zoo.eval.metrics import *  # noqa: F403
from zoo.eval.metrics import __all__  # noqa: F401
