"""Shared test fixtures.

* ``ZOO_DEVICE`` (``cpu`` default, ``cuda``) selects the device of the suite's *device tests*: those that
  take the ``device`` fixture (every registry entry and guide through the conformance kit, every pair of
  the composition matrix, prediction against closed forms, checkpoint/resume, the ArviZ export, the
  bow-tie sweeps and their acceleration, projpred, ...).  They build their data on it and run there.
  Every other test runs on the CPU whatever ``ZOO_DEVICE`` says: it builds CPU tensors and checks
  validation, formats, the CLI or math whose outcome does not depend on the device, and a fit that
  defaulted to ``ZOO_DEVICE`` would only meet its CPU data with a device-mismatch error.
  ``ZOO_DEVICE_TESTS_ONLY=1`` deselects the others (``benchmarks/gpu_check.sh`` sets it, so the CUDA run
  finishes inside its time cap).
* ``ZOO_DATA_DIR`` points at the shared data root.  Tests that need it use the ``data_dir``
  fixture: without a data root they *skip* (saying why) on a newcomer's machine, but under
  ``ZOO_REQUIRE_DATA=1`` (set by ``.ci/run``) a missing data root *fails* loudly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyro
import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    torch.set_flush_denormal(True)
    # The zoo's networks are small: one thread is fastest and immune to oversubscription on 2 cores.
    torch.set_num_threads(int(os.environ.get("ZOO_NUM_THREADS", "1")))


_SUITE_DEVICE = os.environ.get("ZOO_DEVICE", "cpu")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """``ZOO_FAILURE_LOG=PATH``: each failure's traceback is appended to PATH as it happens (not only in the
    summary at the end), so a suite stopped at a time cap (``benchmarks/gpu_check.sh``) still says why."""
    path = os.environ.get("ZOO_FAILURE_LOG")
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:  # once, in the controller
        with open(path, "a") as f:
            f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("ZOO_DEVICE_TESTS_ONLY") != "1":
        return
    keep, drop = [], []
    for it in items:
        (keep if "device" in getattr(it, "fixturenames", ()) else drop).append(it)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.fixture(autouse=True)
def _device_of_the_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that do not take ``device`` run on the CPU (``ZOO_DEVICE=cpu`` for their fits and CLI calls)."""
    if "device" not in request.fixturenames and _SUITE_DEVICE != "cpu":
        monkeypatch.setenv("ZOO_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


@pytest.fixture(scope="session")
def device() -> torch.device:
    name = _SUITE_DEVICE
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
def benchmark_script(monkeypatch):
    """A loader of ``benchmarks/NAME.py`` as a module (the scripts are not a package; as when one runs as a
    script, its siblings import)."""
    import importlib.util

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(folder))

    def load(name: str):
        path = folder / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load


@pytest.fixture
def one_torch_thread():
    """Small tensors: avoid thread-pool overhead on shared CI machines (the ``zoo.distributions`` tests use it
    through ``pytestmark``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def clean_registry():
    """Snapshot the registry (entries and loaded entry points) and the modules, restore them afterwards: for
    tests that register models or load plugins (plugin modules named plug_*, plugpkg_* or ep_mod_*)."""
    from zoo.experiments import registry

    registry.load_plugins()
    saved, saved_ep, modules = dict(registry._REGISTRY), set(registry._EP_LOADED), set(sys.modules)
    yield registry
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    registry._EP_LOADED.clear()
    registry._EP_LOADED.update(saved_ep)
    for name in set(sys.modules) - modules:
        if name.startswith(("plug_", "plugpkg_", "ep_mod_")):
            del sys.modules[name]
