"""The metaclass that lets the zoo's interfaces be both ``PyroModule`` s and ``abc`` abstract base classes.

``PyroModule`` has its own metaclass (``pyro.nn.module._PyroModuleMeta``, which implements
``PyroModule[torch.nn.Linear]``); a class cannot use ``abc.ABCMeta`` next to it unless one metaclass
derives from both.  :class:`PyroModuleABCMeta` is that metaclass, so ``Prior``, ``Likelihood`` and
``ClosedFormGuide`` declare their required methods with ``@abc.abstractmethod`` and a subclass that
misses one fails at construction with ``TypeError: Can't instantiate abstract class ...``.
(``typing.Protocol`` is not used: a ``Protocol`` cannot also be a ``torch.nn.Module`` base class.)
"""

from __future__ import annotations

import abc

from pyro.nn import PyroModule

__all__ = ["PyroModuleABCMeta"]


class PyroModuleABCMeta(abc.ABCMeta, type(PyroModule)):
    """``abc.ABCMeta`` combined with ``PyroModule``'s metaclass."""
