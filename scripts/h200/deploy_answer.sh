#!/usr/bin/env bash
# The H200 evidence of `attnbench recommend --model ... --measure` (issue 31): for
# llama-3.1-8b (tp1) and llama-3.1-70b (tp8), vLLM and SGLang, on each shipped trace and the
# brief's 450-agent mix, the replay's running batch drawn per CUDA-graph bucket holding >= 5%
# of the decode steps, and the heaviest smaller ones up to 90% (one step per bucket) and timed with every deployable configuration of
# the engine, bf16 KV first, then fp8_e4m3 KV, into ONE rows file. Through the device tool,
# with `.device` carried:
#   source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> bash scripts/h200/deploy_answer.sh
# Rows land in $OUT/<gpu>-deploy.jsonl (<gpu>: the card the call got, `gpu_tag.sh`); commit
# them as results/<gpu>-deploy.jsonl.gz (gzip -9).
# Self-limited: no new batch starts after DEPLOY_BUDGET_S (default 540 s) of this script's wall
# time, so one call stays under the 600 s a command may run. Resumable: when a cut call's rows
# are committed as results/<gpu>-deploy.jsonl.gz, the next call continues them (--resume).
# Cost (from `--measure --dry-run --per-bucket 1` on the committed rows): each bucket of >= 5%
# of the decode steps, and with --cover 0.9 (COVER) the heaviest smaller ones until 90% of the
# steps are on their own batches (on the H100 in session 15, without --cover, 39-58% of the
# 70B tp8 mooncake and agents steps fell in buckets under 5%): 134 batches per KV dtype, each
# timed with the engine's 2 configurations, 536 pairs in all (304 without --cover). The four
# traces of one (KV dtype, model, engine) are timed in one invocation (`--trace` repeated: one
# worker start and one set of ceilings; 8 invocations, not 32). At ~0.5-1 s a warm pair, ~100 s
# of FlashInfer JIT on a fresh machine and ~15 s per invocation, about 100 + 536 x 0.7 + 8 x 15
# = ~590 s: the budget stops it at 540 s (bf16 first) and a second call resumes what is left
# (session 15's 304 pairs took 289 s on a warm H100).
# DRY=1 plans every invocation (`--dry-run`, no GPU) to check the script on a CPU machine.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh
ROWS="$OUT/$GPU_TAG-deploy.jsonl"
BUDGET=${DEPLOY_BUDGET_S:-540}
AB="${AB:-python3 -m attnbench}"
start=$SECONDS
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; deploy_answer; $(date -u +%FT%TZ)"
[ -f scripts/h200/jit_aot.sh ] && bash scripts/h200/jit_aot.sh
if [ -f "results/$GPU_TAG-deploy.jsonl.gz" ] && [ ! -f "$ROWS" ]; then
  zcat "results/$GPU_TAG-deploy.jsonl.gz" > "$ROWS"  # a cut call's rows: continue them
fi
mapfile -t INPUTS < <(ls results/h200-*.jsonl* | grep -v -- -deploy)
for kv in auto fp8_e4m3; do
  for model in "llama-3.1-8b 1" "llama-3.1-70b 8"; do
    set -- $model
    for engine in vllm sglang; do
      left=$((BUDGET - (SECONDS - start)))
      if [ "$left" -lt 40 ]; then
        echo "=== budget of ${BUDGET}s spent: commit $ROWS and call again to resume"
        exit 0
      fi
      resume=(); [ -f "$ROWS" ] && resume=(--resume)
      [ -n "${DRY:-}" ] && resume+=(--dry-run)
      echo "=== $1 tp$2 $engine kv=$kv, 4 traces (${left}s left)"
      t0=$SECONDS
      timeout -s INT -k 15 "$left" $AB recommend "${INPUTS[@]}" --model "$1" --tp "$2" \
        --engine "$engine" --trace azure-code --trace azure-conv --trace mooncake-conv \
        --trace agents:450 --kv-dtype "$kv" --measure --per-bucket 1 --cover "${COVER:-0.9}" \
        --out "$ROWS" "${resume[@]}" --budget-s $((left - 30)) 2>&1 | tail -"${TAIL:-40}"
      echo "=== exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
    done
  done
done
echo "=== done in $((SECONDS - start)) s: $ROWS"
