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
