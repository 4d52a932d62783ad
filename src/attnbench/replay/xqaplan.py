"""TensorRT-LLM XQA's split of a decode batch (`kernelplan`'s `xqa` family): sub-sequences per
request (mha.cu / mha_sm90.cu computeNbSubSeqPerSeq*, launchHopperF8MHA) and each CTA's tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence

XQA_TILE_TOKENS = {"mha": 256, "mha_sm90": 64}
"""KV tokens per tile: the generic kernel, and the SM90 fp8 GMMA kernel (gemm0CtaTileNbTokens)."""


def xqa_sub_seqs(seqs: int, num_sms: int, kv_max: int, tile_tokens: int) -> int:
    """XQA's sub-sequences per request (computeNbSubSeqPerSeqMHA): `seqs` = requests x KV heads."""
    return max(1, min(max(1, num_sms // max(seqs, 1)), math.ceil(kv_max / tile_tokens)))


def xqa_sm90_sub_seqs(seqs: int, num_sms: int, kv_max: int, tile_tokens: int) -> int:
    """The SM90 fp8 kernel's sub-sequences per request (mha_sm90.cu launchHopperF8MHA):
    round((3 x SMs // seqs) x 0.25), at least 1 and at most ceil(longest / tile)."""
    quarter = (3 * num_sms // max(seqs, 1)) * 0.25
    return max(1, min(math.floor(quarter + 0.5), math.ceil(kv_max / tile_tokens)))


def xqa_unit_tokens(kv_len: int, sub_seqs: int, tile_tokens: int) -> list[int]:
    """KV tokens of each of a request's `sub_seqs` CTAs: sub-sequence j takes the tiles j,
    j + sub_seqs, ... (mha.cu / mha_sm90.cu stride the tiles by the sub-sequence count)."""
    tiles = max(1, math.ceil(kv_len / tile_tokens))
    out = []
    for j in range(sub_seqs):
        mine = max(0, math.ceil((tiles - j) / sub_seqs))
        last = mine > 0 and (tiles - 1) % sub_seqs == j
        out.append(mine * tile_tokens - (tiles * tile_tokens - kv_len if last else 0))
    return out


def xqa_split_exact(
    kv_lens: Sequence[int], h: int, num_sms: int, kv_dtype: str
) -> tuple[int, list[int]]:
    """(the longest request's sub-sequences, every CTA's KV tokens in launch order) of XQA's
    plan on the requests' lengths: the grid's sub-sequences per request from the
    longest (`xqa_sub_seqs`, `xqa_sm90_sub_seqs`), each CTA's tokens (`xqa_unit_tokens`). The
    SM90 fp8 kernel splits a request only with >= 2 tiles (multiBlockMinNbTiles) and into at
    most its tiles; the generic kernel gives every request the grid's count."""
    n, mx = len(kv_lens), max(kv_lens)
    fp8 = kv_dtype == "fp8_e4m3"
    tile = XQA_TILE_TOKENS["mha_sm90" if fp8 else "mha"]
    sub = (xqa_sm90_sub_seqs if fp8 else xqa_sub_seqs)(n * h, num_sms, mx, tile)
    units: list[int] = []
    chain = 1
    for kv_len in kv_lens:
        tiles = max(1, math.ceil(kv_len / tile))
        mine = (min(tiles, sub) if tiles >= 2 else 1) if fp8 else sub
        units.extend(xqa_unit_tokens(kv_len, mine, tile))
        chain = mine if kv_len == mx else chain
    return chain, units
