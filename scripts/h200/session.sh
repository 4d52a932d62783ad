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
stage=${1:?stage: Q, R, S or T (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
case $stage in
Q)  # session 8, call 1: finish fp8 and the replay calibration (29 cases: 9 long prefills and
  # appends, 20 decode cases where live steps fell outside it), the live validation at full
  # length (60 steps), SGLang's default page size 1 on the traces
  for f in fp8 replay-calibration; do
    gunzip -c "results/h200-$f.jsonl.gz" > "$OUT/h200-$f.jsonl"
  done
  step 60 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  R5="-b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b sdpa:cudnn"
  step 120 calibration $RUN --suite replay-calibration $R5 --resume \
    --out "$OUT/h200-replay-calibration.jsonl"
  step 300 validation $AB replay-validate "$OUT/h200-replay-calibration.jsonl" --steps 60 $R5 \
    --max-time-ms 60 --out "$OUT/h200-replay-validation.json"
  step 60 engines-traces-p1 $RUN --suite traces -b sglang --page-size 1 \
    --out "$OUT/h200-traces-engines-p1.jsonl"
  ;;
R)  # session 8, call 2 (chained): the GPU tests in two halves (one run of all 167 did not fit
  # in a call: FlashInfer's compiles), the kernel part of the FP8 study
  GPU="python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=15"
  A="tests/test_cudnn.py tests/test_fidelity.py tests/test_flash_attn.py tests/test_flashinfer.py"
  B="tests/test_flex.py tests/test_fp8study.py tests/test_gpu_core.py tests/test_mla.py"
  B="$B tests/test_replay_live.py tests/test_sdpa.py tests/test_suites.py tests/test_windows.py"
  step 250 gpu-tests-a bash -c "timeout -s INT 245 $GPU $A > $OUT/h200-gpu-tests-a.txt 2>&1; \
    tail -25 $OUT/h200-gpu-tests-a.txt"
  step 200 gpu-tests-b bash -c "timeout -s INT 195 $GPU $B > $OUT/h200-gpu-tests-b.txt 2>&1; \
    tail -25 $OUT/h200-gpu-tests-b.txt"
  step 130 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  ;;
S)  # session 8, call 3 (what budget is left): live validation at fp8 KV, XQA's knobs tuned on
  # the ragged suite, the README's command (the default suite) with its kernels compiled
  cp results/h200-tune-ragged.jsonl "$OUT/"
  # the live validation with an fp8 KV cache, what `recommend` picks (FA3 fp8)
  gunzip -c results/h200-replay-calibration.jsonl.gz > /tmp/calibration.jsonl
  step 150 validation-fp8 $AB replay-validate /tmp/calibration.jsonl --steps 60 --kv-dtype \
    fp8_e4m3 -b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa \
    --max-time-ms 60 --out "$OUT/h200-replay-validation-fp8.json"
  step 100 tune-xqa $AB tune --device cuda --budget-s 80 --resume -b flashinfer:xqa \
    --suite ragged --out "$OUT/h200-tune-ragged.jsonl"
  step 200 default-warm $AB run --out /tmp/default.jsonl  # `step` logs its wall time
  # SM activity again, ncu now averaging 3 calls per kernel (one call's time varied 6%)
  step 120 sm-activity $AB fidelity --ncu --cases sm-activity --out "$OUT/h200-sm-activity.json"
  ;;
T)  # session 8, call 4 (426 s left): the fp8 suite's last case (its fp16-query / fp8-KV
  # FlashInfer module is too big to carry compiled), the GPU tests after flex
  gunzip -c results/h200-fp8.jsonl.gz > "$OUT/h200-fp8.jsonl"
  step 140 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  GPU="python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=10"
  B="tests/test_fp8study.py tests/test_gpu_core.py tests/test_mla.py tests/test_replay_live.py"
  B="$B tests/test_sdpa.py tests/test_suites.py tests/test_windows.py"
  step 165 gpu-tests-c bash -c "timeout -s INT 160 $GPU $B > $OUT/h200-gpu-tests-c.txt 2>&1; \
    tail -25 $OUT/h200-gpu-tests-c.txt"
  ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
