"""Copies of the paged KV cache in the layouts non-paged kernels take, made in `plan`.

Kernels without a page table (FA3 fwd-only build, torch SDPA, FlexAttention) need K and V
contiguous. These helpers gather token ranges of each request out of the scattered pages with
one advanced-indexing op per tensor (no Python loop over tokens). The copy happens at plan
time and is never part of a timed run; rows say so in `details` (`kv_cache: contiguous`).

Shapes (cache dtype kept: fp8 stays fp8):

    packed:  k, v [sum(end_b - start_b), num_kv_heads, head_dim]        (varlen kernels)
    padded:  k, v [batch_size, max_len, num_kv_heads, head_dim], zeros past each length

`page_table` and `paged_kv` give paged kernels that take a dense page table (vLLM's
`block_table`, FA3's `page_table`) the case's own pages, without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnbench.workload.inputs import AttentionInputs

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def exclusive_cumsum(lens: Sequence[int]) -> list[int]:
    """[0, l0, l0+l1, ...] (len(lens) + 1 entries): cu_seqlens / indptr from lengths."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def int32(values: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int32, device=device)


def token_slots(
    inputs: AttentionInputs,
    starts: Sequence[int],
    ends: Sequence[int],
    requests: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Physical (page id, offset in page) of tokens starts[i]..ends[i]-1 of request
    `requests[i]` (default: request i), concatenated in that order.

    Returns two int64 tensors of length sum(ends[i] - starts[i]).
    """
    spec = inputs.spec
    dev = inputs.device
    lens = [e - s for s, e in zip(starts, ends, strict=True)]
    if any(n < 0 for n in lens):
        raise ValueError("every end must be >= its start")
    reqs = list(range(len(lens))) if requests is None else list(requests)
    total = sum(lens)
    lens_t = torch.tensor(lens, dtype=torch.long, device=dev)
    row = torch.repeat_interleave(torch.arange(len(lens), device=dev), lens_t)
    req = torch.tensor(reqs, dtype=torch.long, device=dev)[row]
    first = torch.tensor(exclusive_cumsum(lens)[:-1], dtype=torch.long, device=dev)
    start_t = torch.tensor(list(starts), dtype=torch.long, device=dev)
    pos = torch.arange(total, device=dev) - first[row] + start_t[row]  # token index in request
    ps = spec.page_size
    page = inputs.kv_indices.long()[inputs.kv_indptr.long()[req] + pos // ps]
    return page, pos % ps


def gather_slots(
    inputs: AttentionInputs, page: torch.Tensor, offset: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V at the given slots: each `[*page.shape, num_kv_heads, head_dim]`, contiguous."""
    cache = as_bytes(inputs.kv_cache)
    if inputs.spec.kv_layout == "NHD":  # [P, 2, ps, H, D]
        k, v = cache[page, 0, offset], cache[page, 1, offset]
    else:  # HND [P, 2, H, ps, D]: advanced indices split by a slice go first -> [..., H, D]
        k, v = cache[page, 0, :, offset], cache[page, 1, :, offset]
    dtype = inputs.kv_cache.dtype
    return k.contiguous().view(dtype), v.contiguous().view(dtype)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """fp8 tensors as uint8 views (indexing and scatter kernels are not all built for fp8)."""
    return t.view(torch.uint8) if t.dtype in FP8_DTYPES else t


def packed_kv(
    inputs: AttentionInputs,
    starts: Sequence[int] | None = None,
    ends: Sequence[int] | None = None,
    requests: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ranges of requests, concatenated: k, v `[N, num_kv_heads, head_dim]`.

    Defaults: the whole of every request (0..kv_len); see `token_slots` for `requests`.
    """
    spec = inputs.spec
    starts = [0] * spec.batch_size if starts is None else starts
    ends = list(spec.kv_lens) if ends is None else ends
    page, offset = token_slots(inputs, starts, ends, requests)
    return gather_slots(inputs, page, offset)


def padded_kv(
    inputs: AttentionInputs,
    starts: Sequence[int] | None = None,
    ends: Sequence[int] | None = None,
    max_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens start_b..end_b of every request, one row each, zero-padded to `max_len`.

    Returns k, v `[batch_size, max_len, num_kv_heads, head_dim]` (default max_len: the longest
    range). Padding is zeros, so a kernel that ignores lengths still sees finite values.
    """
    spec = inputs.spec
    starts = [0] * spec.batch_size if starts is None else starts
    ends = list(spec.kv_lens) if ends is None else ends
    lens = [e - s for s, e in zip(starts, ends, strict=True)]
    width = max(lens) if max_len is None else max_len
    if width < max(lens):
        raise ValueError(f"max_len={width} is shorter than the longest range {max(lens)}")
    k_packed, v_packed = packed_kv(inputs, starts, ends)
    shape = (len(lens), width, spec.num_kv_heads, spec.head_dim)
    dtype = k_packed.dtype
    store = torch.uint8 if dtype in FP8_DTYPES else dtype  # zero bytes are +0.0 in fp8
    k = torch.zeros(shape, dtype=store, device=inputs.device)
    v = torch.zeros(shape, dtype=store, device=inputs.device)
    rows, cols = padded_index(lens, inputs.device)
    k[rows, cols] = as_bytes(k_packed)
    v[rows, cols] = as_bytes(v_packed)
    return k.view(dtype), v.view(dtype)


def padded_index(lens: Sequence[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every real token of a padded `[len(lens), max(lens)]` layout, in
    packed (request-major) order: `padded[rows, cols]` is the packed tensor."""
    lens_t = torch.tensor(list(lens), dtype=torch.long, device=device)
    rows = torch.repeat_interleave(torch.arange(len(lens), device=device), lens_t)
    first = torch.tensor(exclusive_cumsum(lens)[:-1], dtype=torch.long, device=device)
    cols = torch.arange(int(lens_t.sum()), device=device) - first[rows]
    return rows, cols


def page_table(inputs: AttentionInputs) -> torch.Tensor:
    """Dense page table `[batch_size, max_pages_per_request]` int32 (unused slots hold page 0),
    the `block_table` / `page_table` argument of vLLM-style paged kernels."""
    spec = inputs.spec
    indptr = inputs.kv_indptr.tolist()
    counts = [indptr[b + 1] - indptr[b] for b in range(spec.batch_size)]
    table = torch.zeros(spec.batch_size, max(counts), dtype=torch.int32, device=inputs.device)
    rows, cols = padded_index(counts, inputs.device)
    table[rows, cols] = inputs.kv_indices[: indptr[-1]]
    return table


def paged_kv(
    inputs: AttentionInputs, ends: Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The case's paged cache as dense-page-table kernels take it, for keys 0..ends[b] of every
    request (default: whole requests): K and V pages `[num_pages, page_size, num_kv_heads,
    head_dim]` (views of the cache, NHD only), the page table `[batch_size, max_pages]` int32
    from `kv_indptr`/`kv_indices`, and the lengths int32 (`inputs.kv_lens` itself for whole
    requests): the pages and lengths the reference reads."""
    spec = inputs.spec
    if spec.kv_layout != "NHD":
        raise ValueError("dense-page-table kernels take NHD pages [pages, page_size, heads, dim]")
    if ends is None or list(ends) == list(spec.kv_lens):
        lens = inputs.kv_lens
    else:
        lens = int32(ends, inputs.device)
    return inputs.k_cache, inputs.v_cache, page_table(inputs), lens
