"""Stable import path: re-exports the public API of :mod:`zoo.core.architectures`."""

from zoo.core.architectures import *  # noqa: F403
from zoo.core.architectures import __all__  # noqa: F401
