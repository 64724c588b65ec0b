"""The zoo's one thread setting: ``ZOO_NUM_THREADS``, applied by :func:`zoo.infer.loop.fit` and ``zoo fit``.

The zoo's networks are small, and on small machines they train fastest single-threaded; a process that runs
several fits side by side (``zoo reproduce --jobs``, a test suite) also wants one thread per fit.  The
environment variable ``ZOO_NUM_THREADS`` says how many torch intra-op threads a process should use:

* the command line applies ``--threads`` if given, else ``ZOO_NUM_THREADS``, else 1;
* the Python API (:func:`~zoo.infer.loop.fit`, :func:`~zoo.infer.loop.resume`) applies ``ZOO_NUM_THREADS``
  when it is set and otherwise leaves torch's own setting (the caller's process) alone.

A value that is not a positive integer is a ``ValueError`` naming the variable, raised before any training.
A count above the machine's cores (:func:`available_cores`) is capped there with a ``logging`` warning:
asking torch/OpenMP for 100000 threads would try to map that many thread stacks and crash the process.
"""

from __future__ import annotations

import logging
import os

import torch

__all__ = ["ENV_VAR", "available_cores", "env_num_threads", "apply_num_threads", "cap_threads"]

logger = logging.getLogger(__name__)

#: the environment variable holding the torch thread count
ENV_VAR = "ZOO_NUM_THREADS"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where known, else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cap_threads(n: int, what: str = "threads") -> int:
    """``n`` capped at :func:`available_cores`, with a warning naming ``what`` when it is capped."""
    cores = available_cores()
    if n > cores:
        logger.warning("%s=%d exceeds the %d core(s) available: using %d threads", what, n, cores, cores)
        return cores
    return n


def env_num_threads() -> int | None:
    """The thread count ``ZOO_NUM_THREADS`` asks for, or ``None`` when it is unset or empty."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError(f"{ENV_VAR} must be a positive integer (torch threads), got {raw!r}")
    return n


def apply_num_threads(n: int | None = None, *, default: int | None = None) -> int | None:
    """Set torch's intra-op thread count to ``n``, else ``ZOO_NUM_THREADS``, else ``default``; ``n`` and
    the variable are capped at the machine's cores (:func:`cap_threads`, with a warning).

    With all three ``None`` nothing changes.  Returns the count set (or ``None``).  A bad ``n`` or a bad
    ``ZOO_NUM_THREADS`` is a ``ValueError`` naming it.
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    if n is not None:
        chosen: int | None = cap_threads(n, "threads")
    else:
        env = env_num_threads()
        chosen = cap_threads(env, ENV_VAR) if env is not None else default
    if chosen is not None and torch.get_num_threads() != chosen:
        torch.set_num_threads(chosen)
    return chosen
