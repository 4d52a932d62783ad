#!/usr/bin/env bash
# The GPU rows `attnbench anchors` sets beside NVIDIA AIConfigurator's tables (issue 46): suite
# aic-anchors (72 uniform decode cases on AIConfigurator's grid: 32/8 and 8/1 heads, d128,
# bf16 and fp8 e4m3 KV, page 64) with the engine paths it has rows of (vllm:flash-attn,
# sglang:fa3, flashinfer:xqa for TRT-LLM) and vllm:flashinfer beside them, twice:
#   1. attnbench's default timing (cold L2)    -> $OUT/<gpu>-aic-anchors.jsonl
#   2. warm L2 (--warm-l2), as AIConfigurator's back-to-back graph replays read the cache
#      -> $OUT/<gpu>-aic-anchors-warm.jsonl: the ratio of 1 to 2 is the measured L2 share of
#      a gap (<gpu>: the card the call got, `gpu_tag.sh`).
# Through the device tool, with `.device` carried:
#   source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> bash scripts/h200/aic_anchors.sh
# Commit the files as results/<gpu>-aic-anchors.jsonl.gz and results/<gpu>-aic-anchors-warm.jsonl.gz
# (gzip -9), then `attnbench anchors` and `attnbench findings`.
# Cost: 72 cases x 4 variants = 288 rows per pass; ~100 s of FlashInfer JIT and ceilings on a
# fresh machine, then about 0.5 s a row (the default suite's 264 rows took 46 s after 117 s
# of setup on an H100): ~4 min for pass 1, ~3 min for pass 2, about 7-8 min in all. Each
# pass has its own limit (Ctrl-C keeps its rows); a cut pass resumes with RESUME=1.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh
AB="${AB:-python3 -m attnbench}"
VARIANTS=(-b vllm:flash-attn -b sglang:fa3 -b flashinfer:xqa -b vllm:flashinfer)
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; aic_anchors on $GPU_TAG; $(date -u +%FT%TZ)"
[ -f scripts/h200/jit_aot.sh ] && bash scripts/h200/jit_aot.sh
pass() {  # pass LIMIT_S FILE FLAGS...
  local t=$1 rows="$OUT/$GPU_TAG-$2.jsonl"; shift 2
  local resume=(); [ -n "${RESUME:-}" ] && [ -f "$rows" ] && resume=(--resume)
  echo "=== $rows (limit ${t}s)"
  local t0=$SECONDS
  timeout -s INT -k 20 "$t" $AB run --device cuda --suite aic-anchors "${VARIANTS[@]}" \
    --max-time-ms 60 --case-timeout 120 --out "$rows" "${resume[@]}" "$@" 2>&1 | tail -"${TAIL:-25}"
  echo "=== exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
}
pass "${COLD_LIMIT_S:-330}" aic-anchors
pass "${WARM_LIMIT_S:-240}" aic-anchors-warm --warm-l2
$AB anchors "$OUT" -v 2>&1 | tail -"${TAIL_ANCHORS:-60}"
