#!/usr/bin/env bash
# One H200 call of a session, by stage, each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh U
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
# FlashInfer's JIT compiles cost 15-100 s per kernel module and ate most of session 5's steps:
# carry the kernels compiled last time as jit-cache.txz (git-ignored, 7.4 MB; rebuilt from the
# jit-cache.tgz.part* a call returns by scripts/h200/jit_cache.sh) and unpack it first:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> \
#     bash scripts/h200/session.sh U
# Give the commit literally (`git rev-parse --short HEAD` here, not on the device): in session 7
# the device's copy of .git was stale and `$(git rev-parse ...)` there named an older commit.
# with carry [".device", "jit-cache.txz"] (tree ~6.3 MB + site 51.9 MB + cache <= 8 MB under the
# 64 MiB carry limit). `trap - EXIT` stops setup.sh from returning the cache (two of the eight
# files that come back); leave it out on the last call of a session to rebuild jit-cache.txz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
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
stage=${1:?stage: U, V, W, X or Y (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
bash scripts/h200/jit_aot.sh  # else FlashInfer's ninja compiles every carried module again
case $stage in
U)  # session 9, call 1: the fp8 suite's last case (FlashInfer's fp16-query / fp8-KV modules),
  # then the live replay validation with an fp8 KV cache: first the 34 fp8 calibration cases
  # the committed calibration lacks (fp8 prefill/append and the live steps' tiny and large
  # batches), then 60 live steps x 4 fp8-capable variants
  gunzip -c results/h200-fp8.jsonl.gz > "$OUT/h200-fp8.jsonl"
  step 120 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  gunzip -c results/h200-replay-calibration.jsonl.gz > "$OUT/h200-replay-calibration.jsonl"
  # the 8 odd-longest cases (SDPA cuDNN's unaligned padding mask, 72..200 requests)
  R5="-b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b sdpa:cudnn"
  step 90 calibration-odd $RUN --suite replay-calibration $R5 --resume \
    --out "$OUT/h200-replay-calibration.jsonl"
  cp "$OUT/h200-replay-calibration.jsonl" /tmp/calibration.jsonl
  F4="-b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa"
  step 150 calibration-fp8 $RUN --suite replay-calibration-fp8 $F4 --resume \
    --out "$OUT/h200-replay-calibration-fp8.jsonl"
  step 220 validation-fp8 $AB replay-validate /tmp/calibration.jsonl \
    "$OUT/h200-replay-calibration-fp8.jsonl" --steps 60 --kv-dtype fp8_e4m3 $F4 \
    --max-time-ms 60 --out "$OUT/h200-replay-validation-fp8.json"
  ;;
V)  # session 9, call 2 (chained): the GPU tests, groups a and b (scripts/h200/gpu_tests.sh)
  step 560 gpu-tests-ab env GPU_TESTS_LIMIT=270 bash scripts/h200/gpu_tests.sh a b
  ;;
W)  # session 9, call 3 (chained): the GPU tests, groups c and d
  step 570 gpu-tests-cd env GPU_TESTS_LIMIT=280 bash scripts/h200/gpu_tests.sh c d
  ;;
X)  # session 9, what budget is left: the FP8 study with FA3's fp8 path, FlexAttention on the
  # GQA cases it failed to lower, the fp8 suite's tuning, the README command with kernels loaded
  step 120 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  step 60 flex-gqa $RUN --suite gqa -b flex --out "$OUT/h200-gqa-flex.jsonl"
  cp results/h200-tune-fp8.jsonl "$OUT/"
  step 150 tune-fp8 $AB tune --device cuda --budget-s 130 --resume -b flash-attn:fa3 \
    -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa --suite fp8 \
    --out "$OUT/h200-tune-fp8.jsonl"
  step 200 default-warm $AB run --out /tmp/default.jsonl  # `step` logs its wall time
  ;;
Y)  # the README command as a new user meets it: the first call on a fresh machine, with nothing
  # compiled (carry only .device; no jit-cache.txz unpacked), its wall time logged by `step`
  step 560 default-fresh $AB run --out "$OUT/h200-default-fresh.jsonl"
  ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
