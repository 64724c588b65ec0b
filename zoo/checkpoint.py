"""Stable import path: re-exports the public API of :mod:`zoo.infer.checkpoint`."""

from zoo.infer.checkpoint import *  # noqa: F403
from zoo.infer.checkpoint import __all__  # noqa: F401
