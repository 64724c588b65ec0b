"""Stable import path: re-exports the public API of :mod:`zoo.core.guide`."""

from zoo.core.guide import *  # noqa: F403
from zoo.core.guide import __all__  # noqa: F401
