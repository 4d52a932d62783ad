#!/usr/bin/env bash
# One H200 call of a session, by stage, each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh F
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
trap - EXIT  # results, not FlashInfer's JIT cache, fill the few files that come back
AB="python3 -m attnbench"
RUN="$AB run --device cuda --max-time-ms 60 --case-timeout 120"
DEC="-b flash-attn:fa3 -b flash-attn:fa3-contiguous -b flashinfer:fa2 -b flashinfer:tc"
DEC="$DEC -b flashinfer:xqa -b flashinfer:auto -b sdpa:cudnn"
ALL="$DEC -b flashinfer:fa3 -b flashinfer:ragged-fa3 -b flashinfer:ragged-fa2 -b sdpa:flash"
step() {  # step LIMIT_S NAME CMD...: Ctrl-C at the limit (rows kept), then a hard kill
  local t=$1 name=$2; shift 2
  echo "=== $name (limit ${t}s): $*"
  local t0=$SECONDS
  timeout -s INT -k 20 "$t" "$@" 2>&1 | tail -"${TAIL:-15}"
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
  pkill -9 -f spawn_main 2>/dev/null; true
}
stage=${1:?stage: F or G (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
case $stage in
F)  # session 5, call 1: finish the brief and fp8 suites (resumed), FP8 on the GPU, fidelity, MLA
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  cp results/h200-brief.jsonl results/h200-fp8.jsonl "$OUT/"
  step 25 backends $AB backends --device cuda
  step 110 brief $RUN --suite brief $ALL --resume --out "$OUT/h200-brief.jsonl"
  step 160 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  step 80 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  step 80 fidelity $AB fidelity --ncu --out "$OUT/h200-fidelity.json"
  step 110 mla $RUN --suite mla --out "$OUT/h200-mla.jsonl"
  ;;
G)  # session 5, call 2 (chained, warm kernels): GPU tests, SM activity, tuning, gpt-oss
  step 220 gpu-tests bash -c "timeout -s INT 210 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE tests > $OUT/h200-gpu-tests.txt 2>&1; tail -25 $OUT/h200-gpu-tests.txt"
  step 150 sm-activity $AB fidelity --ncu --cases sm-activity --out "$OUT/h200-sm-activity.json"
  TUNE="$AB tune --device cuda -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b flash-attn:fa3"
  step 65 tune-ragged $TUNE --suite ragged --budget-s 55 --out "$OUT/h200-tune-ragged.jsonl"
  step 65 tune-fp8 $TUNE --suite fp8 --budget-s 55 --out "$OUT/h200-tune-fp8.jsonl"
  step 80 gptoss $RUN --suite gptoss -b flash-attn:fa3 -b flashinfer:xqa -b flashinfer:fa2 \
    -b flashinfer:tc -b sdpa:cudnn -b flex --out "$OUT/h200-gptoss.jsonl"
  ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
