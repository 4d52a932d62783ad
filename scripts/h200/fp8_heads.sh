#!/usr/bin/env bash
# The fp8 study on the answers' head shapes, on whichever card the call got (issue 44: an
# answer's fp8 line quotes the study of its own GPU and heads, `deploy.fp8`): llama-3.1-8b at
# tp1 (32/8 d128) and llama-3.1-70b at tp8 (8/1 d128), the full study each (needles to 64k,
# FlashInfer's and FA3's fp8 decode). Through the device tool:
#   bash scripts/h200/fp8_heads.sh
# Files: $OUT/<gpu>-fp8-study-<model>-tp<N>.json.gz (<gpu>: the card the call got,
# `gpu_tag.sh`); commit them under results/ as they are (`deploy.fp8` reads every
# results/*fp8*.json* study document). About 1 min per shape on an H200.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh
AB="${AB:-python3 -m attnbench}"
echo "fp8_heads on $GPU_TAG; $(date -u +%FT%TZ)"
rc=0
for heads in llama-3.1-8b:1 llama-3.1-70b:8; do
  name="$GPU_TAG-fp8-study-${heads%%:*}-tp${heads##*:}.json"
  $AB fp8 --device cuda --full --heads "$heads" --out "$OUT/$name" || rc=$?
  [ -f "$OUT/$name" ] && gzip -9f "$OUT/$name"
done
exit $rc
