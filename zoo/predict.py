"""Stable import path: re-exports the public API of :mod:`zoo.infer.predict`."""

from zoo.infer.predict import *  # noqa: F403
from zoo.infer.predict import __all__  # noqa: F401
