#!/usr/bin/env bash
# One H200 call of a session, by stage, each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh s11a
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
# FlashInfer's JIT compiles cost 15-120 s per kernel module: on a fresh machine they took 323 of
# the default suite's 507 s (session 10). Within a session, chained calls (within 30 s) on the
# warm machine keep what earlier calls compiled (/tmp). A session's checkout starts without
# jit-cache.txz (git-ignored): `scripts/h200/jit_cache.sh` rebuilds it from the
# jit-cache.tgz.part* that a call keeping setup.sh's EXIT trap returns, and
# scripts/h200/jit_aot.sh (run first in every stage) links its modules as AOT artifacts:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; trap - EXIT; ATTNBENCH_GIT_SHA=<sha> \
#     bash scripts/h200/session.sh s11d
# with carry [".device", "jit-cache.txz"]. The carry limit is 64 MiB for the tracked tree
# (~7.9 MB at session 10's end), the site pack (51.9 MB) and the cache together: session 10's
# default-suite cache is 4.8 MB (61 MiB in all).
# Give the commit literally (`git rev-parse --short HEAD` here, not on the device): in session 7
# the device's copy of .git was stale and `$(git rev-parse ...)` there named an older commit.
# `trap - EXIT` stops setup.sh from returning the JIT cache as jit-cache.tgz.part* (two or three
# of the eight files that come back).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source scripts/h200/gpu_tag.sh  # files named for the card the call got
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
precompile() {  # bytecode for every module on sys.path, as a pip install leaves it
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  local t0=$SECONDS
  python3 -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "/site", "/src"))))' |
    xargs -r python3 -m compileall -q -j 0 >/dev/null 2>&1
  echo "=== precompile: $((SECONDS - t0)) s"
}
stage=${1:?stage: s11a, s11d, s11e, s12a-s12e, s13a, s13c, s16a, s16b or s17a (older stages are in git history)}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
bash scripts/h200/jit_aot.sh  # else FlashInfer's ninja compiles every carried module again
case $stage in
s11a)  # session 11, call 1, on a fresh machine (carry .device only; `trap - EXIT`): which plain
  # kernel reads HBM fastest (session 10's decode rows passed the copy and sum ceilings by up to
  # 5%), then GPU test group a. Groups b-d follow in chained calls at the same commit, so that
  # one full pass names one commit (session 9-10's groups ran at two):
  #   call 2: ATTNBENCH_GIT_SHA=<sha> GPU_TESTS_LIMIT=280 bash scripts/h200/gpu_tests.sh b c
  #   call 3: ATTNBENCH_GIT_SHA=<sha> GPU_TESTS_LIMIT=420 bash scripts/h200/gpu_tests.sh d
  # then again any group cut at its limit: the modules it compiled stay in /tmp on the warm
  # machine (group d passed in 155 s on its second try in session 10).
  step 90 read-probe python3 scripts/h200/read_probe.py --out "$OUT/$GPU_TAG-read-probe.json"
  step 470 gpu-tests-a env GPU_TESTS_LIMIT=450 bash scripts/h200/gpu_tests.sh a
  ;;
s11d)  # what time is left: the full FP8 study in one run (FA3's fp8 path and FlashInfer's
  # per-token scales in one file)
  step 300 fp8-study $AB fp8 --device cuda --full --out "$OUT/$GPU_TAG-fp8-study.json"
  ;;
s11e)  # the read ceiling from the fastest plain reader (measure/stream_read.py, from the read
  # probe): the device's facts, the reader's GPU tests, then the bf16 decode rows that passed
  # the old ceilings (FA3 contiguous and cuDNN at 64k) against the new one, with paged FA3 and
  # FlashInfer's tc and xqa (their modules come with the carried jit-cache.txz)
  step 60 hw $AB hw --device cuda --out "$OUT/$GPU_TAG-hw.json"
  step 150 read-tests python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
    tests/test_stream_read.py tests/test_gpu_core.py
  step 240 read-ceiling $RUN -k decode -l "1024,4096,16384,65536" --no-fp8-mode \
    -b flash-attn:fa3-contiguous -b flash-attn:fa3 -b sdpa:cudnn -b flashinfer:tc \
    -b flashinfer:xqa --out "$OUT/$GPU_TAG-read-ceiling.jsonl"
  ;;
s12a)  # session 12, call 1, on a fresh machine (carry .device only; `trap - EXIT`): the
  # small-kernel fidelity check (CUPTI and nvbench against our timers), the held-out replay
  # steps (frozen in suites/replay-heldout-steps.toml before any was timed; --resume picks up
  # a cut run). One command may run 600 s: the GPU tests are stage s12b.
  step 130 fidelity-small $AB fidelity --cases small --out "$OUT/$GPU_TAG-fidelity-small.json"
  step 420 replay-heldout env ATTNBENCH_MAX_RUNS=200 $AB run --device cuda \
    --suite replay-heldout-steps -b flash-attn:fa3 -b flashinfer:fa2 -b flashinfer:tc \
    -b flashinfer:xqa -b sdpa:cudnn --max-time-ms 10 --case-timeout 60 --resume \
    --out "$OUT/$GPU_TAG-replay-heldout.jsonl"
  ;;
s12b)  # call 2, chained: the GPU tests of the code that landed since the last full pass
  TAIL=40 step 300 gpu-tests python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/test_timed_output.py tests/test_fidelity_small.py tests/test_replay_fa3plan.py \
    tests/test_replay_live.py tests/test_fp8study.py tests/test_softcap.py
  ;;
s12c)  # call 3, on a FRESH machine (carry .device only: no jit-cache.txz, no chained warm
  # machine; `trap - EXIT`): the README's first command, the default suite, as a new user runs
  # it, then again warm (issue 34: <= 240 s fresh, <= 90 s warm). The FlashInfer modules and
  # Flex kernels are built in one prebuild before timing (run/prebuild.py); each file's last
  # line (type "footer") holds the run's wall_s, setup_s and the prebuild's report.
  # The whole output is kept (TAIL=400): at 1fe251d the last 15 lines hid the prebuild's
  # report, and both runs were cut in FlashInfer compiles after 17 rows (see the issue note).
  TAIL=400 step 300 default-fresh $AB run --device cuda --out "$OUT/$GPU_TAG-default-fresh.jsonl"
  TAIL=400 step 200 default-warm $AB run --device cuda --out "$OUT/$GPU_TAG-default-warm.jsonl"
  ;;
s12d)  # the head_dim zoo (issue 36): the Gemma-2 / Phi-3 presets (soft-cap, windows, d96
  # MHA), then the headdim suite (d64-256 x GQA 1/4/8, ragged and uniform, decode and
  # prefill). Both prebuild their FlashInfer modules in one parallel build first.
  step 200 headdim-models $RUN --suite headdim-models -b flashinfer:fa2 -b flashinfer:tc \
    -b flashinfer:xqa -b flash-attn:fa3 -b sdpa:cudnn --resume --out "$OUT/$GPU_TAG-headdim-models.jsonl"
  step 360 headdim $RUN --suite headdim -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:auto \
    -b flash-attn:fa3 -b sdpa:cudnn --resume --out "$OUT/$GPU_TAG-headdim.jsonl"
  ;;
s13a)  # session 13, call 1, on a FRESH machine (carry .device only; `trap - EXIT`): the
  # README's first command, the default suite, as a new user runs it, then again warm (issue
  # 34: <= 240 s fresh, <= 90 s warm). At 1fe251d (s12c) both runs were cut in FlashInfer
  # compiles after 17 rows: FlashInfer's one-build prebuild (build_jit_specs) keeps the ninja
  # logs in its JIT folder, so each module's own ninja run at first use compiled it again.
  # The prebuild now builds each module in its own folder; FlashInfer's JIT build log (kept
  # here as jit-builds-*.jsonl, and read by the run into its footer's `first_use`) shows any
  # module the jobs still compiled.
  # The device's site folders carry no bytecode (a pip install writes it): every process
  # compiled torch's modules from source (7.7 s in one worker, session 17). Compiled first,
  # into a cache folder, outside the timed runs.
  precompile
  TAIL=400 step 350 default-fresh env FLASHINFER_JIT_BUILD_LOG="$OUT/jit-builds-fresh.jsonl" \
    $AB run --device cuda --out "$OUT/$GPU_TAG-default-fresh.jsonl"
  TAIL=400 step 150 default-warm env FLASHINFER_JIT_BUILD_LOG="$OUT/jit-builds-warm.jsonl" \
    $AB run --device cuda --out "$OUT/$GPU_TAG-default-warm.jsonl"
  ;;
s13c)  # the head_dim zoo on FlashInfer (issue 36), with the prebuild: flashinfer:tc's decode
  # and flashinfer:fa2's paged prefill (one FA2 prefill module per head_dim; the tc witness
  # case records the d96 fault), then XQA (decode only: it refuses the prefill cases), then
  # the four presets of headdim-models (Gemma-2-9b/27b soft-capped, Phi-3-mini/medium
  # windowed) on fa2, tc, FA3 and cuDNN.
  # One file per run: --resume refuses a file written with another suite or backends.
  H="$AB run --device cuda --max-time-ms 20 --case-timeout 90 --resume"
  TAIL=40 step 170 headdim-tc $H --suite headdim -b flashinfer:tc -b flashinfer:fa2 \
    --out "$OUT/$GPU_TAG-headdim-fi.jsonl"
  TAIL=40 step 120 headdim-xqa $H --suite headdim -b flashinfer:xqa \
    --out "$OUT/$GPU_TAG-headdim-xqa.jsonl"
  TAIL=40 step 180 headdim-models $H --suite headdim-models -b flashinfer:fa2 \
    -b flashinfer:tc -b flash-attn:fa3 -b sdpa:cudnn --out "$OUT/$GPU_TAG-headdim-models.jsonl"
  ;;
s16a)  # session 16, call 2 (a fresh machine: FlashInfer's prefill modules come from the
  # prebuild): the prefill rows `recommend --model` prices the engines' prefill with (issue
  # 31: "prefill no case shared with the default"), as its gap line names them, the four
  # traffics' lengths in one run per model; the head_dim zoo on the two libraries without a
  # JIT (FA3, cuDNN: issue 36 asks two libraries per head_dim); the README's Gemma-2 command
  # (soft-cap 50, sliding and full layers); the GPU test of the prebuild's FA2 module.
  L="trace:azure-code;trace:azure-conv;trace:mooncake-conv;mixed"
  TAIL=30 step 170 prefill-8b $RUN --model llama-3.1-8b --tp 1 -k prefill -l "$L" -b vllm \
    -b sglang --resume --out "$OUT/$GPU_TAG-deploy-prefill-8b.jsonl"
  TAIL=30 step 100 prefill-70b $RUN --model llama-3.1-70b --tp 8 -k prefill -l "$L" -b vllm \
    -b sglang --resume --out "$OUT/$GPU_TAG-deploy-prefill-70b.jsonl"
  H="$AB run --device cuda --max-time-ms 20 --case-timeout 90 --resume"
  TAIL=20 step 130 headdim-nojit $H --suite headdim -b flash-attn:fa3 -b sdpa:cudnn \
    --out "$OUT/$GPU_TAG-headdim.jsonl"
  TAIL=30 step 100 gemma-2-9b $H --model gemma-2-9b --out "$OUT/$GPU_TAG-gemma-2-9b.jsonl"
  TAIL=20 step 50 prebuild-test python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
    tests/test_flashinfer.py -k "prebuil"
  ;;
s17a)  # where a run's time goes off the GPU: on one H100 host the default suite's cases took
  # 46 s after setup, on another 77-82 s (same commit, same rows). The default suite, fresh,
  # with every process profiled (ATTNBENCH_PROFILE); the profiles come back in one tarball.
  TAIL=30 step 350 default-profiled env ATTNBENCH_PROFILE="$OUT/prof" \
    $AB run --device cuda --out "$OUT/$GPU_TAG-default-profiled.jsonl"
  tar czf "$OUT/prof.tgz" -C "$OUT" prof && rm -rf "$OUT/prof"
  nproc; lscpu | grep -E "Model name|^CPU\(s\)|MHz" || true
  ;;
s16b)  # SGLang's prefill at its default page size (1): s16a's rows at page 16 are another
  # option than SGLang's default, so `recommend --engine sglang` left prefill unpriced
  # On a fresh machine the first step's prebuild compiles FA3's and FlashInfer's prefill
  # modules (about 2 min on an H100): at 75 s each, session 17's steps kept no row.
  L="trace:azure-code;trace:azure-conv;trace:mooncake-conv;mixed"
  for m in "llama-3.1-8b 1 8b 330" "llama-3.1-70b 8 70b 200"; do
    set -- $m
    TAIL=12 step "$4" "sglang-prefill-$3" $RUN --model "$1" --tp "$2" -k prefill -l "$L" \
      --page-size 1 -b sglang --resume --out "$OUT/$GPU_TAG-deploy-prefill-sglang-$3.jsonl"
  done
  ;;
s12e)  # the head_dim zoo within the device time s12c left (~600 s): the headdim suite on the
  # two libraries that need no JIT build (FA3, SDPA cuDNN), then its decode half on
  # FlashInfer's fa2 (seven CUDA-core decode modules, d96's known bug included), then
  # Gemma-2-9b (soft-cap 50, sliding and full layers) and Phi-3-mini as presets. The
  # prebuild is off (ATTNBENCH_PREBUILD=0): at 1fe251d it held the default run up to 229 s.
  # One file per run: --resume refuses a file written with another suite or model.
  export ATTNBENCH_PREBUILD=0
  H="$AB run --device cuda --max-time-ms 20 --case-timeout 90 --resume"
  step 140 headdim-nojit $H --suite headdim -b flash-attn:fa3 -b sdpa:cudnn \
    --out "$OUT/$GPU_TAG-headdim.jsonl"
  step 190 headdim-fa2 $H --suite scripts/h200/headdim-decode.toml -b flashinfer:fa2 \
    --out "$OUT/$GPU_TAG-headdim-fa2.jsonl"
  step 150 gemma-2-9b $H --model gemma-2-9b -k decode -b flashinfer:fa2 -b flex \
    -b flash-attn:fa3 -b sdpa:cudnn --out "$OUT/$GPU_TAG-gemma-2-9b.jsonl"
  step 60 phi-3-mini $H --model phi-3-mini-4k -k decode -b flashinfer:fa2 -b flash-attn:fa3 \
    -b sdpa:cudnn --out "$OUT/$GPU_TAG-phi-3-mini.jsonl"
  ;;
*) echo "unknown stage $stage (s11a, s11d, s11e, s12a-s12e; older: git history)" >&2 ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
