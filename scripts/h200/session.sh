#!/usr/bin/env bash
# One H200 call of a session, by stage (A, B, C), each step under its own time limit so a slow
# step cannot starve the next; rows are appended as they finish, so a step cut short keeps its
# rows. Through the device tool, with `.device` carried:
#   source .device/setup.sh; ATTNBENCH_GIT_SHA=<commit> bash scripts/h200/session.sh A
# Results land in $OUT/<name>.jsonl (at most 8 files come back); the log in $OUT/log-<stage>.txt.
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
stage=${1:?stage: A, B, C, D, E, P, X or Y}
{
echo "commit ${ATTNBENCH_GIT_SHA:-unknown}; stage $stage; $(date -u +%FT%TZ)"
case $stage in
X)  # session 3, call 1: paged FA3 checked, then the brief suite (page 16), page 64, raggedness
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  step 45 backends $AB backends --device cuda
  step 100 fa3-tests bash -c "timeout -s INT 90 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE tests/test_flash_attn.py -k 'paged or every_variant or fp8_budget' \
    > $OUT/h200-fa3-tests.txt 2>&1; tail -15 $OUT/h200-fa3-tests.txt"
  step 230 brief $RUN --suite brief $ALL --out "$OUT/h200-brief.jsonl"
  step 120 paged64 $RUN --suite scripts/h200/paged64.toml $DEC --out "$OUT/h200-paged64.jsonl"
  step 80 ragged $RUN --suite ragged $DEC --out "$OUT/h200-ragged.jsonl"
  ;;
Y)  # session 3, call 2 (chained, warm kernels): fp8, traces, 70B, trees, shared prefixes, GQA
  step 100 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --out "$OUT/h200-fp8.jsonl"
  step 70 traces $RUN --suite traces $DEC --out "$OUT/h200-traces.jsonl"
  step 80 brief70b $RUN --suite brief70b $DEC --out "$OUT/h200-brief70b.jsonl"
  step 80 trees $RUN --suite trees -b flash-attn:fa3 -b flashinfer:tc -b flashinfer:fa2 \
    -b flashinfer:fa3 -b sdpa:cudnn -b sdpa:efficient --out "$OUT/h200-trees.jsonl"
  step 80 shared_prefix $RUN --suite shared_prefix -b flashinfer:cascade \
    -b flash-attn:fa3-cascade -b flash-attn:fa3 -b flashinfer:tc -b flashinfer:fa2 \
    --out "$OUT/h200-shared-prefix.jsonl"
  step 50 gqa $RUN --suite gqa $DEC --out "$OUT/h200-gqa.jsonl"
  ;;
P)  # a probe before the long calls: the paged FA3 path, the tests that failed last time, tools
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import pynvml; pynvml.nvmlInit(); print('nvml ok', pynvml.nvmlSystemGetDriverVersion())"
  ncu --version | tail -1
  step 60 backends $AB backends --device cuda
  step 240 probe-tests bash -c "timeout -s INT 230 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE tests/test_flash_attn.py tests/test_gpu_core.py 'tests/test_flex.py::test_gpu_every_kind_passes_the_gate' \
    > $OUT/h200-probe-tests.txt 2>&1; tail -30 $OUT/h200-probe-tests.txt"
  ;;
A)
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  step 60 backends $AB backends --device cuda
  # the default suite on a fresh machine: what a new user waits for (JIT compiles included)
  step 420 default $AB run --device cuda --out "$OUT/h200-default.jsonl"
  step 240 brief $RUN --suite brief $ALL --out "$OUT/h200-brief.jsonl"
  ;;
B)
  step 150 paged64 $RUN --suite scripts/h200/paged64.toml $DEC --out "$OUT/h200-paged64.jsonl"
  step 100 ragged $RUN --suite ragged $DEC --out "$OUT/h200-ragged.jsonl"
  step 80 traces $RUN --suite traces $DEC --out "$OUT/h200-traces.jsonl"
  step 90 brief70b $RUN --suite brief70b $DEC --out "$OUT/h200-brief70b.jsonl"
  step 110 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --out "$OUT/h200-fp8.jsonl"
  ;;
C)
  step 60 gqa $RUN --suite gqa $DEC --out "$OUT/h200-gqa.jsonl"
  step 100 trees $RUN --suite trees -b flash-attn:fa3 -b flashinfer:tc -b flashinfer:fa2 \
    -b flashinfer:fa3 -b sdpa:cudnn -b sdpa:efficient -b flex --out "$OUT/h200-trees.jsonl"
  step 100 shared_prefix $RUN --suite shared_prefix -b flashinfer:cascade -b flash-attn:fa3-cascade \
    -b flash-attn:fa3 -b flashinfer:tc -b flashinfer:fa2 --out "$OUT/h200-shared-prefix.jsonl"
  step 220 gpu-tests bash -c "timeout -s INT 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE tests > $OUT/h200-gpu-tests.txt 2>&1; tail -25 $OUT/h200-gpu-tests.txt"
  step 100 default-warm $AB run --device cuda --out "$OUT/h200-default-warm.jsonl"
  ;;
D)  # session 4, call 1: finish the brief and fp8 suites (resumed), FP8 on the GPU, fidelity
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  cp results/h200-brief.jsonl results/h200-fp8.jsonl "$OUT/"
  step 30 backends $AB backends --device cuda
  step 130 brief $RUN --suite brief $ALL --resume --out "$OUT/h200-brief.jsonl"
  step 190 fp8 $RUN --suite fp8 $DEC -b flashinfer:fa3 --resume --out "$OUT/h200-fp8.jsonl"
  step 100 fp8-study $AB fp8 --device cuda --full --out "$OUT/h200-fp8-study.json"
  step 100 fidelity $AB fidelity --ncu --out "$OUT/h200-fidelity.json"
  ;;
E)  # session 4, call 2 (chained): SM activity under ncu, the GPU tests, tuning ragged and fp8
  step 170 sm-activity $AB fidelity --ncu --cases sm-activity --out "$OUT/h200-sm-activity.json"
  step 230 gpu-tests bash -c "timeout -s INT 220 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfE tests > $OUT/h200-gpu-tests.txt 2>&1; tail -25 $OUT/h200-gpu-tests.txt"
  TUNE="$AB tune --device cuda -b flashinfer:fa2 -b flashinfer:tc -b flashinfer:xqa -b flash-attn:fa3"
  step 90 tune-ragged $TUNE --suite ragged --budget-s 80 --out "$OUT/h200-tune-ragged.jsonl"
  step 90 tune-fp8 $TUNE --suite fp8 --budget-s 80 --out "$OUT/h200-tune-fp8.jsonl"
  ;;
esac
echo "=== done $(date -u +%FT%TZ)"; ls -la "$OUT"
} 2>&1 | tee "$OUT/log-$stage.txt"
