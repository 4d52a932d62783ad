#!/usr/bin/env bash
# Issue 47 on a GPU: an engine's own Triton kernel (`vllm:triton-attn`, or with ENGINE=sglang
# `sglang:triton`) validated, then that engine's answers for the models whose alternative (or,
# on SGLang, default) it is, on whichever card the call got (files named by gpu_tag.sh). Pack the kernel here first (`bash scripts/h200/pack_engine_triton.sh`), then
# through the device tool, carry [".device", ".device-triton"]:
#   source .device/setup.sh; trap - EXIT
#   ATTNBENCH_GIT_SHA=<clean short sha> [ENGINE=sglang] bash scripts/h200/engine_triton_answer.sh
# (name the sha here, from this checkout: the device copy's own git HEAD can be stale)
# Steps, each under its own limit (about 540 s in all on a fresh machine):
#   probe   scripts/h200/engine_triton_probe.py: both engines' kernels load and agree with
#           float64 (SGLang's decode; vLLM's 2D and split-KV launches)       -> $OUT/engine-triton-probe-<gpu>.txt
#   tests   pytest -m gpu tests/test_<engine>_triton.py (the gate, the launch) -> $OUT/<gpu>-<engine>-triton-tests.txt
#   answers recommend --measure for gpt-oss-120b tp8 and Gemma-2-9b on azure-conv: the engine's
#           settings (vLLM: FLASH_ATTN, FLASHINFER, TRITON_ATTN; SGLang: fa3, flashinfer,
#           triton) on the trace's own batches          -> $OUT/<gpu>-deploy-{gptoss,gemma2}-<engine>-triton.jsonl
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh
export ATTNBENCH_ENGINE_TRITON=${ATTNBENCH_ENGINE_TRITON:-$PWD/.device-triton}
case "${ATTNBENCH_GIT_SHA:-}" in
  "" | unknown* | *-dirty) echo "refused: name a clean commit, ATTNBENCH_GIT_SHA=<sha>" >&2; exit 2 ;;
esac
export ATTNBENCH_GIT_SHA
ENGINE=${ENGINE:-vllm}
case "$ENGINE" in
  vllm | sglang) ;;
  *) echo "refused: ENGINE=$ENGINE; allowed: vllm, sglang" >&2; exit 2 ;;
esac
AB="python3 -m attnbench"
echo "commit $ATTNBENCH_GIT_SHA; engine_triton_answer $ENGINE on $GPU_TAG; $(date -u +%FT%TZ)"
timeout 100 python3 scripts/h200/engine_triton_probe.py 2>&1 | tail -14
timeout 130 python3 -m pytest -q -m gpu "tests/test_${ENGINE}_triton.py" 2>&1 | tail -12 \
  | tee "$OUT/$GPU_TAG-$ENGINE-triton-tests.txt"
for job in "gpt-oss-120b 8 gptoss" "gemma-2-9b 1 gemma2"; do
  read -r model tp name <<< "$job"
  echo "=== $model tp$tp ($(date -u +%T))"
  timeout 170 $AB recommend --model "$model" --tp "$tp" --engine "$ENGINE" --trace azure-conv \
    --measure --budget-s 140 --out "$OUT/$GPU_TAG-deploy-$name-$ENGINE-triton.jsonl" 2>&1 | tail -22
done
echo "=== done $(date -u +%T)"; ls -la "$OUT"
