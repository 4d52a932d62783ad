#!/usr/bin/env bash
# One H200 call of a session, by stage, each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh H
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
# FlashInfer's JIT compiles cost 15-100 s per kernel module and ate most of session 5's steps:
# carry the kernels compiled last time as jit-cache.txz (git-ignored, ~6 MB: `tar cf - -C
# <dir with flashinfer-ws> --exclude='*.o' --exclude='*.ninja*' --exclude='*.d' flashinfer-ws |
# xz -9e > jit-cache.txz`, from the jit-cache.tgz.part* a call returns) and unpack it first:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; ATTNBENCH_GIT_SHA=... bash ... H
# with carry [".device", "jit-cache.txz"] (the tree itself stays under ~8 MB).
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
stage=${1:?stage: H, I, J or K (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
case $stage in
H)  # session 6, call 1: finish brief, fp8, MLA (resumed), gpt-oss, FP8 numerics on the GPU
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  cp results/h200-brief.jsonl results/h200-fp8.jsonl "$OUT/"
  step 20 backends $AB backends --device cuda
  step 60 brief $RUN --suite brief $ALL --resume --out "$OUT/h200-brief.jsonl"
  step 190 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  # MLA again in full: DeepSeek-V3's softmax scale now carries YaRN's mscale (a new case id)
  step 110 mla $RUN --suite mla --out "$OUT/h200-mla.jsonl"
  step 100 gptoss $RUN --suite gptoss -b flash-attn:fa3 -b flashinfer:xqa -b flashinfer:fa2 \
    -b flashinfer:tc -b sdpa:cudnn -b flex --out "$OUT/h200-gptoss.jsonl"
  step 110 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  ;;
I)  # session 6, call 2 (chained): the full GPU test pass, timing fidelity, SM activity
  step 340 gpu-tests bash -c "timeout -s INT 330 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE --durations=25 tests > $OUT/h200-gpu-tests.txt 2>&1; tail -45 $OUT/h200-gpu-tests.txt"
  step 100 fidelity $AB fidelity --ncu --resume --out "$OUT/h200-fidelity.json"
  step 150 sm-activity $AB fidelity --ncu --cases sm-activity --resume \
    --out "$OUT/h200-sm-activity.json"
  ;;
J)  # session 6, call 3: replay calibration and live validation, the engine variants
  R5="-b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b sdpa:cudnn"
  step 180 calibration $RUN --suite replay-calibration $R5 --resume \
    --out "$OUT/h200-replay-calibration.jsonl"
  step 120 validation $AB replay-validate "$OUT/h200-replay-calibration.jsonl" --steps 60 $R5 \
    --out "$OUT/h200-replay-validation.json"
  step 150 engines-brief $RUN --suite brief -b vllm -b sglang --out "$OUT/h200-brief-engines.jsonl"
  step 120 engines-fp8 $RUN --suite fp8 -b vllm -b sglang --out "$OUT/h200-fp8-engines.jsonl"
  ;;
K)  # later: engine variants at page size 1, tuning resumed, the default suite's wall time
  step 100 engines-p1 $RUN --suite brief -b sglang --page-size 1 \
    --out "$OUT/h200-brief-engines-p1.jsonl"
  TUNE="$AB tune --device cuda --budget-s 80 --resume -b flashinfer:fa2 -b flashinfer:tc"
  TUNE="$TUNE -b flashinfer:xqa -b flash-attn:fa3"
  cp results/h200-tune-ragged.jsonl results/h200-tune-fp8.jsonl "$OUT/"
  step 90 tune-ragged $TUNE --suite ragged --out "$OUT/h200-tune-ragged.jsonl"
  step 90 tune-fp8 $TUNE --suite fp8 --out "$OUT/h200-tune-fp8.jsonl"
  ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
