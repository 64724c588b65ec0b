"""benchmarks/gpu_check.sh without CUDA: a clear message, exit code 69, nothing run or written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_without_cuda_exits_69_and_touches_nothing(tmp_path):
    # run a copy inside an empty checkout layout, with CUDA hidden, so any write would show up in tmp_path
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "benchmarks" / "gpu_check.sh")
    before = _tree(tmp_path)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(tmp_path / "benchmarks" / "gpu_check.sh")],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 69, proc.stderr
    assert "no CUDA GPU visible" in proc.stderr and "nothing was written" in proc.stderr
    assert proc.stdout == ""  # no test run, no benchmark started
    assert _tree(tmp_path) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_gpu_speed_refuses_cuda_without_a_gpu():
    script = SCRIPT.parent / "gpu_speed.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--devices", "cuda"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "torch sees no CUDA device" in proc.stderr


def _gpu_speed():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_speed", SCRIPT.parent / "gpu_speed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tests_record_names_failures_of_a_verbose_log_cut_at_its_cap(tmp_path):
    """A ``-v`` log stopped by the time cap (no summary line) still gives counts and the failed ids."""
    log = tmp_path / "tests.log"
    log.write_text(
        "bringing up nodes...\n"
        "[gw0] [  1%] PASSED tests/test_a.py::test_one\n"
        "[gw1] [  2%] FAILED tests/test_b.py::test_two[cuda]\n"
        "[gw0] [  3%] SKIPPED tests/test_a.py::test_three\n"
        "[gw1] [  4%] ERROR tests/test_c.py::test_four\n"
        "[gw0] [  5%] PASSED tests/test_a.py::test_five\n"
    )
    rec = _gpu_speed()._tests_record(str(log), 124, 300.0)
    assert rec["progress_counts"] == {"passed": 2, "failed": 1, "errors": 1, "skipped": 1}
    assert rec["failed"] == ["tests/test_b.py::test_two[cuda]", "tests/test_c.py::test_four"]
    assert rec["timed_out"] and rec["rc"] == 124


def test_tests_record_counts_a_quiet_log(tmp_path):
    log = tmp_path / "tests.log"
    log.write_text("..F.s. [ 50%]\n.E.... [100%]\n3 failed\n")
    rec = _gpu_speed()._tests_record(str(log), 1, 10.0)
    assert rec["progress_counts"] == {"passed": 9, "failed": 1, "errors": 1, "skipped": 1}
    assert rec["failed"] == [] and not rec["timed_out"]
