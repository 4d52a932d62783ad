"""`sglang:triton`: SGLang 0.5.23's `triton` attention backend, its own Triton kernels
(`sglang/kernels/ops/attention/decode_attention.py`, `extend_attention.py`, and the decode
step's kv-split kernel in `metadata.py`) called as `TritonAttnBackend` calls them
(`sglang/srt/layers/attention/triton_backend.py`), loaded from the pack that
`scripts/h200/pack_engine_triton.sh` extracts from the wheel (`engine_triton_load`).

The cache is SGLang's token pool: K and V buffers `[num_slots, Hkv, d]`, one row per token
slot, read through `kv_indptr` / `kv_indices` (token slots, not pages: with `--page-size` > 1
the kernels only split a slot into page and offset, the same address). The case's NHD pages
are copied into it in plan, slot = page * page_size + offset.

Decode (`forward_decode`, one query token per request; CUDA graphs on, the default):

    q, o        [graph_bs, Hq, d]   the batch padded to its capture size (`paths.
                                    sglang_graph_batch`); padding rows read one token
    kv_indices  each request's tokens; a window layer's last min(kv_len, W) of them, W =
                the layer's sliding_window_size = HF sliding_window - 1 (= window_left)
    num_kv_splits  SGLang's `get_num_kv_splits_triton` over the padded batch's full seq lens
                (padding at 1), max 8; run per step before the graph (`replan`)
    sm_scale * k_scale into stage 1, v_scale and the sinks in the split reduction, logit_cap

A window layer's decode reads min(kv_len, W) tokens, one fewer than the W + 1 keys its own
extend kernel, FA3 and FlashInfer give (sgl-project/sglang#32087, closed unmerged): replayed as
is, such cases (kv_len > W) fail the gate with the one key SGLang drops.

Prefill and append (`forward_extend`, eager: the breakable prefill graph runs attention outside
the captured body): `extend_attention_fwd` with the new tokens' K/V contiguous in the query
dtype (with an fp8 cache: the cache's values, dequantised, as the model hands them before it
stores them), the cached prefix through `kv_indptr` / `kv_indices` (a window layer's: the
prefix's last min(prefix, W) tokens, masked in the kernel), `sliding_window_size` = W.

fp8 (e4m3, per-tensor scales): the grouped decode kernel casts q and P to fp8 for its dots, so
its budget is fp8's and its reference uses the fp8 query; the MHA decode kernel multiplies in
fp32. The extend kernel casts q and P to fp8 for the cached prefix only.

Refused: MLA (SGLang's triton MLA path and head dims 192/288/576 are other code), trees (a
verify custom mask), HND pages, fp8 e5m2, non-causal attention.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.engine_triton_load import KERNEL_FILES, pack_dir
from attnbench.backends.features import MLA_VARIANTS, missing_feature
from attnbench.engines.paths import SGLANG_MAX_CAPTURE, sglang_graph_batch, sglang_triton_launch
from attnbench.engines.paths import SGLANG_TRITON_KINDS as KINDS
from attnbench.engines.paths import SGLANG_TRITON_MAX_KV_SPLITS as MAX_KV_SPLITS
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.quant import quantize
from attnbench.workload.spec import WorkloadSpec

NAME = "sglang:triton"
WHEEL, FILES = KERNEL_FILES[NAME]
MLA_HEAD_DIMS = (192, 288, 576)
"""Head dims the kernels split into a nope and a rope part (`BLOCK_DPE` > 0): MLA shapes."""


def refusal(spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why SGLang's triton backend (as replayed here) cannot run `spec` (None: it can)."""
    mla = "{who} is replayed for GQA/MHA; MLA cases run on " + MLA_VARIANTS
    refused = missing_feature(NAME, spec, ("window", "sinks", "softcap"), {"mla": mla})
    if refused is not None:
        return refused.reason
    if device.kind != "cuda":
        return f"{NAME} runs the engine's Triton kernels on a CUDA GPU; this is {device.kind}"
    if spec.kind not in KINDS:
        return f"{NAME}: kind={spec.kind} is not replayed ({', '.join(KINDS)} are)"
    if not spec.causal:
        return f"{NAME}: decoder attention is causal here"
    if spec.head_dim in MLA_HEAD_DIMS:
        return f"{NAME}: head_dim {spec.head_dim} takes the kernels' MLA (rope-split) path"
    if spec.kv_layout != "NHD":
        return f"{NAME}: the case's pages are copied into SGLang's token pool from NHD only"
    if spec.dtype not in ("bfloat16", "float16"):
        return f"{NAME}: 16-bit queries only, not {spec.dtype}"
    if spec.is_fp8 and spec.kv_dtype != "fp8_e4m3":
        return f"{NAME}: an fp8 cache is replayed as e4m3 only, not {spec.kv_dtype}"
    if not spec.is_fp8 and spec.kv_dtype != spec.dtype:
        return f"{NAME}: a 16-bit cache in the query dtype ({spec.kv_dtype} vs {spec.dtype})"
    return None


@functools.cache
def _load_error(pack: Path) -> str | None:
    from attnbench.backends.engine_triton_load import (
        pack_missing,
        sglang_decode_attention,
        sglang_extend_attention,
        sglang_kv_splits_kernel,
    )

    missing = pack_missing(NAME)
    if missing:
        return missing
    try:
        for load in (sglang_decode_attention, sglang_extend_attention, sglang_kv_splits_kernel):
            load(pack)
    except Exception as exc:  # the kernel files' imports under the stub parents
        why = " ".join(str(exc).split())[:240]
        return f"{NAME}: a kernel file is not importable ({type(exc).__name__}: {why})"
    return None


def token_pool(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's NHD pages [P, 2, page, Hkv, d] copied into SGLang's token pool: K and V
    buffers [P * page, Hkv, d], slot = page * page_size + offset (fp8 copied as bytes)."""
    pages = inputs.kv_cache
    raw = pages.view(torch.uint8) if pages.element_size() == 1 else pages
    slots = raw.shape[0] * raw.shape[2]
    k, v = (raw[:, i].reshape(slots, *raw.shape[3:]).contiguous() for i in (0, 1))
    return k.view(pages.dtype), v.view(pages.dtype)


def token_slots(inputs: AttentionInputs, starts: list[int], ends: list[int]) -> torch.Tensor:
    """`kv_indices`: per request b, the pool slots of its tokens starts[b]..ends[b] - 1."""
    page = inputs.spec.page_size
    table = kvgather.page_table(inputs).long()
    rows = [
        table[b, torch.arange(s, e, device=table.device) // page] * page
        + torch.arange(s, e, device=table.device) % page
        for b, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]
    return torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64, device=table.device)


def indptr(lens: list[int], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([0, *lens], device=device, dtype=dtype).cumsum(0).to(dtype)


def window_starts(kv_lens: list[int], keep: int) -> list[int]:
    """First token each request reads: its last `keep` tokens (`update_sliding_window_buffer`:
    window_kv_lens = min(seq_lens, sliding_window_size)); keep < 0: all of them."""
    return [0 if keep < 0 else max(0, n - keep) for n in kv_lens]


def new_tokens(
    buf: torch.Tensor, slots: torch.Tensor, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """The new tokens' K or V as the model hands `forward_extend` them: contiguous, in the query
    dtype (from an fp8 pool: its values times the scale; the pool holds their fp8 copy)."""
    raw = buf.view(torch.uint8) if buf.element_size() == 1 else buf
    rows = raw[slots].view(buf.dtype)
    return rows.to(dtype) if scale == 1.0 else (rows.float() * scale).to(dtype)


def decode_query(spec: WorkloadSpec, q: torch.Tensor) -> torch.Tensor | None:
    """The query the grouped decode kernel's dots see with an fp8 cache: q cast to fp8 e4m3
    (`q.to(K_Buffer.dtype.element_ty)`, no scale); None where it keeps q (16-bit cache, MHA)."""
    if not spec.is_fp8 or spec.group_size == 1:
        return None
    return quantize(q, 1.0, torch.float8_e4m3fn).float()


def kv_splits(kernel: Any, seq_lens: torch.Tensor, spec: WorkloadSpec, sms: int) -> torch.Tensor:
    """`TritonAttnBackend.get_num_kv_splits` for a decode batch: SGLang's own kernel over
    `seq_lens` (the padded batch), one group, at most MAX_KV_SPLITS."""
    out = torch.empty(seq_lens.shape[0], dtype=torch.int32, device=seq_lens.device)
    num_seq = seq_lens.shape[0]
    schedule = 256 if num_seq < 256 else 1 << (num_seq - 1).bit_length()
    uneven = torch.zeros(1, dtype=torch.int32, device=seq_lens.device)
    kernel[(1,)](
        out,
        seq_lens,
        num_seq,
        1,
        spec.num_qo_heads,
        spec.num_kv_heads,
        MAX_KV_SPLITS,
        sms,
        MAX_NUM_SEQ=schedule,
        uneven_batch_ptr=uneven,
    )
    return out


def _device_facts() -> tuple[int, bool]:
    """`get_device_core_count` and `is_arch_support_pdl` (SM90+) of the current GPU."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    major, _ = torch.cuda.get_device_capability()
    return int(props.multi_processor_count), major >= 9


def padded_batch(
    spec: WorkloadSpec, inputs: AttentionInputs, graph: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decode step as the CUDA graph replays it for `graph` rows: q (padding rows zero),
    `kv_indptr` (int32) and `kv_indices` (int64) of the tokens each row reads (its window, or
    for a padding row one token of request slot 0) and the rows' full seq lens (padding: 1)."""
    dev, pad = inputs.q.device, graph - spec.batch_size
    kv_lens = list(spec.kv_lens)
    starts = window_starts(kv_lens, spec.window_left)
    pad_slot = torch.zeros(pad, dtype=torch.int64, device=dev)
    kv_indices = torch.cat([token_slots(inputs, starts, kv_lens), pad_slot])
    read = [e - s for s, e in zip(starts, kv_lens, strict=True)] + [1] * pad
    seq_lens = torch.tensor(kv_lens + [1] * pad, device=dev, dtype=torch.int64)
    q = torch.cat([inputs.q, inputs.q.new_zeros(pad, *inputs.q.shape[1:])])
    return q, indptr(read, dev, torch.int32), kv_indices, seq_lens


def decode_details(graph: int, splits: list[int]) -> dict[str, str | int | float | bool]:
    """The row's facts of a decode step: the batch the graph ran and each request's splits."""
    return {
        "api": "decode_attention_fwd",
        "library": WHEEL,
        "kv_cache": "token pool (SGLang's triton layout)",
        "graph_batch": graph,
        "max_kv_splits": MAX_KV_SPLITS,
        "kv_splits": ",".join(str(n) for n in splits),
    }


def plan_decode(spec: WorkloadSpec, inputs: AttentionInputs) -> PlannedRun:
    from attnbench.backends.engine_triton_load import (
        sglang_decode_attention,
        sglang_kv_splits_kernel,
    )

    decode = sglang_decode_attention(pack_dir())
    split_kernel = sglang_kv_splits_kernel(pack_dir())
    sms, use_pdl = _device_facts()
    dev, batch = inputs.q.device, spec.batch_size
    graph = sglang_graph_batch(batch)
    k_buf, v_buf = token_pool(inputs)
    q, kv_indptr, kv_indices, seq_lens = padded_batch(spec, inputs, graph)
    splits = kv_splits(split_kernel, seq_lens, spec, sms)
    heads, dv = spec.num_qo_heads, spec.head_dim
    f32 = torch.float32
    kw: dict[str, Any] = {
        "q": q,
        "k_buffer": k_buf,
        "v_buffer": v_buf,
        "o": torch.empty_like(q),
        "kv_indptr": kv_indptr,
        "kv_indices": kv_indices,
        "attn_logits": torch.empty(graph, heads, MAX_KV_SPLITS, dv, device=dev, dtype=f32),
        "attn_lse": torch.empty(graph, heads, MAX_KV_SPLITS, device=dev, dtype=f32),
        "num_kv_splits": splits,
        "max_kv_splits": MAX_KV_SPLITS,
        "sm_scale": spec.sm_scale,
        "k_scale": inputs.k_scale,
        "v_scale": inputs.v_scale,
        "logit_cap": spec.logits_soft_cap,
        "sinks": inputs.sinks,
        "xai_temperature_len": -1,
        "has_mla": False,
        "use_pdl": use_pdl,
        "page_size": spec.page_size,
        "enable_lean": False,
        "uneven_batch": torch.zeros(1, dtype=torch.int32, device=dev),
    }

    def run() -> torch.Tensor:
        decode(**kw)
        out: torch.Tensor = kw["o"]
        return out

    def replan() -> None:
        kw["num_kv_splits"].copy_(kv_splits(split_kernel, seq_lens, spec, sms))

    q_eff = decode_query(spec, inputs.q)
    return PlannedRun(
        run=run,
        resolved=sglang_triton_launch(spec),
        details=decode_details(graph, splits[:batch].tolist()),
        unpack=lambda out: out[:batch],
        out=kw["o"],
        q_effective=q_eff,
        precision="fp8_e4m3" if q_eff is not None else "",
        plan_mode="cuda-graph" if batch <= SGLANG_MAX_CAPTURE["tp<4"] else "eager",
        replan=replan,
    )


def plan_extend(spec: WorkloadSpec, inputs: AttentionInputs) -> PlannedRun:
    from attnbench.backends.engine_triton_load import sglang_extend_attention

    extend = sglang_extend_attention(pack_dir())
    dev = inputs.q.device
    qo_lens, kv_lens = list(spec.qo_lens), list(spec.kv_lens)
    prefix = [n - m for n, m in zip(kv_lens, qo_lens, strict=True)]
    starts = window_starts(prefix, spec.window_left)
    k_buf, v_buf = token_pool(inputs)
    new = token_slots(inputs, prefix, kv_lens)
    k_new, v_new = (
        new_tokens(buf, new, scale, inputs.q.dtype)
        for buf, scale in ((k_buf, inputs.k_scale), (v_buf, inputs.v_scale))
    )
    kw: dict[str, Any] = {
        "q_extend": inputs.q,
        "k_extend": k_new,
        "v_extend": v_new,
        "o_extend": torch.empty_like(inputs.q),
        "k_buffer": k_buf,
        "v_buffer": v_buf,
        "qo_indptr": indptr(qo_lens, dev, torch.int64),
        "kv_indptr": indptr([p - s for s, p in zip(starts, prefix, strict=True)], dev, torch.int32),
        "kv_indices": token_slots(inputs, starts, prefix),
        "custom_mask": None,
        "is_causal": True,
        "mask_indptr": None,
        "max_len_extend": max(qo_lens),
        "k_scale": inputs.k_scale,
        "v_scale": inputs.v_scale,
        "sm_scale": spec.sm_scale,
        "logit_cap": spec.logits_soft_cap,
        "sliding_window_size": spec.window_left,
        "sinks": inputs.sinks,
        "window_kv_offsets": None,
        "xai_temperature_len": -1,
        "page_size": spec.page_size,
        "extend_seq_lens_cpu": qo_lens,
    }

    def run() -> torch.Tensor:
        extend(**kw)
        out: torch.Tensor = kw["o_extend"]
        return out

    cached = any(p > 0 for p in prefix)
    return PlannedRun(
        run=run,
        resolved="extend",
        details={
            "api": "extend_attention_fwd",
            "library": WHEEL,
            "kv_cache": "token pool (SGLang's triton layout) + new tokens contiguous",
        },
        out=kw["o_extend"],
        precision="fp8_e4m3" if spec.is_fp8 and cached else "",
    )


class SglangTritonAttn:
    """`sglang:triton` (see the module docstring)."""

    name = NAME
    devices: tuple[str, ...] = ("cuda",)
    knobs: Mapping[str, tuple[object, ...]] = {}
    summary = (
        f"SGLang's triton backend: the engine's own Triton kernels ({WHEEL} wheel: "
        f"{', '.join(FILES)})"
    )

    def __repr__(self) -> str:
        return f"SglangTritonAttn({self.name!r})"

    def describe(self) -> str:
        return self.summary

    def available(self) -> str | None:
        return _load_error(pack_dir())

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        why = refusal(spec, device)
        return Unsupported(why) if why else None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        if knobs:
            raise ValueError(f"{self.name} has no knobs; got {sorted(knobs)}")
        if sglang_triton_launch(spec) == "extend":
            return plan_extend(spec, inputs)
        return plan_decode(spec, inputs)


def backends() -> list[SglangTritonAttn]:
    return [SglangTritonAttn()]
