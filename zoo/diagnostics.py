"""Stable import path: re-exports the public API of :mod:`zoo.eval.diagnostics`."""

from zoo.eval.diagnostics import *  # noqa: F403
from zoo.eval.diagnostics import __all__  # noqa: F401
