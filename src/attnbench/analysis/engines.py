"""Export a hybrid plan as vLLM and SGLang launch options, and say where an engine cannot
express it. Option names and values were looked up in the engines' current sources and docs:

vLLM (`vllm serve`), docs v0.32.0 "Attention Backend Feature Support"
(https://docs.vllm.ai/en/v0.32.0/design/attention_backends/):
  --attention-backend NAME         names of `AttentionBackendEnum`
                                   (vllm/v1/attention/backends/registry.py): FLASH_ATTN,
                                   FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, ... One backend for
                                   prefill and decode alike; `--attention-backend` and
                                   `--attention-config.backend` are mutually exclusive.
  --attention-config JSON          `AttentionConfig` (vllm/config/attention.py, docs "stable"):
                                   `flash_attn_version` in {2, 3, 4}, FLASH_ATTN backend only.
  --kv-cache-dtype                 `CacheDType` (vllm/config/cache.py @ 002f10e0): auto, float16,
                                   bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...
  --block-size N                   `CacheConfig.block_size` (default 16, same file).
  VLLM_ATTENTION_BACKEND           deprecated since v0.14 and no longer read by v0.26
                                   (vllm-project/vllm issue #50292): not emitted.

SGLang (`python -m sglang.launch_server`), python/sglang/srt/server_args.py @ 001067ff
(sgl-project/sglang) and docs https://docs.sglang.io/advanced_features/attention_backend.html:
  --attention-backend / --prefill-attention-backend / --decode-attention-backend
                                   choices ATTENTION_BACKEND_CHOICES: flashinfer, fa3, fa4,
                                   triton, torch_native, flex_attention, trtllm_mha, ...; the
                                   phase-specific ones "have priority over --attention-backend".
  --kv-cache-dtype                 auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, ...
  --page-size N                    "The number of tokens in a page."
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attnbench.analysis.hybrid import Plan

VLLM_VERSION = "vLLM v0.32.0 docs; vllm/config/cache.py @ 002f10e0"
SGLANG_VERSION = "SGLang server_args.py @ 001067ff"

# attnbench library -> engine backend name (None: the engine has no such backend)
_VLLM = {
    "flashinfer": "FLASHINFER",
    "flash-attn": "FLASH_ATTN",
    "flex": "FLEX_ATTENTION",
    "sdpa": None,
    "cudnn": None,
    "reference": None,
}
_SGLANG = {
    "flashinfer": "flashinfer",
    "flash-attn": "fa3",
    "flex": "flex_attention",
    "sdpa": "torch_native",
    "cudnn": None,
    "reference": None,
}


@dataclass
class EngineExport:
    engine: str
    source: str
    args: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        base = "vllm serve MODEL" if self.engine == "vLLM" else "python -m sglang.launch_server"
        if self.engine != "vLLM":
            base += " --model-path MODEL"
        return " ".join([base, *self.args])


def _lib(backend: str | None) -> str:
    return (backend or "").split(":")[0]


def _variant(backend: str | None) -> str:
    return (backend or "").partition(":")[2]


def _fa_version(variant: str) -> int | None:
    """FlashAttention's major version of a flash-attn variant: `fa3`, `fa3-contiguous` (the
    same kernel on a gathered copy) and `fa3-cascade` are 3; `fa2` is 2."""
    base = variant.partition("+")[0].split("-")[0]
    return {"fa3": 3, "fa2": 2, "fa4": 4}.get(base)


NO_DECODE = (
    "no decode row passed the accuracy gate, so no decode backend is chosen: measure decode "
    "(`attnbench run -k decode`)"
)


def _kv(plan: Plan, engine: str) -> tuple[str, str | None]:
    if plan.kv_dtype.startswith("fp8"):
        return plan.kv_dtype, None
    return "auto", f"KV cache in the model dtype ({plan.model_dtype}), as measured"


def export_vllm(plan: Plan) -> EngineExport:
    """vLLM runs one attention backend for prefill and decode: the decode choice is emitted
    (it sets per-token latency); the prefill cost of that compromise is stated from the rows."""
    out = EngineExport("vLLM", VLLM_VERSION)
    dec, pre = plan.decode_backend, plan.prefill_backend
    name = _VLLM.get(_lib(dec)) if dec else None
    if dec is None:
        out.notes.append(NO_DECODE)
    elif name is None:
        out.notes.append(f"vLLM has no backend for {dec}: choose the next variant in the matrix")
    else:
        version = _fa_version(_variant(dec))
        if name == "FLASH_ATTN" and version:
            cfg = json.dumps({"backend": name, "flash_attn_version": version})
            out.args += ["--attention-config", f"'{cfg}'"]
        else:
            out.args += ["--attention-backend", name]
        if name == "FLASHINFER" and _variant(dec):
            out.notes.append(
                f"measured FlashInfer variant `{_variant(dec)}`, but on Hopper vLLM's FLASHINFER "
                "backend runs the tensor-core decode wrapper (flashinfer:tc) and the paged "
                "prefill wrapper (flashinfer:auto) whatever was measured: "
                "`attnbench recommend --engine vllm` ranks what it runs"
            )
    if pre and dec and pre != dec:
        pen = plan.prefill_penalty
        cost = (
            f"{dec} is {pen.ratio:.2f}x the prefill latency of {pre} "
            f"(95% CI {pen.ci_low:.2f}-{pen.ci_high:.2f})"
            if pen is not None
            else f"{dec} has no prefill rows to price this"
        )
        out.notes.append(
            f"cannot express the hybrid (prefill {pre}, decode {dec}): one backend serves both; "
            f"{cost}"
        )
    kv, note = _kv(plan, "vLLM")
    out.args += ["--kv-cache-dtype", kv]
    if note:
        out.notes.append(note)
    if plan.page_size:
        out.args += ["--block-size", str(plan.page_size)]
    _contiguous_note(plan, out)
    return out


def export_sglang(plan: Plan) -> EngineExport:
    """SGLang takes separate prefill and decode backends, so the hybrid maps directly."""
    out = EngineExport("SGLang", SGLANG_VERSION)
    dec, pre = plan.decode_backend, plan.prefill_backend
    names = {}
    for role, backend in (("prefill", pre), ("decode", dec)):
        if backend is None:
            continue
        name = _SGLANG.get(_lib(backend))
        if name == "fa3" and _fa_version(_variant(backend) or "fa3") != 3:
            name = None  # SGLang has no FlashAttention-2 backend
        if name is None:
            out.notes.append(f"SGLang has no attention backend for {backend} ({role})")
        else:
            names[role] = name
    if dec is None:
        out.notes.append(NO_DECODE)
    if names and len(set(names.values())) == 1 and len(names) == 2:
        out.args += ["--attention-backend", names["decode"]]
    else:
        for role, name in names.items():
            out.args += [f"--{role}-attention-backend", name]
    for role, backend in (("prefill", pre), ("decode", dec)):
        if _lib(backend) == "flashinfer" and _variant(backend):
            out.notes.append(
                f"{role}: measured FlashInfer variant `{_variant(backend)}`, but SGLang's "
                "flashinfer backend runs its own paths (decode: fa2 wrapper, tensor cores for "
                "fp8 KV or group >= 4, page size 1): `attnbench recommend --engine sglang` "
                "ranks what it runs"
            )
        if _lib(backend) == "sdpa":
            out.notes.append(f"{role}: torch_native is SGLang's SDPA path (no native paging)")
    kv, note = _kv(plan, "SGLang")
    out.args += ["--kv-cache-dtype", kv]
    if note:
        out.notes.append(note)
    if plan.page_size:
        out.args += ["--page-size", str(plan.page_size)]
    _contiguous_note(plan, out)
    return out


FA3 = "flash-attn:fa3"
FA3_CONTIGUOUS = "flash-attn:fa3-contiguous"


def measured_contiguous(backend: str | None, details: Mapping[str, Any]) -> bool:
    """True only for rows that really read a contiguous copy of the KV cache:
    `flash-attn:fa3-contiguous`, or an older `flash-attn:fa3` row (before FA3 read the pages)
    whose `details.kv_cache` is not `paged`. A `+tuned` suffix names the same kernel."""
    name = (backend or "").partition("+")[0]
    if name == FA3_CONTIGUOUS:
        return True
    return name == FA3 and details.get("kv_cache") != "paged"


def _contiguous_note(plan: Plan, out: EngineExport) -> None:
    if measured_contiguous(plan.decode_backend, plan.decode_details):
        out.notes.append(
            f"{plan.decode_backend} was measured on a contiguous (gathered) KV cache, not the "
            "paged one an engine uses: its paged kernel may differ"
        )


def export(plan: Plan) -> list[EngineExport]:
    return [export_vllm(plan), export_sglang(plan)]
