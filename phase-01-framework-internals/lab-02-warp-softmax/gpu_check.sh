#!/usr/bin/env bash
# GPU validation for Lab 02, in one go (about 8 minutes on one H200):
#   1. build warp_softmax.so against this machine's CUDA torch (the .cu kernels included),
#   2. run test_lab.py (every device-parametrized test also runs on CUDA),
#   3. run the CUDA benchmark (and a quick CPU one),
# writing everything to one log: ${OUT:-gpu_results}/gpu_check.log (+ bench JSON/PNG there).
#
#   PYTHON=python3 OUT=/some/dir ./gpu_check.sh
#
# Works offline: needs python with a CUDA build of torch, nvcc and ninja. If pytest is not
# installed, gpu/mini_pytest.py runs test_lab.py instead.
set -uo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
OUT=${OUT:-gpu_results}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # H100/H200; add more for other GPUs
export MAX_JOBS=${MAX_JOBS:-8}
status=0
{
  echo "== gpu_check $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nvcc --version | tail -1

  echo "== build (setup.py build_ext --inplace, CUDA kernels included)"
  start=$(date +%s)
  rm -rf build warp_softmax/warp_softmax.so
  timeout 300 "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail -50 "$OUT/build.log"; exit 1; }
  echo "built in $(( $(date +%s) - start )) s"
  "$PY" -c "import torch; torch.ops.load_library('warp_softmax/warp_softmax.so'); print(torch._C._dispatch_dump('warp_softmax::softmax'))"

  echo "== tests"
  start=$(date +%s)
  if "$PY" -c "import pytest" 2>/dev/null; then
    timeout 300 "$PY" -m pytest test_lab.py -q -p no:cacheprovider -rs || status=1
  else
    echo "(pytest not installed: using gpu/mini_pytest.py)"
    timeout 300 "$PY" gpu/mini_pytest.py test_lab.py || status=1
  fi
  echo "tests took $(( $(date +%s) - start )) s"

  echo "== CUDA benchmark"
  timeout 150 "$PY" bench.py --device cuda --out "$OUT" || status=1
  echo "== CPU benchmark (quick)"
  timeout 60 "$PY" bench.py --device cpu --quick --out "$OUT/cpu" || status=1
  echo "== done, status $status"
  exit "$status"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
