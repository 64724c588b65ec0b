"""One fan-out for every many-fits command: ``zoo reproduce``, ``zoo bench`` and ensembles.

Fits are dispatched through `joblib <https://joblib.readthedocs.io>`_ on one of three backends:

* ``loky`` (default): worker processes on this machine (``jobs`` of them; ``jobs=1`` runs in-process);
* ``dask``: a Dask cluster: the running scheduler at ``address`` (``tcp://host:8786``), else a
  ``LocalCluster`` of ``jobs`` single-threaded worker processes started for the run (extra ``[dask]``);
* ``ray``: a Ray cluster: the one at ``address`` (``host:6379``, ``ray://host:10001`` or ``auto``), else a
  local Ray instance with ``jobs`` CPUs started for the run (extra ``[ray]``).  joblib's Ray backend
  returns results by whole batches, so fits go out ``jobs`` at a time and are journaled batch by batch.

Rows do not depend on the backend: each task carries its own seed, and each worker pins its torch threads
(:func:`zoo.infer.threads.apply_num_threads`, ``threads`` per worker, 1 by default) before it fits.
Workers load the plugins the dispatching process has loaded, so plugin models fit anywhere.

**Failures.** :func:`dispatch` yields each result as soon as it is done, so the caller journals it at
once (:mod:`zoo.experiments.journal`).  A worker that dies mid-fit (killed, out of memory) is not an
error of the fit: the tasks not finished yet are dispatched again (at most ``retries`` times), and the
finished ones are never re-run.  An exception raised by a fit itself propagates unchanged.

**Workers die with their parent.** A local worker (loky, or a local Dask/Ray cluster) watches the process
that dispatched it and exits within a second once that process is gone (``kill -9`` included), so an
interrupted command leaves no fits running.  Workers of a remote cluster belong to that cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from zoo.core.config import Config
from zoo.core.validation import check_positive_int

__all__ = [
    "BACKENDS",
    "DispatchConfig",
    "DispatchError",
    "add_dispatch_arguments",
    "dispatch",
    "dispatch_config",
    "open_backend",
]

logger = logging.getLogger(__name__)

BACKENDS = ("loky", "dask", "ray")
EXTRAS = {"dask": ("distributed", "pyro-bnn-zoo[dask]"), "ray": ("ray", "pyro-bnn-zoo[ray]")}
#: exception class names that mean "the worker process died", not "the fit failed"
WORKER_LOST = frozenset(
    {
        "TerminatedWorkerError",
        "BrokenProcessPool",
        "KilledWorker",
        "WorkerCrashedError",
        "RayActorError",
        "ActorDiedError",
        "ActorUnavailableError",
        "LocalRayletDiedError",
        "NodeDiedError",
    }
)
_ADDRESS = {
    "dask": re.compile(r"((tcp|tls|inproc|ws|wss)://)?[\w.\-\[\]:]+:\d{1,5}"),
    "ray": re.compile(r"auto|(ray://)?[\w.\-\[\]:]+:\d{1,5}"),
}


class DispatchError(ValueError):
    """A backend or address that cannot be used: unknown, not installed, malformed or unreachable."""

    flag = "--backend/--address"


@dataclasses.dataclass(frozen=True)
class DispatchConfig(Config):
    """Where fits run: ``backend`` (one of :data:`BACKENDS`), ``address`` of a running Dask scheduler or
    Ray cluster (``None``: start a local one), ``jobs`` (local workers; with an address, the most fits in
    flight at once), torch ``threads`` per worker, ``retries`` after lost workers, ``connect_timeout``
    (seconds) to reach ``address``."""

    backend: str = "loky"
    address: str | None = None
    jobs: int = 1
    threads: int = 1
    retries: int = 2
    connect_timeout: float = 20.0

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise DispatchError(f"backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        check_positive_int("jobs", self.jobs)
        check_positive_int("threads", self.threads)
        check_positive_int("retries", self.retries, allow_zero=True)
        if not isinstance(self.connect_timeout, int | float) or not self.connect_timeout > 0:
            raise ValueError(f"connect_timeout: must be a number > 0, got {self.connect_timeout!r}")
        if self.address is None:
            return
        if self.backend == "loky":
            raise DispatchError("address: the loky backend runs on this machine; --address needs dask or ray")
        if not isinstance(self.address, str) or not _ADDRESS[self.backend].fullmatch(self.address):
            example = "tcp://HOST:8786" if self.backend == "dask" else "HOST:6379, ray://HOST:10001 or auto"
            raise DispatchError(f"address: not a {self.backend} address: {self.address!r} (e.g. {example})")

    @property
    def inline(self) -> bool:
        """Run in this process, one task after another (loky with one job)."""
        return self.backend == "loky" and self.jobs == 1

    def check_installed(self) -> None:
        """``DispatchError`` naming the extra to install when the backend's package is missing."""
        if self.backend not in EXTRAS:
            return
        module, extra = EXTRAS[self.backend]
        try:
            __import__(module)
        except ImportError as e:
            raise DispatchError(f"backend: {self.backend} needs `pip install {extra}` ({e})") from None


def add_dispatch_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backend`` and ``--address`` on a subcommand (``--jobs`` is the subcommand's own)."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="loky",
        help="where fits run: loky worker processes (default), a Dask or a Ray cluster",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="a running Dask scheduler (tcp://HOST:8786) or Ray cluster (HOST:6379, ray://HOST:10001, auto); "
        "without it a local cluster of --jobs workers is started",
    )


def dispatch_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> DispatchConfig:
    """The :class:`DispatchConfig` of parsed ``--backend/--address/--jobs``; a bad one is a usage error."""
    try:
        cfg = DispatchConfig(backend=args.backend, address=args.address, jobs=args.jobs)
        cfg.check_installed()
    except (TypeError, ValueError) as e:
        parser.error(f"argument {'--address' if str(e).startswith('address') else '--backend'}: {e}")
    return cfg


# ------------------------------------------------------------------------------------------------ workers


@dataclasses.dataclass(frozen=True)
class _WorkerContext:
    threads: int
    plugins: tuple[str, ...]
    root_pid: int | None  # the dispatching process, watched by local workers


_WATCHED: set[int] = set()


def _watch(root_pid: int) -> None:
    """Exit this worker process once ``root_pid`` is gone (a daemon thread polling twice a second)."""
    if root_pid in _WATCHED or root_pid == os.getpid():
        return
    _WATCHED.add(root_pid)
    from zoo.io import pid_alive

    def loop() -> None:
        while pid_alive(root_pid):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=loop, name="zoo-parent-watch", daemon=True).start()


def _loaded_plugins() -> set[str]:
    from zoo.experiments.registry import available, get_entry

    return {p for p in (get_entry(n).plugin for n in available()) if p}


def _load_plugins(plugins: Sequence[str]) -> None:
    loaded = _loaded_plugins() if plugins else set()
    missing = [p for p in plugins if p not in loaded]
    if missing:
        from zoo.experiments.plugins import load_plugin

        for p in missing:
            load_plugin(p)


def _call(fn: Callable[[Any], Any], index: int, task: Any, ctx: _WorkerContext) -> tuple[int, Any]:
    """Run one task in a worker: watch the parent, pin threads, load plugins."""
    from zoo.infer.threads import apply_num_threads

    if ctx.root_pid is not None:
        _watch(ctx.root_pid)
    apply_num_threads(ctx.threads)
    _load_plugins(ctx.plugins)
    return index, fn(task)


def _worker_lost(e: BaseException) -> bool:
    return any(c.__name__ in WORKER_LOST for c in type(e).__mro__)


# ------------------------------------------------------------------------------------------------ backends


@contextmanager
def _dask(cfg: DispatchConfig) -> Iterator[None]:
    from distributed import Client, LocalCluster

    with ExitStack() as stack:
        try:
            if cfg.address is None:
                cluster = LocalCluster(
                    n_workers=cfg.jobs,
                    threads_per_worker=1,  # fits use torch's global RNG: one fit per process
                    processes=True,
                    dashboard_address=None,
                )
                stack.enter_context(cluster)
                client = Client(cluster)
            else:
                client = Client(cfg.address, timeout=f"{cfg.connect_timeout}s")
        except OSError as e:
            raise DispatchError(f"address: cannot reach the Dask scheduler {cfg.address!r}: {e}") from None
        stack.enter_context(client)
        yield


@contextmanager
def _ray(cfg: DispatchConfig) -> Iterator[None]:
    import ray
    from ray.util.joblib import register_ray

    started = not ray.is_initialized()
    if started:
        try:
            if cfg.address is None:
                ray.init(num_cpus=cfg.jobs, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=cfg.address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise DispatchError(f"address: cannot start or reach Ray at {cfg.address!r}: {e}") from None
    register_ray()
    try:
        yield
    finally:
        if started:
            ray.shutdown()


@contextmanager
def _session(cfg: DispatchConfig) -> Iterator[None]:
    if cfg.backend == "dask":
        with _dask(cfg):
            yield
    elif cfg.backend == "ray":
        with _ray(cfg):
            yield
    else:
        yield


def _round(
    fn: Callable[[Any], Any], pending: dict[int, Any], cfg: DispatchConfig, ctx: _WorkerContext
) -> Iterator[tuple[int, Any]]:
    import joblib

    items = list(pending.items())
    n_jobs = min(cfg.jobs, len(items)) if cfg.backend != "dask" or cfg.address is None else -1
    # one task per batch, so each finished fit comes back (and is journaled) on its own
    with joblib.parallel_config(backend=cfg.backend, n_jobs=n_jobs):  # registers dask/ray on first use
        try:
            parallel = joblib.Parallel(return_as="generator_unordered", batch_size=1)
            batch = len(items)
        except ValueError:  # joblib's Ray backend returns whole lists: dispatch `jobs` tasks at a time
            parallel = joblib.Parallel(return_as="list", batch_size=1)
            batch = cfg.jobs
    with parallel:  # one pool of workers for every batch
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            yield from parallel(joblib.delayed(_call)(fn, i, t, ctx) for i, t in chunk)


@contextmanager
def open_backend(
    config: DispatchConfig | None = None,
) -> Iterator[Callable[[Callable[[Any], Any], Sequence[Any]], Iterator[tuple[int, Any]]]]:
    """Start ``config``'s backend (a local Dask or Ray cluster, or the connection to a remote one) for the
    block and yield ``run(fn, tasks)``, which iterates ``(index, fn(task))`` as each task finishes.

    A backend that cannot start or an address that cannot be reached is a :class:`DispatchError` on
    entering the block, so a caller can start it before writing anything."""
    cfg = config or DispatchConfig()
    if cfg.inline:
        yield lambda fn, tasks: ((i, fn(t)) for i, t in enumerate(tasks))
        return
    cfg.check_installed()
    root = os.getpid() if cfg.address is None else None
    ctx = _WorkerContext(cfg.threads, tuple(sorted(_loaded_plugins())), root)
    with _session(cfg):
        yield lambda fn, tasks: _results(fn, dict(enumerate(tasks)), cfg, ctx)


def dispatch(
    fn: Callable[[Any], Any], tasks: Sequence[Any], config: DispatchConfig | None = None
) -> Iterator[tuple[int, Any]]:
    """Run ``fn(task)`` for every task on ``config``'s backend; yield ``(index, result)`` as each finishes.

    ``fn`` must be picklable (a module-level function) unless the run is inline.  The backend is started
    on the first iteration and stopped after the last result (:func:`open_backend`).  Tasks whose worker
    died are dispatched again (``config.retries`` times at most, then the error is raised); an error of
    ``fn`` itself propagates unchanged (see the module docstring)."""
    with open_backend(config) as run:
        yield from run(fn, tasks)


def _results(
    fn: Callable[[Any], Any], pending: dict[int, Any], cfg: DispatchConfig, ctx: _WorkerContext
) -> Iterator[tuple[int, Any]]:
    lost = 0
    while pending:
        try:
            for i, result in _round(fn, pending, cfg, ctx):
                del pending[i]
                yield i, result
        except Exception as e:
            if not _worker_lost(e) or lost >= cfg.retries:
                raise
            lost += 1
            logger.warning(
                "a worker died (%s: %s); dispatching the %d unfinished task(s) again (retry %d of %d)",
                type(e).__name__,
                str(e).splitlines()[0] if str(e) else "",
                len(pending),
                lost,
                cfg.retries,
            )
