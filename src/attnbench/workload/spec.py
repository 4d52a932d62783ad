"""Workload specs: what one benchmark case computes, independent of any backend.

A `WorkloadSpec` is immutable, validated and serialised whole into every result row, so a row
can be re-run or re-analysed without the settings that produced it.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Any, Literal, overload

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Kind = Literal["decode", "prefill", "append", "tree", "shared_prefix"]
DType = Literal["float16", "bfloat16"]
KVDType = Literal["float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
KVLayout = Literal["NHD", "HND"]
LayerType = Literal["", "full_attention", "sliding_attention"]
"""Which of a model's layer kinds a case times (HF `layer_types` names); "": every layer."""

KINDS: tuple[str, ...] = ("decode", "prefill", "append", "tree", "shared_prefix")
DTYPES: tuple[str, ...] = ("float16", "bfloat16")
KV_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
KV_LAYOUTS: tuple[str, ...] = ("NHD", "HND")

_DTYPE_ALIASES = {
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp8": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "fp8_e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
}

ITEMSIZE: dict[str, int] = {"float16": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


def normalize_dtype(name: str, *, field: str = "dtype", allow_fp8: bool = True) -> str:
    """Map user spellings (fp16, bf16, e4m3...) to canonical names; raise ValueError otherwise."""
    canon = _DTYPE_ALIASES.get(name.strip().lower())
    allowed = KV_DTYPES if allow_fp8 else DTYPES
    if canon is None or canon not in allowed:
        raise ValueError(f"{field}={name!r} is not a known dtype; allowed: {', '.join(allowed)}")
    return canon


def is_fp8(kv_dtype: str) -> bool:
    return kv_dtype.startswith("fp8")


@overload
def causal_pairs(qo_len: int, kv_len: int) -> int: ...
@overload
def causal_pairs(qo_len: np.ndarray, kv_len: np.ndarray) -> np.ndarray: ...
def causal_pairs(qo_len: Any, kv_len: Any) -> Any:
    """(query, key) pairs that `qo_len` causal queries at the end of `kv_len` keys attend to.

    Query i (0-based) sits at position kv_len - qo_len + i and sees that many keys plus itself:
    qo_len * (kv_len - qo_len) + qo_len * (qo_len + 1) / 2. Works on ints and integer arrays.
    """
    return qo_len * (kv_len - qo_len) + qo_len * (qo_len + 1) // 2


def windowed_pairs(qo_len: int, kv_len: int, window_left: int) -> int:
    """(query, key) pairs of `qo_len` causal queries at the end of `kv_len` keys when each
    query also sees at most `window_left` keys before itself (FlashInfer's `window_left`).

    Query at position p sees keys max(0, p - window_left)..p: min(p + 1, window_left + 1) keys,
    summed over p = kv_len - qo_len .. kv_len - 1. A negative window_left is no window.
    """
    if window_left < 0:
        return causal_pairs(qo_len, kv_len)
    first, last = kv_len - qo_len, kv_len - 1
    ramp_end = min(last, window_left)  # positions that still see every key before them
    ramp = (
        (ramp_end + 1) * (ramp_end + 2) // 2 - first * (first + 1) // 2 if first <= ramp_end else 0
    )
    flat = (last - max(first, window_left + 1) + 1) * (window_left + 1)
    return ramp + max(0, flat)


def window_tokens(qo_len: int, kv_len: int, window_left: int) -> int:
    """KV tokens a request's queries read: the last `qo_len + window_left` of its `kv_len`
    keys under a window (the first query's window start to the end), else all of them."""
    return kv_len if window_left < 0 else min(kv_len, qo_len + window_left)


class MlaSpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V3, Kimi-K2) in its absorbed ("matrix
    absorption") form, as serving engines run decode and prefill on the latent cache.

    The cache holds one latent per token, shared by every query head: the compressed KV
    (`kv_lora_rank` values, ckv) and the RoPE key (`qk_rope_head_dim`, kpe). With W_UK folded
    into the query, q = [q_nope W_UK (kv_lora_rank); q_pe (qk_rope_head_dim)] and

        logits = sm_scale * (q_nope . ckv + q_pe . kpe)     over the latent_dim (576) values
        out    = softmax(logits) @ ckv                       [kv_lora_rank] per head

    (W_UV is applied after attention, outside the kernel). As an attention case that is one
    "KV head" of head_dim latent_dim for keys and kv_lora_rank for values. `sm_scale` is the
    model's 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), the per-head width before absorption,
    unless set (the DeepSeek-V3 preset sets it with YaRN's mscale: `MLAShape.softmax_scale`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kv_lora_rank: int = Field(default=512, gt=0)
    qk_rope_head_dim: int = Field(default=64, gt=0)
    qk_nope_head_dim: int = Field(default=128, gt=0)
    v_head_dim: int = Field(default=128, gt=0)
    sm_scale: float = Field(default=0.0, ge=0.0)
    """Softmax scale; 0 (the default): 1/sqrt(qk_nope_head_dim + qk_rope_head_dim)."""

    @model_validator(mode="after")
    def _scale(self) -> MlaSpec:
        if self.sm_scale == 0.0:
            width = self.qk_nope_head_dim + self.qk_rope_head_dim
            object.__setattr__(self, "sm_scale", 1.0 / float(np.sqrt(width)))
        return self

    @property
    def latent_dim(self) -> int:
        """Values one token caches per layer: kv_lora_rank + qk_rope_head_dim (576)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class TreeSpec(BaseModel):
    """A speculative-decoding draft tree: node i's parent is `parents[i]` (-1 for a root)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Readable shape name, e.g. `chain-8`, `medusa-64`, `eagle2-60`."""
    parents: tuple[int, ...]
    """Parent index of each draft node, in topological order (parents[i] < i)."""

    @model_validator(mode="after")
    def _topological(self) -> TreeSpec:
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"tree {self.name}: parents[{i}]={p} must be in [-1, {i})")
        return self

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @property
    def visible_pairs(self) -> int:
        """(node, node) pairs where the first sees the second: each node sees itself and its
        ancestors, so a node at depth d (a root: 0) contributes d + 1."""
        depth: list[int] = []
        for p in self.parents:
            depth.append(0 if p < 0 else depth[p] + 1)
        return sum(depth) + len(depth)


class WorkloadSpec(BaseModel):
    """One attention call over a batch of requests, as a serving engine issues it per layer.

    Lengths are per request: `kv_lens[i]` is the KV length request i attends to *after* this
    step's tokens were appended, `qo_lens[i]` the number of new query tokens (1 for decode,
    the whole prompt for prefill, a few for append/tree verification).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    num_qo_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    kv_lens: tuple[int, ...]
    """KV length per request (context plus this step's tokens)."""
    qo_lens: tuple[int, ...]
    """Query tokens per request."""
    page_size: int = Field(default=16, gt=0)
    kv_layout: KVLayout = "NHD"
    dtype: DType = "bfloat16"
    """Query and output dtype."""
    kv_dtype: KVDType = "bfloat16"
    causal: bool = True
    """Causal within each request (query i sees keys up to its own position)."""
    seed: int = 0
    model: str | None = None
    tp: int = Field(default=1, gt=0)
    num_layers: int = Field(default=1, gt=0)
    """Layers of the model on this GPU: one plan per step is shared by this many runs."""
    lengths: str = ""
    """Label of the distribution the lengths came from, e.g. `mixed(256..65536)`."""
    label: str = ""
    """Free-form tag from the suite (e.g. `skew=3`), kept in the case id."""
    tree: TreeSpec | None = None
    """Draft tree for kind=tree: every request verifies this tree over its context."""
    shared_prefix_len: int = Field(default=0, ge=0)
    """For kind=shared_prefix: tokens at the start of every request that all requests share."""
    mla: MlaSpec | None = None
    """Multi-head latent attention (absorbed form): num_kv_heads is 1 (the shared latent),
    head_dim its latent_dim, and values are its first kv_lora_rank values."""
    window_left: int = Field(default=-1, ge=-1)
    """Sliding window: each query also sees at most this many keys before itself (FlashInfer's
    `window_left`; HF `sliding_window` - 1); -1: no window."""
    sinks: bool = False
    """A learned sink logit per query head joins the softmax denominator (gpt-oss)."""
    layer_type: LayerType = ""
    """The model's layer kind this case times; `num_layers` then counts that kind only."""
    logits_soft_cap: float = Field(default=0.0, ge=0.0)
    """Logit soft-capping (Gemma-2): each scaled logit s becomes cap * tanh(s / cap) before the
    mask and softmax (FlashInfer's `logits_soft_cap`, FA3's `softcap`, HF
    `attn_logit_softcapping`); 0: none."""
    query_pre_attn_scalar: float = Field(default=0.0, ge=0.0)
    """The softmax scale is query_pre_attn_scalar ** -0.5 (Gemma-2/3's config field, e.g. 144
    for Gemma-2-27b at head_dim 128); 0: head_dim ** -0.5."""

    @model_serializer(mode="wrap")
    def _omit_default_features(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave the attention-feature fields out while they are at their defaults, so a plain
        GQA case serialises (and hashes into its case_id) exactly as before they existed."""
        data = handler(self)
        if isinstance(data, dict):
            for key, default in _FEATURE_DEFAULTS.items():
                if key in data and data[key] == default:
                    del data[key]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.num_qo_heads % self.num_kv_heads:
            raise ValueError(
                f"num_qo_heads={self.num_qo_heads} must be a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size={self.page_size} must be a power of two")
        if not self.kv_lens:
            raise ValueError("kv_lens must hold at least one request")
        if len(self.kv_lens) != len(self.qo_lens):
            raise ValueError(
                f"kv_lens ({len(self.kv_lens)}) and qo_lens ({len(self.qo_lens)}) differ in length"
            )
        for kv, qo in zip(self.kv_lens, self.qo_lens, strict=True):
            if qo <= 0 or kv <= 0:
                raise ValueError("every kv_len and qo_len must be positive")
            if qo > kv:
                raise ValueError(f"qo_len={qo} exceeds kv_len={kv}")
        if self.kind == "decode" and any(q != 1 for q in self.qo_lens):
            raise ValueError("decode has exactly one query token per request")
        if self.kind == "prefill" and self.qo_lens != self.kv_lens:
            raise ValueError("prefill attends only to its own tokens: qo_lens must equal kv_lens")
        if self.kind == "tree":
            if self.tree is None:
                raise ValueError("kind=tree needs a tree")
            if any(q != self.tree.num_nodes for q in self.qo_lens):
                raise ValueError("kind=tree: every qo_len must equal the tree's node count")
        if self.kind == "shared_prefix" and not 0 < self.shared_prefix_len <= min(self.kv_lens):
            raise ValueError("kind=shared_prefix needs 0 < shared_prefix_len <= every kv_len")
        self._check_features()
        return self

    def _check_features(self) -> None:
        plain = ("decode", "prefill", "append")
        soft_cap = self.logits_soft_cap > 0
        if (self.window_left >= 0 or self.sinks or self.mla or soft_cap) and self.kind not in plain:
            raise ValueError(
                f"kind={self.kind}: windows, sinks, soft-caps and MLA are modelled for "
                f"{', '.join(plain)} only"
            )
        if soft_cap and (self.sinks or self.mla):
            raise ValueError("a soft-capped case has no sinks and no MLA (no model has both)")
        if self.window_left >= 0 and not self.causal:
            raise ValueError("window_left needs causal=True (a left window over causal keys)")
        if self.mla is None:
            return
        m = self.mla
        if self.num_kv_heads != 1 or self.head_dim != m.latent_dim:
            raise ValueError(
                f"an MLA case has num_kv_heads=1 and head_dim={m.latent_dim} (the latent: "
                f"kv_lora_rank {m.kv_lora_rank} + qk_rope_head_dim {m.qk_rope_head_dim}), "
                f"not {self.num_kv_heads} and {self.head_dim}"
            )
        if self.window_left >= 0 or self.sinks:
            raise ValueError("an MLA case has no sliding window and no sinks")
        if self.kv_layout != "NHD":
            raise ValueError("the MLA latent cache is [pages, page_size, latent_dim]: NHD only")

    # -- derived sizes ----------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return len(self.kv_lens)

    @property
    def group_size(self) -> int:
        return self.num_qo_heads // self.num_kv_heads

    @property
    def total_q(self) -> int:
        return sum(self.qo_lens)

    @property
    def total_kv(self) -> int:
        return sum(self.kv_lens)

    @property
    def num_pages(self) -> int:
        """Pages the paged KV cache holds: ceil(kv_len / page_size) per request."""
        return sum(-(-n // self.page_size) for n in self.kv_lens)

    @property
    def is_fp8(self) -> bool:
        return is_fp8(self.kv_dtype)

    @property
    def v_head_dim(self) -> int:
        """Width of values and of the output per head: MLA's kv_lora_rank, else head_dim."""
        return self.mla.kv_lora_rank if self.mla else self.head_dim

    @property
    def sm_scale(self) -> float:
        """Softmax scale: MLA's (from the model's per-head width), else
        1/sqrt(query_pre_attn_scalar) where set, else 1/sqrt(head_dim)."""
        if self.mla:
            return self.mla.sm_scale
        return 1.0 / float(np.sqrt(self.query_pre_attn_scalar or self.head_dim))

    def features(self) -> tuple[str, ...]:
        """Attention features beyond plain GQA this case uses: `mla`, `window`, `sinks`,
        `softcap`."""
        found = ("mla",) * (self.mla is not None) + ("window",) * (self.window_left >= 0)
        return found + ("sinks",) * self.sinks + ("softcap",) * (self.logits_soft_cap > 0)

    @cached_property
    def case_id(self) -> str:
        """Readable, deterministic id: `decode/llama-3.1-70b-tp8/bs32/mixed/bf16/kv=fp8_e4m3/p16`.

        A short hash of the whole spec keeps two cases with the same summary apart.
        """
        if self.model:
            shape = self.model + (f"-tp{self.tp}" if self.tp > 1 else "")
        elif self.mla:
            shape = f"mla-h{self.num_qo_heads}-r{self.mla.kv_lora_rank}+{self.mla.qk_rope_head_dim}"
        else:
            shape = f"h{self.num_qo_heads}-{self.num_kv_heads}-d{self.head_dim}"
        lens = self.lengths or _summarize_lengths(self.kv_lens)
        parts = [self.kind, shape, f"bs{self.batch_size}", lens]
        if self.kind == "tree" and self.tree is not None:
            parts.append(self.tree.name)
        if self.kind == "shared_prefix":
            parts.append(f"prefix{self.shared_prefix_len}")
        if self.kind == "append":
            parts.append(f"q{max(self.qo_lens)}")
        if self.layer_type:
            parts.append(self.layer_type.removesuffix("_attention"))
        if self.window_left >= 0:
            parts.append(f"win{self.window_left}")
        if self.sinks:
            parts.append("sinks")
        if self.logits_soft_cap:
            parts.append(f"cap{self.logits_soft_cap:g}")
        if self.query_pre_attn_scalar:
            parts.append(f"qscale{self.query_pre_attn_scalar:g}")
        parts += [self.dtype, f"kv={self.kv_dtype}", f"p{self.page_size}", self.kv_layout]
        if self.label:
            parts.append(self.label)
        digest = hashlib.sha1(
            json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        ).hexdigest()[:8]
        return "/".join(parts) + "#" + digest


_FEATURE_DEFAULTS: dict[str, Any] = {
    "mla": None,
    "window_left": -1,
    "sinks": False,
    "layer_type": "",
    "logits_soft_cap": 0.0,
    "query_pre_attn_scalar": 0.0,
}
"""Fields added for MLA, windows, sinks, soft-caps and the softmax scale, and the defaults a
plain GQA case has."""


def _summarize_lengths(kv_lens: tuple[int, ...]) -> str:
    lo, hi = min(kv_lens), max(kv_lens)
    return f"ctx{lo}" if lo == hi else f"ctx{lo}..{hi}"
