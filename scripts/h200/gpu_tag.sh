#!/usr/bin/env bash
# Sourced by the device scripts: GPU_TAG names the card the call really got (`h200`, `h100`,
# or `gpu`), so that every file the call writes says where it was measured. A call for an H200
# may be given an H100 (session 15: three calls were), and its files must not say h200.
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
  | grep -o -i -E 'h100|h200|h20|a100|b200|l40s' | head -1 | tr '[:upper:]' '[:lower:]')
GPU_TAG=${GPU_TAG:-gpu}
export GPU_TAG
