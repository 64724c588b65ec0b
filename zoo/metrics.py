"""Stable import path: re-exports the public API of :mod:`zoo.eval.metrics` and the reference-posterior
scores of :mod:`zoo.eval.scores`."""

from zoo.eval.metrics import *  # noqa: F403
from zoo.eval.metrics import __all__ as _metrics
from zoo.eval.scores import *  # noqa: F403
from zoo.eval.scores import __all__ as _scores

__all__ = [*_metrics, *_scores]
