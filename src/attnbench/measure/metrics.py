"""Bytes, FLOPs and rates of an attention case: pure functions of the spec and a latency.

Conventions: 1 GB/s = 1e9 B/s, 1 TFLOP/s = 1e12 FLOP/s; latencies in microseconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from attnbench.workload.spec import ITEMSIZE, WorkloadSpec, causal_pairs

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
    """KV tokens stored once in the cache: a shared prefix counts once, not per request."""
    if spec.kind == "shared_prefix":
        shared = spec.shared_prefix_len
        return shared + sum(n - shared for n in spec.kv_lens)
    return spec.total_kv


def bytes_moved(spec: WorkloadSpec) -> Bytes:
    """Bytes read and written, each tensor touched once:

        q          = total_q * num_qo_heads * head_dim * itemsize(dtype)
        kv         = unique_kv_tokens * num_kv_heads * head_dim * 2 (K and V) * itemsize(kv_dtype)
        o          = total_q * num_qo_heads * head_dim * itemsize(dtype)
        page_table = (num_pages + 2 * batch_size + 1) * 4   (kv_indices, kv_indptr, last_page_len)

    fp8 per-tensor scales are two scalars and are left out. Padding, re-reads and split-KV
    partial results are not counted: they are the kernel's overhead, which the achieved
    bandwidth then shows.
    """
    q_item, kv_item = ITEMSIZE[spec.dtype], ITEMSIZE[spec.kv_dtype]
    qo_elems = spec.total_q * spec.num_qo_heads * spec.head_dim
    kv_elems = unique_kv_tokens(spec) * spec.num_kv_heads * spec.head_dim * 2
    return Bytes(
        q=qo_elems * q_item,
        kv=kv_elems * kv_item,
        o=qo_elems * q_item,
        page_table=(spec.num_pages + 2 * spec.batch_size + 1) * INDEX_BYTES,
    )


def attended_pairs(spec: WorkloadSpec) -> int:
    """(query, key) pairs whose score is computed and used, summed over requests.

    Non-causal: qo_len * kv_len. Causal: `causal_pairs`. Tree: every node sees the context
    plus its ancestors and itself.
    """
    if spec.kind == "tree" and spec.tree is not None:
        in_tree = spec.tree.visible_pairs
        return sum(
            (kv - qo) * qo + in_tree for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True)
        )
    total = 0
    for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True):
        if spec.causal and qo > 1:
            total += causal_pairs(qo, kv)
        else:
            total += qo * kv
    return total


def flops(spec: WorkloadSpec) -> int:
    """FLOPs = 4 * head_dim * num_qo_heads * attended_pairs: 2 for q.k and 2 for p.v per pair
    per head dimension (a multiply and an add each). Softmax exponentials are not counted."""
    return 4 * spec.head_dim * spec.num_qo_heads * attended_pairs(spec)


def kv_cache_bytes(spec: WorkloadSpec) -> int:
    """Footprint of the paged KV cache: whole pages, K and V, at kv_dtype."""
    return (
        spec.num_pages
        * spec.page_size
        * spec.num_kv_heads
        * spec.head_dim
        * 2
        * ITEMSIZE[spec.kv_dtype]
    )


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


def per_token_ms(run_us: float, plan_us: float, num_layers: int) -> float:
    """Attention time of one decode step of the whole model on one GPU, in ms:
    one plan per step (shared by all layers, as FlashInfer's wrappers are used) plus one run
    per layer."""
    return (run_us * num_layers + plan_us) / 1e3


def arithmetic_intensity(spec: WorkloadSpec) -> float:
    """FLOPs per byte moved: where the case sits on the roofline."""
    return flops(spec) / bytes_moved(spec).total
