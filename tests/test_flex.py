"""FlexAttention backend: document masks over the packed batch (per-token ids, bottom-right
causal, tree ancestors) checked against the reference's rule, every kind through the gate on
CPU (eager, and once compiled), every kind and dtype on the H200 (`-m gpu`)."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch

from attnbench.backends import flex
from attnbench.backends.masks import request_mask, token_ids
from attnbench.backends.reference import reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import DeviceInfo, detect
from attnbench.run.sweep import SweepContext, run_backend, run_case
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import WorkloadSpec
from backend_cases import KINDS, make_spec

EAGER = {"compiled": False}


@pytest.fixture
def ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-flex", info=detect("cpu"), measure_cfg=cfg)


def _run(spec: WorkloadSpec, ctx: SweepContext, **knobs: Any) -> Any:
    inputs = make_inputs(spec, "cpu")
    return run_backend(
        spec, flex.FlexBackend(), inputs, reference_attention(inputs), ctx, knobs=knobs
    )


@pytest.mark.parametrize("kind", KINDS)
def test_mask_mod_is_the_reference_rule(kind: str) -> None:
    """The packed-batch mask, evaluated densely, is block-diagonal with each request's own
    allowed-keys mask on its block."""
    spec = make_spec(kind)
    ids = token_ids(spec)
    mask_mod = flex.make_mask_mod(spec, ids)
    q_idx = torch.arange(spec.total_q)[:, None]
    kv_idx = torch.arange(spec.total_kv)[None, :]
    zero = torch.zeros((), dtype=torch.long)
    dense = mask_mod(zero, zero, q_idx, kv_idx)
    assert dense.shape == (spec.total_q, spec.total_kv)
    q0 = k0 = 0
    for n, seq_len in zip(spec.qo_lens, spec.kv_lens, strict=True):
        block = dense[q0 : q0 + n, k0 : k0 + seq_len]
        want = request_mask(spec, n, seq_len)
        assert torch.equal(block, want if want is not None else torch.ones_like(block))
        assert dense[q0 : q0 + n].sum() == block.sum()  # nothing outside its own request
        q0, k0 = q0 + n, k0 + seq_len


def test_token_ids() -> None:
    spec = make_spec("tree")
    ids = token_ids(spec)
    assert ids.q_req.tolist() == [0] * 5 + [1] * 5 + [2] * 5
    assert ids.q_pos[5:10].tolist() == [7, 8, 9, 10, 11]  # request 1: 12 keys, 5 drafts
    assert ids.q_node[5:10].tolist() == [0, 1, 2, 3, 4]
    assert ids.kv_node[40:52].tolist() == [-1] * 7 + [0, 1, 2, 3, 4]
    assert ids.tree is not None
    assert ids.tree.shape == (5, 5)


@pytest.mark.parametrize("kind", KINDS)
def test_eager_every_kind_passes_the_gate(kind: str, ctx: SweepContext) -> None:
    row = _run(make_spec(kind), ctx, **EAGER)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.resolved == "flex-eager"
    assert row.details["kv_cache"] == "packed"
    assert 0 <= row.details["block_sparsity"] <= 1


def test_eager_hnd_fp16_without_gqa(ctx: SweepContext) -> None:
    spec = make_spec("append", kv_layout="HND", dtype="float16", kv_dtype="float16")
    assert _run(spec, ctx, **EAGER).status == "ok"
    mha = make_spec("prefill", num_kv_heads=8)
    assert _run(mha, ctx, **EAGER).status == "ok"


@pytest.mark.slow
def test_compiled_on_cpu(ctx: SweepContext) -> None:
    """torch.compile(flex_attention) on CPU (inductor's C++ template; ~10-40 s to compile)."""
    spec = make_spec("append", kv_lens=(17, 30), qo_lens=(3, 2))
    rows = run_case(spec, [flex.FlexBackend()], ctx)
    assert [r.status for r in rows] == ["ok"], rows[0].reason
    assert rows[0].resolved == "flex"
    assert rows[0].plan_us > 0  # the block mask rebuild


@pytest.mark.parametrize(
    ("total_q", "group_size", "backend"),
    [
        (70, 4, "TRITON"),  # the H200 failure: prefill of 70 rows, group 4 -> a 512-row tile
        (16, 16, "TRITON"),  # decode of 16 requests, 16 q heads per kv head -> 256 rows
        (16, 8, "AUTO"),  # 128 rows: fits the block mask's Q block
        (3, 4, "AUTO"),  # small decode: flex-decoding's 16-row tile
        (127, 1, "AUTO"),
        (200, 4, "AUTO"),  # 128 rows or more: Inductor's main kernel already
    ],
)
def test_main_kernel_is_asked_for_where_flex_decoding_has_no_tile(
    total_q: int, group_size: int, backend: str
) -> None:
    assert flex.flex_kernel_backend(total_q, group_size) == backend


def test_main_kernel_option_names_a_backend_this_torch_knows() -> None:
    from torch.nn.attention.flex_attention import FlexKernelOptions

    (key,) = flex._main_kernel_option()
    assert key in FlexKernelOptions.__annotations__


def test_check_reasons() -> None:
    b = flex.FlexBackend()
    cpu = DeviceInfo("cpu", 0, "cpu", None, 2, 0, 0)
    assert b.available() is None
    assert b.check(make_spec("decode"), cpu) is None
    why = b.check(make_spec("decode", kv_dtype="fp8_e4m3"), cpu)
    assert why is not None
    assert "fp8" in why.reason
    why = b.check(make_spec("decode", kv_dtype="float16"), cpu)
    assert why is not None
    assert "differ" in why.reason


def test_eager_refuses_huge_score_matrices() -> None:
    spec = make_spec("prefill", kv_lens=(30000, 30000), qo_lens=(30000, 30000), num_qo_heads=2)
    with pytest.raises(MemoryError, match="GiB"):
        flex.FlexBackend().plan(spec, cast(Any, None), EAGER)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_every_kind_passes_the_gate(kind: str, dtype: str) -> None:
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-flex-gpu", info=info, measure_cfg=cfg)
    spec = make_spec(kind, head_dim=128, page_size=16, dtype=dtype, kv_dtype=dtype)
    rows = run_case(spec, [flex.FlexBackend()], ctx)
    row = rows[0]
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert "graph capture failed" not in row.reason
    fp8 = make_spec(kind, head_dim=128, kv_dtype="fp8_e4m3")
    assert run_case(fp8, [flex.FlexBackend()], ctx)[0].status == "unsupported"


@pytest.mark.gpu
def test_gpu_block_sizes_are_honoured() -> None:
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-flex-gpu", info=info, measure_cfg=cfg)
    spec = make_spec("prefill", head_dim=128, page_size=16, kv_lens=(300, 200), qo_lens=(300, 200))
    inputs = make_inputs(spec, "cuda:0")
    oracle = reference_attention(inputs)
    knobs = {"block_m": 64, "block_n": 64}
    row = run_backend(spec, flex.FlexBackend(), inputs, oracle, ctx, knobs=knobs)
    assert row.status == "ok", row.reason
    assert row.details["block_m"] == 64
