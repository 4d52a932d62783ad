from __future__ import annotations

import pytest

from attnbench.workload.capacity import (
    GIB,
    CapacityScenario,
    capacity_table,
    kv_bytes_per_token,
    max_batch,
    model_params,
    request_bytes,
    static_scale_bytes,
    weight_bytes_per_gpu,
)
from attnbench.workload.models import get_model


def test_bytes_per_token_llama70b_tp8() -> None:
    # 80 layers, 1 KV head per GPU at TP8, head_dim 128: K and V
    assert kv_bytes_per_token(80, 1, 128, "bfloat16") == 2 * 80 * 128 * 2 == 40960
    assert kv_bytes_per_token(80, 1, 128, "fp8_e4m3", "tensor") == 20480
    # per-token scales: one fp32 per (token, head) for K and for V, every layer
    assert kv_bytes_per_token(80, 1, 128, "fp8_e4m3", "token") == 20480 + 2 * 80 * 4
    # channel: K per channel (static), V per token
    assert kv_bytes_per_token(80, 1, 128, "e5m2", "channel") == 20480 + 80 * 4


def test_static_scale_bytes_per_scheme() -> None:
    assert static_scale_bytes(80, 8, 128, "bf16") == 0
    assert static_scale_bytes(80, 8, 128, "fp8_e4m3", "tensor") == 80 * 2 * 4
    assert static_scale_bytes(80, 8, 128, "fp8_e4m3", "head") == 80 * 16 * 4
    assert static_scale_bytes(80, 8, 128, "fp8_e4m3", "channel") == 80 * 8 * 128 * 4
    assert static_scale_bytes(80, 8, 128, "fp8_e4m3", "token") == 0
    with pytest.raises(ValueError, match="scheme"):
        static_scale_bytes(80, 8, 128, "fp8_e4m3", "block")


def test_request_bytes_rounds_up_to_whole_pages() -> None:
    assert request_bytes(16, 16, 10) == 160
    assert request_bytes(17, 16, 10) == 320
    assert request_bytes(1, 1, 10) == 10
    with pytest.raises(ValueError, match="positive"):
        request_bytes(0, 16, 10)


def test_max_batch_single_length_and_mix() -> None:
    per_req = request_bytes(1000, 16, 100)  # 1008 tokens
    assert max_batch(per_req * 7, [1000], 16, 100) == 7
    assert max_batch(per_req * 7 - 1, [1000], 16, 100) == 6
    # a mix of 16 and 48 tokens averages 32 tokens per request
    assert max_batch(32 * 100 * 10, [16, 48], 16, 100) == 10
    assert max_batch(-5, [16], 16, 100) == 0


def test_model_params_match_published_sizes() -> None:
    assert model_params(get_model("llama-3.1-8b")) == pytest.approx(8.03e9, rel=0.005)
    assert model_params(get_model("llama-3.1-70b")) == pytest.approx(70.6e9, rel=0.005)
    assert weight_bytes_per_gpu(get_model("llama-3.1-70b"), 8) == pytest.approx(
        70.55e9 * 2 / 8, rel=0.005
    )


def test_capacity_table_fp8_doubles_the_batch() -> None:
    rows = capacity_table(
        {"64k": [65536], "mix": [256, 65536]},
        {"h100": 80.0},
        CapacityScenario(utilization=0.9, reserve_gib=4.0),
    )
    by = {(r.kv_dtype, r.scheme): r for r in rows}
    bf16, fp8, tok = by["bfloat16", "none"], by["fp8_e4m3", "tensor"], by["fp8_e4m3", "token"]
    weights = weight_bytes_per_gpu(get_model("llama-3.1-70b"), 8)
    assert bf16.budget_bytes == int(80 * GIB * 0.9) - weights - 4 * GIB
    assert bf16.max_tokens == bf16.budget_bytes // 40960
    assert fp8.saved_fraction == 0.5
    assert 0.48 < tok.saved_fraction < 0.5
    assert fp8.max_batch["64k"] in (2 * bf16.max_batch["64k"], 2 * bf16.max_batch["64k"] + 1)
    assert tok.max_batch["mix"] <= fp8.max_batch["mix"]
    # the brief's 32 x 64k batch does not fit in bf16 on an 80 GiB GPU at TP8, but fits in fp8
    assert bf16.max_batch["64k"] < 32 <= fp8.max_batch["64k"]
