"""Shared test fixtures.

* ``ZOO_DEVICE`` (``cpu`` default, ``cuda``) selects the device of the whole suite, as Pyro's
  ``PYRO_DEVICE`` does for its own tests.
* ``ZOO_DATA_DIR`` points at the shared data root.  Tests that need it use the ``data_dir``
  fixture: without a data root they *skip* (saying why) on a newcomer's machine, but under
  ``ZOO_REQUIRE_DATA=1`` (set by ``.ci/run``) a missing data root *fails* loudly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyro
import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    torch.set_flush_denormal(True)
    # The zoo's networks are small: one thread is fastest and immune to oversubscription on 2 cores.
    torch.set_num_threads(int(os.environ.get("ZOO_NUM_THREADS", "1")))


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


@pytest.fixture(scope="session")
def device() -> torch.device:
    name = os.environ.get("ZOO_DEVICE", "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("ZOO_DEVICE=cuda but CUDA is not available")
    return torch.device(name)


def _data_root() -> Path | None:
    root = os.environ.get("ZOO_DATA_DIR")
    if root and Path(root).is_dir():
        return Path(root)
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    root = _data_root()
    if root is None:
        msg = (
            "shared data root not found: set ZOO_DATA_DIR to the folder holding uci/, mnist/, kmnist/ "
            f"(currently ZOO_DATA_DIR={os.environ.get('ZOO_DATA_DIR')!r})"
        )
        if os.environ.get("ZOO_REQUIRE_DATA") == "1":
            pytest.fail("ZOO_REQUIRE_DATA=1 but " + msg)
        pytest.skip(msg)
    return root


@pytest.fixture
def benchmark_script():
    """A loader of ``benchmarks/NAME.py`` as a module (the scripts are not a package)."""
    import importlib.util

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load
