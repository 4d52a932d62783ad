#!/usr/bin/env bash
# Run HERE (not on the GPU, which has no network): extract the engines' own Triton attention
# kernels, and the few files they import, from the pinned wheels into .device-triton/ (ignored
# by git, well under 2 MB), to carry to the GPU: run(carry=[".device-triton"], ...).
# sglang 0.5.23: 39 MB wheel; vllm 0.34.0: 239 MB wheel (both Apache-2.0; LICENSE files kept).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}  # any Python with pip: it only downloads and unzips
WHL=${WHL:-/tmp/engine-wheels}
OUT=.device-triton
mkdir -p "$WHL" "$OUT"
"$PY" -m pip download -q --no-deps sglang==0.5.23 -d "$WHL"
"$PY" -m pip download -q --no-deps vllm==0.34.0 -d "$WHL"
unzip -q -o "$WHL"/sglang-0.5.23-*.whl -d "$OUT" \
  'sglang/kernels/ops/attention/decode_attention.py' \
  'sglang/kernels/ops/attention/extend_attention.py' \
  'sglang/kernels/ops/attention/score_mod.py' \
  'sglang/kernels/ops/attention/metadata.py' \
  'sglang/srt/environ.py' \
  'sglang-0.5.23.dist-info/licenses/*'
unzip -q -o "$WHL"/vllm-0.34.0-*.whl -d "$OUT" \
  'vllm/v1/attention/ops/triton_unified_attention.py' \
  'vllm/v1/attention/ops/triton_attention_helpers.py' \
  'vllm/triton_utils/*' \
  'vllm-0.34.0.dist-info/licenses/*' 2>/dev/null || true
du -sh "$OUT"
find "$OUT" -name '*.py' | sort
