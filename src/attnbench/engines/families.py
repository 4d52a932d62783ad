"""Which attention backend vLLM and SGLang pick on Hopper for each attention family, which
ones a user may name instead, and the engine's own refusal for the others.

A family is what a model's attention needs beyond plain GQA (`WorkloadSpec.features()`):
`sinks` (gpt-oss: sinks on every layer, a window of 128 on every other one), `softcap`
(Gemma-2: a soft-cap of 50 on every layer, a window of 4096 on every other one), `window`
(windows only: Phi-3, Gemma-3) and `plain`. A model with several layer kinds takes one
decision for the whole model (the engines pick one backend per model), so the family is the
union of its layers' features. Read from the engine releases attnbench pins as the newest
(vLLM 0.34.0, SGLang 0.5.23), each fact cited with its file; MLA models are `engines.mla`'s.

What attnbench does with it: `Option.variant` is the engine variant that replays the engine's
call (`engines.paths.kernel_path`), None where attnbench has none (the reason in `why`);
`family_default` is the baseline a recommendation is measured against.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from attnbench.engines.paths import SGLANG_HOOK_0523, VLLM_FI_034, Engine, Source
from attnbench.engines.setting import SGLANG_TRITON, VLLM_TRITON

Family = Literal["plain", "window", "sinks", "softcap", "mla"]

_VLLM = ("vllm-project/vllm", "62d4bc3c7")
VLLM_PRIORITY = Source(*_VLLM, "vllm/platforms/cuda.py")
VLLM_VALIDATE = Source(*_VLLM, "vllm/v1/attention/backend.py")
VLLM_FA_UTILS = Source(*_VLLM, "vllm/v1/attention/backends/fa_utils.py")
_SGLANG = ("sgl-project/sglang", "v0.5.23")
SGLANG_DEFAULT = Source(*_SGLANG, "python/sglang/srt/arg_groups/model_override_base.py")
SGLANG_GPT_OSS = Source(*_SGLANG, "python/sglang/srt/arg_groups/model_overrides/gpt_oss.py")
SGLANG_GEMMA2 = Source(*_SGLANG, "python/sglang/srt/arg_groups/model_overrides/gemma2_gemma3.py")
SOURCES: tuple[Source, ...] = (
    VLLM_PRIORITY,
    VLLM_VALIDATE,
    VLLM_FA_UTILS,
    VLLM_TRITON,
    VLLM_FI_034,
    SGLANG_DEFAULT,
    SGLANG_GPT_OSS,
    SGLANG_GEMMA2,
    SGLANG_HOOK_0523,
    SGLANG_TRITON,
)

SGLANG_SINKS_ELSEWHERE = (
    "SGLang gives a model with attention sinks triton (never flashinfer) only where neither "
    "its Hopper default (fa3, CUDA >= 12.3, no speculative topk > 1) nor its SM100 default "
    f"(trtllm_mha) applies ({SGLANG_DEFAULT.cite()} get_default_attn_backend)"
)
"""Where SGLang's "sinks -> triton" rule applies: not on Hopper."""


@dataclass(frozen=True)
class Option:
    """One backend of an engine for one family: the engine's answer and attnbench's."""

    backend: str
    """The engine's name for it (`--attention-backend`)."""
    variant: str | None
    """The attnbench engine variant that replays it; None: none (why says so)."""
    why: str
    """The engine's rule that takes or refuses it, one line."""
    source: Source
    refused: bool = False
    """The engine itself refuses this backend for the family (the reason is `why`)."""


def family_of(features: Iterable[str]) -> Family:
    """The family of a model (or case) with these features (`WorkloadSpec.features()`)."""
    found = set(features)
    order: tuple[Family, ...] = ("mla", "sinks", "softcap", "window")
    return next((f for f in order if f in found), "plain")


_VLLM_FA = Option(
    "FLASH_ATTN",
    "vllm:flash-attn",
    "first of SM90's priority [FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, "
    "TURBOQUANT] that validates: head sizes <= 256, sliding window supported, sinks where FA "
    "is 3 or 4 (flash_attn_supports_sinks), no soft-cap check",
    VLLM_PRIORITY,
)
_VLLM_TRITON = Option(
    "TRITON_ATTN",
    "vllm:triton-attn",
    "supports_sink True, supports_sliding_window True, head sizes >= 32, soft-cap passed to "
    "unified_attention",
    VLLM_TRITON,
)
_VLLM_FI_SINKS = Option(
    "FLASHINFER",
    None,
    "validates on SM90 only where XQA decode can load (supports_sink -> "
    "supports_trtllm_attention: NVIDIA's cubins); then decode runs XQA and prefill "
    "BatchAttentionWithAttentionSinkWrapper; attnbench replays the pinned commit, where "
    "FLASHINFER serves no sinks",
    VLLM_FI_034,
)
_VLLM_FI = Option(
    "FLASHINFER",
    "vllm:flashinfer",
    "head sizes 64, 128, 256, 512; sliding window and logits_soft_cap passed to plan (one "
    "window per KV-cache group)",
    VLLM_FI_034,
)
_VLLM_FLEX_SINKS = Option(
    "FLEX_ATTENTION",
    None,
    "validate_configuration: 'attention sinks not supported' (supports_sink is False)",
    VLLM_VALIDATE,
    refused=True,
)
_SGLANG_FA3_SINKS = Option(
    "fa3",
    "sglang:fa3",
    "gpt-oss's override sets fa3 on SM90 when no backend is named; FA3 gets window_size, "
    "sinks and softcap",
    SGLANG_GPT_OSS,
)
_SGLANG_FA3 = Option(
    "fa3",
    "sglang:fa3",
    "MHA on Hopper (CUDA >= 12.3, no speculative topk > 1) defaults to fa3; Gemma-2's override "
    "only disables the hybrid SWA memory pool",
    SGLANG_DEFAULT,
)
_SGLANG_TRITON = Option(
    "triton",
    "sglang:triton",
    "decode_attention_fwd / extend_attention_fwd take sinks and logit_cap; windows read "
    "window_kv_indices (decode: the last sliding_window_size tokens, one key short: "
    "sgl-project/sglang#32087)",
    SGLANG_TRITON,
)
_SGLANG_FI_SINKS = Option(
    "flashinfer",
    "sglang:flashinfer",
    "asserts 'GptOssForCausalLM requires one of [triton, trtllm_mha, fa3, fa4, ...] attention "
    "backend'",
    SGLANG_HOOK_0523,
    refused=True,
)
_SGLANG_FI = Option(
    "flashinfer",
    "sglang:flashinfer",
    "window layers through their own wrapper (window_left, seq lens clamped to window + 1), "
    "logits_soft_cap from the layer's logit_cap",
    SGLANG_DEFAULT,
)

FAMILY_OPTIONS: dict[tuple[Engine, Family], tuple[Option, ...]] = {
    ("vllm", "sinks"): (_VLLM_FA, _VLLM_FI_SINKS, _VLLM_TRITON, _VLLM_FLEX_SINKS),
    ("vllm", "softcap"): (_VLLM_FA, _VLLM_FI, _VLLM_TRITON),
    ("vllm", "window"): (_VLLM_FA, _VLLM_FI, _VLLM_TRITON),
    ("sglang", "sinks"): (_SGLANG_FA3_SINKS, _SGLANG_TRITON, _SGLANG_FI_SINKS),
    ("sglang", "softcap"): (_SGLANG_FA3, _SGLANG_FI, _SGLANG_TRITON),
    ("sglang", "window"): (_SGLANG_FA3, _SGLANG_FI, _SGLANG_TRITON),
}
"""Per engine and family: the engine's default first, then what a user may name, then what the
engine refuses (`refused`). Plain GQA is `engines.paths.default_setting`'s."""


def family_options(engine: Engine, features: Iterable[str]) -> tuple[Option, ...] | str:
    """The backends `engine` offers on Hopper for a model with `features`, default first, or
    why this module does not answer (MLA, plain GQA)."""
    family = family_of(features)
    if family == "mla":
        return f"{engine}: MLA models run on the engine's MLA backends (engines.mla)"
    if family == "plain":
        return f"{engine}: plain GQA/MHA defaults are engines.paths.default_setting's"
    return FAMILY_OPTIONS[(engine, family)]


def family_default(engine: Engine, features: Iterable[str]) -> Option | str:
    """The backend `engine` picks on Hopper when none is named, for a model with `features`;
    a string where this module does not answer (see `family_options`)."""
    found = family_options(engine, features)
    return found if isinstance(found, str) else found[0]
