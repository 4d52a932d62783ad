#!/usr/bin/env bash
# One H200 call of a session, by stage, each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh L
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
# FlashInfer's JIT compiles cost 15-100 s per kernel module and ate most of session 5's steps:
# carry the kernels compiled last time as jit-cache.txz (git-ignored, 7.4 MB; rebuilt from the
# jit-cache.tgz.part* a call returns by scripts/h200/jit_cache.sh) and unpack it first:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> \
#     bash scripts/h200/session.sh L
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
stage=${1:?stage: P, M (or L, N) (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
case $stage in
P)  # session 7 after refusals left ~1,400 s: the issue-blocking steps of L and N in one call
  # (MLA and gpt-oss extras dropped); eight files come back: 7 results + the log
  for f in brief fp8 replay-calibration; do
    gunzip -c "results/h200-$f.jsonl.gz" > "$OUT/h200-$f.jsonl"
  done
  step 40 brief $RUN --suite brief $ALL --resume --out "$OUT/h200-brief.jsonl"
  step 140 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  R5="-b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b sdpa:cudnn"
  step 60 calibration $RUN --suite replay-calibration $R5 --resume \
    --out "$OUT/h200-replay-calibration.jsonl"
  step 150 validation $AB replay-validate "$OUT/h200-replay-calibration.jsonl" --steps 60 $R5 \
    --max-time-ms 60 --out "$OUT/h200-replay-validation.json"
  step 95 engines-traces $RUN --suite traces -b vllm -b sglang \
    --out "$OUT/h200-traces-engines.jsonl"
  step 65 engines-p1 $RUN --suite brief -b sglang --page-size 1 \
    --out "$OUT/h200-brief-engines-p1.jsonl"
  ;;
L)  # session 7, call 1: finish brief, fp8, MLA, gpt-oss; replay calibration and validation
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  for f in brief fp8 mla gptoss replay-calibration; do  # resume targets, committed gzipped
    gunzip -c "results/h200-$f.jsonl.gz" > "$OUT/h200-$f.jsonl"
  done
  step 50 brief $RUN --suite brief $ALL --resume --out "$OUT/h200-brief.jsonl"
  step 180 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  step 80 mla $RUN --suite mla --resume --out "$OUT/h200-mla.jsonl"
  step 60 gptoss $RUN --suite gptoss -b flash-attn:fa3 -b flashinfer:xqa -b flashinfer:fa2 \
    -b flashinfer:tc -b sdpa:cudnn -b flex --resume --out "$OUT/h200-gptoss.jsonl"
  R5="-b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b sdpa:cudnn"
  step 60 calibration $RUN --suite replay-calibration $R5 --resume \
    --out "$OUT/h200-replay-calibration.jsonl"
  step 150 validation $AB replay-validate "$OUT/h200-replay-calibration.jsonl" --steps 60 $R5 \
    --max-time-ms 60 --out "$OUT/h200-replay-validation.json"
  ;;
M)  # session 7, call 2 (chained): the full GPU test pass, FP8 numerics, XQA without PDL
  step 430 gpu-tests bash -c "timeout -s INT 420 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE --durations=25 tests > $OUT/h200-gpu-tests.txt 2>&1; tail -45 $OUT/h200-gpu-tests.txt"
  step 70 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  step 60 xqa-no-pdl $AB fidelity --ncu --cases sm-activity -b flashinfer:xqa \
    --knob enable_pdl=false --out "$OUT/h200-sm-activity-xqa-no-pdl.json"
  ;;
N)  # session 7, call 3 (chained, what budget is left): engine variants on the traces and at
  # SGLang's default page size 1, tuning resumed
  step 100 engines-traces $RUN --suite traces -b vllm -b sglang \
    --out "$OUT/h200-traces-engines.jsonl"
  step 80 engines-p1 $RUN --suite brief -b sglang --page-size 1 \
    --out "$OUT/h200-brief-engines-p1.jsonl"
  # The README's command on this machine with its kernels compiled (the default suite, `all`)
  step 200 default-warm $AB run --out /tmp/default.jsonl  # `step` logs its wall time
  ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
