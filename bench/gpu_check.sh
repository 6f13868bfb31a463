#!/usr/bin/env bash
# The GPU checks, as one script, for a machine with one NVIDIA GPU and torch with CUDA:
#
#   bash bench/gpu_check.sh            # from the repository root (or anywhere: it cds there)
#
# 1. the tests that run only where CUDA is present (tests/reference/test_trainer.py's GPU test);
# 2. bench/throughput.py --device cuda for both configs (small, dcnv2);
# 3. a one-run `harness run --profile h200-1gpu` (the profile of the project's GPU machine)
#    into a temporary results folder, and `harness check` of its log;
# then a summary, one line per step with its status and time. Each step has its own time limit
# so that the whole stays within 8 minutes. On a machine without a GPU it says so in one line
# and exits 0. Not covered yet (issue 15): a one-rank NCCL sharded run and the init self-check.
#
# Environment: PYTHON (default: python) is the interpreter with torch and this project
# installed (`pip install -e .` into the machine's own torch environment).
set -u
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python}

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no GPU here (torch.cuda.is_available() is False, or torch is missing): nothing to check"
  exit 0
fi

OUT=$(mktemp -d -t gpu-check-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
SUMMARY=()
FAILED=0

step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "== $name (at most ${limit}s): $*"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  local status="ok"
  if [ $rc -eq 124 ]; then status="TIMED OUT"; FAILED=1; elif [ $rc -ne 0 ]; then status="FAILED (exit $rc)"; FAILED=1; fi
  SUMMARY+=("$(printf '%-22s %-18s %4ss' "$name" "$status" $((SECONDS - t0)))")
}

"$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'on', torch.cuda.get_device_name(0))"
step gpu-tests 120 "$PY" -m pytest -q -n 0 -p no:cacheprovider tests/reference/test_trainer.py -k gpu
step throughput-small 90 "$PY" bench/throughput.py --device cuda --config small
step throughput-dcnv2 150 "$PY" bench/throughput.py --device cuda --config dcnv2
step harness-run-h200 180 "$PY" -m harness run --profile h200-1gpu --runs 1 --seed 1 --results "$OUT/results"
LOG=$(find "$OUT/results" -name 'result_0.txt' -path '*/results/*' 2>/dev/null | head -n 1)
if [ -n "$LOG" ]; then
  step harness-check 30 "$PY" -m harness check "$LOG"
else
  SUMMARY+=("$(printf '%-22s %-18s' harness-check "no log to check")")
  FAILED=1
fi

echo "== summary"
for line in "${SUMMARY[@]}"; do echo "$line"; done
grep -h "ratio ours / baseline" "$OUT"/throughput-*.log 2>/dev/null | sed 's/^/throughput: /'
exit $FAILED
