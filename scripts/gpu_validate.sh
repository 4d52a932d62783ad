#!/usr/bin/env bash
# On the H200 (through the device tool): environment facts, backends, ceilings, then every GPU
# test in parallel processes (which also compiles FlashInfer's JIT modules in parallel).
#   source .device/setup.sh; bash scripts/gpu_validate.sh
set -uo pipefail
# The machine gets the working tree without .git: pass the commit as ATTNBENCH_GIT_SHA=$(git
# rev-parse --short=12 HEAD) in front of the command so every results header names it.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export MAX_JOBS=${MAX_JOBS:-6}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
    --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  python3 -m attnbench backends --device cuda
  python3 -m attnbench hw --device cuda --out "$OUT/hw.json"
} 2>&1 | tee "$OUT/env.txt"
timeout "${TEST_TIMEOUT:-420}" python3 -m pytest -m gpu -q -n "${WORKERS:-6}" --timeout 400 \
  -p no:cacheprovider -o addopts="" -rA --continue-on-collection-errors "${@:-tests}" 2>&1 | tee "$OUT/gpu-tests.txt" | \
  grep -E "PASSED|FAILED|ERROR|passed|failed|error" | tail -120
timeout "${REF_TIMEOUT:-100}" python3 -m attnbench run --device cuda --backend reference \
  --suite default --max-time-ms 100 --out "$OUT/reference-default.jsonl" 2>&1 | tail -25
