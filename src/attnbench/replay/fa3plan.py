"""FlashAttention-3's plan of a paged decode batch on sm90, as its host code and scheduler kernel
decide it (Dao-AILab/flash-attention `hopper/`; tokenspeed-fa3 3.0.0 builds the same sources):

    block_n     the KV tile (tile_size.h tile_size_fwd_sm90): with a page table whose page size
                is not a multiple of the TMA tile, paged KV is read without TMA and d <= 128
                takes 128 tokens (bf16/fp16) or 160 (fp8 e4m3); flash_api.cpp get_pagedkv_tma.
    num_splits  the static split count (flash_api.cpp get_num_splits, heuristics.h
                num_splits_heuristic): a varlen batch pretends batch 1 ("one long sequence and
                the rest short"), so it is an upper bound for the dynamic split below; above 1
                the split kernel writes fp32 partials and the combine kernel runs.
    pack_gqa    get_pack_gqa: always on for paged KV without TMA or with a split.
    splits      per request (flash_prepare_scheduler.cu prepare_varlen_num_blocks_kernel, one
                CTA for up to 992 requests): blocks_per_sm = ceil(total_blocks x 1.1 x heads /
                SMs) in float32 (heads: KV heads with pack-GQA, else query heads), then
                min(ceil(n_blocks_i / blocks_per_sm), num_splits), at least 1.
    order       the requests sorted by KV blocks per split, longest first (stable; causal: minus
                the query blocks), the order the persistent scheduler
                (tile_scheduler.hpp VarlenDynamicPersistentTileScheduler, one CTA per SM)
                hands out their tiles.

On the H200 the FA3 backend records the decision FA3 made for every decode row
(`backends/fa_calls.py`: `fa3_num_splits` from the split buffers, `fa3_pack_gqa`, and
`fa3_splits` / `fa3_order` from `get_scheduler_metadata`); `recorded_decision` reads it back, and
a test checks `fa3_decision` against every recorded row. The cost model uses the recorded
decision where a row has one and this re-implementation elsewhere (the simulator, CPU runs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from attnbench.backends.fa3_record import decode_counts

PREPARE_MAX_BATCH = 992
"""prepare_varlen_num_blocks_kernel splits dynamically only when one CTA holds the batch (31 x
32 requests); above it every request keeps one split."""
L2_BYTES = 50 * 1024 * 1024
"""heuristics.h: a KV head above this (the assumed L2) may split even when the SMs are full."""
MAX_SPLITS = 128


@dataclass(frozen=True)
class FA3Call:
    """What FA3's planning is told about a decode call (one query per request)."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    kv_itemsize: int = 2
    """1 for fp8 e4m3 (FA3's fp8 path quantises q too), else 2."""
    page_size: int | None = 16
    """None: no page table."""
    causal: bool = True
    """As the engines and attnbench pass it for decode; FA3 keeps it only for d128 with a page
    table (flash_api.cpp), where it selects the 128-token tile and the causal sort key."""
    num_sms: int = 132


@dataclass(frozen=True)
class FA3Decision:
    """FA3's plan of one decode call (module docstring)."""

    num_splits: int
    pack_gqa: bool
    splits: tuple[int, ...]
    """Splits per request, in launch order."""
    order: tuple[int, ...]
    """The request (index into the call's KV lengths) of each launch position."""
    block_n: int

    def unit_tokens(self, kv_lens: Sequence[int], num_kv_heads: int) -> list[int]:
        """KV tokens of every tile in launch order: per request its splits (split j reads
        blocks j x per .. (j + 1) x per of ceil(blocks / splits) = per), per KV head when
        pack-GQA packs the query heads of one KV head into a tile."""
        out: list[int] = []
        bn = self.block_n
        for req, s in zip(self.order, self.splits, strict=True):
            kv = int(kv_lens[req])
            per = -(-max(1, -(-kv // bn)) // s) * bn
            tiles = [max(0, min(kv, (j + 1) * per) - j * per) for j in range(s)]
            for t in tiles:
                out.extend([t] * num_kv_heads)
        return out


def _causal(call: FA3Call) -> bool:
    """flash_api.cpp: a one-query call without a window is made non-causal unless d128 paged."""
    keep = 64 < call.head_dim <= 128 and call.page_size is not None
    return call.causal and keep


def tile_sm90(head_dim: int, itemsize: int, causal: bool, paged_non_tma: bool) -> tuple[int, int]:
    """(kBlockM, kBlockN) of tile_size_fwd_sm90 (d = dv, not local, no softcap)."""
    small_n = causal or paged_non_tma
    if itemsize == 2:
        if head_dim <= 64:
            return 192, 128 if small_n else 192
        if head_dim <= 96:
            return 192, 128 if paged_non_tma else 144
        if head_dim <= 128:
            return 128, 128 if small_n else 176
        if head_dim <= 192:
            return 128, 96 if paged_non_tma else 128
        return 128, 80
    if head_dim <= 64:
        return 192, 160
    if head_dim <= 96:
        return 192, 128
    if head_dim <= 128:
        return 128, 160 if paged_non_tma else 224
    if head_dim <= 192:
        return 128, 160
    return 128, 128


def round_head_dim(head_dim: int) -> int:
    """flash_api.cpp round_up_headdim (every size compiled in)."""
    return next((d for d in (64, 96, 128, 192) if head_dim <= d), 256)


def paged_tma(call: FA3Call) -> bool:
    """get_pagedkv_tma: the page size a multiple of the TMA tile, and more packed queries than
    one m-block."""
    if call.page_size is None:
        return False
    d = round_head_dim(call.head_dim)
    block_m, block_n = tile_sm90(d, call.kv_itemsize, _causal(call), False)
    group = call.num_qo_heads // call.num_kv_heads
    return call.page_size % block_n == 0 and group > block_m


def tile_of(call: FA3Call) -> tuple[int, int]:
    """(kBlockM, kBlockN) of the kernel this call runs."""
    non_tma = call.page_size is not None and not paged_tma(call)
    return tile_sm90(round_head_dim(call.head_dim), call.kv_itemsize, _causal(call), non_tma)


@lru_cache(maxsize=65536)
def num_splits_heuristic(
    total_mblocks: int,
    num_sms: int,
    num_n_blocks: int,
    num_m_blocks: int = 1,
    size_one_kv_head: int = 0,
    causal_or_local: bool = False,
    max_splits: int = MAX_SPLITS,
) -> int:
    """heuristics.h num_splits_heuristic, in its float32 arithmetic."""
    if total_mblocks >= 0.8 * num_sms:
        if size_one_kv_head > L2_BYTES and num_m_blocks >= num_sms * 2 and not causal_or_local:
            return min(-(-size_one_kv_head // L2_BYTES), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    top = min(max_splits, num_sms, num_n_blocks)
    s = np.arange(1, top + 1, dtype=np.float32)
    waves = np.float32(total_mblocks) * s / np.float32(num_sms)
    eff = waves / np.ceil(waves)
    best = float(eff.max())
    return int(np.flatnonzero(eff.astype(np.float64) >= 0.85 * best)[0]) + 1


def fa3_static_splits(call: FA3Call, kv_max: int) -> int:
    """get_num_splits for a varlen (dynamically split) decode call whose longest request holds
    `kv_max` tokens: batch 1, pack-GQA, max_seqlen_k the page table's width (as attnbench's
    backend passes it: whole pages)."""
    page = call.page_size or 1
    max_seqlen_k = -(-kv_max // page) * page
    block_m, block_n = tile_of(call)
    group = call.num_qo_heads // call.num_kv_heads
    n_blocks = -(-max_seqlen_k // block_n)
    m_blocks = -(-group // block_m)
    size_head = max_seqlen_k * 2 * call.head_dim * call.kv_itemsize
    return num_splits_heuristic(
        call.num_kv_heads * m_blocks, call.num_sms, n_blocks, m_blocks, size_head, _causal(call)
    )


def fa3_pack_gqa(call: FA3Call, num_splits: int) -> bool:
    """get_pack_gqa (FA3's choice when the caller leaves pack_gqa unset)."""
    if (call.page_size is not None and not paged_tma(call)) or num_splits > 1:
        return True
    return call.num_qo_heads != call.num_kv_heads  # varlen q: should_pack_gqa is true


def fa3_decision(call: FA3Call, kv_lens: Sequence[int]) -> FA3Decision:
    """FA3's plan of a decode call over requests of `kv_lens` (module docstring)."""
    kv = np.asarray(kv_lens, dtype=np.int64)
    block_m, block_n = tile_of(call)
    static = fa3_static_splits(call, int(kv.max()))
    pack = fa3_pack_gqa(call, static)
    group = call.num_qo_heads // call.num_kv_heads
    m_blocks = -(-(group if pack else 1) // block_m)
    n_blocks = -(-kv // block_n)
    if kv.size > PREPARE_MAX_BATCH or static == 1:
        splits = np.ones(kv.size, dtype=np.int64)
    else:
        heads = call.num_kv_heads if pack else call.num_qo_heads
        total = np.float32(int(n_blocks.sum()) * m_blocks) * np.float32(1.1) * np.float32(heads)
        per_sm = max(int(np.ceil(total / np.float32(call.num_sms))), 1)
        splits = np.maximum(np.minimum(-(-n_blocks // per_sm), static), 1)
    key = -(-n_blocks // splits)
    if _causal(call):
        key = key * block_n - m_blocks * block_m
    order = np.argsort(-key, kind="stable")
    return FA3Decision(
        num_splits=static,
        pack_gqa=pack,
        splits=tuple(int(v) for v in splits[order]),
        order=tuple(int(v) for v in order),
        block_n=block_n,
    )


def recorded_decision(
    details: Mapping[str, object], call: FA3Call, batch_size: int
) -> FA3Decision | None:
    """The decision an H200 row recorded (`backends.fa3_record`), None when the row has none
    or it does not fit the batch; a pack-GQA FA3 could not tell apart ("either") is this
    module's."""
    try:
        splits = decode_counts(str(details["fa3_splits"]))
        order = tuple(int(v) for v in str(details["fa3_order"]).split(",")) if batch_size else ()
        static = int(str(details["fa3_num_splits"]))
    except (KeyError, ValueError):
        return None
    if len(splits) != batch_size or sorted(order) != list(range(batch_size)):
        return None
    pack = details.get("fa3_pack_gqa")
    packed = pack if isinstance(pack, bool) else fa3_pack_gqa(call, static)
    return FA3Decision(static, packed, splits, order, tile_of(call)[1])


def fa3_split(
    n: int,
    total: float,
    mx: float,
    call: FA3Call,
    kv_lens: Sequence[int] | None = None,
    decision: FA3Decision | None = None,
) -> tuple[float, float, float, list[int] | None]:
    """(longest unit tokens, units, the longest request's splits, every unit's tokens or None)
    of one call: on the requests' lengths (`kv_lens`, with FA3's recorded `decision` when
    there is one) exactly, else from the summary (n, total KV, longest) with the same rules,
    sum(n_blocks_i) taken as total / block_n + n / 2."""
    h = call.num_kv_heads
    if kv_lens is not None and len(kv_lens) == n:
        d = decision or fa3_decision(call, kv_lens)
        tiles = d.unit_tokens(kv_lens, h)
        longest = max(range(n), key=lambda i: kv_lens[d.order[i]])
        return float(max(tiles)), float(len(tiles)), float(d.splits[longest]), tiles
    _, bn = tile_of(call)
    static = fa3_static_splits(call, int(mx))
    nb_max = max(1, math.ceil(mx / bn))
    if static == 1 or n > PREPARE_MAX_BATCH:
        return mx, float(n * h), 1.0, None
    heads = h if fa3_pack_gqa(call, static) else call.num_qo_heads
    blocks = total / bn + n / 2.0
    per_sm = max(1, math.ceil(blocks * 1.1 * heads / call.num_sms))
    longest = max(1, min(math.ceil(nb_max / per_sm), static))
    unit = min(mx, float(math.ceil(nb_max / longest) * bn))
    units = max(float(n), min(float(n * static), blocks / per_sm + n / 2.0))
    return unit, units * h, float(longest), None
