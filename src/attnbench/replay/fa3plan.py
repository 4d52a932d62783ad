"""FlashAttention-3's split of a paged decode batch on sm90 (`kernelplan`'s `fa3` family):
hopper/heuristics.h num_splits_heuristic for the static count, flash_prepare_scheduler.cu's
dynamic per-request split below it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np


def _fa3_block_n(head_dim: int) -> int:
    """FA3's KV tile on sm90 (hopper/tile_size.h: 176 up to d128 when not causal, else 128)."""
    return 176 if head_dim <= 128 else 128


@lru_cache(maxsize=65536)
def fa3_num_splits(total_mblocks: int, num_sms: int, num_n_blocks: int) -> int:
    """hopper/heuristics.h num_splits_heuristic for decode (one m-block, not causal)."""
    if total_mblocks >= 0.8 * num_sms or num_n_blocks <= 4:
        return 1
    max_splits = min(128, num_sms, num_n_blocks)
    eff = []
    for s in range(1, max_splits + 1):
        waves = total_mblocks * s / num_sms
        eff.append(waves / math.ceil(waves))
    best = max(eff)
    return next(s for s, e in enumerate(eff, start=1) if e >= 0.85 * best)


def fa3_split(
    n: int,
    total: float,
    mx: float,
    h: int,
    head_dim: int,
    num_sms: int,
    kv_lens: Sequence[int] | None = None,
) -> tuple[float, float]:
    """(longest unit tokens, units): the static split of batch 1 (the dynamic scheduler's upper
    bound), then per request ceil(blocks_i / blocks_per_sm) splits at most that (on the
    requests' block counts when `kv_lens` is known, else on the summary)."""
    bn = _fa3_block_n(head_dim)
    nb_max = max(1, math.ceil(mx / bn))
    splits = fa3_num_splits(h, num_sms, nb_max)
    if splits == 1:
        return mx, float(n * h)
    exact = kv_lens is not None and len(kv_lens) == n
    nb = np.maximum(1, -(-np.asarray(kv_lens if exact else [], dtype=np.int64) // bn))
    blocks = float(nb.sum()) if exact else total / bn + n / 2.0
    per_sm = max(1, math.ceil(blocks * 1.1 * h / num_sms))
    longest = max(1, min(math.ceil(nb_max / per_sm), splits))
    unit = min(mx, float(math.ceil(nb_max / longest) * bn))
    if exact:
        units = float(np.minimum(-(-nb // per_sm), splits).sum())
    else:
        units = max(float(n), min(float(n * splits), blocks / per_sm + n / 2.0))
    return unit, units * h
