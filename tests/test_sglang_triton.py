"""`sglang:triton` (issue 47): SGLang 0.5.23's `triton` attention backend replayed from the
wheel's own Triton files. Without a GPU: its refusal rules, the CUDA-graph batch and the kv
splits SGLang's decode gets, the kernels each kind launches, and the copy of the case's pages
into SGLang's token pool (window indices included). On a GPU (`gpu`): gpt-oss's sinks, Gemma-2's
soft-cap, an fp8 cache, prefill and append through the gate, and SGLang's decode window (one
key short of the window: sgl-project/sglang#32087) as a mismatch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnbench.backends import select_backends
from attnbench.backends.sglang_triton import (
    SglangTritonAttn,
    decode_query,
    new_tokens,
    refusal,
    token_pool,
    token_slots,
    window_starts,
)
from attnbench.engines.paths import (
    KernelPath,
    kernel_path,
    setting,
    sglang_graph_batch,
    sglang_triton_decode,
    sglang_triton_kv_splits,
    sglang_triton_launch,
)
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import MlaSpec, WorkloadSpec
from backend_cases import device, make_spec


def gpt_oss(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """gpt-oss-120b at tp 8: 8 query heads on 1 KV head of 64, window 128 and sinks, page 1."""
    kv = overrides.pop("kv_lens", (300, 1000, 70, 4096))
    fields: dict[str, Any] = {
        "kind": kind,
        "num_qo_heads": 8,
        "num_kv_heads": 1,
        "head_dim": 64,
        "page_size": 1,
        "window_left": 127,
        "sinks": True,
        "kv_lens": kv,
        "qo_lens": (1,) * len(kv) if kind == "decode" else kv,
    }
    return WorkloadSpec(**(fields | overrides))


def gemma2(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """Gemma-2-9b at tp 1: 16/8 heads of 256, soft-cap 50, scale 256 ** -0.5 (a full layer)."""
    return gpt_oss(
        kind,
        **{
            "num_qo_heads": 16,
            "num_kv_heads": 8,
            "head_dim": 256,
            "window_left": -1,
            "sinks": False,
            "logits_soft_cap": 50.0,
            "query_pre_attn_scalar": 256.0,
        }
        | overrides,
    )


@pytest.mark.parametrize(
    ("spec", "sm", "message"),
    [
        (gpt_oss(), 90, None),
        (gpt_oss("prefill", kv_lens=(30, 40)), 90, None),
        (gemma2(), 90, None),
        (gemma2(kv_dtype="fp8_e4m3"), 90, None),
        (make_spec("append"), 90, None),
        (make_spec("shared_prefix"), 90, None),
        (gpt_oss(page_size=16), 90, None),
        (gpt_oss(), 0, "on a CUDA GPU; this is cpu"),
        (make_spec("tree"), 90, "kind=tree is not replayed"),
        (gemma2(kv_dtype="fp8_e5m2"), 90, "e4m3 only, not fp8_e5m2"),
        (gpt_oss(kv_layout="HND"), 90, "from NHD only"),
        (make_spec(head_dim=192, num_qo_heads=4, num_kv_heads=4), 90, "MLA (rope-split)"),
        (make_spec(kv_dtype="float16"), 90, "a 16-bit cache in the query dtype"),
    ],
)
def test_rules(spec: WorkloadSpec, sm: int, message: str | None) -> None:
    where = device(sm) if sm else device(kind="cpu")
    why = refusal(spec, where)
    if message is None:
        assert why is None
        assert SglangTritonAttn().check(spec, where) is None
    else:
        assert why is not None
        assert why.startswith("sglang:triton")
        assert message in why


def test_mla_goes_to_the_mla_backends() -> None:
    mla = WorkloadSpec(
        kind="decode",
        num_qo_heads=16,
        num_kv_heads=1,
        head_dim=576,
        page_size=64,
        mla=MlaSpec(),
        kv_lens=(100, 200),
        qo_lens=(1, 1),
    )
    why = refusal(mla, device(90))
    assert why is not None
    assert "flashmla:dense" in why


def test_decode_runs_in_the_capture_size_that_holds_the_batch_or_eagerly_past_256() -> None:
    assert [sglang_graph_batch(b) for b in (1, 3, 5, 9, 12, 13, 17, 256)] == [
        1,
        4,
        8,
        12,
        12,
        16,
        24,
        256,
    ]
    assert sglang_graph_batch(257) == 257  # past cuda_graph_max_bs 256 (tp < 4): eager
    assert sglang_graph_batch(300, max_bs=512) == 304  # tp >= 4: capture sizes to 512


def test_kv_splits_follow_get_num_kv_splits_triton() -> None:
    """Worked by hand from metadata.py: 80 tokens longest, 1 shortest -> 8 splits of 10 tokens
    (splits_1); 132 SMs over 4 requests x 2 head tiles -> 8 (splits_2); each request gets
    max(cdiv(n, 10), cdiv(n, 10))."""
    assert sglang_triton_kv_splits([37, 80, 16, 1], 8, 2) == [4, 8, 2, 1]
    # even lengths (max * 8 >= min * 10): splits_1 = 1; 300 x 1 tile over int(132 * log2(1000
    # / 64)) = 523 cores -> 2 splits of 500
    assert sglang_triton_kv_splits([1000] * 300, 8, 1) == [2] * 300
    # within 25% of each other: splits_1 = 1; 2 x 128 MHA head programs fill the SMs -> 1 split
    assert sglang_triton_kv_splits([100, 85], 128, 128) == [1, 1]
    assert sglang_triton_kv_splits([100, 85], 8, 1) == [8, 7]  # 2 programs: 8 splits of 13
    assert sglang_triton_kv_splits([100, 85], 8, 8, max_kv_splits=4) == [4, 4]


def test_cuda_graph_padding_changes_the_real_requests_splits() -> None:
    """Padding rows at seq_len 1 make the batch uneven: 17 requests of 600 run as 24, so each
    gets 8 splits (600 / 1, capped at 8), where the even batch alone would get 4 (17 x 8 head
    tiles over int(132 * log2(600 / 64)) = 426 cores)."""
    spec = gpt_oss(num_qo_heads=64, num_kv_heads=8, kv_lens=(600,) * 17)
    assert sglang_triton_decode(spec) == (24, [8] * 17)
    assert sglang_triton_kv_splits([600] * 17, 64, 8) == [4] * 17  # unpadded
    eager = gpt_oss(kv_lens=(600,) * 300)  # past 256: eager, unpadded, 426 cores / 300 tiles
    assert sglang_triton_decode(eager) == (300, [2] * 300)


@pytest.mark.parametrize(
    ("spec", "launch"),
    [
        (gpt_oss(), "grouped"),
        (make_spec(num_qo_heads=4, num_kv_heads=4), "mha"),
        (make_spec("shared_prefix"), "grouped"),
        (gpt_oss("prefill", kv_lens=(30, 40)), "extend"),
        (make_spec("append"), "extend"),
    ],
)
def test_launch_by_kind_and_group(spec: WorkloadSpec, launch: str) -> None:
    assert sglang_triton_launch(spec) == launch
    path = kernel_path("sglang:triton", spec)
    assert isinstance(path, KernelPath)
    assert path.variant == "sglang:triton"
    assert "triton_backend.py" in path.why
    assert ("extend_attention_fwd" in path.why) == (launch == "extend")


def test_the_setting_is_sglangs_triton_backend() -> None:
    s = setting("sglang:triton")
    assert (s.engine, s.name, s.default, s.page_sizes) == ("sglang", "triton", False, None)
    assert s.kv_dtypes == ("auto", "fp8_e4m3")
    why = kernel_path("sglang:triton", gpt_oss(kv_lens=(50,) * 17))
    assert isinstance(why, KernelPath)
    assert "batch 17 run as 24" in why.why


def test_pages_are_copied_into_the_token_pool_slot_by_slot() -> None:
    spec = make_spec()  # page 8, 2 KV heads of 32
    inputs = make_inputs(spec, "cpu")
    k, v = token_pool(inputs)
    pages = inputs.kv_cache
    page = spec.page_size
    assert k.shape == v.shape == (pages.shape[0] * page, spec.num_kv_heads, spec.head_dim)
    assert k.is_contiguous()
    for slot in (0, 5, page, 3 * page + 7, k.shape[0] - 1):
        assert torch.equal(k[slot], pages[slot // page, 0, slot % page])
        assert torch.equal(v[slot], pages[slot // page, 1, slot % page])


def test_an_fp8_pool_is_copied_byte_for_byte_and_new_tokens_are_dequantised() -> None:
    inputs = make_inputs(make_spec(kv_dtype="fp8_e4m3"), "cpu")
    k, v = token_pool(inputs)
    assert k.dtype == v.dtype == torch.float8_e4m3fn
    flat = inputs.kv_cache[:, 1].reshape(v.shape)
    assert torch.equal(v.view(torch.uint8), flat.view(torch.uint8))
    slots = torch.tensor([3, 0, 9])
    rows = new_tokens(k, slots, inputs.k_scale, torch.bfloat16)
    assert rows.dtype == torch.bfloat16
    want = (k.view(torch.uint8)[slots].view(k.dtype).float() * inputs.k_scale).bfloat16()
    assert torch.equal(rows, want)


def test_kv_indices_read_each_requests_tokens_and_a_window_its_last_w() -> None:
    spec = make_spec(kv_lens=(40, 9, 73))
    inputs = make_inputs(spec, "cpu")
    k, _ = token_pool(inputs)
    starts = window_starts(list(spec.kv_lens), 16)
    assert starts == [24, 0, 57]  # min(kv_len, 16) tokens: SGLang's decode window
    assert window_starts([5, 50], -1) == [0, 0]
    slots = token_slots(inputs, starts, list(spec.kv_lens))
    assert slots.dtype == torch.int64
    got = k[slots]
    offset = 0
    for b, (s, n) in enumerate(zip(starts, spec.kv_lens, strict=True)):
        kb, _ = inputs.request_kv(b)
        assert torch.equal(got[offset : offset + n - s], kb[s:n])
        offset += n - s
    assert offset == slots.numel()


def test_the_grouped_decode_sees_an_fp8_query_with_an_fp8_cache() -> None:
    q = torch.tensor([[[1.0, -500.0, 0.1, 3.3]]], dtype=torch.bfloat16)
    fp8 = make_spec(kv_dtype="fp8_e4m3")
    q8 = decode_query(fp8, q)
    assert q8 is not None
    assert q8.flatten().tolist() == [1.0, -448.0, 0.1015625, 3.25]
    assert decode_query(make_spec(), q) is None
    assert decode_query(make_spec(num_qo_heads=2, kv_dtype="fp8_e4m3"), q) is None  # MHA


def test_registry_lists_the_variant_and_it_says_why_it_cannot_run_here() -> None:
    names = [b.name for b in select_backends(["sglang"])]
    assert "sglang:triton" in names
    why = SglangTritonAttn().available()
    assert why is not None  # no Triton, or no pack, on the CPU machine
    assert why.startswith("sglang:triton")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "spec",
    [
        gpt_oss(window_left=-1),
        gpt_oss(kv_lens=(100, 30, 127, 64)),  # inside the window: every key read
        gpt_oss("prefill", kv_lens=(300, 1000, 70, 513)),
        gpt_oss("append", kv_lens=(300, 1000, 70, 513), qo_lens=(3, 40, 2, 8)),
        gemma2(),
        gemma2(kv_dtype="fp8_e4m3"),
        gemma2("prefill", kv_lens=(300, 700)),
        gpt_oss(window_left=-1, kv_lens=(60,) * 200),  # graph batch 200
        gpt_oss(window_left=-1, num_qo_heads=4, num_kv_heads=4),  # MHA stage 1
    ],
    ids=[
        "oss-full",
        "oss-in-window",
        "oss-prefill",
        "oss-append",
        "gemma",
        "gemma-fp8",
        "gemma-prefill",
        "oss-200",
        "mha",
    ],
)
def test_gpu_triton_passes_the_gate(spec: WorkloadSpec) -> None:
    row = _row(spec)
    assert row.status == "ok", row.reason
    assert row.resolved == _launched(spec)


@pytest.mark.gpu
def test_gpu_decode_window_is_one_key_short_as_in_sglang() -> None:
    """SGLang 0.5.23 decode reads min(kv_len, W) tokens, W keys where the window has W + 1
    (sgl-project/sglang#32087): replayed as is, the gate sees the missing key."""
    row = _row(gpt_oss())
    assert row.status == "mismatch", row.reason


def _row(spec: WorkloadSpec) -> Any:
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.sweep import SweepContext, run_case

    backend = SglangTritonAttn()
    if backend.available() is not None:
        pytest.skip(str(backend.available()))
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-sglang-triton-gpu", info=detect("cuda:0"), measure_cfg=cfg)
    (row,) = run_case(spec, [backend], ctx)
    return row


def _launched(spec: WorkloadSpec) -> str:
    """The kernels that really ran, as the profiler saw them: `extend` (`_fwd_kernel`), else
    decode's stage 1 (`grouped` or `mha`), which must come with the split reduction."""
    from torch.profiler import ProfilerActivity, profile

    run = SglangTritonAttn().plan(spec, make_inputs(spec, "cuda")).run
    run()  # compiled before the profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events()}
    if any("_fwd_grouped_kernel_stage1" in n for n in names):
        launched = "grouped"
    elif any("_fwd_kernel_stage1" in n for n in names):
        launched = "mha"
    else:
        return "extend" if any(n.startswith("_fwd_kernel") for n in names) else str(names)
    assert any("_fwd_kernel_stage2" in n for n in names), sorted(names)
    return launched
