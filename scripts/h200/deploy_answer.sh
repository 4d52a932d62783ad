#!/usr/bin/env bash
# The GPU evidence of `attnbench recommend --model ... --measure` (issues 44 and 45), on
# whichever card the call got: for llama-3.1-8b (tp1) and llama-3.1-70b (tp8), vLLM and SGLang,
# on each shipped trace and the brief's 450-agent mix, the decode steps of a replay on THIS
# GPU's own step costs, drawn per CUDA-graph bucket (the sampling design of `deploy.plan`: 5
# random steps per bucket of >= 5% of the steps, 2 per smaller bucket, heaviest first, to 90%
# of the steps) and 6 prompts drawn from the trace for prefill, each timed with every deployable
# configuration of the engine (paired), bf16 KV first, then fp8_e4m3 KV, into ONE rows file.
# Through the device tool, with `.device` carried:
#   source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> bash scripts/h200/deploy_answer.sh
# Rows land in $OUT/<gpu>-deploy.jsonl.gz (<gpu>: the card the call got, `gpu_tag.sh`); commit
# them as results/<gpu>-deploy.jsonl.gz, with the replays that drew them (histogram, bootstrap
# and cost-band replicates), <gpu>-deploy.traffic.json.gz, beside them.
# Where this GPU has no rows to fit the 70B tp8 step costs, the `replay` suite's FA3 rows are
# measured first (`$OUT/<gpu>-replay-70b.jsonl.gz`, ~32 cases), so that no traffic is replayed on
# another GPU's costs.
# Self-limited: no new invocation starts after DEPLOY_BUDGET_S (default 530 s) of wall time, so
# one call stays under the 600 s a command may run. Resumable: a call chained within the warm
# machine's 30 s continues the rows it left in /tmp/deploy-rows; on a fresh machine, place the
# returned rows at runs/<gpu>-deploy.jsonl.gz and carry `runs`.
# Cost (`--measure --dry-run`, both GPUs alike): 8B 123-128 batches per engine and KV dtype,
# 70B 170-175, each timed with the engine's 2 configurations: ~1,180 pairs per KV dtype.
# DRY=1 plans every invocation (`--dry-run`, no GPU) to check the script on a CPU machine.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh
KEEP=/tmp/deploy-rows; mkdir -p "$KEEP"
ROWS="$KEEP/$GPU_TAG-deploy.jsonl"
BUDGET=${DEPLOY_BUDGET_S:-530}
AB="${AB:-python3 -m attnbench}"
start=$SECONDS
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; deploy_answer on $GPU_TAG; $(date -u +%FT%TZ)"
[ -f scripts/h200/jit_aot.sh ] && bash scripts/h200/jit_aot.sh
if [ ! -f "$ROWS" ] && [ -f "runs/$GPU_TAG-deploy.jsonl.gz" ]; then
  zcat "runs/$GPU_TAG-deploy.jsonl.gz" > "$ROWS"  # a cut call's rows: continue them
  cp "runs/$GPU_TAG-deploy.traffic.json.gz" "$KEEP/" 2>/dev/null
fi
save() {
  gzip -9c "$ROWS" > "$OUT/$GPU_TAG-deploy.jsonl.gz" 2>/dev/null
  cp "$KEEP/$GPU_TAG-deploy.traffic.json.gz" "$OUT/" 2>/dev/null; true
}
trap save EXIT
mapfile -t INPUTS < <(ls results/*.jsonl* | grep -v -- -deploy)
CAL="$KEEP/$GPU_TAG-replay-70b.jsonl"
if [ "$GPU_TAG" != h200 ] && ! ls results/"$GPU_TAG"-replay*.jsonl* >/dev/null 2>&1; then
  if [ ! -f "$CAL.done" ] && [ -z "${DRY:-}" ]; then
    echo "=== $GPU_TAG has no 70B tp8 replay rows: the replay suite's FA3 cases first"
    t0=$SECONDS
    timeout -s INT -k 15 200 $AB run --suite replay -b flash-attn:fa3 --device cuda \
      --max-time-ms 60 --out "$CAL" 2>&1 | tail -5
    echo "=== exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
    touch "$CAL.done"
  fi
  gzip -9c "$CAL" > "$OUT/$GPU_TAG-replay-70b.jsonl.gz" 2>/dev/null
  [ -f "$CAL" ] && INPUTS+=("$CAL")
fi
for kv in ${KV_DTYPES:-auto fp8_e4m3}; do
  for model in "llama-3.1-8b 1" "llama-3.1-70b 8"; do
    set -- $model
    for engine in vllm sglang; do
      left=$((BUDGET - (SECONDS - start)))
      if [ "$left" -lt 60 ]; then
        echo "=== budget of ${BUDGET}s spent: call again within 30 s to resume"
        exit 0
      fi
      resume=(); [ -f "$ROWS" ] && resume=(--resume)
      [ -n "${DRY:-}" ] && resume+=(--dry-run)
      echo "=== $1 tp$2 $engine kv=$kv, 4 traces (${left}s left)"
      t0=$SECONDS
      timeout -s INT -k 15 "$left" $AB recommend "${INPUTS[@]}" --model "$1" --tp "$2" \
        --engine "$engine" --trace azure-code --trace azure-conv --trace mooncake-conv \
        --trace agents:450 --kv-dtype "$kv" --measure --out "$ROWS" "${resume[@]}" \
        --budget-s $((left - 30)) 2>&1 | tail -"${TAIL:-12}"
      echo "=== exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
    done
  done
done
echo "=== done in $((SECONDS - start)) s: $ROWS"
