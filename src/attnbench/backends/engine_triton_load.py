"""Load the engines' own Triton attention kernels without the engines.

`scripts/h200/pack_engine_triton.sh` extracts the kernel files from the pinned wheels (SGLang
0.5.23, vLLM 0.34.0; Apache-2.0) into a pack folder. Their parent packages are not there: each
is stubbed here with what the kernel files read from it, nothing more.

- SGLang's `decode_attention.py` and `extend_attention.py` import `sglang.srt.environ` (packed:
  stdlib only) and five helpers of `sglang.srt.utils`, whose package pulls orjson, psutil,
  pybase64, requests, PIL, starlette, zmq...: is_hip, is_cuda, is_gfx95_supported,
  is_gfx1250_supported and get_device_core_count. Its `metadata.py` (the decode step's kv-split
  kernel) imports torch and Triton only.
- vLLM's `triton_unified_attention.py` reads three flags of `vllm.envs` (VLLM_BATCH_INVARIANT,
  VLLM_TRITON_FORCE_FIRST_CONFIG, VLLM_TRITON_USE_TD, all off by default), the platform's fp8
  dtype and device family, `vllm.logger.init_logger`, `vllm.utils.math_utils.cdiv` and the
  `KVQuantMode` enum of `vllm.v1.kv_cache_interface` (its first six members, copied).
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any

PACK_ENV = "ATTNBENCH_ENGINE_TRITON"
"""The folder `scripts/h200/pack_engine_triton.sh` fills (default `.device-triton`)."""


def pack_dir() -> Path:
    """The pack of the engines' Triton kernel files (`$ATTNBENCH_ENGINE_TRITON`)."""
    return Path(os.environ.get(PACK_ENV, ".device-triton")).resolve()


KERNEL_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sglang:triton": (
        "sglang 0.5.23",
        (
            "sglang/kernels/ops/attention/decode_attention.py",
            "sglang/kernels/ops/attention/extend_attention.py",
            "sglang/kernels/ops/attention/metadata.py",
        ),
    ),
    "vllm:triton-attn": (
        "vllm 0.34.0",
        ("vllm/v1/attention/ops/triton_unified_attention.py",),
    ),
}
"""Per variant: the wheel and the kernel files it needs from it."""


def pack_missing(name: str) -> str | None:
    """Why variant `name`'s kernel files cannot load here: no Triton, or a file missing from
    the pack (None: both are there)."""
    import importlib.util

    wheel, files = KERNEL_FILES[name]
    if importlib.util.find_spec("triton") is None:
        kernels = "kernel" if len(files) == 1 else "kernels"
        return f"{name} needs Triton and a CUDA GPU (the {wheel} wheel's Triton {kernels})"
    missing = [f for f in files if not (pack_dir() / f).is_file()]
    if missing:
        return (
            f"{name}: {missing[0]} is not in {pack_dir()}; run "
            "scripts/h200/pack_engine_triton.sh (extracts it from the pinned wheel)"
        )
    return None


VLLM_KV_QUANT_MODES = {
    "NONE": 0,
    "FP8_PER_TENSOR": 1,
    "INT8_PER_TOKEN_HEAD": 2,
    "FP8_PER_TOKEN_HEAD": 3,
    "INT4_PER_TOKEN_HEAD": 4,
    "NVFP4": 5,
}
"""vllm/v1/kv_cache_interface.py `KVQuantMode` (0.34.0), the members the kernel file reads."""


def _package(name: str, path: Path | None) -> None:
    """An empty package `name` whose submodules load from `path` (None: none do)."""
    mod = types.ModuleType(name)
    mod.__path__ = [str(path)] if path else []
    sys.modules[name] = mod


def _module(name: str, **attrs: Any) -> None:
    mod = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(mod, key, value)
    sys.modules[name] = mod


def stub_sglang(pack: Path) -> None:
    """Parents of SGLang's kernel files: the packed environ.py, five helpers of srt.utils."""
    import torch

    root = pack / "sglang"
    for name, sub in [
        ("sglang", ""),
        ("sglang.kernels", "kernels"),
        ("sglang.kernels.ops", "kernels/ops"),
        ("sglang.kernels.ops.attention", "kernels/ops/attention"),
        ("sglang.srt", "srt"),
    ]:
        _package(name, root / sub)
    _module(
        "sglang.srt.utils",
        is_hip=lambda: False,
        is_cuda=lambda: True,
        is_gfx95_supported=lambda: False,
        is_gfx1250_supported=lambda: False,
        get_device_core_count=lambda device_id=0: (
            torch.cuda.get_device_properties(device_id).multi_processor_count
        ),
    )


def vllm_logger(name: str) -> Any:
    """vLLM's `init_logger`: a logger with its `debug_once`, `info_once` and `warning_once`
    (the launcher calls `debug_once` when the split-KV scratch has fewer rows than query
    tokens), here the plain calls, with vLLM's extra keywords (`scope`) dropped."""
    log = logging.getLogger(name)
    for level in ("debug", "info", "warning"):
        plain = getattr(log, level)
        setattr(log, f"{level}_once", lambda msg, *args, _plain=plain, **_: _plain(msg, *args))
    return log


def stub_vllm(pack: Path) -> None:
    """Parents of vLLM's kernel file (see the module docstring)."""
    import torch

    root = pack / "vllm"
    for name, sub in [
        ("vllm", root),
        ("vllm.v1", root / "v1"),
        ("vllm.v1.attention", root / "v1" / "attention"),
        ("vllm.v1.attention.ops", root / "v1" / "attention" / "ops"),
        ("vllm.utils", None),
    ]:
        _package(name, sub)
    major, minor = torch.cuda.get_device_capability()
    platform = types.SimpleNamespace(
        fp8_dtype=lambda: torch.float8_e4m3fn,
        is_rocm=lambda: False,
        is_xpu=lambda: False,
        is_cuda=lambda: True,
        is_device_capability_family=lambda family: major * 10 == family,
        is_device_capability=lambda cap: (major, minor) == tuple(cap),
    )
    _module(
        "vllm.envs",
        VLLM_BATCH_INVARIANT=False,
        VLLM_TRITON_FORCE_FIRST_CONFIG=False,
        VLLM_TRITON_USE_TD=False,
    )
    _module("vllm.logger", init_logger=vllm_logger)
    _module(
        "vllm.platforms",
        current_platform=platform,
        vllm_version_matches_substr=lambda sub: False,
    )
    _module("vllm.utils.math_utils", cdiv=lambda a, b: -(a // -b))
    _module(
        "vllm.v1.kv_cache_interface", KVQuantMode=enum.IntEnum("KVQuantMode", VLLM_KV_QUANT_MODES)
    )


@functools.cache
def vllm_unified_attention(pack: Path) -> Any:
    """vLLM 0.34.0's `unified_attention` (TRITON_ATTN's kernel launcher), loaded from `pack`."""
    stub_vllm(pack)
    from vllm.v1.attention.ops.triton_unified_attention import (  # type: ignore[import-not-found]
        unified_attention,
    )

    return unified_attention


@functools.cache
def sglang_decode_attention(pack: Path) -> Any:
    """SGLang 0.5.23's `decode_attention_fwd` (its triton backend's decode), loaded from
    `pack`."""
    stub_sglang(pack)
    from sglang.kernels.ops.attention.decode_attention import (  # type: ignore[import-not-found]
        decode_attention_fwd,
    )

    return decode_attention_fwd


@functools.cache
def sglang_extend_attention(pack: Path) -> Any:
    """SGLang 0.5.23's `extend_attention_fwd` (its triton backend's prefill and append)."""
    stub_sglang(pack)
    from sglang.kernels.ops.attention.extend_attention import (  # type: ignore[import-not-found]
        extend_attention_fwd,
    )

    return extend_attention_fwd


@functools.cache
def sglang_kv_splits_kernel(pack: Path) -> Any:
    """SGLang 0.5.23's `get_num_kv_splits_triton` (the decode step's per-request kv splits)."""
    stub_sglang(pack)
    from sglang.kernels.ops.attention.metadata import (  # type: ignore[import-not-found]
        get_num_kv_splits_triton,
    )

    return get_num_kv_splits_triton


def vllm_kv_quant_mode(name: str) -> Any:
    """A member of the loaded kernel's KVQuantMode (after `vllm_unified_attention`)."""
    return sys.modules["vllm.v1.kv_cache_interface"].KVQuantMode[name]
