"""FA3's plan of a paged decode batch (`replay.fa3plan`): the re-implementation against the
hopper sources, and against every decision an H200 row recorded (`fa3_*` details)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from attnbench.backends import flash_attn as fa
from attnbench.backends.fa3_record import decision_details, decode_counts, encode_counts
from attnbench.backends.fa_lib import FlashLib
from attnbench.replay.fa3plan import (
    FA3Call,
    FA3Decision,
    fa3_decision,
    fa3_static_splits,
    recorded_decision,
    tile_of,
)
from attnbench.results import read_results
from attnbench.workload.inputs import make_inputs
from backend_cases import make_spec
from test_flash_attn import FA3_ARGS, FakeFA3

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


def metadata_values(d: FA3Decision) -> list[int]:
    """What `get_scheduler_metadata` returns for a sorted causal decode call: per batch rounded
    up to 4, the splits, query blocks, request and heads in L2 per launch position, then the
    semaphore (hopper/flash_api.cpp)."""
    pad = [0] * (-len(d.splits) % 4)
    ones = [1] * len(d.splits)
    return [*d.splits, *pad, *ones, *pad, *d.order, *pad, *ones, *pad, 0]


def test_recorded_decision_reads_back_what_the_backend_writes() -> None:
    kv = [2048] * 5 + [70_000]
    d = fa3_decision(LLAMA70_TP8, kv)
    details = decision_details(metadata_values(d), len(kv), d.num_splits, True)
    assert details["fa3_metadata"] == "8 x 4 + semaphore"
    assert details["fa3_splits"] == encode_counts(d.splits)
    assert recorded_decision(details, LLAMA70_TP8, len(kv)) == d
    assert recorded_decision({}, LLAMA70_TP8, len(kv)) is None
    assert recorded_decision(details, LLAMA70_TP8, len(kv) + 1) is None  # not this batch
    short = decision_details([1, 2, 3], len(kv), 4, True)
    assert list(short) == ["fa3_metadata"]
    assert str(short["fa3_metadata"]).startswith("unread")


def _recorded_rows() -> list[tuple[str, list[int], FA3Decision, FA3Call]]:
    out = []
    for path in sorted([*RESULTS.glob("*.jsonl*"), *RESULTS.glob("replay/*.jsonl*")]):
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


class MetadataFA3(FakeFA3):
    """FakeFA3 whose `get_scheduler_metadata` has FA3's real layout (from the re-implementation,
    pack-GQA as asked) and whose raw forward returns split buffers of the static split count:
    the plumbing from FA3's report to a row's details, without a GPU."""

    def __init__(self, call: FA3Call) -> None:
        super().__init__()
        self.call = call

    @staticmethod
    def _check_metadata(k: torch.Tensor, **kw: Any) -> None:
        del k, kw  # the layout is FA3's here, not FakeFA3's echo of its arguments

    def get_scheduler_metadata(self, *args: Any, **kw: Any) -> torch.Tensor:
        seqlens = args[6]
        d = fa3_decision(self.call, seqlens.tolist())
        if kw.get("pack_gqa") is False:  # query heads share the blocks per SM: fewer splits
            heads = self.call.num_qo_heads // self.call.num_kv_heads
            d = replace(d, splits=tuple(max(1, -(-s // heads)) for s in d.splits))
        return torch.tensor(metadata_values(d), dtype=torch.int32)

    def fwd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        out, lse, _, _ = super().fwd(q, k, v, **kw)
        static = fa3_decision(self.call, kw["seqused_k"].tolist()).num_splits
        accum = torch.empty(static, 1) if static > 1 else None
        return out, lse, accum, None


def test_fa3_rows_record_the_decision_fa3_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = make_spec("decode", kv_lens=(40, 9, 1200, 73), qo_lens=(1, 1, 1, 1), page_size=16)
    call = FA3Call(spec.num_qo_heads, spec.num_kv_heads, spec.head_dim, page_size=16)
    module = MetadataFA3(call)
    lib = FlashLib(module, "fake_fa3", "0", 3, {}, module, FA3_ARGS, "fake-dist")  # type: ignore[arg-type]
    monkeypatch.setattr(fa, "load_fa3", lambda: lib)
    planned = fa.FlashAttnBackend(3).plan(spec, make_inputs(spec, "cpu"))
    details = planned.details
    assert details["fa3_pack_gqa"] is True  # the metadata matched the pack-GQA recomputation
    assert details["fa3_metadata"] == "4 x 4 + semaphore"
    assert recorded_decision(details, call, spec.batch_size) == fa3_decision(call, spec.kv_lens)
    assert details["fa3_num_splits"] == fa3_static_splits(call, 1200) > 1
    windowed = spec.model_copy(update={"window_left": 64})
    plan = fa.FlashAttnBackend(3).plan(windowed, make_inputs(windowed, "cpu"))
    assert "fa3_splits" not in plan.details


@pytest.mark.gpu
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "fp8_e4m3"])
def test_gpu_fa3_decision_matches_the_reimplementation(kv_dtype: str) -> None:
    """On the H200: FA3's own report for skewed and uniform decode batches at Llama-3.1-70B
    TP 8 equals what `fa3_decision` predicts on the CPU."""
    from attnbench.run.sweep import run_case
    from attnbench.workload.spec import WorkloadSpec
    from test_flash_attn import _gpu_ctx, _paged_fa3_or_skip

    _paged_fa3_or_skip()
    call = FA3Call(8, 1, 128, kv_itemsize=1 if kv_dtype.startswith("fp8") else 2)
    for kv in ([2048] * 40 + [70_001], [256] * 200, [600, 33, 5000], [40_000] * 3 + [900] * 150):
        spec = WorkloadSpec(
            kind="decode", num_qo_heads=8, num_kv_heads=1, head_dim=128, page_size=16,
            kv_lens=tuple(kv), qo_lens=(1,) * len(kv), dtype="bfloat16", kv_dtype=kv_dtype,
        )  # fmt: skip
        (row,) = run_case(spec, [fa.FlashAttnBackend(3)], _gpu_ctx())
        assert row.status == "ok", row.reason
        got = recorded_decision(dict(row.details), call, len(kv))
        assert got is not None, dict(row.details)
        mine = fa3_decision(call, kv)
        assert (got.num_splits, got.pack_gqa, got.splits) == (
            mine.num_splits,
            mine.pack_gqa,
            mine.splits,
        ), (kv[:4], dict(row.details))
