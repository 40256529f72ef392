#!/usr/bin/env bash
# GPU validation for Lab 02, in one go (about 6 minutes on one H200, never more than 9):
#   1. build warp_softmax.so against this machine's CUDA torch (the .cu kernels included),
#   2. run test_lab.py and tests/ (every device-parametrized test also runs on CUDA: softmax,
#      log_softmax, dtype=, FP8 in and out),
#   3. `python -m warp_softmax check --device cuda` and the CUDA benchmark (FP8 and dtype= paths
#      included), and a quick CPU one,
#   4. run every CUDA kernel path under compute-sanitizer memcheck (where the runtime allows),
# writing everything to one log: ${OUT:-gpu_results}/gpu_check.log (+ bench JSON/PNG there).
#
#   PYTHON=python3 OUT=/some/dir ./gpu_check.sh
#
# Works offline with any Python torch supports (3.10-3.12; the GPU machine has 3.12): needs
# python with a CUDA build of torch, setuptools, nvcc and ninja. Nothing is installed: the
# library is built in place and both packages (warp_softmax, warp_softmax_harness) are found
# from this folder through PYTHONPATH. If pytest is not installed, gpu/mini_pytest.py runs the
# tests instead. Each step gets at most its own limit and never more than what is left of
# BUDGET_S (default 540 s), so the log always ends with a summary line even on a slow machine.
set -uo pipefail
cd "$(dirname "$0")"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
OUT=${OUT:-gpu_results}
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # H100/H200; add more for other GPUs
export MAX_JOBS=${MAX_JOBS:-8}
export PYTHONUNBUFFERED=1
DEADLINE=$(( $(date +%s) + BUDGET_S ))
declare -a SUMMARY=()

# step NAME LIMIT_S COMMAND...: runs COMMAND with min(LIMIT_S, time left) and records the result.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  if (( left < 10 )); then
    echo "== $name: SKIPPED (budget spent)"
    SUMMARY+=("$name: skipped (budget)")
    return 1
  fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit} s)"
  local start=$(date +%s) rc
  # timeout runs programs, not shell functions: a child bash gets the exported functions.
  timeout "$limit" bash -c '"$@"' step "$@"
  rc=$?
  local took=$(( $(date +%s) - start ))
  case $rc in
    0) SUMMARY+=("$name: ok (${took} s)") ;;
    124) SUMMARY+=("$name: TIMED OUT after ${took} s") ;;
    *) SUMMARY+=("$name: FAILED rc=$rc (${took} s)") ;;
  esac
  echo "== $name: rc=$rc, ${took} s"
  return "$rc"
}

build() {
  rm -rf build warp_softmax/warp_softmax.so
  "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; return 1; }
  grep -E "nvcc|warp_softmax_cuda" "$OUT/build.log" | tail -2 | cut -c1-300
  "$PY" -c "import torch; torch.ops.load_library('warp_softmax/warp_softmax.so'); print(torch._C._dispatch_dump('warp_softmax::softmax'))"
}

tests() {
  if "$PY" -c "import pytest" 2>/dev/null; then
    "$PY" -m pytest test_lab.py tests -q -p no:cacheprovider -rs --durations=8
  else
    echo "(pytest not installed: using gpu/mini_pytest.py)"
    "$PY" gpu/mini_pytest.py test_lab.py tests
  fi
}

# compute-sanitizer memcheck over every CUDA kernel path (warp_softmax_harness.compare: check_kernel_paths,
# check_converting_paths).
# It needs a runtime that exposes the GPU's debugging interface (Firecracker yes, gVisor no):
# when the tool itself cannot run, say so and do not count it as a kernel failure.
sanitize() {
  if ! command -v compute-sanitizer > /dev/null; then
    echo "compute-sanitizer not found"; return 0
  fi
  local code="import torch, warp_softmax
from warp_softmax_harness.compare import check_converting_paths, check_kernel_paths
print('cases', check_kernel_paths('cuda', (torch.float32, torch.bfloat16, torch.float16)))
print('converting cases (dtype=, FP8, log_softmax)', check_converting_paths('cuda'))"
  compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$PY" -c "$code" \
    > "$OUT/sanitizer.log" 2>&1
  local rc=$?
  tail -25 "$OUT/sanitizer.log"
  if (( rc == 99 )); then echo "memcheck found errors"; return 1; fi
  if (( rc != 0 )); then echo "(compute-sanitizer could not run here, rc=$rc: not a kernel failure)"; fi
  return 0
}

export PY OUT
export -f build tests sanitize

{
  echo "== gpu_check $(date -u +%FT%TZ), budget ${BUDGET_S} s"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nvcc --version | tail -1
  nproc

  status=0
  if step "build (setup.py build_ext --inplace, CUDA kernels included)" 240 build; then
    step "tests (test_lab.py and tests/, CPU and CUDA)" 240 tests || status=1
    step "accuracy sweep and opcheck on CUDA" 60 "$PY" -m warp_softmax check --device cuda || status=1
    step "CUDA benchmark" 120 "$PY" -m warp_softmax bench --device cuda --out "$OUT" || status=1
    step "CPU benchmark (quick)" 45 "$PY" -m warp_softmax bench --device cpu --quick --out "$OUT/cpu" || status=1
    step "compute-sanitizer memcheck, every kernel path" 120 sanitize || status=1
  else
    status=1
  fi
  echo "== summary"
  printf '  %s\n' "${SUMMARY[@]}"
  echo "== done, status $status"
  exit "$status"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
