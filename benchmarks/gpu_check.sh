#!/usr/bin/env bash
# One-command GPU check (issue 18): on a machine with one CUDA GPU, within 8 minutes,
#   1. the suite's device tests (those taking the ``device`` fixture, not the @slow ones; see tests/conftest.py;
#      ZOO_DEVICE_TESTS_ONLY=0 runs the whole suite, the others on the CPU) with ZOO_DEVICE=cuda, capped at
#      ZOO_GPU_TEST_SECONDS (default 360: on an H100 with 12 workers, 159 of the 161 device tests ended within
#      250 s, and the longest, 95 s alone, started late); each failure's traceback goes, as it happens, to
#      ZOO_GPU_FAILURE_LOG (default: a temporary file) and is printed at the end;
#   2. the speed benchmarks of benchmarks/gpu_speed.py (MF-LBBNN 784-400-600-10 epoch, horseshoe mnist10k
#      epoch, bow-tie CAVI sweep on protein), each on CUDA and on the CPU, capped at ZOO_GPU_BENCH_SECONDS
#      (default 120; about 15 s on an H100);
# and writes benchmarks/results/gpu.json (test outcome + figures).  Record the figures in
# benchmarks/RESULTS.md by hand.
#
# On a machine without a CUDA device it prints why and exits with code 69 (EX_UNAVAILABLE), having run and
# written nothing.  Exit codes otherwise: 0 tests passed and figures written; 1 tests failed or timed out
# (figures still written); 2 the benchmark failed.
#
# Usage: ZOO_DATA_DIR=<data> bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PY="${PYTHON:-python}"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "gpu_check: no CUDA GPU visible to torch (torch.cuda.is_available() is False):" \
       "nothing was run and nothing was written; run this on a machine with a GPU." >&2
  exit 69
fi

log="$(mktemp -t zoo-gpu-tests.XXXXXX)"
failures="${ZOO_GPU_FAILURE_LOG:-$(mktemp -t zoo-gpu-failures.XXXXXX)}"
: >"$failures"
trap 'rm -f "$log"; [ -n "${ZOO_GPU_FAILURE_LOG:-}" ] || rm -f "$failures"' EXIT
export ZOO_DEVICE=cuda MPLBACKEND=Agg PYTHONUNBUFFERED=1 ZOO_FAILURE_LOG="$failures"
export ZOO_DEVICE_TESTS_ONLY="${ZOO_DEVICE_TESTS_ONLY:-1}"

echo "gpu_check: test suite with ZOO_DEVICE=cuda (cap ${ZOO_GPU_TEST_SECONDS:-360}s)"
t0=$(date +%s)
# -v names each test as it ends, so a suite stopped at its cap still lists its failures; pytest-xdist, where
# installed, spreads the suite over 12 processes (the cap is otherwise too short for all of it; pyproject's
# --maxprocesses 4 is raised to match); without it pyproject's addopts (-n) are dropped
workers="${ZOO_GPU_TEST_WORKERS:-12}"
xdist=(-o addopts=)
"$PY" -c 'import xdist' >/dev/null 2>&1 && xdist=(-p xdist -n "$workers" --maxprocesses "$workers")
timeout "${ZOO_GPU_TEST_SECONDS:-360}" "$PY" -m pytest -v -p no:cacheprovider -m "not slow" --tb=line \
  "${xdist[@]}" 2>&1 | tee "$log"
test_rc=${PIPESTATUS[0]}
t1=$(date +%s)
if [ -s "$failures" ]; then
  echo "gpu_check: tracebacks of the failed tests:"
  cat "$failures"
fi

echo "gpu_check: speed benchmarks, CUDA vs CPU (cap ${ZOO_GPU_BENCH_SECONDS:-120}s)"
timeout "${ZOO_GPU_BENCH_SECONDS:-120}" "$PY" benchmarks/gpu_speed.py --devices cpu cuda \
  --tests-log "$log" --tests-rc "$test_rc" --tests-seconds "$((t1 - t0))" \
  --out benchmarks/results/gpu.json
bench_rc=$?

if [ "$bench_rc" -ne 0 ]; then
  echo "gpu_check: the speed benchmark failed (exit $bench_rc); tests exited $test_rc" >&2
  exit 2
fi
if [ "$test_rc" -ne 0 ]; then
  echo "gpu_check: tests exited $test_rc (124 = timed out); figures in benchmarks/results/gpu.json" >&2
  exit 1
fi
echo "gpu_check: tests passed; figures in benchmarks/results/gpu.json"
