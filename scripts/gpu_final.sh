#!/usr/bin/env bash
# The last H200 session's work in one command (device time is scarce: every step has its own
# time limit, so a slow step cannot starve the ones after it). Run through the device tool as
#   bash scripts/gpu_final.sh
# with `.device` carried (site.tar.xz from pack.sh, plus jitcache.tar.xz: FlashInfer modules
# compiled in an earlier session, so kernels are not recompiled).
set -uo pipefail
# The machine gets the working tree without .git: pass the commit as ATTNBENCH_GIT_SHA=$(git
# rev-parse --short=12 HEAD) in front of the command so every results header names it.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -f .device/jitcache.tar.xz ] && [ ! -d /tmp/flashinfer-ws ]; then
  tar xJf .device/jitcache.tar.xz -C /tmp
fi
export MAX_JOBS=16
source .device/setup.sh
trap - EXIT  # results, not the JIT cache, fill the few files that come back
AB="python3 -m attnbench"
FAST="--max-time-ms 60 --case-timeout 60"
FI="-b flashinfer:fa2 -b flashinfer:tc -b flashinfer:fa3 -b flashinfer:cudnn"
step() { local t=$1; shift; echo "=== $* (limit ${t}s)"; timeout "$t" "$@" 2>&1 | tail -${TAIL:-12}; }

step 190 $AB run --device cuda --suite scripts/h200/serving.toml $FAST $FI -b flashinfer:xqa \
  -b flashinfer:cascade -b flash-attn:fa3 -b flash-attn:fa3-cascade -b sdpa:cudnn \
  -b sdpa:efficient --out "$OUT/h200-serving.jsonl"
step 75 $AB run --device cuda --suite scripts/h200/brief70b.toml $FAST $FI -b flash-attn:fa3 \
  -b sdpa:cudnn --out "$OUT/h200-brief70b.jsonl"
step 70 $AB fp8 --device cuda --full --out "$OUT/fp8-study.json"
step 45 $AB replay "$OUT/h200-brief70b.jsonl" --trace agents:450 --live 4 \
  --live-out "$OUT/replay-live.jsonl" --out "$OUT/replay-agents.json"
step 45 $AB run --device cuda --gpus 0,0 -b flashinfer:fa2 -b faulty:nan --batch-size 16 \
  --lengths "1024;4194304" --kv-dtype bf16 --max-time-ms 30 --out "$OUT/smoke.jsonl"
(cd "$OUT" && tar czf misc.tgz --remove-files replay-live.jsonl smoke.jsonl 2>/dev/null)
TAIL=20 step 60 $AB fidelity --ncu --out "$OUT/fidelity.json"
TAIL=20 step "${TUNE_LIMIT:-50}" $AB tune --device cuda --lengths "16384;mixed" --kind decode \
  --kv-dtype bf16 -b flashinfer:fa2 -b flashinfer:tc -b flash-attn:fa3 --budget-s 40 \
  --out "$OUT/tune.jsonl"
ls -la "$OUT"
