#!/usr/bin/env bash
# The GPU tests (`pytest -m gpu`) in groups that each fit a few minutes of one device call; a
# full pass is groups a, b, c and d (several in one call if its time allows: `... a b`). Through
# the device tool, carry [".device", "jit-cache.txz"]:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; trap - EXIT
#   bash scripts/h200/gpu_tests.sh a
# (from session.sh: `step 390 gpu-tests-a bash scripts/h200/gpu_tests.sh a`, a step limit above
# the group's own, GPU_TESTS_LIMIT).
# Each group writes $OUT/$GPU_TAG-gpu-tests-<group>.txt: pytest's report (slowest 15, failures),
# then the FlashInfer modules it JIT-compiled and how long ninja took on each.
# Where the time goes is FlashInfer's JIT: 15-100 s per kernel module missing from the carried
# cache (jit-cache.txz: head_dim 128 bf16/fp16/e4m3-KV decode and prefill, MLA bf16, XQA at
# groups 4/8 and gpt-oss's d64). jit_aot.sh makes that cache load at all (without it every
# module compiles again on a fresh machine, which group b cannot absorb). Estimates with it, from
# the session 7/8 logs (pytest and CUDA start-up ~20 s each):
#   a ~200 s  FA3 (86 cases, prebuilt, ~0.9 s each), cuDNN, fidelity, timers, SDPA, suites,
#             live replay, MLA (compiles: MLA fa3 bf16-q/e4m3-latent)
#   b ~280 s  FlashInfer's variants (compiles: XQA multi-token q_len 4 bf16 and e4m3, XQA group
#             7, cascade merge) and the FP8 study's kernel check (e5m2 decode and fa2 prefill,
#             fa2 per-token-scale e4m3 and e5m2)
#   c ~270 s  windows and sinks (compiles: d64 sliding-window decode, fa2 and fa3 prefill) and
#             Flex (torch.compile, ~80 s)
#   d ~300 s  `gpu_slow` cases: FlashInfer e5m2 (decode, fa2, fa3 prefill; ~60 s less right
#             after b on the same machine), MLA fp16 (fa2, fa3), window fp16 (four modules)
# A group cut at its limit (GPU_TESTS_LIMIT, default 330 s) still writes its report.
#   bash scripts/h200/gpu_tests.sh --list     # the groups: name, -m expression, files
set -uo pipefail
ROUTINE="gpu and not gpu_slow"
declare -A MARK=([a]=$ROUTINE [b]=$ROUTINE [c]=$ROUTINE [d]="gpu_slow")
declare -A FILES=(
  [a]="tests/test_cudnn.py tests/test_fidelity.py tests/test_flash_attn.py tests/test_gpu_core.py
       tests/test_mla.py tests/test_replay_fa3plan.py tests/test_replay_live.py tests/test_sdpa.py
       tests/test_stream_read.py tests/test_suites.py tests/test_timed_output.py
       tests/test_fidelity_small.py tests/test_flashmla.py"
  [b]="tests/test_flashinfer.py tests/test_fp8study.py"
  [c]="tests/test_windows.py tests/test_flex.py tests/test_softcap.py tests/test_vllm_triton.py tests/test_sglang_triton.py"
  [d]="tests/test_flashinfer.py tests/test_mla.py tests/test_windows.py tests/test_softcap.py"
)
GROUPS_IN_ORDER="a b c d"

if [ "${1:-}" = "--list" ]; then
  for g in $GROUPS_IN_ORDER; do
    printf '%s\t%s\t%s\n' "$g" "${MARK[$g]}" "$(echo ${FILES[$g]})"
  done
  exit 0
fi
[ $# -gt 0 ] || { echo "usage: $0 GROUP... (groups: $GROUPS_IN_ORDER) | --list" >&2; exit 2; }
for g in "$@"; do
  [ -n "${MARK[$g]:-}" ] || { echo "unknown group $g (groups: $GROUPS_IN_ORDER)" >&2; exit 2; }
done

OUT=${OUT:-/tmp/out}
source scripts/h200/gpu_tag.sh  # files named for the card the call got
mkdir -p "$OUT"
if [ ! -d /tmp/flashinfer-ws ] && [ -f jit-cache.txz ]; then
  tar xJf jit-cache.txz -C /tmp
fi
bash "$(dirname "$0")/jit_aot.sh" || echo "jit_aot failed: the carried modules compile again"

jit_dirs() {  # the JIT build folders of this FlashInfer workspace
  ls -d "${FLASHINFER_WORKSPACE_BASE:-$HOME}"/.cache/flashinfer/*/*/cached_ops/*/ 2>/dev/null
}

compiled_since() {  # STAMP: the modules ninja linked after STAMP, with ninja's time on each
  local dir name secs
  for dir in $(jit_dirs); do
    name=$(basename "$dir")
    [ "$dir$name.so" -nt "$1" ] || continue
    secs=$(awk '!/^#/ && $2 > m {m = $2} END {printf "%.0f", m / 1000}' "$dir.ninja_log" \
      2>/dev/null)
    echo "compiled ${secs:-?} s  $name"
  done
}

status=0
for g in "$@"; do
  log=$OUT/$GPU_TAG-gpu-tests-$g.txt
  stamp=$(mktemp)
  t0=$SECONDS
  # shellcheck disable=SC2086  # FILES is a word list
  timeout -s INT -k 30 "${GPU_TESTS_LIMIT:-330}" python3 -m pytest -m "${MARK[$g]}" -q \
    -p no:cacheprovider -rfE --durations=15 ${FILES[$g]} > "$log" 2>&1
  rc=$?
  {
    echo "=== group $g: -m '${MARK[$g]}' $(echo ${FILES[$g]}): exit $rc after $((SECONDS - t0)) s"
    echo "=== commit ${ATTNBENCH_GIT_SHA:-unknown (pass ATTNBENCH_GIT_SHA)}; $(date -u +%FT%TZ)"
    echo "=== FlashInfer modules JIT-compiled in group $g:"
    compiled=$(compiled_since "$stamp")
    echo "${compiled:-none (all loaded from the cache or already compiled)}"
  } >> "$log"
  rm -f "$stamp"
  tail -"${TAIL:-25}" "$log"
  [ "$rc" -eq 0 ] || status=$rc
done
exit "$status"
