"""Stable import path: re-exports the public API of :mod:`zoo.core.model`."""

from zoo.core.model import *  # noqa: F403
from zoo.core.model import __all__  # noqa: F401
