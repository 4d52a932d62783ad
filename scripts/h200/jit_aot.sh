#!/usr/bin/env bash
# Make FlashInfer load the carried JIT cache instead of compiling every module again.
#
# The carried cache (jit-cache.txz, or the jit-cache.tgz.part* that .device/setup.sh restores)
# keeps each module's .so but not its object files or ninja logs (too big to carry). FlashInfer
# 0.7.4 loads a JIT module only through ninja (jit/core.py: `try_load` returns AOT artifacts only,
# `build` runs ninja on the module's build.ninja), and ninja rebuilds a .so whose .o inputs are
# missing: on a fresh machine each "cached" module is compiled again. (On the H200, test_mla's
# decode-bf16, whose two MLA modules are in the cache, took 47 s, as long as decode-fp16, whose
# two are not; test_flashinfer's decode-bf16, four carried modules, took 106 s.)
# FlashInfer loads an AOT artifact, <flashinfer package>/data/aot/<name>/<name>.so (jit/env.py
# `get_aot_artifacts`), as it is, and falls back to a JIT build if it cannot: this links every
# carried cached_ops/<name>/<name>.so there. Idempotent; run it after the cache is unpacked and
# `source .device/setup.sh` (which sets FLASHINFER_WORKSPACE_BASE and PYTHONPATH), before
# anything imports flashinfer:
#   tar xJf jit-cache.txz -C /tmp; source .device/setup.sh; bash scripts/h200/jit_aot.sh
set -euo pipefail
py=${PYTHON:-python3}
pkg=$("$py" -c 'import importlib.util as u; s = u.find_spec("flashinfer")
print(s.submodule_search_locations[0] if s and s.submodule_search_locations else "")')
if [ -z "$pkg" ]; then
  echo "jit_aot: no flashinfer package here; nothing linked"
  exit 0
fi
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$pkg/_build_meta.py" 2>/dev/null || true)
arch=${FLASHINFER_CUDA_ARCH_LIST:-}
arch=${arch//./}
case $arch in *[\ \;,]* | "") arch="*" ;; esac # several archs: take whichever dirs exist
base=${FLASHINFER_WORKSPACE_BASE:-$HOME}/.cache/flashinfer
aot=$pkg/data/aot
linked=0
shopt -s nullglob
for so in "$base"/${version:-*}/$arch/cached_ops/*/*.so; do
  name=$(basename "$(dirname "$so")")
  [ "$(basename "$so")" = "$name.so" ] && [ -s "$so" ] || continue
  mkdir -p "$aot/$name"
  if [ ! "$so" -ef "$aot/$name/$name.so" ]; then
    ln -f "$so" "$aot/$name/$name.so" 2>/dev/null || cp -f "$so" "$aot/$name/$name.so"
  fi
  linked=$((linked + 1))
done
echo "jit_aot: $linked carried FlashInfer modules linked as AOT artifacts under $aot" \
  "(from $base/${version:-*}/$arch/cached_ops)"
