"""Parallel NUTS chains and the main script: :func:`zoo.infer.mcmc.fit_nuts` starts its worker processes
with ``spawn``, and a spawned worker first re-runs the top-level code of the parent's ``__main__`` script
(Python's ``multiprocessing`` programming guidelines, "Safe importing of main module").  A script without
the ``if __name__ == "__main__":`` guard would therefore make every worker run the script's whole fit
again.  :func:`sequential_if_unguarded` detects such a script before any worker starts and runs the chains
sequentially with a warning that says why; :func:`refuse_in_worker_bootstrap` stops a ``fit_nuts`` call
made while a worker re-runs the script (a guarded script calling it outside its guard), so the parent's
pool fails and its chains run sequentially instead.
"""

from __future__ import annotations

import ast
import logging
import multiprocessing as mp
import sys
from pathlib import Path
from typing import Any, TypeVar

from zoo.infer.mcmc_chains import default_workers

# a NUTSConfig (zoo.infer.mcmc imports this module, so it is not imported here)
_Config = TypeVar("_Config", bound=Any)

__all__ = ["unguarded_main_script", "sequential_if_unguarded", "refuse_in_worker_bootstrap"]

logger = logging.getLogger(__name__)


def _is_main_guard(node: ast.stmt) -> bool:
    """Whether ``node`` is ``if __name__ == "__main__":`` (either order of the comparison)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    names = {p.id for p in parts if isinstance(p, ast.Name)}
    return "__name__" in names and any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts)


def unguarded_main_script() -> str | None:
    """The path of the ``__main__`` script when ``spawn`` worker processes would re-run all of its top-level
    code: it has no module-level ``if __name__ == "__main__":`` block.  ``None`` for a guarded script, an
    interactive session, ``python -c`` or ``python -m package`` (whose ``__main__`` is not re-run), or a
    script that cannot be read (multiprocessing's rules, ``multiprocessing.spawn.get_preparation_data``)."""
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    path = getattr(main, "__file__", None)
    if path is None or (spec_name is not None and spec_name.split(".")[-1] == "__main__"):
        return None
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return None if any(_is_main_guard(node) for node in tree.body) else str(path)


def sequential_if_unguarded(cfg: _Config) -> _Config:
    """``cfg``, or ``cfg`` with sequential chains (and a warning saying why) when its parallel workers would
    re-run an unguarded main script (:func:`unguarded_main_script`)."""
    if default_workers(cfg.chains, cfg.parallel) <= 1:
        return cfg
    script = unguarded_main_script()
    if script is None:
        return cfg
    logger.warning(
        "NUTS: running the %d chains sequentially, not in parallel: worker processes are started with "
        "'spawn' and would re-run the top-level code of %s, which has no `if __name__ == \"__main__\":` "
        "guard. Put the script's code under that guard for parallel chains (or pass parallel=False).",
        cfg.chains,
        script,
    )
    return cfg.replace(parallel=False)


def refuse_in_worker_bootstrap() -> None:
    """``RuntimeError`` when called while a ``spawn`` worker process re-runs the main script (its
    bootstrap): the parent's pool then fails and its chains run sequentially, instead of every worker
    sampling the script's whole fit again."""
    if getattr(mp.current_process(), "_inheriting", False):
        raise RuntimeError(
            "fit_nuts was called while a NUTS worker process imported the main script: put the script's "
            'code under `if __name__ == "__main__":` to run chains in parallel (or pass parallel=False)'
        )
