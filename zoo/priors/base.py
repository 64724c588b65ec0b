"""Stable import path: re-exports the public API of :mod:`zoo.core.prior`."""

from zoo.core.prior import *  # noqa: F403
from zoo.core.prior import __all__  # noqa: F401
