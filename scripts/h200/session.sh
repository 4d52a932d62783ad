#!/usr/bin/env bash
# One H200 call of a session, by stage, each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh s10a
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
# FlashInfer's JIT compiles cost 15-100 s per kernel module and ate most of session 5's steps.
# Within a session, chained calls on the warm machine keep what earlier calls compiled (/tmp).
# Across sessions, jit-cache.txz (git-ignored; rebuilt from the jit-cache.tgz.part* a call with
# setup.sh's EXIT trap returns, by scripts/h200/jit_cache.sh) carries compiled modules that
# scripts/h200/jit_aot.sh (run first in every stage) links as AOT artifacts:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> \
#     bash scripts/h200/session.sh s10b
# with carry [".device", "jit-cache.txz"]. The carry limit is 64 MiB for the tracked tree
# (7.1 MB at session 9's end), the site pack (51.9 MB) and the cache (7.3 MB) together: 0.3 MB
# to spare. Session 10 runs without it: s10a must start bare, s10b-s10d run on the machine s10a
# warmed, and group d's and the fp8 suite's modules were never in it.
# Give the commit literally (`git rev-parse --short HEAD` here, not on the device): in session 7
# the device's copy of .git was stale and `$(git rev-parse ...)` there named an older commit.
# `trap - EXIT` stops setup.sh from returning the JIT cache as jit-cache.tgz.part* (two or three
# of the eight files that come back).
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
stage=${1:?stage: s10a, s10b, s10c or s10d (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
bash scripts/h200/jit_aot.sh  # else FlashInfer's ninja compiles every carried module again
case $stage in
s10a)  # session 10, call 1, on a fresh machine: the README command as a new user meets it,
  # nothing compiled (carry only .device, unpack no jit-cache.txz, keep setup.sh's EXIT trap so
  # the kernels it compiles come back as jit-cache.tgz.part*); `step` logs its wall time. Rows
  # go to /tmp too, for s10b to resume on the same (warm) machine if 520 s do not suffice (the
  # call also unpacks the site, ~15 s, and packs the JIT cache on exit, within 600 s).
  step 520 default-fresh $AB run --out /tmp/h200-default-fresh.jsonl
  cp /tmp/h200-default-fresh.jsonl "$OUT/"
  ;;
s10b)  # session 10, call 2 (chained within 30 s, same machine): finish the fresh run if it was
  # cut (its wall time is the two steps' sum), then the same command again with every kernel
  # compiled: the warm wall time
  step 240 default-fresh-resume $AB run --resume --out /tmp/h200-default-fresh.jsonl
  cp /tmp/h200-default-fresh.jsonl "$OUT/"
  step 240 default-warm $AB run --out "$OUT/h200-default-warm.jsonl"
  ;;
s10c)  # session 10, call 3 (chained): SDPA cuDNN's replay model (odd-length masks unsplit above
  # 66 requests, 45a98ce) on 120 live steps it was not shaped on (drawn from cuDNN's own replay:
  # 4 of the 120 batches are among the 60-step run's, 21 are odd calls above 66 requests), then
  # the GPU tests' group d
  gunzip -c results/h200-replay-calibration.jsonl.gz > /tmp/calibration.jsonl
  step 180 validation-cudnn $AB replay-validate /tmp/calibration.jsonl --steps 120 \
    -b sdpa:cudnn --max-time-ms 60 --out "$OUT/h200-replay-validation-cudnn.json"
  step 380 gpu-tests-d env GPU_TESTS_LIMIT=360 bash scripts/h200/gpu_tests.sh d
  ;;
s10d)  # what time is left (or session 11): the fp8 suite's last row (flashinfer:fa3 on the fp16
  # query / fp8 KV case), then the full FP8 study in one run (FA3's fp8 path and FlashInfer's
  # per-token scales in one file)
  gunzip -c results/h200-fp8.jsonl.gz > "$OUT/h200-fp8.jsonl"
  step 200 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  step 300 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  ;;
*) echo "unknown stage $stage (s10a, s10b, s10c, s10d; older ones are in git history)" >&2 ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
