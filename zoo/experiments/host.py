"""The machine a result was computed on, as far as its floating-point digits depend on it.

A fit in the zoo is deterministic on one machine and one thread count: the data split, the starts and every
Monte Carlo draw are seeded.  It is not bit-identical across machines.  Float32 matrix products and
reductions run in kernels that MKL, oneDNN and ATen choose by the CPU's instruction set (AVX2, AVX-512,
AMX, ...), and kernels for different instruction sets sum in different orders.  Thousands of stochastic
gradient steps carry that last-bit difference to the third or fourth digit of a test metric, as a change of
seed would.  For example, one ``cv-bnn`` fit on wine (standard split 0) gives test RMSE 0.62873 with MKL's
AVX-512 kernels and 0.62847 on the same machine with ``MKL_ENABLE_INSTRUCTIONS=AVX2``.

Results that are meant to be re-computed bit for bit therefore record :func:`host`, and a comparison of a
committed result with a fresh one (``benchmarks/calibration.py --verify``) says whether the two hosts differ.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["KERNEL_ENV", "cpu_name", "host"]

#: environment variables that change which CPU kernels run (MKL, oneDNN, ATen), recorded when set
KERNEL_ENV = ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU's model name with its family and model numbers (which tell CPU generations apart when the
    name does not), from ``/proc/cpuinfo`` (or the text ``cpuinfo``); ``platform.processor()`` or
    ``platform.machine()`` where there is none."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            if fields:
                break  # the end of the first processor's block
            continue
        fields.setdefault(key, value.strip())
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine() or "unknown"
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def host() -> dict[str, object]:
    """``{"cpu", "isa", "threads", "torch"}`` of this process — the CPU (:func:`cpu_name`), the instruction
    set ATen dispatches to, torch's intra-op threads and torch's version — and ``"kernel_env"``, the
    :data:`KERNEL_ENV` variables that are set, when any is."""
    import torch

    out: dict[str, object] = {
        "cpu": cpu_name(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    env = {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}
    if env:
        out["kernel_env"] = env
    return out
