"""FA3's plan of a paged decode batch (`replay.fa3plan`): the re-implementation against the
hopper sources, and against every decision an H200 row recorded (`fa3_*` details)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.replay.fa3plan import (
    FA3Call,
    FA3Decision,
    decode_counts,
    encode_counts,
    fa3_decision,
    fa3_static_splits,
    recorded_decision,
    tile_of,
)
from attnbench.results import read_results

LLAMA70_TP8 = FA3Call(num_qo_heads=8, num_kv_heads=1, head_dim=128)
RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_tile_follows_tile_size_h_for_paged_kv_without_tma() -> None:
    # page 16 is no multiple of the TMA tile: paged KV without TMA, d128 takes 128 (bf16) and
    # 160 (fp8) KV tokens a tile; without a page table d128 non-causal takes 176
    assert tile_of(LLAMA70_TP8) == (128, 128)
    assert tile_of(FA3Call(8, 1, 128, kv_itemsize=1)) == (128, 160)
    assert tile_of(FA3Call(8, 1, 128, page_size=None)) == (128, 176)
    assert tile_of(FA3Call(8, 1, 64, page_size=None)) == (192, 192)


def test_static_split_pretends_batch_one() -> None:
    # at most 4 KV tiles: never split (flash_api.cpp get_num_splits, heuristics.h)
    assert fa3_static_splits(LLAMA70_TP8, 512) == 1
    # 5 tiles: split; one KV head fills 1 of 132 SMs, so the most splits within 85% of the best
    assert fa3_static_splits(LLAMA70_TP8, 513) == 5
    assert fa3_static_splits(LLAMA70_TP8, 131072) == 109


def test_dynamic_split_shares_the_blocks_per_sm() -> None:
    # 129 requests of 2048 tokens (16 tiles) and one of 135,168 (1,056 tiles): 3,120 tiles,
    # blocks_per_sm = ceil(3120 x 1.1 / 132) = 26; the long one splits into ceil(1056 / 26) = 41
    kv = [2048] * 129 + [135_168]
    d = fa3_decision(LLAMA70_TP8, kv)
    assert (d.num_splits, d.pack_gqa, d.block_n) == (109, True, 128)
    assert (d.order[0], d.splits[0]) == (129, 41)  # the longest per split goes first
    assert d.splits[1:] == (1,) * 129
    assert d.order[1:] == tuple(range(129))  # ties keep their order (a stable sort)
    tiles = d.unit_tokens(kv, 1)
    assert (len(tiles), sum(tiles)) == (170, sum(kv))
    assert max(tiles) == 26 * 128


def test_large_batch_of_short_requests_is_not_split() -> None:
    d = fa3_decision(LLAMA70_TP8, [256] * 200)
    assert (d.num_splits, d.splits) == (1, (1,) * 200)
    d = fa3_decision(LLAMA70_TP8, [4096] * 993)  # beyond one scheduler CTA: no dynamic split
    assert d.splits == (1,) * 993


def test_counts_round_trip() -> None:
    values = (16, 12, 12, 1, 1, 1, 3)
    assert encode_counts(values) == "16,12x2,1x3,3"
    assert decode_counts(encode_counts(values)) == values
    with pytest.raises(ValueError, match="invalid literal"):
        decode_counts("1,x")


def test_recorded_decision_reads_back_what_the_backend_writes() -> None:
    kv = [2048] * 5 + [70_000]
    d = fa3_decision(LLAMA70_TP8, kv)
    details = {
        "fa3_num_splits": d.num_splits,
        "fa3_pack_gqa": True,
        "fa3_splits": encode_counts(d.splits),
        "fa3_order": ",".join(str(i) for i in d.order),
    }
    assert recorded_decision(details, LLAMA70_TP8, len(kv)) == d
    assert recorded_decision({}, LLAMA70_TP8, len(kv)) is None
    assert recorded_decision(details, LLAMA70_TP8, len(kv) + 1) is None  # not this batch


def _recorded_rows() -> list[tuple[str, list[int], FA3Decision, FA3Call]]:
    out = []
    for path in sorted(RESULTS.glob("*.jsonl*")):
        for r in read_results(path).rows:
            if r.backend != "flash-attn:fa3" or r.spec.kind != "decode" or r.status != "ok":
                continue
            s = r.spec
            call = FA3Call(
                s.num_qo_heads,
                s.num_kv_heads,
                s.head_dim,
                kv_itemsize=1 if s.kv_dtype.startswith("fp8") else 2,
                page_size=s.page_size,
                num_sms=132,
            )
            got = recorded_decision(dict(r.details), call, s.batch_size)
            if got is not None:
                out.append((f"{path.name}:{r.case_id}", list(s.kv_lens), got, call))
    return out


def test_reimplementation_matches_every_recorded_decision() -> None:
    """On the H200, FA3's own `get_scheduler_metadata` and split buffers record what it chose
    for each decode row; the CPU re-implementation must choose the same (static splits,
    pack-GQA, splits per request in launch order; the order up to ties of equal tiles)."""
    recorded = _recorded_rows()
    if not recorded:
        pytest.skip("no committed FA3 row records its scheduler decision yet (H200 run pending)")
    wrong = []
    for where, kv, got, call in recorded:
        mine = fa3_decision(call, kv)
        tiles = [-(-kv[i] // mine.block_n) for i in got.order]
        keys = [(t + s - 1) // s for t, s in zip(tiles, got.splits, strict=True)]
        same = (
            mine.num_splits == got.num_splits
            and mine.pack_gqa == got.pack_gqa
            and mine.splits == got.splits
            and keys == sorted(keys, reverse=True)
        )
        if not same:
            wrong.append(where)
    assert not wrong, f"{len(wrong)} of {len(recorded)} recorded decisions differ: {wrong[:5]}"
