#!/usr/bin/env bash
# The project's GPU check: everything that needs a CUDA GPU, in one run of at most 10 minutes
# (BUDGET_S, default 600 s) on the lent machine (one H200, 16 cores), most valuable first:
#
#   step         budget  what
#   lab02         300 s  lab 02's gpu_check.sh: build with the .cu, the CUDA tests, the accuracy
#                        sweep and opcheck on CUDA, the CUDA benchmark, compute-sanitizer
#   classifier    160 s  MiniLM-L6 (fine-tuned there for seconds on a synthetic task): eager
#                        FP32 / FP16 / BF16, SDPA vs eager attention, torch.compile default,
#                        reduce-overhead (CUDA graphs), max-autotune-no-cudagraphs as the budget
#                        allows; batch 1 and 8, sequence 128; the pipeline's gates vs FP32
#   batching       50 s  the dynamic batcher in front of the CUDA model, c = 1, 4, 16, against
#                        no batching
#   generation     50 s  the GPT's continuous-batching engine with a CUDA FP16 step against
#                        static batching at c = 16: tokens/s, TTFT, ITL
#   (report)       15 s  kept back from the budget for the JSON, the markdown and the summary
#
# 300 + 160 + 50 + 50 + 15 = 575 s, plus ~10 s of start-up lines: under 600. A step gets its
# budget or what is left of BUDGET_S less the report's 15 s, whichever is less, and is stopped
# at that limit (timeout); the Python steps also get it as --budget-s, skip what no longer
# fits, and rewrite their JSON after every row, so a step cut short still returns its rows.
#
# Output in $OUT (default gpu_results): gpu_check.json (every step, in order), gpu_check.md
# (the same as tables), gpu_check.log (the console) and raw.tar.gz (lab 02's build and
# sanitizer logs and bench.json/png, each step's own JSON). The last line is always the
# summary: one status per step.
#
#   OUT=/some/dir bash gpu_check.sh            # on the GPU machine: python3 there holds torch
#   bash gpu_check.sh --dry-run                # anywhere: every step's code, tiny, on the CPU
#
# --dry-run runs each step at tiny sizes on the CPU and then checks the JSON (every step
# present and ok); tools/test_gpu_check.py runs it in `make test`. Nothing is installed: the
# packages are found through PYTHONPATH (tools/, inference-pipeline/, framework-fundamentals/
# and phase01_common).
# Python packages the GPU machine lacks can travel as wheels in .whl/ (see the device notes);
# they are installed into a temporary folder first. A step whose module is missing records
# "skipped: <module> missing" instead of failing.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)
DRY_RUN=0
if (( $# > 1 )); then echo "gpu_check.sh: one argument at most (--dry-run or --help), got $#" >&2; exit 2; fi
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | cut -c3-; exit 0 ;;
  *) echo "gpu_check.sh: unknown argument '$1' (expected --dry-run, --help or nothing)" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
OUT=${OUT:-gpu_results}
BUDGET_S=${BUDGET_S:-600}
REPORT_S=15
if [[ -e $OUT && ! -d $OUT ]]; then echo "gpu_check.sh: OUT=$OUT is not a folder" >&2; exit 2; fi
mkdir -p "$OUT" || { echo "gpu_check.sh: cannot create OUT=$OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
STEPS="$WORK/steps.tsv"
: > "$STEPS"
START=$(date +%s)
DEADLINE=$(( START + BUDGET_S - REPORT_S ))
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Bytecode: with a cache folder outside the tree (make test's PYTHONPYCACHEPREFIX, under the
# venv) every step reads and writes it, so a module the steps share is compiled once, not once
# per process; without one, nothing is written (the tree stays as it was copied).
[[ -n ${PYTHONPYCACHEPREFIX:-} ]] || export PYTHONDONTWRITEBYTECODE=1
# What the lent machine finds: these folders and its own packages (nothing of ours installed).
# Each Python step checks that every project package it imported lies in one of them.
export GPU_CHECK_PYTHONPATH="$ROOT/tools:$ROOT/inference-pipeline:$ROOT/framework-fundamentals:$ROOT/phase-01-framework-internals/common"
export PYTHONPATH="$GPU_CHECK_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"
# The dry run measures nothing: one thread per process keeps it quick on a shared machine
# (two threads spin against other jobs' load).
(( DRY_RUN )) && export OMP_NUM_THREADS=1
exec > >(tee "$OUT/gpu_check.log") 2>&1

# The report and the summary line, however the run ends (a failed step, a signal).
finish() {
  local rc=$?
  trap - EXIT
  local check=()
  (( DRY_RUN )) && check=(--dry-run)
  tar -czf "$OUT/raw.tar.gz" -C "$WORK" --exclude=site . 2>/dev/null
  timeout 30 "$PY" -m gpu_check.report --work "$WORK" --out "$OUT" \
    --budget-s "$BUDGET_S" --seconds $(( $(date +%s) - START )) "${check[@]}"
  local report_rc=$?
  if (( report_rc == 4 )); then  # written; a step is not ok
    rc=1
  elif (( report_rc != 0 )); then
    rc=1
    echo "gpu_check: the report failed; steps as the shell saw them:"
    sed 's/^/  /' "$STEPS"
    echo "gpu_check summary: $(awk -F'\t' '{printf "%s%s %s", (NR > 1 ? "; " : ""), $1, $2}' "$STEPS"); report FAILED"
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap finish EXIT
trap 'exit 143' TERM INT

# step NAME BUDGET_S COMMAND...: COMMAND under min(BUDGET_S, time left); one steps.tsv line:
# name, status (ok / failed rc=N / timed out / skipped: budget spent), seconds, limit.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  if (( left < 10 )); then
    echo "== $name: skipped (budget spent)"
    printf '%s\t%s\t%s\t%s\n' "$name" "skipped: budget spent" 0 0 >> "$STEPS"
    return
  fi
  (( limit > left )) && limit=$left
  echo "== $name (limit ${limit} s)"
  local begin=$(date +%s) rc status
  timeout -k 5 "$limit" "$@" --budget-s "$limit"
  rc=$?
  local took=$(( $(date +%s) - begin ))
  case $rc in
    0) status=ok ;;
    124|137) status="timed out" ;;
    *) status="failed rc=$rc" ;;
  esac
  echo "== $name: $status (${took} s)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$limit" >> "$STEPS"
}

# Lab 02's script takes its budget from BUDGET_S and keeps 10 s for its own summary.
lab02() {
  local budget=$2
  local flags=()
  (( DRY_RUN )) && flags=(--dry-run)
  OUT="$WORK/lab02" BUDGET_S=$(( budget - 10 )) PYTHON="$PY" \
    bash "$ROOT/phase-01-framework-internals/lab-02-warp-softmax/gpu_check.sh" "${flags[@]}"
}
export -f lab02
export ROOT WORK PY DRY_RUN

# python_step NAME: python -m gpu_check.NAME, its JSON in $WORK/NAME.json.
python_step() {
  local name=$1
  shift
  local flags=()
  (( DRY_RUN )) && flags=(--dry-run)
  "$PY" -m "gpu_check.$name" --out "$WORK/$name.json" "${flags[@]}" "$@"
}
export -f python_step

echo "== gpu_check $(date -u +%FT%TZ), budget ${BUDGET_S} s$( ((DRY_RUN)) && echo ', dry run: tiny sizes on the CPU')"
if [[ -d $ROOT/.whl ]] && compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
    "$ROOT"/.whl/*.whl && export PYTHONPATH="$WORK/site:$PYTHONPATH"
fi
if (( ! DRY_RUN )); then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
if (( DRY_RUN )); then
  # torch's version line comes from lab 02's first process (one torch start-up fewer)
  "$PY" -c "import sys; print('python', sys.version.split()[0])"
else
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
fi
echo "cores: $(getconf _NPROCESSORS_ONLN)"

step lab02 300 bash -c 'lab02 "$@"' lab02
step classifier 160 bash -c 'python_step classifier "$@"' classifier
step batching 50 bash -c 'python_step batching "$@"' batching
step generation 50 bash -c 'python_step generation "$@"' generation
