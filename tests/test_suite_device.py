"""The suite's own device switch (``tests/conftest.py``), run on a throw-away copy: under ``ZOO_DEVICE`` a
test that does not take ``device`` runs on the CPU, ``ZOO_DEVICE_TESTS_ONLY=1`` keeps only the device tests,
and ``ZOO_FAILURE_LOG`` receives each failure's traceback as it happens."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = """
import os


def test_without_device_runs_on_the_cpu():
    assert os.environ["ZOO_DEVICE"] == "cpu"


def test_that_fails_on_purpose():
    assert 1 + 1 == 3, "planted failure"


def test_with_device(device):
    assert os.environ["ZOO_DEVICE"] == "meta"
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(TESTS)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ZOO_", "PYTEST_"))}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)]
    env = {**environ, **env}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_other_tests_run_on_the_cpu_and_failures_are_logged_as_they_happen(tmp_path):
    log = tmp_path / "failures.txt"
    out = _run(tmp_path, ZOO_DEVICE="meta", ZOO_FAILURE_LOG=str(log)).stdout
    # the device fixture accepts only an available cuda or the CPU; "meta" stands in for "not the CPU"
    assert "PASSED test_planted.py::test_without_device_runs_on_the_cpu" in out, out
    assert "FAILED test_planted.py::test_that_fails_on_purpose" in out, out
    text = log.read_text()
    assert text.count("==== ") == 1 and "test_that_fails_on_purpose (call)" in text
    assert "planted failure" in text


def test_device_tests_only_deselects_the_others(tmp_path):
    out = _run(tmp_path, ZOO_DEVICE="meta", ZOO_DEVICE_TESTS_ONLY="1").stdout
    assert "2 deselected" in out and "test_with_device" in out, out
    assert "test_without_device_runs_on_the_cpu" not in out and "test_that_fails_on_purpose" not in out, out
    out = _run(tmp_path).stdout  # without the switch every test is collected, on the CPU
    assert "test_without_device_runs_on_the_cpu" in out and "3 deselected" not in out, out
