#!/usr/bin/env bash
# FlashMLA's GPU rows (issue 47): `flashmla:dense` (sgl-flash-mla 1.0.0, the SM90 dense decode in
# its flash_mla_legacy ops) gated against the fp64 reference and timed beside FlashInfer's MLA
# kernels, in two passes:
#   1. suite mla-pr1770 (flash-attention PR #1770's var_len MLA decode: 128 heads, batch 128,
#      page 64, lengths max(N(s, s/2), 1) at s = 1k, 4k, 16k), 3 cases x 4 variants
#      -> $OUT/<gpu>-mla-pr1770.jsonl; `attnbench anchors --set pr1770` sets them beside the
#      PR's FA3 and FlashMLA times. flash-attn:mla is a refusal row here (this pack has no FA3).
#   2. scripts/h200/mla-v3-tp8.toml (DeepSeek-V3 at tp 8, 16 heads, page 64: ragged decode at
#      batch 8/16/64 on azure-conv, mooncake-conv and 8k..32k lengths, a 2-token append),
#      6 cases x 3 raw variants + the engines' FLASHMLA/flashmla paths -> $OUT/<gpu>-mla-v3-tp8.jsonl
# (<gpu>: the card the call got, `gpu_tag.sh`). It needs the second pack, which carries
# FlashMLA and no FA3 (the normal .device pack is too big to add it under the carry limit):
#   DEVICE_DIR=.device-mla DEVICE_NO_FA3=1 ../shared/device/pack.sh sgl-flash-mla==1.0.0
# and runs, through the device tool with `.device-mla` carried:
#   source .device-mla/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> bash scripts/h200/mla_flashmla.sh
# FA3's own refusal (the official tokenspeed-fa3 build compiles out the head_dim 64 / 512 kernel
# flash-attn:mla runs on) needs the normal pack: FA3_ONLY=1 with `.device` carried writes
# $OUT/<gpu>-mla-pr1770-fa3.jsonl (3 refusal rows, no kernel runs; ~1 min with start-up):
#   source .device/setup.sh; trap - EXIT; FA3_ONLY=1 ATTNBENCH_GIT_SHA=<sha> bash scripts/h200/mla_flashmla.sh
# The view keeps that reason over this pack's "not installed" row.
# Commit the files as results/<gpu>-mla-pr1770.jsonl.gz, results/<gpu>-mla-v3-tp8.jsonl.gz (and
# results/<gpu>-mla-pr1770-fa3.jsonl.gz) (gzip -9), then `attnbench anchors --set pr1770` and
# `attnbench findings`.
# Cost, on a fresh machine: two FlashInfer MLA JIT modules (fa2, fa3; ~30-60 s each, the first
# pass pays them) and the ceilings per pass (~20 s), then a few seconds a row (the fp64
# reference of the 16k case reads 2.2M latent tokens): ~3-4 min for pass 1, ~1-2 min for
# pass 2, about 5-6 min in all. Each pass has its own limit (Ctrl-C keeps its rows; together
# 430 s); a cut pass resumes with RESUME=1. $OUT gets 2 files (3 with a log).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh
AB="${AB:-python3 -m attnbench}"
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; mla_flashmla on $GPU_TAG; $(date -u +%FT%TZ)"
python3 -c 'import flash_mla; print("flash_mla", flash_mla.__version__, "has_legacy", flash_mla.has_legacy())' \
  2>&1 | tail -1
[ -f scripts/h200/jit_aot.sh ] && bash scripts/h200/jit_aot.sh
pass() {  # pass LIMIT_S FILE SUITE VARIANTS...
  local t=$1 rows="$OUT/$GPU_TAG-$2.jsonl" suite=$3; shift 3
  local resume=(); [ -n "${RESUME:-}" ] && [ -f "$rows" ] && resume=(--resume)
  echo "=== $rows (limit ${t}s)"
  local t0=$SECONDS
  timeout -s INT -k 20 "$t" $AB run --device cuda --suite "$suite" "$@" \
    --max-time-ms 100 --case-timeout 150 --out "$rows" "${resume[@]}" 2>&1 | tail -"${TAIL:-30}"
  echo "=== exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
}
if [ -n "${FA3_ONLY:-}" ]; then
  pass "${FA3_LIMIT_S:-120}" mla-pr1770-fa3 mla-pr1770 -b flash-attn:mla
  $AB anchors "$OUT" --set pr1770 2>&1 | tail -"${TAIL_ANCHORS:-60}"
  exit 0
fi
pass "${PR1770_LIMIT_S:-270}" mla-pr1770 mla-pr1770 \
  -b flashmla:dense -b flashinfer:mla-fa3 -b flashinfer:mla-fa2 -b flash-attn:mla
pass "${V3_LIMIT_S:-160}" mla-v3-tp8 scripts/h200/mla-v3-tp8.toml \
  -b flashmla:dense -b flashinfer:mla-fa3 -b flashinfer:mla-fa2 -b vllm:flashmla -b sglang:flashmla
$AB anchors "$OUT" --set pr1770 2>&1 | tail -"${TAIL_ANCHORS:-60}"
$AB show "$OUT/$GPU_TAG-mla-v3-tp8.jsonl" 2>&1 | tail -"${TAIL_SHOW:-40}"
