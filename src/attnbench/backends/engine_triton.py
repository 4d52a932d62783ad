"""The engines' own Triton attention backends: SGLang's `triton` and vLLM's `TRITON_ATTN`.

Their kernels are Triton files inside the engines' wheels (Apache-2.0), not in a kernel
library: SGLang 0.5.23 `sglang/kernels/ops/attention/decode_attention.py` and
`extend_attention.py`, vLLM 0.34.0 `vllm/v1/attention/ops/triton_unified_attention.py`. Neither
imports alone: SGLang's import `sglang.srt.environ` (stdlib only) and `sglang.srt.utils` (whose
package pulls orjson, psutil, pybase64, requests, PIL, starlette, zmq...) for five helpers
(is_hip, is_cuda, is_gfx95_supported, is_gfx1250_supported, get_device_core_count); vLLM's
import `vllm.envs`, `vllm.logger`, `vllm.platforms`, `vllm.triton_utils` and
`vllm.v1.kv_cache_interface`. `scripts/h200/pack_engine_triton.sh` extracts the files from the
pinned wheels into `.device-triton/` (ignored by git, carried to the GPU) and
`scripts/h200/engine_triton_probe.py` loads them there under stub parent packages.

vLLM's call is replayed (`vllm:triton-attn`, `backends.vllm_triton`: its cache layout, window,
sinks, soft-cap, fp8 scale and 2D/3D launch choice). SGLang's is not yet (its kv-split count
and window indices): `sglang:triton` refuses every case with that reason, so no row claims an
engine kernel that did not run. The loading itself is `backends.engine_triton_load`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from attnbench.backends import vllm_triton
from attnbench.backends.base import PlannedRun, Unsupported, UnsupportedCase
from attnbench.backends.engine_triton_load import KERNEL_FILES, PACK_ENV, pack_missing
from attnbench.backends.features import MLA_VARIANTS, missing_feature
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from attnbench.backends.vllm_triton import VllmTritonAttn

__all__ = ["KERNEL_FILES", "PACK_ENV", "TritonEngineVariant", "backends"]

NOT_REPLAYED = (
    "{name}: the engine's Triton kernel file is packed, but attnbench does not replay the "
    "engine's call yet: SGLang 0.5.23's triton decode picks its split-KV kernel (kv splits "
    "from get_num_kv_splits_triton) or Lean work-centric attention by a CUDA-graph capture "
    "policy (triton_backend.py forward_decode)"
)


class TritonEngineVariant:
    """One engine's Triton attention backend (see the module docstring)."""

    devices: tuple[str, ...] = ("cuda",)

    def __init__(self, name: str) -> None:
        if name not in KERNEL_FILES:
            raise ValueError(
                f"no engine Triton variant {name!r}; allowed: {', '.join(KERNEL_FILES)}"
            )
        self.name = name
        self.wheel, self.files = KERNEL_FILES[name]
        self.summary = (
            f"the engine's own Triton kernels ({self.wheel} wheel: {', '.join(self.files)})"
        )
        self.knobs: Mapping[str, tuple[object, ...]] = {}

    def __repr__(self) -> str:
        return f"TritonEngineVariant({self.name!r})"

    def available(self) -> str | None:
        """Why the engine's Triton kernels cannot run here (they always cannot, for now)."""
        return pack_missing(self.name) or NOT_REPLAYED.format(name=self.name)

    def describe(self) -> str:
        return self.summary

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        mla = "{who} is the engine's GQA/MHA backend; MLA cases run on " + MLA_VARIANTS
        refused = missing_feature(self.name, spec, ("window", "sinks", "softcap"), {"mla": mla})
        return refused or Unsupported(self.available() or NOT_REPLAYED.format(name=self.name))

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        raise UnsupportedCase(self.available() or NOT_REPLAYED.format(name=self.name))


def backends(engine: str) -> list[TritonEngineVariant | VllmTritonAttn]:
    """The engine's Triton variants: vLLM's replayed, SGLang's refusing (module docstring)."""
    if engine == "vllm":
        return list(vllm_triton.backends())
    return [TritonEngineVariant(n) for n in KERNEL_FILES if n.startswith(f"{engine}:")]
