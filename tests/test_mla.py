"""MLA (issue 18): the absorbed-form reference against a decompressed computation, the latent
inputs, bytes and FLOPs, presets, refusals, sdpa:mla through the gate on the CPU, and the GPU
variants (flashinfer:mla-fa2/-fa3, sdpa:mla, flash-attn:mla) on the H200."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from attnbench.backends import all_backends
from attnbench.backends.fa3_mla import fa3_mla_refusal
from attnbench.backends.fa_lib import FlashLib
from attnbench.backends.flashinfer_mla import FlashInferMlaBackend, mla_refusal
from attnbench.backends.reference import reference_attention
from attnbench.backends.sdpa_mla import SdpaMlaBackend
from attnbench.cli import app
from attnbench.measure import metrics
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect
from attnbench.run.sweep import SweepContext, run_case
from attnbench.workload.inputs import make_inputs
from attnbench.workload.models import get_model, layer_shapes
from attnbench.workload.spec import MlaSpec, WorkloadSpec
from backend_cases import device

RANK, ROPE, NOPE, V = 512, 64, 128, 128


def mla_spec(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """Three ragged requests of absorbed MLA, 8 query heads on one 512 + 64 latent, page 8."""
    shapes: dict[str, dict[str, Any]] = {
        "decode": {"kv_lens": (40, 9, 73), "qo_lens": (1, 1, 1)},
        "append": {"kv_lens": (40, 12, 73), "qo_lens": (4, 3, 5)},
        "prefill": {"kv_lens": (21, 9, 40), "qo_lens": (21, 9, 40)},
    }
    fields: dict[str, Any] = {
        "kind": kind,
        "num_qo_heads": 8,
        "num_kv_heads": 1,
        "head_dim": RANK + ROPE,
        "page_size": 8,
        "mla": MlaSpec(),
        **shapes[kind],
    }
    fields.update(overrides)
    return WorkloadSpec(**fields)


# -- the reference against MLA computed the long way -------------------------------------------


def _decompressed(
    q_nope_h: torch.Tensor,
    q_pe: torch.Tensor,
    latent: list[torch.Tensor],
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    spec: WorkloadSpec,
) -> torch.Tensor:
    """MLA as the model defines it, per head: k = [ckv W_UK^T; kpe], v = ckv W_UV, softmax over
    q.k / sqrt(nope + rope), causal at the end of each request. Returns [T, H, v_head_dim]."""
    outs, q0 = [], 0
    for b, (kv_len, n) in enumerate(zip(spec.kv_lens, spec.qo_lens, strict=True)):
        ckv, kpe = latent[b][:, :RANK], latent[b][:, RANK:]
        k_nope = torch.einsum("lr,hnr->lhn", ckv, w_uk)  # [L, H, nope]
        k = torch.cat([k_nope, kpe[:, None, :].expand(-1, spec.num_qo_heads, -1)], dim=-1)
        v = torch.einsum("lr,hrv->lhv", ckv, w_uv)  # [L, H, v]
        q = torch.cat([q_nope_h[q0 : q0 + n], q_pe[q0 : q0 + n]], dim=-1)  # [n, H, nope+rope]
        logits = torch.einsum("qhd,lhd->hql", q, k) / math.sqrt(NOPE + ROPE)
        pos = torch.arange(n)[:, None] + kv_len - n
        logits.masked_fill_(torch.arange(kv_len)[None, :] > pos, float("-inf"))
        outs.append(torch.einsum("hql,lhv->qhv", torch.softmax(logits, dim=-1), v))
        q0 += n
    return torch.cat(outs)


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
def test_reference_mla_equals_the_decompressed_computation(kind: str) -> None:
    """Absorbing W_UK into q and applying W_UV after attention gives MLA itself."""
    spec = mla_spec(kind)
    inputs = make_inputs(spec)
    gen = torch.Generator().manual_seed(1)
    h, t = spec.num_qo_heads, spec.total_q
    w_uk = torch.randn(h, NOPE, RANK, generator=gen, dtype=torch.float64) / math.sqrt(RANK)
    w_uv = torch.randn(h, RANK, V, generator=gen, dtype=torch.float64) / math.sqrt(RANK)
    q_nope_h = torch.randn(t, h, NOPE, generator=gen, dtype=torch.float64)
    q_pe = torch.randn(t, h, ROPE, generator=gen, dtype=torch.float64)
    absorbed = torch.cat([torch.einsum("thn,hnr->thr", q_nope_h, w_uk), q_pe], dim=-1)
    latent = [inputs.request_latent(b).double() for b in range(spec.batch_size)]

    out = reference_attention(inputs, q=absorbed)  # [T, H, 512]
    assert out.shape == (t, h, RANK)
    per_head = torch.einsum("thr,hrv->thv", out, w_uv)
    expected = _decompressed(q_nope_h, q_pe, latent, w_uk, w_uv, spec)
    torch.testing.assert_close(per_head, expected, rtol=1e-10, atol=1e-10)


def test_fp8_latent_has_power_of_two_scales_exact_in_bf16() -> None:
    spec = mla_spec(kv_dtype="fp8_e4m3")
    inputs = make_inputs(spec)
    assert inputs.kv_cache.dtype == torch.float8_e4m3fn
    for scale in (inputs.ckv_scale, inputs.kpe_scale):
        assert math.log2(scale) == round(math.log2(scale))
    deq = inputs.kv_cache.float()
    deq[..., :RANK] *= inputs.ckv_scale
    deq[..., RANK:] *= inputs.kpe_scale
    assert torch.equal(deq.to(torch.bfloat16).float(), deq)
    ref = reference_attention(inputs)
    assert torch.isfinite(ref).all()
    assert ref.shape == (3, 8, RANK)


# -- bytes, FLOPs, the bound ---------------------------------------------------------------------


def test_mla_bytes_read_the_latent_once_and_flops_count_576_plus_512() -> None:
    spec = mla_spec("decode")
    b = metrics.bytes_moved(spec)
    assert b.kv == spec.total_kv * (RANK + ROPE) * 2
    assert b.q == spec.total_q * 8 * (RANK + ROPE) * 2
    assert b.o == spec.total_q * 8 * RANK * 2
    assert metrics.flops(spec) == 2 * 8 * spec.total_kv * (576 + 512)
    pre = mla_spec("prefill")
    pairs = sum(n * (n + 1) // 2 for n in pre.kv_lens)  # causal: halved on the diagonal
    assert metrics.flops(pre) == 2 * 8 * pairs * (576 + 512)
    assert metrics.kv_cache_bytes(spec) == spec.num_pages * 8 * 576 * 2


def test_deepseek_v3_decode_is_above_the_h200_ridge_and_gqa_decode_below() -> None:
    (v3,) = layer_shapes(get_model("deepseek-v3"))
    mla = WorkloadSpec(
        kind="decode",
        num_qo_heads=v3.num_qo_heads,
        num_kv_heads=1,
        head_dim=576,
        kv_lens=(8192,) * 32,
        qo_lens=(1,) * 32,
        **v3.spec_fields,
    )
    # the H200's measured ceilings (results/archive/h200-hw.json): 797 TFLOP/s bf16, 4230 GB/s copy
    assert metrics.arithmetic_intensity(mla) > metrics.ridge_intensity(797.4, 4230.0) > 180
    assert metrics.bound(metrics.arithmetic_intensity(mla), 797.4, 4230.0) == "compute"
    gqa = mla.model_copy(update={"mla": None, "num_kv_heads": 8, "head_dim": 128})
    assert metrics.bound(metrics.arithmetic_intensity(gqa), 797.4, 4230.0) == "memory"
    assert metrics.binding_fraction(0.4, 0.7) == ("compute", 0.7)
    assert metrics.binding_fraction(0.9, 0.1) == ("memory", 0.9)
    assert metrics.binding_fraction(None, 0.1) is None
    assert metrics.binding_fraction(float("nan"), 0.1) is None


# -- presets and spec rules ---------------------------------------------------------------------


def test_deepseek_preset_becomes_an_absorbed_case_sharded_by_tp() -> None:
    (one,) = layer_shapes(get_model("deepseek-v3"), tp=8)
    assert (one.num_qo_heads, one.num_kv_heads, one.head_dim, one.num_layers) == (16, 1, 576, 61)
    mla = one.spec_fields["mla"]
    assert (mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim) == (512, 64, 128)
    # YaRN's mscale on the softmax scale (DeepSeek-V3 inference/model.py): rope_factor 40,
    # mscale 1.0 -> (0.1 ln 40 + 1)^2 = 1.874 times 192 ** -0.5
    assert mla.sm_scale == pytest.approx((0.1 * math.log(40) + 1) ** 2 / math.sqrt(192))
    assert mla.sm_scale == pytest.approx(0.13523, abs=1e-5)
    (kimi,) = layer_shapes(get_model("kimi-k2"))
    assert kimi.num_qo_heads == 64
    assert kimi.spec_fields["mla"].sm_scale == pytest.approx(1 / math.sqrt(192))  # not read
    with pytest.raises(ValueError, match="tp=3 must divide deepseek-v3's 128 query heads"):
        layer_shapes(get_model("deepseek-v3"), tp=3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_kv_heads": 2, "num_qo_heads": 8}, "num_kv_heads=1 and head_dim=576"),
        ({"head_dim": 512}, "num_kv_heads=1 and head_dim=576"),
        ({"window_left": 8}, "no sliding window and no sinks"),
        ({"kv_layout": "HND"}, "NHD only"),
    ],
)
def test_mla_spec_rules(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mla_spec(**overrides)


def test_mla_case_id_and_serialisation_round_trip() -> None:
    spec = mla_spec()
    assert spec.case_id.startswith("decode/mla-h8-r512+64/bs3/")
    dumped = spec.model_dump(mode="json")
    assert dumped["mla"]["sm_scale"] == pytest.approx(1 / math.sqrt(192))
    assert WorkloadSpec.model_validate(dumped) == spec
    assert "mla" not in mla_spec().model_copy(update={"mla": None}).model_dump()


def test_mla_suite_is_deepseek_v3_decode_fp8_and_prefill() -> None:
    from attnbench.config import Settings
    from attnbench.workload.suite import load_suite, suite_specs

    specs = suite_specs(load_suite("mla"), Settings())
    assert {(s.num_qo_heads, s.num_kv_heads, s.head_dim, s.num_layers) for s in specs} == {
        (128, 1, 576, 61)
    }
    assert all(s.mla is not None and s.model == "deepseek-v3" for s in specs)
    decode16 = [s for s in specs if s.kind == "decode" and s.kv_dtype == "bfloat16"]
    assert {(s.batch_size, s.lengths) for s in decode16} == {
        (b, f"ctx{n}") for b in (1, 32, 128) for n in (1024, 8192, 65536)
    } | {(32, "mixed(256..65536)")}
    assert sum(s.kv_dtype == "fp8_e4m3" for s in specs) == 5
    assert {s.total_q for s in specs if s.kind == "prefill"} == {4096, 16384}


# -- refusals ----------------------------------------------------------------------------------


def test_every_gqa_variant_refuses_an_mla_case_and_says_where_it_runs() -> None:
    spec = mla_spec()
    mla_variants = {"sdpa:mla", "flashinfer:mla-fa2", "flashinfer:mla-fa3", "flash-attn:mla"}
    mla_variants.add("flashmla:dense")  # tests/test_flashmla.py
    mla_variants.add("reference")  # the oracle computes everything
    for backend in all_backends():
        if backend.name in mla_variants or getattr(backend, "hidden", False):
            continue
        if backend.name.startswith("flash-attn") and backend.available() is not None:
            continue  # FA not installed here: check() answers with that first
        if "mla" in getattr(getattr(backend, "setting", None), "families", ()):
            continue  # an engine backend that serves MLA models too (SGLang's fa3, flashinfer)
        why = backend.check(spec, device(90))
        assert why is not None, backend.name
        assert "MLA" in why.reason, (backend.name, why)


def test_mla_variants_refuse_plain_attention() -> None:
    gqa = WorkloadSpec(kind="decode", num_qo_heads=8, num_kv_heads=2, head_dim=64,
                       kv_lens=(9,), qo_lens=(1,))  # fmt: skip
    why = SdpaMlaBackend().check(gqa, device(90))
    assert why is not None
    assert "runs MLA cases only" in why.reason
    assert "runs MLA cases only" in (mla_refusal("fa3", gqa, device(90)) or "")


@pytest.mark.parametrize(
    ("backend", "sm", "overrides", "message"),
    [
        ("fa2", 90, {}, None),
        ("fa3", 90, {}, None),
        ("fa2", 80, {}, None),
        ("fa3", 80, {}, "SM90 (Hopper) only"),
        ("fa2", 75, {}, "needs SM80+"),
        ("fa3", 90, {"kv_dtype": "fp8_e4m3"}, None),
        ("fa2", 80, {"kv_dtype": "fp8_e4m3"}, "fp8 latent cache needs SM90"),
        ("fa3", 90, {"kv_dtype": "fp8_e5m2"}, "e4m3 only"),
        ("fa3", 90, {"kv_dtype": "fp8_e4m3", "dtype": "float16"}, "bfloat16 query"),
        ("fa3", 90, {"kv_dtype": "float16"}, "in the query dtype"),
        ("fa3", 90, {"mla": MlaSpec(kv_lora_rank=384), "head_dim": 448}, "kv_lora_rank in"),
    ],
)
def test_flashinfer_mla_rules(
    backend: str, sm: int, overrides: dict[str, Any], message: str | None
) -> None:
    why = mla_refusal(backend, mla_spec(**overrides), device(sm))
    if message is None:
        assert why is None
    else:
        assert why is not None
        assert message in why


def _fa3(flags: dict[str, bool]) -> FlashLib:
    return FlashLib(torch, "flash_attn_interface", "3.0.0", 3, flags)


def test_fa3_mla_refuses_a_build_without_the_64x512_kernel() -> None:
    tokenspeed = {  # tokenspeed-fa3 3.0.0.post20260810 flash_attn_config.CONFIG (excerpt)
        "FLASHATTENTION_DISABLE_PAGEDKV": False,
        "FLASHATTENTION_DISABLE_HDIM64": False,
        "FLASH_ATTENTION_DISABLE_HDIMDIFF64": True,
    }
    why = fa3_mla_refusal(_fa3(tokenspeed), mla_spec(), device(90))
    assert why is not None
    assert "FLASH_ATTENTION_DISABLE_HDIMDIFF64" in why
    assert "head_dim 576 exceeds FA3's 256 maximum" in why
    full = dict(tokenspeed, FLASH_ATTENTION_DISABLE_HDIMDIFF64=False)
    assert fa3_mla_refusal(_fa3(full), mla_spec(), device(90)) is None
    assert "SM90" in (fa3_mla_refusal(_fa3(full), mla_spec(), device(80)) or "")
    assert "fp8" in (fa3_mla_refusal(_fa3(full), mla_spec(kv_dtype="fp8_e4m3"), device(90)) or "")


# -- sdpa:mla through the gate on the CPU --------------------------------------------------------


@pytest.fixture
def cpu_ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-mla", info=detect("cpu"), measure_cfg=cfg)


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("lens", ["ragged", "uniform"])
def test_sdpa_mla_passes_the_gate_on_the_cpu(
    kind: str, dtype: str, lens: str, cpu_ctx: SweepContext
) -> None:
    overrides: dict[str, Any] = {"dtype": dtype, "kv_dtype": dtype}
    if lens == "uniform":
        q = {"decode": 1, "append": 4, "prefill": 24}[kind]
        overrides |= {"kv_lens": (24, 24), "qo_lens": (q, q)}
    spec = mla_spec(kind, **overrides)
    (row,) = run_case(spec, [SdpaMlaBackend()], cpu_ctx)
    assert row.status == "ok", row.reason
    assert row.resolved in ("flash", "math")
    assert row.flops == metrics.flops(spec)


@pytest.mark.usefixtures("isolated", "fake_timer")
@pytest.mark.slow
def test_run_model_deepseek_v3_on_the_cpu_end_to_end(tmp_path: Path) -> None:
    """`attnbench run --model deepseek-v3` builds MLA cases; sdpa:mla and the reference rows
    pass the gate; every GQA variant is an unsupported row naming the MLA variants."""
    out = tmp_path / "mla.jsonl"
    args = ["run", "--device", "cpu", "--model", "deepseek-v3", "--tp", "8", "--batch-size", "2"]
    args += ["--lengths", "24;mixed:8-40", "--kind", "decode", "--kind", "prefill"]
    args += ["--kv-dtype", "bfloat16", "--out", str(out)]
    args += ["--backend", "sdpa", "--backend", "reference"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    rows = [r for r in rows if r.get("type") == "result"]
    by = {(r["case_id"], r["backend"]): r for r in rows}
    cases = {c for c, _ in by}
    assert len(cases) == 4
    for case in cases:
        assert by[(case, "sdpa:mla")]["status"] == "ok"
        assert by[(case, "reference")]["status"] == "ok"
        assert by[(case, "sdpa:math")]["status"] == "unsupported"
        assert "sdpa:mla" in by[(case, "sdpa:math")]["reason"]
        assert by[(case, "sdpa:mla")]["spec"]["mla"]["kv_lora_rank"] == 512


# -- on the H200 ---------------------------------------------------------------------------------

GPU_MLA_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "decode-bf16": ("decode", {}),
    "decode-fp16": ("decode", {"dtype": "float16", "kv_dtype": "float16"}),
    "decode-fp8": ("decode", {"kv_dtype": "fp8_e4m3"}),
    "decode-long-128heads": (
        "decode",
        {"num_qo_heads": 128, "kv_lens": (5000, 77, 1025, 64), "qo_lens": (1,) * 4},
    ),
    "append-bf16": ("append", {}),
    "prefill-bf16": ("prefill", {}),
    "prefill-page1": ("prefill", {"page_size": 1}),
    "decode-page64": ("decode", {"page_size": 64}),
}


GPU_SLOW_MLA_CASES = {"decode-fp16"}
"""Cases that compile FlashInfer MLA modules the carried JIT cache lacks and no suite uses (fp16:
fa2 and fa3, about 20 s each; scripts/h200/gpu_tests.sh runs them in group d). The bf16 modules
are carried; decode-fp8's fa2 one too, its fa3 one (bf16 query, e4m3 latent) is compiled."""


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c, marks=pytest.mark.gpu_slow if c in GPU_SLOW_MLA_CASES else ())
        for c in GPU_MLA_CASES
    ],
)
def test_gpu_mla_variants_pass_the_gate(case: str) -> None:
    """Every MLA variant that check() admits is gated and timed; the others say why."""
    kind, overrides = GPU_MLA_CASES[case]
    spec = mla_spec(kind, **overrides)
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-mla-gpu", info=info, measure_cfg=cfg)
    variants = [v for v in all_backends() if v.name.endswith(":mla") or ":mla-" in v.name]
    rows = run_case(spec, variants, ctx)
    failures = []
    for row in rows:
        if row.status == "unsupported" and row.reason:
            continue
        if row.status != "ok":
            failures.append(f"{row.backend}: {row.status}: {row.reason}")
    assert not failures, "\n".join(failures)
    ok = {r.backend for r in rows if r.status == "ok"}
    if spec.is_fp8:
        assert {"flashinfer:mla-fa2", "flashinfer:mla-fa3"} <= ok, rows
    else:
        assert {"flashinfer:mla-fa2", "flashinfer:mla-fa3", "sdpa:mla"} <= ok, rows


@pytest.mark.gpu
def test_gpu_flashinfer_mla_replan_and_resolved_backend() -> None:
    pytest.importorskip("flashinfer")
    from attnbench.measure.accuracy import check_accuracy

    spec = mla_spec("decode", num_qo_heads=128, kv_lens=(3000, 17), qo_lens=(1, 1))
    inputs = make_inputs(spec, "cuda:0")
    oracle = reference_attention(inputs)
    for backend in ("fa2", "fa3"):
        planned = FlashInferMlaBackend(backend).plan(spec, inputs)
        assert planned.resolved == backend
        assert planned.replan is not None
        planned.replan()
        out = planned.run()
        torch.cuda.synchronize()
        assert out.shape == (2, 128, 512)
        assert check_accuracy(planned.unpack(out), oracle, spec.dtype).passed


# -- the memory check counts the latent once ---------------------------------------------------


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "fp8_e4m3"])
def test_memory_estimate_counts_the_latent_cache_once(kv_dtype: str) -> None:
    """The pre-run memory check sizes an MLA cache as the tensor `make_inputs` builds (one
    576-wide latent per token, not a K and a V), and its output as kv_lora_rank wide."""
    from attnbench.workload.memory import estimate, output_bytes

    spec = mla_spec(kv_dtype=kv_dtype)
    inputs = make_inputs(spec)
    est = estimate(spec, "flashinfer:mla-fa3")
    assert inputs.kv_cache.shape == (spec.num_pages, spec.page_size, 576)
    assert est.kv_cache == inputs.kv_cache.numel() * inputs.kv_cache.element_size()
    assert est.q == inputs.q.numel() * inputs.q.element_size()
    oracle = reference_attention(inputs)
    assert output_bytes(spec, 8) == oracle.numel() * oracle.element_size()
