"""Materialise a `WorkloadSpec` into tensors: queries, a paged KV cache and its page table.

Everything is drawn from a generator seeded with `spec.seed`, so a case is reproducible on the
same device. The page table is scattered (a random permutation of page ids), as a real
allocator leaves it after requests come and go; a contiguous table would flatter every kernel
that prefetches across page boundaries.

Layouts (FlashInfer's names):

    q:        [total_q, num_qo_heads, head_dim]                       dtype
    kv_cache: NHD [num_pages, 2, page_size, num_kv_heads, head_dim]   kv_dtype
              HND [num_pages, 2, num_kv_heads, page_size, head_dim]
    qo_indptr [batch_size + 1] int32, kv_indptr [batch_size + 1] int32 (in pages),
    kv_indices [kv_indptr[-1]] int32, kv_last_page_len [batch_size] int32
    sinks     [num_qo_heads] bfloat16 (spec.sinks: one learned logit per query head)

Queries are unit-normal, scaled for a soft-capped case so the cap changes the answer
(`soft_cap_query_scale`).

An MLA case (spec.mla) holds the absorbed form instead: q `[total_q, num_qo_heads, 576]`
(q_nope absorbed into the 512-wide latent, then q_pe) and the latent cache
`[num_pages, page_size, 576]` (ckv, then kpe), the layout engines store it in and FlashInfer's
MLA wrapper reads; an fp8 latent has one power-of-two scale for ckv and one for kpe, so its
dequantised values are exact in bf16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnbench.workload.spec import WorkloadSpec, window_tokens

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "float32": torch.float32,
    "float64": torch.float64,
}


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


@dataclass
class AttentionInputs:
    """Tensors of one case, on one device. Shared by every backend that runs the case."""

    spec: WorkloadSpec
    q: torch.Tensor
    kv_cache: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_len: torch.Tensor
    kv_lens: torch.Tensor
    k_scale: float = 1.0
    """Dequantisation scale of an fp8 K cache: real value = stored value * k_scale."""
    v_scale: float = 1.0
    custom_mask: torch.Tensor | None = None
    """For tree verification: flat bool mask, request-major, each request [qo_len, kv_len]."""
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    sinks: torch.Tensor | None = None
    """spec.sinks: per-query-head sink logits `[num_qo_heads]`, bfloat16 (as FA3 takes them)."""
    ckv_scale: float = 1.0
    """MLA with an fp8 latent: dequantisation scale of its first kv_lora_rank values (ckv)."""
    kpe_scale: float = 1.0
    """MLA with an fp8 latent: dequantisation scale of its RoPE part (kpe)."""

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def k_cache(self) -> torch.Tensor:
        """View of K pages, shape as kv_cache without the K/V axis."""
        return self.kv_cache[:, 0]

    @property
    def v_cache(self) -> torch.Tensor:
        return self.kv_cache[:, 1]

    def request_kv(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of request b, gathered from its pages: each [kv_len, num_kv_heads, head_dim].

        Values are in the cache dtype (fp8 stays fp8); callers dequantise.
        """
        spec = self.spec
        start, end = int(self.kv_indptr[b]), int(self.kv_indptr[b + 1])
        pages = self.kv_indices[start:end].long()
        blocks = self.kv_cache[pages]  # [n_pages, 2, ...]
        if spec.kv_layout == "HND":
            blocks = blocks.transpose(2, 3)  # -> [n_pages, 2, page_size, H, D]
        kv = blocks.transpose(0, 1).reshape(2, -1, spec.num_kv_heads, spec.head_dim)
        n = spec.kv_lens[b]
        return kv[0, :n], kv[1, :n]

    def request_latent(self, b: int) -> torch.Tensor:
        """MLA: the latent of request b gathered from its pages, `[kv_len, latent_dim]` in the
        cache dtype (fp8 stays fp8; ckv_scale and kpe_scale dequantise)."""
        start, end = int(self.kv_indptr[b]), int(self.kv_indptr[b + 1])
        pages = self.kv_cache[self.kv_indices[start:end].long()]  # [n_pages, page_size, 576]
        return pages.reshape(-1, pages.shape[-1])[: self.spec.kv_lens[b]]

    def nbytes(self) -> int:
        tensors = [self.q, self.kv_cache, self.kv_indices, self.kv_indptr, self.qo_indptr]
        return sum(t.numel() * t.element_size() for t in tensors)


def page_table(spec: WorkloadSpec, generator: torch.Generator) -> tuple[list[int], list[int]]:
    """Scattered page table: (kv_indptr, kv_indices) as Python lists.

    With kind=shared_prefix, the whole pages inside the first `shared_prefix_len` tokens are the
    same physical pages in every request (a prefix cache hit).
    """
    pages_per_req = [-(-n // spec.page_size) for n in spec.kv_lens]
    shared = spec.shared_prefix_len // spec.page_size if spec.kind == "shared_prefix" else 0
    num_pages = shared + sum(p - shared for p in pages_per_req)
    perm = torch.randperm(num_pages, generator=generator).tolist()
    shared_ids, rest = perm[:shared], iter(perm[shared:])
    indptr, indices = [0], []
    for p in pages_per_req:
        indices += shared_ids + [next(rest) for _ in range(p - shared)]
        indptr.append(len(indices))
    return indptr, indices


def make_inputs(
    spec: WorkloadSpec, device: str | torch.device = "cpu", *, keep_high_precision: bool = False
) -> AttentionInputs:
    """Build the case's tensors on `device` from `spec.seed`."""
    device = torch.device(device)
    cpu_gen = torch.Generator().manual_seed(spec.seed)
    dev_gen = torch.Generator(device=device).manual_seed(spec.seed)
    indptr, indices = page_table(spec, cpu_gen)
    num_pages = max(indices) + 1
    q_dtype = torch_dtype(spec.dtype)
    if spec.mla is not None:
        return _mla_inputs(spec, device, dev_gen, indptr, indices, keep_high_precision)

    q = torch.empty(spec.total_q, spec.num_qo_heads, spec.head_dim, dtype=q_dtype, device=device)
    q.normal_(generator=dev_gen)
    if spec.logits_soft_cap > 0:
        q.mul_(soft_cap_query_scale(spec))
    if spec.kv_layout == "NHD":
        shape = (num_pages, 2, spec.page_size, spec.num_kv_heads, spec.head_dim)
    else:
        shape = (num_pages, 2, spec.num_kv_heads, spec.page_size, spec.head_dim)
    hp_dtype = q_dtype if not spec.is_fp8 else torch.bfloat16
    kv_hp = torch.empty(shape, dtype=hp_dtype, device=device)
    kv_hp.normal_(generator=dev_gen)

    k_scale = v_scale = 1.0
    extras: dict[str, torch.Tensor] = {}
    if spec.is_fp8:
        from attnbench.workload.quant import per_tensor_scale, quantize

        fp8 = torch_dtype(spec.kv_dtype)
        k_scale = per_tensor_scale(kv_hp[:, 0], fp8)
        v_scale = per_tensor_scale(kv_hp[:, 1], fp8)
        kv_cache = torch.empty(shape, dtype=fp8, device=device)
        kv_cache[:, 0] = quantize(kv_hp[:, 0], k_scale, fp8)
        kv_cache[:, 1] = quantize(kv_hp[:, 1], v_scale, fp8)
        if keep_high_precision:
            extras["kv_cache_hp"] = kv_hp
        else:
            del kv_hp
    else:
        kv_cache = kv_hp

    inputs = AttentionInputs(
        spec,
        q,
        kv_cache,
        *_index_tensors(spec, indptr, indices, device),
        k_scale=k_scale,
        v_scale=v_scale,
        extras=extras,
    )
    if spec.kind == "tree" and spec.tree is not None:
        inputs.custom_mask = tree_custom_mask(spec).to(device)
    if spec.sinks:
        inputs.sinks = sink_logits(spec, cpu_gen).to(device)
    return inputs


Index5 = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _index_tensors(
    spec: WorkloadSpec, indptr: list[int], indices: list[int], device: torch.device
) -> Index5:
    """(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, kv_lens) as int32 on `device`."""
    last = [n - (-(-n // spec.page_size) - 1) * spec.page_size for n in spec.kv_lens]
    qo_indptr = [0]
    for n in spec.qo_lens:
        qo_indptr.append(qo_indptr[-1] + n)

    def i32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    return i32(qo_indptr), i32(indptr), i32(indices), i32(last), i32(list(spec.kv_lens))


SOFT_CAP_LOGIT_STD = 0.08
"""A soft-capped case's scaled logits have this standard deviation per unit of the cap (4 at
Gemma-2's 50), see `soft_cap_query_scale`."""


def soft_cap_query_scale(spec: WorkloadSpec) -> float:
    """The factor on a soft-capped case's unit-normal queries that makes the scaled logits'
    standard deviation SOFT_CAP_LOGIT_STD x the cap, large enough for the cap to matter.

    Unit-normal q and k give scaled logits of standard deviation sqrt(head_dim) x sm_scale
    (about 1), where a cap of 50 moves the output by less than bf16's error budget: a kernel
    that dropped the cap would pass the accuracy gate. At 4 it moves it by 5-10x the budget at
    1-2k keys (more at longer contexts), while an approximate tanh (FlashInfer's
    `tanh.approx.f32`, relative error 2^-11) stays ~4x inside it.
    """
    spread = math.sqrt(spec.head_dim) * spec.sm_scale
    return max(1.0, SOFT_CAP_LOGIT_STD * spec.logits_soft_cap / spread)


def sink_logits(spec: WorkloadSpec, generator: torch.Generator) -> torch.Tensor:
    """One sink logit per query head, bfloat16 `[num_qo_heads]`, large enough to matter.

    Scaled logits of unit-normal q and k are about N(0, 1), so n keys put about 1.65 n
    (n e^(1/2)) in the softmax denominator. Sinks are drawn around log(1.65 n), n the mean
    number of keys a query sees, so a sink takes 25-75% of the probability mass for most heads:
    a kernel that dropped it would fail the accuracy gate by far.
    """
    seen = [
        window_tokens(1, kv, spec.window_left) if spec.window_left >= 0 else kv - qo / 2
        for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True)
    ]
    centre = math.log(1.65 * max(1.0, sum(seen) / len(seen)))
    noise = torch.randn(spec.num_qo_heads, generator=generator, dtype=torch.float64)
    return (centre + noise).to(torch.bfloat16)


def pow2_scale(x: torch.Tensor, fp8: torch.dtype) -> float:
    """The smallest power of two that maps x's largest magnitude into the fp8 range: stored
    values times it are exact in bf16, so a kernel that dequantises to bf16 loses nothing."""
    from attnbench.workload.quant import FP8_MAX

    amax = float(x.abs().amax().float())
    return 1.0 if amax == 0.0 else float(2.0 ** math.ceil(math.log2(amax / FP8_MAX[fp8])))


def _mla_inputs(
    spec: WorkloadSpec,
    device: torch.device,
    gen: torch.Generator,
    indptr: list[int],
    indices: list[int],
    keep_high_precision: bool,
) -> AttentionInputs:
    """The absorbed MLA case: q `[total_q, Hq, 576]` and the latent cache (module docstring)."""
    assert spec.mla is not None
    rank = spec.mla.kv_lora_rank
    q_dtype = torch_dtype(spec.dtype)
    q = torch.empty(spec.total_q, spec.num_qo_heads, spec.head_dim, dtype=q_dtype, device=device)
    q.normal_(generator=gen)
    shape = (max(indices) + 1, spec.page_size, spec.head_dim)
    latent = torch.empty(shape, dtype=q_dtype if not spec.is_fp8 else torch.bfloat16, device=device)
    latent.normal_(generator=gen)
    scales = (1.0, 1.0)
    extras: dict[str, torch.Tensor] = {}
    if spec.is_fp8:
        from attnbench.workload.quant import quantize

        fp8 = torch_dtype(spec.kv_dtype)
        hp, latent = latent, torch.empty(shape, dtype=fp8, device=device)
        scales = (pow2_scale(hp[..., :rank], fp8), pow2_scale(hp[..., rank:], fp8))
        latent[..., :rank] = quantize(hp[..., :rank], scales[0], fp8)
        latent[..., rank:] = quantize(hp[..., rank:], scales[1], fp8)
        if keep_high_precision:
            extras["kv_cache_hp"] = hp
    return AttentionInputs(
        spec,
        q,
        latent,
        *_index_tensors(spec, indptr, indices, device),
        extras=extras,
        ckv_scale=scales[0],
        kpe_scale=scales[1],
    )


def tree_ancestor_mask(parents: tuple[int, ...]) -> torch.Tensor:
    """[n, n] bool: node i sees node j iff j is i or one of its ancestors."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        mask[i, i] = True
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def tree_custom_mask(spec: WorkloadSpec) -> torch.Tensor:
    """Flat bool mask for tree verification, concatenated over requests.

    Request b contributes [qo_len, kv_len] row-major: every draft node sees the whole context
    (kv_len - qo_len tokens) and, among the draft nodes, itself and its ancestors.
    """
    assert spec.tree is not None
    tree = tree_ancestor_mask(spec.tree.parents)
    parts = []
    for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True):
        m = torch.ones(qo, kv, dtype=torch.bool)
        m[:, kv - qo :] = tree
        parts.append(m.flatten())
    return torch.cat(parts)
