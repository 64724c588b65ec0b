"""Stable import path: re-exports the public API of :mod:`zoo.infer.loop`."""

from zoo.infer.loop import *  # noqa: F403
from zoo.infer.loop import __all__  # noqa: F401
