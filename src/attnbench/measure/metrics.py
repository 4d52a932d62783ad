"""Bytes, FLOPs and rates of an attention case: pure functions of the spec and a latency.

Conventions: 1 GB/s = 1e9 B/s, 1 TFLOP/s = 1e12 FLOP/s; latencies in microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal

from attnbench.workload.spec import ITEMSIZE, WorkloadSpec, window_tokens, windowed_pairs

INDEX_BYTES = 4  # int32 page ids, indptr and last_page_len entries


@dataclass(frozen=True)
class Bytes:
    """Minimum bytes the kernel must move through device memory, by tensor."""

    q: int
    kv: int
    o: int
    page_table: int

    @property
    def total(self) -> int:
        return self.q + self.kv + self.o + self.page_table

    def as_dict(self) -> dict[str, int]:
        d = asdict(self)
        d["total"] = self.total
        return d


def unique_kv_tokens(spec: WorkloadSpec) -> int:
    """KV tokens the kernel must read, each once: a shared prefix counts once, not per
    request; under a sliding window only the tokens some query of the request can see,
    min(kv_len, qo_len + window_left) per request (`window_tokens`)."""
    if spec.kind == "shared_prefix":
        shared = spec.shared_prefix_len
        return shared + sum(n - shared for n in spec.kv_lens)
    if spec.window_left >= 0:
        return sum(
            window_tokens(qo, kv, spec.window_left)
            for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True)
        )
    return spec.total_kv


def kv_values_per_token(spec: WorkloadSpec) -> int:
    """Cache values one token holds: K and V of every KV head, or MLA's one latent (576)."""
    if spec.mla is not None:
        return spec.mla.latent_dim
    return 2 * spec.num_kv_heads * spec.head_dim


def bytes_moved(spec: WorkloadSpec) -> Bytes:
    """Bytes read and written, each tensor touched once:

        q          = total_q * num_qo_heads * head_dim * itemsize(dtype)
        kv         = unique_kv_tokens * kv_values_per_token * itemsize(kv_dtype)
                     (K and V: 2 * num_kv_heads * head_dim; MLA: the latent, 512 + 64, read
                     once per request for all query heads)
        o          = total_q * num_qo_heads * v_head_dim * itemsize(dtype)  (MLA: 512)
        page_table = (num_pages + 2 * batch_size + 1) * 4   (kv_indices, kv_indptr, last_page_len)

    fp8 per-tensor scales and sink logits (one per head) are scalars and are left out. Padding,
    re-reads and split-KV partial results are not counted: they are the kernel's overhead, which
    the achieved bandwidth then shows.
    """
    q_item, kv_item = ITEMSIZE[spec.dtype], ITEMSIZE[spec.kv_dtype]
    rows = spec.total_q * spec.num_qo_heads
    return Bytes(
        q=rows * spec.head_dim * q_item,
        kv=unique_kv_tokens(spec) * kv_values_per_token(spec) * kv_item,
        o=rows * spec.v_head_dim * q_item,
        page_table=(spec.num_pages + 2 * spec.batch_size + 1) * INDEX_BYTES,
    )


def attended_pairs(spec: WorkloadSpec) -> int:
    """(query, key) pairs whose score is computed and used, summed over requests.

    Non-causal: qo_len * kv_len. Causal: `causal_pairs`, under a sliding window
    `windowed_pairs`. Tree: every node sees the context plus its ancestors and itself.
    """
    if spec.kind == "tree" and spec.tree is not None:
        in_tree = spec.tree.visible_pairs
        return sum(
            (kv - qo) * qo + in_tree for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True)
        )
    total = 0
    for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True):
        if spec.causal and (qo > 1 or spec.window_left >= 0):
            total += windowed_pairs(qo, kv, spec.window_left)
        else:
            total += qo * kv
    return total


def flops(spec: WorkloadSpec) -> int:
    """FLOPs = 2 * (head_dim + v_head_dim) * num_qo_heads * attended_pairs: 2 per dimension of
    q.k and of p.v per pair (a multiply and an add each), i.e. 4 * head_dim * ... for plain
    attention and 2 * (576 + 512) * ... for MLA's absorbed form. Softmax exponentials are not
    counted."""
    return 2 * (spec.head_dim + spec.v_head_dim) * spec.num_qo_heads * attended_pairs(spec)


def kv_cache_bytes(spec: WorkloadSpec) -> int:
    """Footprint of the paged KV cache: whole pages, K and V (MLA: the latent), at kv_dtype."""
    return spec.num_pages * spec.page_size * kv_values_per_token(spec) * ITEMSIZE[spec.kv_dtype]


def bandwidth_gbps(nbytes: int | float, latency_us: float) -> float:
    """Achieved bandwidth = bytes / latency, in GB/s (1e9 B/s)."""
    return float(nbytes) / (latency_us * 1e3) if latency_us > 0 else float("nan")


def tflops_per_s(nflops: int | float, latency_us: float) -> float:
    """Achieved rate = FLOPs / latency, in TFLOP/s (1e12 FLOP/s)."""
    return float(nflops) / (latency_us * 1e6) if latency_us > 0 else float("nan")


def fraction(value: float, ceiling: float | None) -> float | None:
    """value / ceiling, or None when there is no ceiling to compare with."""
    if ceiling is None or ceiling <= 0:
        return None
    return value / ceiling


MATMUL_16BIT = "bfloat16"
MATMUL_FP8 = "fp8_e4m3"


def mma_dtype(dtype: str, precision: str = "") -> str:
    """The precision a kernel multiplies in: the fp8 format where its output path is fp8
    (`PlannedRun.precision`: FA3's fp8 path and FlashInfer's fa3 fp8 prefill quantise q and
    multiply q.k and P.v in fp8; so does XQA's SM90 fp8 kernel), else the query dtype (kernels
    that read an fp8 KV cache but dequantise it to 16 bits before the MMA: FlashInfer's fa2
    and tensor-core decode and prefill, its fp8 MLA latent)."""
    return precision if precision.startswith("fp8") else dtype


def matmul_ceiling_key(mma: str) -> str:
    """The measured matmul ceiling a kernel multiplying in `mma` is held to (a key of
    `Ceilings.matmul_tflops`): `fp8_e4m3` for either fp8 format (Hopper's tensor cores run
    e4m3 and e5m2 at one rate; the e4m3 GEMM is the one measured), else `bfloat16` (fp16 runs
    at bf16's rate; the bf16 GEMM is the one measured)."""
    return MATMUL_FP8 if mma.startswith("fp8") or mma.startswith("float8") else MATMUL_16BIT


def per_token_ms(run_us: float, plan_us: float, num_layers: int) -> float:
    """Attention time of one decode step of the whole model on one GPU, in ms:
    one plan per step (shared by all layers, as FlashInfer's wrappers are used) plus one run
    per layer."""
    return (run_us * num_layers + plan_us) / 1e3


def model_per_token_ms(layer_kinds: Iterable[tuple[float, float, int]]) -> float:
    """Attention time of one decode step of a model whose layers differ (gpt-oss: sliding and
    full, Gemma-3: 5 local to 1 global), in ms: each kind, given as (run_us, plan_us,
    num_layers of that kind), runs its own plan once per step (a window is a plan parameter)
    and one run per layer of its kind: the sum of `per_token_ms` over the kinds."""
    return sum(per_token_ms(run_us, plan_us, n) for run_us, plan_us, n in layer_kinds)


def arithmetic_intensity(spec: WorkloadSpec) -> float:
    """FLOPs per byte moved: where the case sits on the roofline."""
    return flops(spec) / bytes_moved(spec).total


Bound = Literal["memory", "compute"]


def ridge_intensity(tflops_ceiling: float, bandwidth_ceiling_gbps: float) -> float:
    """FLOP/byte where the roofline turns: matmul ceiling / bandwidth ceiling. A case above it
    cannot reach the bandwidth ceiling before the matmul one (MLA decode with 128 heads:
    2 * 128 * 1088 FLOPs per 1152-byte bf16 latent token, 242 FLOP/B, above the H200's
    ~190 measured)."""
    return tflops_ceiling * 1e12 / (bandwidth_ceiling_gbps * 1e9)


def bound(intensity: float, tflops_ceiling: float, bandwidth_ceiling_gbps: float) -> Bound:
    """Which ceiling limits a case: `compute` above the ridge intensity, else `memory`."""
    ridge = ridge_intensity(tflops_ceiling, bandwidth_ceiling_gbps)
    return "compute" if intensity > ridge else "memory"


def binding_fraction(
    bandwidth_frac: float | None, tflops_frac: float | None
) -> tuple[Bound, float] | None:
    """The row's bound and its fraction of that ceiling, from the two fractions it stores.

    With both measured against the same run's ceilings, tflops_frac > bandwidth_frac exactly
    when FLOPs / bytes > matmul / bandwidth, i.e. the case is above the ridge (`bound`): the
    larger fraction is the one of the ceiling that binds. None when either is missing (or NaN).
    """
    if bandwidth_frac is None or tflops_frac is None:
        return None
    if math.isnan(bandwidth_frac) or math.isnan(tflops_frac):
        return None
    if tflops_frac > bandwidth_frac:
        return "compute", tflops_frac
    return "memory", bandwidth_frac
