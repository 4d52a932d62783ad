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
from pydantic import BaseModel, ConfigDict, Field, model_validator

Kind = Literal["decode", "prefill", "append", "tree", "shared_prefix"]
DType = Literal["float16", "bfloat16"]
KVDType = Literal["float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
KVLayout = Literal["NHD", "HND"]

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
        return self

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

    @cached_property
    def case_id(self) -> str:
        """Readable, deterministic id: `decode/llama-3.1-70b-tp8/bs32/mixed/bf16/kv=fp8_e4m3/p16`.

        A short hash of the whole spec keeps two cases with the same summary apart.
        """
        shape = (
            self.model + (f"-tp{self.tp}" if self.tp > 1 else "")
            if self.model
            else (f"h{self.num_qo_heads}-{self.num_kv_heads}-d{self.head_dim}")
        )
        lens = self.lengths or _summarize_lengths(self.kv_lens)
        parts = [self.kind, shape, f"bs{self.batch_size}", lens]
        if self.kind == "tree" and self.tree is not None:
            parts.append(self.tree.name)
        if self.kind == "shared_prefix":
            parts.append(f"prefix{self.shared_prefix_len}")
        if self.kind == "append":
            parts.append(f"q{max(self.qo_lens)}")
        parts += [self.dtype, f"kv={self.kv_dtype}", f"p{self.page_size}", self.kv_layout]
        if self.label:
            parts.append(self.label)
        digest = hashlib.sha1(
            json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        ).hexdigest()[:8]
        return "/".join(parts) + "#" + digest


def _summarize_lengths(kv_lens: tuple[int, ...]) -> str:
    lo, hi = min(kv_lens), max(kv_lens)
    return f"ctx{lo}" if lo == hi else f"ctx{lo}..{hi}"
