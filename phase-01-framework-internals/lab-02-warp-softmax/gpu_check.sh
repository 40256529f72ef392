#!/usr/bin/env bash
# GPU validation for Lab 02, in one go; step 1 of the root gpu_check.sh, which gives it about
# 5 minutes of its 10 (BUDGET_S, default 290 s). Each step's limit, in order:
#   1. build      150 s  warp_softmax.so against this machine's CUDA torch, the .cu included;
#   2. tests       60 s  the CUDA half of test_lab.py and tests/ (every device-parametrized test
#                        on cuda, and test_cuda_kernels_are_used_on_gpu); the CPU half and the
#                        nvcc/cmake build tests run in `make test`, and the build was step 1;
#   3. check       40 s  `python -m warp_softmax check --device cuda`: every kernel path, opcheck;
#   4. bench       90 s  the CUDA benchmark (FP8 and dtype= paths included) -> bench.json/png;
#   5. sanitizer   60 s  every CUDA kernel path under compute-sanitizer memcheck (where the
#                        runtime allows the tool).
# A step gets its limit or what is left of BUDGET_S, whichever is less, so the log always ends
# with the summary. Output in ${OUT:-gpu_results}: gpu_check.log, build.log, sanitizer.log,
# bench.json, bench.png, and summary.tsv (one line per step: name, status, seconds), which
# the root gpu_check.sh reads.
#
#   PYTHON=python3 OUT=/some/dir ./gpu_check.sh [--dry-run]
#
# --dry-run (what `make test` runs, through the root script): no GPU, no build. The existing
# build is loaded, a small CPU selection of the tests runs, and the sanitizer step runs its
# kernel-path code on the CPU without the tool, on five row lengths (make test runs every
# length on the CPU elsewhere); check and bench are recorded as skipped.
#
# Works offline with any Python torch supports (3.10-3.12; the GPU machine has 3.12): needs
# python with a CUDA build of torch, setuptools, nvcc and ninja. Nothing is installed: the
# library is built in place and the packages (warp_softmax, warp_softmax_harness, and
# phase01_common from ../common) are found through PYTHONPATH. If pytest is not installed,
# gpu/mini_pytest.py runs the tests instead.
set -uo pipefail
DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "gpu_check.sh: unknown argument '$1' (expected --dry-run or nothing)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")"
# The lab and phase01_common (the harness times with its toolkit), nothing installed.
export PYTHONPATH="$PWD:$(cd ../common && pwd)${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
OUT=${OUT:-gpu_results}
BUDGET_S=${BUDGET_S:-290}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
TSV="$OUT/summary.tsv"
: > "$TSV"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # H100/H200; add more for other GPUs
export MAX_JOBS=${MAX_JOBS:-$(getconf _NPROCESSORS_ONLN)}
export PYTHONUNBUFFERED=1
DEADLINE=$(( $(date +%s) + BUDGET_S ))
declare -a SUMMARY=()

# record NAME STATUS SECONDS: one summary line and one summary.tsv line.
record() {
  SUMMARY+=("$1: $2 ($3 s)")
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$TSV"
}

# step NAME LIMIT_S COMMAND...: runs COMMAND with min(LIMIT_S, time left) and records the result.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  if (( left < 10 )); then
    echo "== $name: SKIPPED (budget spent)"
    record "$name" "skipped: budget spent" 0
    return 1
  fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit} s)"
  local start=$(date +%s) rc
  # timeout runs programs, not shell functions: a child bash gets the exported functions.
  timeout -k 5 "$limit" bash -c '"$@"' step "$@"
  rc=$?
  local took=$(( $(date +%s) - start ))
  case $rc in
    0) record "$name" ok "$took" ;;
    124|137) record "$name" "timed out" "$took" ;;
    *) record "$name" "failed rc=$rc" "$took" ;;
  esac
  echo "== $name: rc=$rc, ${took} s"
  return "$rc"
}

# skip NAME REASON: a step the dry run does not run, named in the summary.
skip() {
  echo "== $1: skipped ($2)"
  record "$1" "skipped: $2" 0
}

TORCH_LINE="import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"

# The dispatch table of the built library; in the dry run it is the first Python process, and
# prints the torch line too (one torch start-up fewer).
show_dispatch() {
  local line=""
  (( DRY_RUN )) && line="$TORCH_LINE; "
  "$PY" -c "${line}import torch; torch.ops.load_library('warp_softmax/warp_softmax.so'); print(torch._C._dispatch_dump('warp_softmax::softmax'))"
}

build() {
  rm -rf build warp_softmax/warp_softmax.so
  "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; return 1; }
  grep -E "nvcc|warp_softmax_cuda" "$OUT/build.log" | tail -2 | cut -c1-300
  show_dispatch
}

# run_tests SELECTION FILES...: the tests of FILES that pytest's -k SELECTION picks (on CUDA
# with 8 pytest-xdist workers where it is installed; a CPU selection, a few quick tests, in
# one process rather than the root pytest.ini's two workers, each importing torch).
run_tests() {
  local select=$1
  shift
  if "$PY" -c "import pytest" 2>/dev/null; then
    local parallel=()
    if "$PY" -c "import xdist" 2>/dev/null; then
      if [[ $select == cuda* ]]; then parallel=(-n 8); else parallel=(-n 0); fi
    fi
    "$PY" -m pytest "$@" -q -p no:cacheprovider -rs -k "$select" "${parallel[@]}"
  else
    echo "(pytest not installed: using gpu/mini_pytest.py, every test of the files)"
    "$PY" gpu/mini_pytest.py "$@"
  fi
}

# The kernel paths that compute-sanitizer memcheck runs (warp_softmax_harness.compare); a
# third argument N limits both checks to the first N row lengths of their lists.
kernel_paths_code() {
  local device=$1 dtypes=$2 first=${3:-}
  echo "import torch, warp_softmax
from warp_softmax_harness.compare import (CONVERTING_ROW_LENGTHS, KERNEL_PATH_ROW_LENGTHS,
    check_converting_paths, check_kernel_paths)
print('cases', check_kernel_paths('$device', $dtypes, KERNEL_PATH_ROW_LENGTHS[:$first]))
print('converting cases (dtype=, FP8, log_softmax)',
      check_converting_paths('$device', CONVERTING_ROW_LENGTHS[:$first]))"
}

# It needs a runtime that exposes the GPU's debugging interface (Firecracker yes, gVisor no):
# when the tool itself cannot run, say so and do not count it as a kernel failure.
sanitize() {
  if ! command -v compute-sanitizer > /dev/null; then
    echo "compute-sanitizer not found"; return 0
  fi
  compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$PY" -c \
    "$(kernel_paths_code cuda '(torch.float32, torch.bfloat16, torch.float16)')" \
    > "$OUT/sanitizer.log" 2>&1
  local rc=$?
  tail -25 "$OUT/sanitizer.log"
  if (( rc == 99 )); then echo "memcheck found errors"; return 1; fi
  if (( rc != 0 )); then echo "(compute-sanitizer could not run here, rc=$rc: not a kernel failure)"; fi
  return 0
}

# The dry run's sanitizer step: the same kernel-path code on the CPU, without the tool, on the
# first five row lengths (tests/test_values.py and tests/test_cpu.py run every length).
sanitize_dry() {
  "$PY" -c "$(kernel_paths_code cpu '(torch.float32,)' 5)"
}

export PY OUT DRY_RUN TORCH_LINE
export -f build show_dispatch run_tests kernel_paths_code sanitize sanitize_dry

{
  echo "== lab 02 gpu_check $(date -u +%FT%TZ), budget ${BUDGET_S} s$( ((DRY_RUN)) && echo ', dry run')"
  (( DRY_RUN )) || "$PY" -c "$TORCH_LINE"
  status=0
  if (( DRY_RUN )); then
    if step "build (dry run: load the existing build)" 30 show_dispatch; then
      step "tests (dry run: a CPU selection)" 60 run_tests "cpu and edge_shapes" tests/test_values.py || status=1
      skip "accuracy sweep and opcheck on CUDA" "dry run, no GPU"
      skip "CUDA benchmark" "dry run, no GPU"
      step "kernel paths (dry run: on the CPU, no compute-sanitizer)" 60 sanitize_dry || status=1
    else
      status=1
    fi
  else
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
    nvcc --version | tail -1
    if step "build (setup.py build_ext --inplace, CUDA kernels included)" 150 build; then
      step "tests (the CUDA half of test_lab.py and tests/)" 60 run_tests "cuda and not compiles_with_nvcc and not cmake_build" test_lab.py tests || status=1
      step "accuracy sweep and opcheck on CUDA" 40 "$PY" -m warp_softmax check --device cuda || status=1
      step "CUDA benchmark" 90 "$PY" -m warp_softmax bench --device cuda --out "$OUT" || status=1
      step "compute-sanitizer memcheck, every kernel path" 60 sanitize || status=1
    else
      status=1
    fi
  fi
  echo "== summary"
  printf '  %s\n' "${SUMMARY[@]}"
  echo "== done, status $status"
  exit "$status"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
