#!/usr/bin/env bash
# Rebuild jit-cache.txz (git-ignored; carried to the H200 beside .device) from the
# jit-cache.tgz.part* files a device call returned, keeping it under the carry limit:
#   bash scripts/h200/jit_cache.sh /work/.device/<n>      # the call's files_at folder
# Leaves out sources, objects and the modules cheapest to compile again (see session.sh), then
# prints the carry total (tracked tree + .device + cache) against the 64 MiB limit.
# Without objects ninja rebuilds every module it is asked for: scripts/h200/jit_aot.sh, run once
# the cache is unpacked, makes FlashInfer load the carried .so files as AOT modules instead.
set -euo pipefail
parts=${1:?folder holding jit-cache.tgz.part*}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$parts"/jit-cache.tgz.part* | tar xzf - -C "$work"
tar cf - -C "$work" --exclude='*.o' --exclude='*.ninja*' --exclude='*.d' --exclude='*.cu' \
  --exclude='*.cuh' --exclude='*e5m2*' --exclude='*token_head_sf*' --exclude=fmha_cudnn_gen \
  --exclude='*q_f16_dtype_kv_e4m3*' --exclude='*spec_q_seq_len_1024*' \
  --exclude='*spec_q_seq_len_8192*' --exclude='xqa_*head_dim_64_*' \
  --exclude=flashinfer_jit.log flashinfer-ws |
  xz -9e -T1 > jit-cache.txz.new
mv jit-cache.txz.new jit-cache.txz
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
site=$(du -cb .device | tail -1 | cut -f1)
cache=$(stat -c %s jit-cache.txz)
total=$((tree + site + cache))
echo "jit-cache.txz $((cache / 1024)) KiB; carry $((total / 1048576)) MiB of 64 MiB" \
  "(tree $((tree / 1048576)), .device $((site / 1048576)))"
[ "$total" -lt $((64 * 1048576)) ] || { echo "over the carry limit: leave more modules out" >&2; exit 1; }
