"""The engines' own Triton attention backends: SGLang's `triton` and vLLM's `TRITON_ATTN`.

Their kernels are Triton files inside the engines' wheels (Apache-2.0), not in a kernel
library: SGLang 0.5.23 `sglang/kernels/ops/attention/decode_attention.py`,
`extend_attention.py` and `metadata.py`, vLLM 0.34.0
`vllm/v1/attention/ops/triton_unified_attention.py`. Neither imports alone: SGLang's import
`sglang.srt.environ` (stdlib only) and `sglang.srt.utils` (whose package pulls orjson, psutil,
pybase64, requests, PIL, starlette, zmq...) for five helpers (is_hip, is_cuda,
is_gfx95_supported, is_gfx1250_supported, get_device_core_count); vLLM's import `vllm.envs`,
`vllm.logger`, `vllm.platforms`, `vllm.triton_utils` and `vllm.v1.kv_cache_interface`.
`scripts/h200/pack_engine_triton.sh` extracts the files from the pinned wheels into
`.device-triton/` (ignored by git, carried to the GPU) and `scripts/h200/engine_triton_probe.py`
loads them there under stub parent packages; the loading itself is
`backends.engine_triton_load`.

Both calls are replayed, each by its own module: `vllm:triton-attn` (`backends.vllm_triton`:
its cache layout, window, sinks, soft-cap, fp8 scale and 2D/3D launch choice) and
`sglang:triton` (`backends.sglang_triton`: its token pool, the CUDA-graph-padded decode batch
and its kv splits, window indices, sinks, logit_cap, fp8 scales, and the extend kernel for
prefill and append). This module lists them per engine.
"""

from __future__ import annotations

from attnbench.backends import sglang_triton, vllm_triton
from attnbench.backends.engine_triton_load import KERNEL_FILES, PACK_ENV
from attnbench.backends.sglang_triton import SglangTritonAttn
from attnbench.backends.vllm_triton import VllmTritonAttn

__all__ = ["KERNEL_FILES", "PACK_ENV", "EngineTriton", "backends"]

EngineTriton = SglangTritonAttn | VllmTritonAttn
"""An engine's own Triton variant."""


def backends(engine: str) -> list[EngineTriton]:
    """The engine's own Triton variants (none for an engine without one)."""
    replayed: dict[str, list[EngineTriton]] = {
        "vllm": list(vllm_triton.backends()),
        "sglang": list(sglang_triton.backends()),
    }
    return replayed.get(engine, [])
