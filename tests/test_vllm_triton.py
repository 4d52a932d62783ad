"""`vllm:triton-attn` (issue 47): vLLM 0.34.0's TRITON_ATTN kernel replayed from the wheel's
own Triton file. Without a GPU: its refusal rules, the split-KV threshold vLLM's builder picks,
the 2D/3D launch choice and the copy of the case's pages into vLLM's cache layout. On a GPU
(`gpu`): gpt-oss's window + sinks layer, Gemma-2's window + soft-cap layer, an fp8 cache and a
prefill through the gate, in the pack `scripts/h200/pack_engine_triton.sh` extracts."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnbench.backends import select_backends
from attnbench.backends.engine_triton_load import vllm_logger
from attnbench.backends.vllm_triton import VllmTritonAttn, refusal, vllm_cache, vllm_query
from attnbench.engines.paths import vllm_capture_sizes as capture_sizes
from attnbench.engines.paths import vllm_triton_launch as launch
from attnbench.engines.paths import vllm_triton_threshold as seq_threshold_3d
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import MlaSpec, WorkloadSpec
from backend_cases import device, make_spec


def gpt_oss(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """gpt-oss-120b at tp 8: 8 query heads on 1 KV head of 64, window 128 and sinks, page 16."""
    kv = overrides.pop("kv_lens", (300, 1000, 70, 4096))
    fields: dict[str, Any] = {
        "kind": kind,
        "num_qo_heads": 8,
        "num_kv_heads": 1,
        "head_dim": 64,
        "page_size": 16,
        "window_left": 127,
        "sinks": True,
        "kv_lens": kv,
        "qo_lens": (1,) * len(kv) if kind == "decode" else kv,
    }
    return WorkloadSpec(**(fields | overrides))


def gemma2(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """Gemma-2-9b at tp 1: 16/8 heads of 256, window 4096, soft-cap 50, scale 256 ** -0.5."""
    return gpt_oss(
        kind,
        **{
            "num_qo_heads": 16,
            "num_kv_heads": 8,
            "head_dim": 256,
            "window_left": 4095,
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
        (gpt_oss("prefill"), 90, None),
        (gemma2(), 90, None),
        (gemma2(kv_dtype="fp8_e4m3"), 90, None),
        (make_spec("append", page_size=16, head_dim=64), 90, None),
        (gpt_oss(), 0, "on a CUDA GPU; this is cpu"),
        (gpt_oss(page_size=8), 90, "multiples of 16"),
        (make_spec(page_size=16, head_dim=16), 90, "head sizes >= 32, not 16"),
        (make_spec("tree", page_size=16, head_dim=64), 90, "kind=tree is not replayed"),
        (gemma2(kv_dtype="fp8_e5m2"), 90, "fp8_e5m2 is not replayed"),
        (gpt_oss(kv_layout="HND"), 90, "from NHD pages only"),
    ],
)
def test_rules(spec: WorkloadSpec, sm: int, message: str | None) -> None:
    where = device(sm) if sm else device(kind="cpu")
    why = refusal(spec, where)
    if message is None:
        assert why is None
        assert VllmTritonAttn().check(spec, where) is None
    else:
        assert why is not None
        assert why.startswith("vllm:triton-attn")
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


def test_split_kv_threshold_is_the_capture_size_nearest_128_over_the_kv_heads() -> None:
    sizes = capture_sizes()
    assert sizes[:5] == [1, 2, 4, 8, 16]
    assert sizes[-1] == 512
    assert {248, 256, 272} <= set(sizes)
    assert 264 not in sizes
    assert [seq_threshold_3d(h) for h in (1, 2, 4, 8, 16, 32, 3)] == [128, 64, 32, 16, 8, 4, 40]


def test_launch_is_split_kv_for_few_short_queries_only() -> None:
    assert launch(gpt_oss()) == "3d"  # 4 requests <= 128
    assert launch(gpt_oss(kv_lens=(50,) * 129)) == "2d"
    assert launch(gemma2(kv_lens=(50,) * 16)) == "3d"  # 8 KV heads: 16
    assert launch(gemma2(kv_lens=(50,) * 17)) == "2d"
    assert launch(gpt_oss("prefill")) == "2d"


def test_launch_takes_queries_of_up_to_8_tokens_split_kv_where_the_scratch_holds_them() -> None:
    """The launcher's rule, not decode's alone: queries of at most MAX_3D_QUERY_LEN (8) tokens
    run split-KV while the requests' query blocks (BLOCK_Q = 16 // group tokens) are at most
    the threshold and the scratch's rows (one per query token, the threshold's count) hold
    every query token. Cases seen to launch so under Triton's interpreter
    (`scripts/cpu/triton_interpret.py`)."""
    append = {"kv_lens": (40, 70, 25), "window_left": -1, "sinks": False}
    assert launch(gpt_oss("append", qo_lens=(3, 4, 2), **append)) == "3d"
    assert launch(gpt_oss("append", qo_lens=(3, 9, 2), **append)) == "2d"  # 9 > 8 tokens
    # 8 KV heads: threshold 16; 3 x 8 = 24 query tokens > 16 scratch rows
    assert launch(gemma2("append", kv_lens=(30, 41, 20), qo_lens=(8, 8, 8))) == "2d"
    assert launch(gemma2("append", kv_lens=(30, 41), qo_lens=(8, 8))) == "3d"
    # group 2, BLOCK_Q 8: 16 requests of 2 tokens are 16 blocks <= 16 but 32 tokens > 16 rows
    assert launch(gemma2("append", kv_lens=(40,) * 16, qo_lens=(2,) * 16)) == "2d"


def test_an_fp8_cache_gets_the_fp8_query_forward_hands_the_kernel() -> None:
    """On CUDA, TRITON_ATTN supports a quantised query: with an fp8 cache, forward casts q to
    fp8 e4m3 at the layer's scale (1.0) and passes that scale as q_descale."""
    spec = gemma2(head_dim=32, num_qo_heads=4, num_kv_heads=2, kv_dtype="fp8_e4m3")
    q = torch.tensor([[[1.0, -500.0, 0.1, 3.3]]], dtype=torch.bfloat16)
    q8, q_descale = vllm_query(spec, q)
    assert q8.dtype == torch.float8_e4m3fn
    assert q8.float().flatten().tolist() == [1.0, -448.0, 0.1015625, 3.25]  # saturated, rounded
    assert q_descale is not None
    assert q_descale.item() == 1.0
    same, none = vllm_query(gemma2(head_dim=32, num_qo_heads=4, num_kv_heads=2), q)
    assert same is q
    assert none is None


def test_the_vllm_logger_stub_has_the_once_calls_the_launcher_makes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = vllm_logger("vllm.v1.attention.ops.triton_unified_attention")
    with caplog.at_level("DEBUG", logger=log.name):
        log.debug_once("Split-K scratch rows < query tokens; using 2D.", scope="local")
        log.warning_once("w %d", 3)
    assert [r.getMessage() for r in caplog.records] == [
        "Split-K scratch rows < query tokens; using 2D.",
        "w 3",
    ]


def test_pages_are_copied_into_vllms_layout_token_by_token() -> None:
    """vLLM's cache is [blocks, Hkv, block, 2d] (K then V per head); forward's views of it are
    K and V [blocks, block, Hkv, d]: every (page, slot, head) must hold the case's values."""
    inputs = make_inputs(gemma2(head_dim=32, num_qo_heads=4, num_kv_heads=2), "cpu")
    k, v = vllm_cache(inputs)
    pages = inputs.kv_cache
    assert k.shape == v.shape == (pages.shape[0], pages.shape[2], pages.shape[3], 32)
    assert torch.equal(k, pages[:, 0])
    assert torch.equal(v, pages[:, 1])
    base = k.untyped_storage().data_ptr()
    assert v.untyped_storage().data_ptr() == base  # one buffer, K|V side by side per head
    assert k.stride() == (pages.shape[2] * pages.shape[3] * 64, 64, pages.shape[2] * 64, 1)


def test_an_fp8_cache_is_copied_byte_for_byte() -> None:
    inputs = make_inputs(gemma2(head_dim=32, num_qo_heads=4, num_kv_heads=2, kv_dtype="fp8_e4m3"))
    k, v = vllm_cache(inputs)
    assert k.dtype == v.dtype == torch.float8_e4m3fn
    assert torch.equal(k.view(torch.uint8), inputs.kv_cache[:, 0].view(torch.uint8))
    assert torch.equal(v.view(torch.uint8), inputs.kv_cache[:, 1].view(torch.uint8))


def test_registry_lists_the_variant_and_it_says_why_it_cannot_run_here() -> None:
    names = [b.name for b in select_backends(["vllm"])]
    assert "vllm:triton-attn" in names
    why = VllmTritonAttn().available()
    assert why is not None  # no Triton, or no pack, on the CPU machine
    assert why.startswith("vllm:triton-attn")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "spec",
    [
        gpt_oss(),
        gpt_oss(window_left=-1),
        gpt_oss("prefill", kv_lens=(300, 1000, 70, 513)),
        gemma2(),
        gemma2(kv_dtype="fp8_e4m3"),
        gpt_oss(kv_lens=(60,) * 200),  # 2D: more requests than 128
        gpt_oss("append", kv_lens=(300, 1000, 70, 513), qo_lens=(3, 4, 2, 8)),  # 3D
    ],
    ids=["oss-window", "oss-full", "oss-prefill", "gemma", "gemma-fp8", "oss-2d", "oss-append"],
)
def test_gpu_triton_attn_passes_the_gate(spec: WorkloadSpec) -> None:
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.sweep import SweepContext, run_case

    backend = VllmTritonAttn()
    if backend.available() is not None:
        pytest.skip(str(backend.available()))
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-vllm-triton-gpu", info=detect("cuda:0"), measure_cfg=cfg)
    (row,) = run_case(spec, [backend], ctx)
    assert row.status == "ok", row.reason
    assert row.details["api"] == "unified_attention"
    assert row.resolved == _launched(spec, backend)


def _launched(spec: WorkloadSpec, backend: VllmTritonAttn) -> str:
    """The launch the kernel really took: `3d` when the split-KV reduction (`reduce_segments`)
    ran, as the profiler saw it, else `2d`."""
    from torch.profiler import ProfilerActivity, profile

    run = backend.plan(spec, make_inputs(spec, "cuda")).run
    run()  # compiled before the profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events()}
    assert any("unified_attention" in n for n in names), sorted(names)
    return "3d" if any("reduce_segments" in n for n in names) else "2d"
